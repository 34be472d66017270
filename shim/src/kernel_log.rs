//! The kernel's own record of its OOM kills, read from `/dev/kmsg`: the witness of last resort
//! when a killed container's cgroup, and with it its OOM counter, is already gone.
//!
//! The OOM killer logs each kill before it sends the signal, as a record
//! `oom-kill:constraint=...,oom_memcg=/a/b,task_memcg=/a/b/c,task=NAME,pid=N,uid=N` that
//! names the victim's memory cgroup, as the kubelet's OOM watcher reads it. The records are
//! rate-limited (10 in 5 s) and the log is a ring, so a record can be missing: its absence is
//! no proof, only its presence is.

use std::io::{ErrorKind, Read};

const KMSG: &str = "/dev/kmsg";

/// The memory cgroups of the OOM kills the kernel's log still holds, oldest first.
pub fn oom_kill_victims() -> std::io::Result<Vec<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(KMSG)?;
    // A reader of /dev/kmsg starts at the oldest record and gets one record per read.
    let mut buf = vec![0u8; 8192];
    let mut victims = Vec::new();
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(cgroup) = oom_kill_victim(&String::from_utf8_lossy(&buf[..n])) {
                    victims.push(cgroup.to_string());
                }
            }
            // Records overwritten while reading: the read goes on from the oldest kept.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(victims)
}

/// The victim's memory cgroup in one `/dev/kmsg` record (`PRI,SEQ,USEC,FLAGS;MESSAGE` and
/// continuation lines), if it is an OOM kill's.
fn oom_kill_victim(record: &str) -> Option<&str> {
    let message = record.split_once(';')?.1.lines().next()?;
    let fields = message.strip_prefix("oom-kill:")?;
    fields
        .split(',')
        .find_map(|field| field.strip_prefix("task_memcg="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_victims_cgroup_in_an_oom_kill_record_only() {
        let kill = "6,2231,81234567,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\
            cpuset=peapod-abc.scope,mems_allowed=0,oom_memcg=/peapod.slice/peapod-abc.scope,\
            task_memcg=/peapod.slice/peapod-abc.scope,task=dd,pid=4242,uid=0\n";
        assert_eq!(
            oom_kill_victim(kill),
            Some("/peapod.slice/peapod-abc.scope")
        );
        // The pod's limit reached: the kill is accounted to the pod, the victim is a container.
        let pod = "6,7,8,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,\
            mems_allowed=0,oom_memcg=/kubepods.slice/pod1.slice,\
            task_memcg=/kubepods.slice/pod1.slice/cri-x.scope,task=sh,pid=9,uid=0\n \
            SUBSYSTEM=memory\n";
        assert_eq!(
            oom_kill_victim(pod),
            Some("/kubepods.slice/pod1.slice/cri-x.scope")
        );
        assert_eq!(
            oom_kill_victim(
                "3,2232,81234600,-;Memory cgroup out of memory: Killed process 4242 (dd)\n"
            ),
            None
        );
        assert_eq!(oom_kill_victim("6,1,2,-;task_memcg=/x\n"), None);
        assert_eq!(oom_kill_victim("garbage"), None);
    }
}
