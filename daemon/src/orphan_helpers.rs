//! Helpers a dead daemon left running: a CNI plugin in the middle of ADD and an OCI runtime
//! `create` it had started go on after SIGKILL (they are not killed with their parent). Left
//! alone, they race recovery: a plugin that creates its veth and reserves its address *after*
//! recovery's CNI DEL ran leaves both behind for good, and a runtime create that lands after
//! the rollback reaped the task leaves a container holding the pod's network namespace (and
//! its veth) alive. So before rolling back an object, recovery kills what still works on it —
//! found by the CNI environment (`CNI_CONTAINERID=<id>`) or by the runtime's command line
//! (`<runtime> ... create ... <id>`) — and waits, bounded, for them to be gone.

use std::time::{Duration, Instant};

/// How long recovery waits for the helpers it killed to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(3);

/// Kills every process that works on object `id` for the daemon (a CNI plugin with
/// `CNI_CONTAINERID=id`, an OCI runtime `create` of `id`), then waits until none is left.
/// Returns how many there were.
pub fn kill_and_wait(id: &str, runtime: &str) -> usize {
    let found = find(id, runtime);
    for pid in &found {
        tracing::warn!(object = %id, pid, "killing a helper a dead daemon left running on it");
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + GONE_WITHIN;
    while !found.iter().all(|p| gone(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    found.len()
}

fn find(id: &str, runtime: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let cni_env = format!("CNI_CONTAINERID={id}");
    let runtime_name = std::path::Path::new(runtime)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me || gone(pid) {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let is_plugin = environ
            .split(|b| *b == 0)
            .any(|kv| kv == cni_env.as_bytes());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .collect();
        let is_create = args.first().is_some_and(|a0| {
            std::path::Path::new(&*String::from_utf8_lossy(a0))
                .file_name()
                .is_some_and(|n| !runtime_name.is_empty() && n.to_string_lossy() == runtime_name)
        }) && args.contains(&b"create".as_slice())
            && args.last() == Some(&id.as_bytes());
        if is_plugin || is_create {
            out.push(pid);
        }
    }
    out
}

/// Gone, or a zombie (PID 1 here reaps orphans only about every 1.25 s).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_with_the_objects_cni_environment_is_killed_and_waited_for() {
        let id = format!("peapod-test-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CNI_CONTAINERID", &id)
            .spawn()
            .unwrap();
        let other = std::process::Command::new("sleep")
            .arg("30")
            .env("CNI_CONTAINERID", "someone-else")
            .spawn()
            .unwrap();
        // spawn returns once the child's exec has replaced its memory, a moment before the
        // kernel records where the new environment lies: until then /proc/<pid>/environ
        // reads empty. A helper a dead daemon left has long passed that point.
        let wanted = format!("CNI_CONTAINERID={id}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read(format!("/proc/{}/environ", child.id()))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .any(|kv| kv == wanted.as_bytes())
        {
            assert!(
                Instant::now() < deadline,
                "the child's environment never showed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(kill_and_wait(&id, "runc"), 1);
        assert!(child.wait().unwrap().code().is_none(), "killed by a signal");
        let mut other = other;
        assert!(
            other.try_wait().unwrap().is_none(),
            "another object's plugin is left alone"
        );
        let _ = other.kill();
        let _ = other.wait();
    }
}
