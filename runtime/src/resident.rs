//! A container's resident exec helper (`peapod-shim nsexec --resident`): it joins the
//! container once (its cgroups, oom_score_adj and namespaces) and then
//! forks every exec the shim sends it, so that an exec's process is born in the container's
//! cgroups instead of being moved there. Moving a process into a cgroup is what a helper
//! started per exec spent most of its time on: on a cgroup v1 host the first move waits for
//! an RCU grace period (about 5 of the 6 ms an exec took; `scripts/cgroup-move-cost`). On v2
//! too the helper joins once, before the container's namespaces ([`process::join_container`]
//! says why not clone3's `CLONE_INTO_CGROUP`).
//!
//! The helper stays outside the container's PID namespace (joining it applies to children
//! only), so the container's processes never see it. Each process is cloned with
//! `CLONE_PARENT`: the shim, not the helper, is its parent, as after `runc exec --detach`.
//! The helper leaves when the container's init exits (its pidfd becomes readable) or when the
//! shim closes the socket (the container is deleted, or the shim is gone).
//!
//! Its stdin is the socket ([`crate::wire`]): it says `ready` (or why not) once, then answers
//! each request (a runtime-spec Process as JSON, with three descriptors for the process's
//! stdin, stdout and stderr) with the process's pid or why it did not start.

use crate::host::Lsm;
use crate::process;
use crate::seccomp;
use crate::spec::{self, Process, Spec};
use crate::wire::{self, Reply};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The helper's entry point; returns its exit status.
pub fn main(bundle: &Path, init_pid: i32) -> i32 {
    // SAFETY: the shim gives the helper its end of the socket pair as stdin.
    let mut sock = unsafe { UnixStream::from_raw_fd(0) };
    let mut resident = match Resident::enter(bundle, init_pid) {
        Ok(r) => r,
        Err(message) => {
            let _ = answer(&mut sock, &Reply::Failed { message });
            return 1;
        }
    };
    if answer(&mut sock, &Reply::Ready).is_err() {
        return 1;
    }
    resident.serve(&mut sock)
}

fn answer(sock: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    wire::send(sock, &bytes, &[])
}

/// Why an exec in this container is left to the OCI runtime, if it is: what the native path
/// does not do, in the exec's process ([`process::unsupported`]) or in the container's spec
/// ([`unsupported_container`]). The shim asks before it sends an exec; the helper again.
pub fn unsupported(process: &Process, spec: &Spec, lsm: &Lsm) -> Option<&'static str> {
    process::unsupported(process, lsm).or_else(|| unsupported_container(spec))
}

/// What [`unsupported`] finds in the container's spec: the same for every exec in it.
pub fn unsupported_container(spec: &Spec) -> Option<&'static str> {
    if spec.linux.personality.is_some() {
        return Some("a personality");
    }
    if spec.linux.seccomp.as_ref().is_some_and(|s| s.notifies()) {
        return Some("a seccomp notify listener");
    }
    None
}

struct Resident {
    /// What the container's spec refuses for every exec ([`unsupported_container`]).
    refused: Option<&'static str>,
    lsm: Lsm,
    bpf: Option<(Vec<u8>, libc::c_uint)>,
    /// The container's init: readable once it has exited.
    init: OwnedFd,
    /// This helper's /proc/self/oom_score_adj, opened while it was the host's, and its value.
    oom_file: std::fs::File,
    oom_score_adj: Option<i32>,
}

impl Resident {
    fn enter(bundle: &Path, init_pid: i32) -> Result<Resident, String> {
        let spec = spec::of_bundle(bundle)?;
        let lsm = Lsm::of_host();
        let bpf = seccomp::program(spec.linux.seccomp.as_ref())?;
        let oom_file = std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/self/oom_score_adj")
            .map_err(|e| format!("open /proc/self/oom_score_adj: {e}"))?;
        let oom_score_adj = spec.process.as_ref().and_then(|p| p.oom_score_adj);
        let init = process::join_container(init_pid, oom_score_adj)?;
        Ok(Resident {
            refused: unsupported_container(&spec),
            lsm,
            bpf,
            init,
            oom_file,
            oom_score_adj,
        })
    }

    fn serve(&mut self, sock: &mut UnixStream) -> i32 {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.init.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: poll on two live descriptors.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return 1;
            }
            if fds[1].revents != 0 {
                // The init has exited: no exec can join the container any more.
                return 0;
            }
            if fds[0].revents == 0 {
                continue;
            }
            let reply = match wire::recv(sock) {
                Ok(None) => return 0,
                Err(_) => return 1,
                Ok(Some((request, stdio))) => match self.exec(&request, stdio) {
                    Ok(pid) => Reply::Started { pid },
                    Err(message) => Reply::Failed { message },
                },
            };
            if answer(sock, &reply).is_err() {
                return 1;
            }
        }
    }

    /// Starts one exec; its descriptors are closed here once the process has its own.
    fn exec(&mut self, request: &[u8], stdio: Vec<OwnedFd>) -> Result<i32, String> {
        let process: Process = serde_json::from_slice(request)
            .map_err(|e| format!("parse the exec's process: {e}"))?;
        let why = process::unsupported(&process, &self.lsm).or(self.refused);
        if let Some(why) = why {
            return Err(format!("native exec cannot do {why}"));
        }
        let mut stdio = stdio;
        // A terminal's exec: the fourth is the console socket its master goes to.
        let console = match (process.terminal, stdio.len()) {
            (true, 4) => stdio.pop(),
            (false, 3) => None,
            (terminal, n) => {
                return Err(format!(
                    "an exec (terminal: {terminal}) with {n} descriptors"
                ))
            }
        };
        let [stdin, stdout, stderr]: [OwnedFd; 3] =
            stdio.try_into().map_err(|fds: Vec<OwnedFd>| {
                format!("an exec needs 3 descriptors, not {}", fds.len())
            })?;
        if let Some(adj) = process.oom_score_adj {
            if self.oom_score_adj != Some(adj) {
                // Children inherit it. (Lowering it needs CAP_SYS_RESOURCE in the host's user
                // namespace, which a helper in a pod's own user namespace no longer has.)
                self.oom_file
                    .write_all(adj.to_string().as_bytes())
                    .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
                self.oom_score_adj = Some(adj);
            }
        }
        let mut prepared = process::prepare(&process, self.bpf.clone(), &self.lsm)?;
        if let Some(console) = &console {
            prepared = prepared.with_console(console.as_raw_fd());
        }
        let fds = [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()];
        process::start(&mut prepared, fds, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(json: &str) -> Process {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn what_the_native_exec_leaves_to_the_runtime() {
        let none = Lsm::default();
        let cfg = Spec::default();
        let plain = process(r#"{"args":["true"],"user":{"uid":0,"gid":0}}"#);
        assert_eq!(unsupported(&plain, &cfg, &none), None);
        let tty = process(r#"{"args":["sh"],"terminal":true}"#);
        assert_eq!(
            unsupported(&tty, &cfg, &none),
            None,
            "an exec's terminal is native"
        );
        assert!(process::unsupported_init(&tty, &none)
            .unwrap()
            .contains("terminal"));
        let aa = process(r#"{"args":["true"],"apparmorProfile":"x"}"#);
        assert_eq!(unsupported(&aa, &cfg, &none), None, "not enforced here");
        let enforced = Lsm {
            apparmor: true,
            selinux: false,
        };
        assert_eq!(
            unsupported(&aa, &cfg, &enforced),
            None,
            "an AppArmor profile is applied natively"
        );
        let label = process(r#"{"args":["true"],"selinuxLabel":"x"}"#);
        let selinux = Lsm {
            apparmor: false,
            selinux: true,
        };
        assert!(unsupported(&label, &cfg, &selinux)
            .unwrap()
            .contains("SELinux"));
        let notify: Spec = serde_json::from_str(
            r#"{"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW",
                "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}}}"#,
        )
        .unwrap();
        assert!(unsupported(&plain, &notify, &none)
            .unwrap()
            .contains("notify"));
        let pinned = process(r#"{"args":["true"],"execCPUAffinity":{"initial":"0"}}"#);
        assert!(unsupported(&pinned, &cfg, &none)
            .unwrap()
            .contains("affinity"));
        let empty = process(r#"{"args":[]}"#);
        assert!(unsupported(&empty, &cfg, &none).is_some());
    }
}
