//! The detached shim process `start` launches: a subreaper serving the Task service on the
//! pod's socket until containerd's Shutdown (after the last container of the pod is deleted).
//!
//! The service answers under both names containerd uses for the same API:
//! `containerd.task.v2.Task` (containerd 1.6 and 1.7) and `containerd.task.v3.Task` (2.x).

use super::events::Publisher;
use super::flags::Flags;
use super::task::ContainerdTask;
use crate::backend::runc::Runc;
use crate::backend::Backends;
use crate::process_control::HostProcesses;
use crate::reaper::Reaper;
use crate::task::TaskService;
use containerd_shim_protos::shim_async::create_task;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Notify;

const TASK_V3: &str = "containerd.task.v3.Task";
const TASK_V2: &str = "containerd.task.v2.Task";

pub fn serve(flags: &Flags) -> Result<(), String> {
    let socket = flags
        .socket
        .clone()
        .ok_or("serve needs -socket (it is run by start)")?;
    let ready = peapod_shim::launch::take_ready_fd();
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only changes this process's attributes.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot become a subreaper: {}",
            std::io::Error::last_os_error()
        ));
    }
    // Logging programs of `binary://` log URIs inherit it (set while single-threaded).
    std::env::set_var("CONTAINER_NAMESPACE", &flags.namespace);
    let runtime =
        crate::server::runtime().map_err(|e| format!("cannot build the async runtime: {e}"))?;
    runtime.block_on(run(flags, &socket, ready))
}

async fn run(flags: &Flags, socket: &Path, ready: Option<OwnedFd>) -> Result<(), String> {
    let reaper = Reaper::start().map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
    let options = &flags.runtime;
    let runtime_root = options.root(&flags.namespace);
    std::fs::create_dir_all(&runtime_root)
        .map_err(|e| format!("create {}: {e}", runtime_root.display()))?;
    let shutdown = Arc::new(Notify::new());
    // The runtime CLI for every command, as containerd's runtime options say: the native
    // paths are peapod's daemon's to ask for.
    let runc = Runc::new(options.binary().to_string(), runtime_root, reaper.clone())
        .with_systemd_cgroup(options.systemd_cgroup);
    let tasks = Arc::new(TaskService::new(
        Backends::runtime_only(Arc::new(runc)),
        Arc::new(HostProcesses::new(reaper)),
        // Console sockets beside the shim's own socket: a short path.
        socket.parent().unwrap_or(Path::new("/tmp")).to_path_buf(),
        shutdown.clone(),
    ));
    let events = Publisher::start(std::env::var("TTRPC_ADDRESS").ok(), flags.namespace.clone());
    let task = Arc::new(ContainerdTask::new(tasks, events, options.clone()));
    let mut services = create_task(task.clone());
    let mut v2 = create_task(task);
    if let Some(service) = v2.remove(TASK_V3) {
        services.insert(TASK_V2.to_string(), service);
    }
    let mut server = crate::server::serve_ttrpc(socket, services).await?;
    if let Some(fd) = ready {
        peapod_shim::launch::report_serving(fd);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = shutdown.notified() => {}
        _ = term.recv() => {}
    }
    // Take the socket away first: a `start` for this pod from now on must launch a new
    // shim, not find this one leaving. The connections already made stay, and the server's
    // shutdown writes the Shutdown reply out (`crate::server::close_after`).
    let _ = std::fs::remove_file(socket);
    let _ = std::fs::remove_file(socket.with_extension("lock"));
    let _ = server.shutdown().await;
    Ok(())
}
