//! Which execs the shim starts itself: through the container's resident helper
//! ([`super::residents`], `peapod-shim nsexec --resident`), a few milliseconds instead of a
//! `runc exec` (a terminal's pty made in the container by the helper's child, its master sent
//! to the console socket as runc sends it), unless the exec needs what the native path does
//! not do: an enforced SELinux label, a seccomp notify listener, a personality, an
//! unreadable spec. (An AppArmor profile is applied by the helper's child, as runc applies
//! it.) The choice is made before anything starts, from the same files the
//! helper reads: the exec's process here, at each exec; the container's spec once, at its
//! create (it does not change while the container lives, and an exec probe comes every few
//! seconds): [`container_refuses`].

use super::runtime_cli::ExecCommand;
use peapod_runtime::host::Lsm;
use peapod_runtime::process;
use peapod_runtime::resident;
use peapod_runtime::spec::{Process, Spec};

/// Why every exec in a container with this spec (or this failure to read it) goes to the
/// runtime, if every one does.
pub fn container_refuses(spec: Result<&Spec, String>) -> Option<String> {
    match spec {
        Ok(spec) => resident::unsupported_container(spec).map(str::to_string),
        Err(e) => Some(e),
    }
}

/// Why this exec (its Process as `process_json`) goes to the runtime, if it does; `refused`:
/// what its container's spec refuses for every exec ([`container_refuses`]).
pub fn leave_to_runtime(
    cmd: &ExecCommand<'_>,
    process_json: &[u8],
    refused: Option<&str>,
    lsm: &Lsm,
) -> Option<String> {
    if cmd.init_pid == 0 {
        return Some("the container's init pid is unknown".into());
    }
    let process: Process = match serde_json::from_slice(process_json) {
        Ok(p) => p,
        Err(e) => return Some(format!("parse {}: {e}", cmd.process_json.display())),
    };
    if process.terminal != cmd.console_socket.is_some() {
        return Some("a terminal without a console socket, or the reverse".into());
    }
    if let Some(why) = process::unsupported(&process, lsm) {
        return Some(why.to_string());
    }
    if let Some(why) = refused {
        return Some(why.to_string());
    }
    if process.capabilities.is_none() {
        return Some("a process without capabilities".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::runtime_cli::ProcessIo;
    use super::*;
    use std::path::Path;

    fn exec<'a>(process_json: &'a Path, console: Option<&'a Path>) -> ExecCommand<'a> {
        ExecCommand {
            bundle: Path::new("/b"),
            init_pid: 42,
            process_json,
            pid_file: Path::new("/b/exec.pid"),
            console_socket: console,
            io: ProcessIo::null(),
        }
    }

    #[test]
    fn what_an_exec_leaves_to_the_runtime() {
        let lsm = Lsm::default();
        let file = Path::new("/b/exec.json");
        let plain = br#"{"args":["sh"],"cwd":"/","capabilities":{}}"#;
        assert_eq!(leave_to_runtime(&exec(file, None), plain, None, &lsm), None);
        let why = |json: &[u8], console, refused| {
            leave_to_runtime(&exec(file, console), json, refused, &lsm).unwrap_or_default()
        };
        assert!(why(plain, None, Some("a personality")).contains("personality"));
        assert!(why(plain, Some(Path::new("/c")), None).contains("terminal"));
        assert!(why(b"{", None, None).contains("parse /b/exec.json"));
        assert!(why(br#"{"args":["sh"]}"#, None, None).contains("capabilities"));
        let mut unknown_init = exec(file, None);
        unknown_init.init_pid = 0;
        assert!(leave_to_runtime(&unknown_init, plain, None, &lsm).is_some());
    }

    #[test]
    fn a_containers_spec_is_judged_once_for_all_its_execs() {
        let spec: Spec =
            serde_json::from_str(r#"{"linux":{"personality":{"domain":"LINUX"}}}"#).expect("spec");
        assert!(container_refuses(Ok(&spec)).is_some_and(|why| why.contains("personality")));
        assert_eq!(container_refuses(Ok(&Spec::default())), None);
        let unreadable = "read /b/config.json: No such file or directory".to_string();
        assert_eq!(container_refuses(Err(unreadable.clone())), Some(unreadable));
    }
}
