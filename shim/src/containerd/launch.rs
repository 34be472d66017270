//! containerd's launch protocol: `start` returns the ttrpc address of the pod's shim, starting
//! it if needed; `delete` cleans up a container whose shim is gone.
//!
//! containerd runs `start` with the container's bundle as working directory, writes the task's
//! runtime options (and, from 2.3, more: [`super::bootstrap`]) to its stdin and reads its
//! combined stdout and stderr as the answer, so `start` prints nothing else. Containers of one
//! pod share one shim: their bundles carry the CRI's `io.kubernetes.cri.sandbox-id`
//! annotation, and the shim's socket is named after it. containerd reconnects after its own
//! restart from the `address` file in each bundle, so the shim is started in a session of its
//! own and outlives containerd.

use super::bootstrap::StartInput;
use super::flags::Flags;
use super::options::{self, RuntimeOptions};
use super::{mounts, PROGRAM};
use containerd_shim_protos::api::DeleteResponse;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::{Message, MessageField};
use peapod_host::timefmt;
use peapod_shim::launch::{Readiness, ReadyPipe};
use peapod_shim::protocol::ExitRecord;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where containerd's shims keep their sockets (short: unix socket paths are limited).
const SOCKET_DIR: &str = "/run/containerd/s";
/// The annotation by which the CRI marks the pod a container belongs to.
const SANDBOX_ID_ANNOTATION: &str = "io.kubernetes.cri.sandbox-id";
/// How long `start` waits for a new shim to serve.
const SERVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The exit status reported for a container whose shim died without recording its exit
/// (128 + SIGKILL, as containerd's own shims report).
const UNKNOWN_EXIT_STATUS: u32 = 128 + 9;

/// The id that groups containers into one shim: the pod's sandbox id, else the container's.
fn group_id(bundle: &Path, id: &str) -> String {
    std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|spec| {
            spec["annotations"][SANDBOX_ID_ANNOTATION]
                .as_str()
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| id.to_string())
}

/// The shim socket of a group, unique per containerd instance and namespace.
fn socket_path(containerd_address: &str, namespace: &str, group: &str) -> PathBuf {
    let digest = Sha256::digest(format!("{containerd_address}/{namespace}/{group}").as_bytes());
    Path::new(SOCKET_DIR).join(hex::encode(digest))
}

fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// An exclusive lock held while one `start` checks for and launches a group's shim, so that
/// two containers of a pod started at once get one shim.
struct GroupLock {
    _file: std::fs::File,
}

impl GroupLock {
    fn take(path: &Path) -> Result<GroupLock, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!(
                "lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(GroupLock { _file: file })
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("write {}: {e}", path.display()))
}

/// `start`: prints the address of the pod's shim, launching it first if it is not running.
/// A shim launched here runs its tasks with this task's runtime options; a task of the pod
/// with other options is refused at its Create ([`super::task`]).
pub fn start(flags: &Flags) -> Result<(), String> {
    use std::io::IsTerminal;
    let bundle = flags.bundle_dir()?;
    let stdin = std::io::stdin();
    let input = StartInput::read(stdin.lock(), stdin.is_terminal(), &flags.id)
        .map_err(|e| format!("read containerd's input: {e}"))?;
    let runtime = options::decode(input.options.as_ref()).map_err(|e| e.to_string())?;
    // For `delete`, which containerd runs with nothing but the bundle once the shim is gone.
    runtime.save(&bundle)?;
    let group = group_id(&bundle, &flags.id);
    let socket = socket_path(&flags.address, &flags.namespace, &group);
    let address = format!("unix://{}", socket.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(SOCKET_DIR)
        .map_err(|e| format!("create {SOCKET_DIR}: {e}"))?;
    let _lock = GroupLock::take(&socket.with_extension("lock"))?;
    if !answers(&socket) {
        let pid = launch(flags, &runtime, &bundle, &group, &socket)?;
        write_file(&bundle.join("shim.pid"), &pid.to_string())?;
    }
    write_file(&bundle.join("address"), &address)?;
    let answer = input.answer(&address)?;
    let mut out = std::io::stdout();
    out.write_all(&answer)
        .and_then(|_| out.flush())
        .map_err(|e| format!("write the address: {e}"))
}

/// Starts `serve` detached for `group` with `runtime`'s options and waits until it answers on
/// `socket`; its pid.
fn launch(
    flags: &Flags,
    runtime: &RuntimeOptions,
    bundle: &Path,
    group: &str,
    socket: &Path,
) -> Result<u32, String> {
    let _ = std::fs::remove_file(socket);
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    // The shim's own messages: containerd reads only what `start` prints.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(bundle.join("shim.log"))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let mut cmd = Command::new(exe);
    cmd.arg0(PROGRAM)
        .args(["-namespace", &flags.namespace])
        .args(["-address", &flags.address])
        .args(["-publish-binary", &flags.publish_binary])
        .args(["-id", group])
        .arg("-socket")
        .arg(socket)
        .args(runtime.to_args())
        .arg("serve")
        .current_dir(bundle)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if flags.debug {
        cmd.arg("-debug");
    }
    let ready = ReadyPipe::detach(&mut cmd).map_err(|e| format!("start the shim: {e}"))?;
    let mut child = cmd.spawn().map_err(|e| format!("start the shim: {e}"))?;
    match ready.wait(SERVE_TIMEOUT) {
        Ok(Readiness::Serving) => Ok(child.id()),
        Ok(Readiness::Ended) => {
            let status = child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            Err(format!(
                "the shim exited before serving ({status}); see {}",
                bundle.join("shim.log").display()
            ))
        }
        Ok(Readiness::TimedOut) | Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("the shim did not serve within {SERVE_TIMEOUT:?}"))
        }
    }
}

/// Removes the socket (and its lock) named in the bundle's `address` once nothing serves it:
/// a shim that was killed could not remove it itself. A live shim's socket is left alone.
fn remove_dead_socket(bundle: &Path) {
    let Ok(address) = std::fs::read_to_string(bundle.join("address")) else {
        return;
    };
    let socket = PathBuf::from(address.trim().trim_start_matches("unix://"));
    if !socket.starts_with(SOCKET_DIR) || answers(&socket) {
        return;
    }
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(socket.with_extension("lock"));
}

/// `delete`: the shim of this container is gone; removes the container from the runtime and
/// its root filesystem mount, and answers a DeleteResponse on stdout with the exit the shim
/// recorded, if it lived to record one.
pub fn delete(flags: &Flags) -> Result<(), String> {
    let bundle = flags.bundle_dir()?;
    let options = RuntimeOptions::saved(&bundle);
    let mut runc = Command::new(options.binary());
    runc.arg("--root").arg(options.root(&flags.namespace));
    if options.systemd_cgroup {
        runc.arg("--systemd-cgroup");
    }
    let runtime = runc
        .args(["delete", "--force", &flags.id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match runtime {
        Ok(out) if !out.status.success() => eprintln!(
            "{PROGRAM}: {} delete {}: {}",
            options.binary(),
            flags.id,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(err) => eprintln!("{PROGRAM}: cannot run {}: {err}", options.binary()),
        Ok(_) => {}
    }
    if let Err(err) = mounts::unmount_rootfs(&bundle) {
        eprintln!("{PROGRAM}: {err}");
    }
    remove_dead_socket(&bundle);
    let mut resp = DeleteResponse::new();
    let mut ts = Timestamp::new();
    match ExitRecord::read(&bundle.join("exit")).ok().flatten() {
        Some(exit) => {
            resp.pid = exit.pid;
            resp.exit_status = exit.exit_code as u32;
            ts.seconds = exit.exited_at_ns.div_euclid(1_000_000_000);
            ts.nanos = exit.exited_at_ns.rem_euclid(1_000_000_000) as i32;
        }
        None => {
            resp.exit_status = UNKNOWN_EXIT_STATUS;
            let now = timefmt::now_ns();
            ts.seconds = now.div_euclid(1_000_000_000);
            ts.nanos = now.rem_euclid(1_000_000_000) as i32;
        }
    }
    resp.exited_at = MessageField::some(ts);
    let bytes = resp
        .write_to_bytes()
        .map_err(|e| format!("encode the delete response: {e}"))?;
    let mut out = std::io::stdout();
    out.write_all(&bytes)
        .and_then(|_| out.flush())
        .map_err(|e| format!("write the delete response: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_of_a_pod_share_the_sandboxs_socket() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"annotations":{"io.kubernetes.cri.sandbox-id":"pod1"}}"#,
        )
        .unwrap();
        assert_eq!(group_id(dir.path(), "c1"), "pod1");
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("config.json"), r#"{"annotations":{}}"#).unwrap();
        assert_eq!(group_id(other.path(), "c2"), "c2");
        assert_eq!(group_id(Path::new("/nonexistent"), "c3"), "c3");
        let a = socket_path("/run/containerd/containerd.sock", "k8s.io", "pod1");
        assert_eq!(
            a,
            socket_path("/run/containerd/containerd.sock", "k8s.io", "pod1")
        );
        assert_ne!(a, socket_path("/tmp/other.sock", "k8s.io", "pod1"));
        assert_ne!(
            a,
            socket_path("/run/containerd/containerd.sock", "default", "pod1")
        );
        // Short enough for a unix socket path, with room for console sockets beside it.
        assert!(a.as_os_str().len() < 90);
    }
}
