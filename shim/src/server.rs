//! Bootstrap of `peapod-shim serve`: the reaper, the backends (the real runtime CLI and the
//! native paths the command line allows), host processes, the Task and extension services
//! on the ttrpc socket, until Shutdown or SIGTERM.

use crate::backend::runc::Runc;
use crate::backend::{Backends, Config, Helpers};
use crate::process_control::HostProcesses;
use crate::reaper::Reaper;
use crate::task::TaskService;
use crate::task_api::TaskApi;
use crate::{extension, Args};
use containerd_shim_protos::shim_async::create_task;
use peapod_runtime::cgroups::Driver;
use peapod_runtime::program::Program;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::{oneshot, Notify};
use ttrpc::asynchronous::Server;

/// The runtime both faces of the shim serve on: one thread (a shim is small and mostly idle),
/// and room for 64 I/O events a tick: a shim waits on a few descriptors per container, and
/// the default room for 1024 is 12 KiB of an idle shim's heap. More just wait a tick.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_io_events_per_tick(64)
        .build()
}

/// Serves until Shutdown.
/// Serves `services` over ttrpc on `socket` (a stale socket file is replaced); both faces
/// of the shim (peapod's and containerd's) listen this way.
pub async fn serve_ttrpc(
    socket: &Path,
    mut services: std::collections::HashMap<String, ttrpc::asynchronous::Service>,
) -> Result<Server, String> {
    let _ = std::fs::remove_file(socket);
    crate::after_burst::note_every_method(&mut services, &crate::after_burst::Bursts::start());
    let address = format!("unix://{}", socket.display());
    let mut server = Server::new()
        .bind(&address)
        .map_err(|e| format!("bind {address}: {e}"))?
        .register_service(services);
    server.start().await.map_err(|e| format!("serve: {e}"))?;
    Ok(server)
}

/// `ready`: the descriptor the daemon waits on ([`peapod_shim::launch`]), told once the
/// socket listens.
pub async fn run(args: Arc<Args>, ready: Option<OwnedFd>) -> Result<(), String> {
    let reaper = Reaper::start().map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
    std::fs::create_dir_all(&args.runtime_root)
        .map_err(|e| format!("create {}: {e}", args.runtime_root.display()))?;
    let shutdown = Arc::new(Notify::new());
    let runc = Arc::new(
        Runc::new(
            args.runtime.clone(),
            args.runtime_root.clone(),
            reaper.clone(),
        )
        .with_systemd_cgroup(args.systemd_cgroup)
        .with_args(args.runtime_args.clone()),
    );
    // Sealed once, before any helper runs: every helper execs from this view. (Its scratch
    // directory is the sockets' own, where a moment's empty directory disturbs nobody, unlike
    // the runtime's root, which runc lists.)
    let exe = std::env::current_exe().map_err(|e| format!("which program am I: {e}"))?;
    let scratch = args.socket.parent().unwrap_or(Path::new("/tmp"));
    let program = Program::sealed(&exe, scratch).map_err(|e| e.to_string())?;
    let helpers = Helpers {
        program: Arc::new(program),
        reaper: reaper.clone(),
    };
    let config = Config {
        runtime: &args.runtime,
        runtime_root: &args.runtime_root,
        sandboxed: args.sandboxed,
        exec: args.exec,
        create: args.create,
        cgroup_driver: if args.systemd_cgroup {
            Driver::Systemd
        } else {
            Driver::Cgroupfs
        },
    };
    let backends = Backends::new(runc, &config, helpers);
    let tasks = Arc::new(TaskService::new(
        backends,
        Arc::new(HostProcesses::new(reaper)),
        args.socket
            .parent()
            .unwrap_or(Path::new("/tmp"))
            .to_path_buf(),
        shutdown.clone(),
    ));
    let mut services = create_task(Arc::new(TaskApi(tasks.clone())));
    let (name, service) = extension::service(tasks);
    services.insert(name, service);
    let server = serve_ttrpc(&args.socket, services).await?;
    if let Some(fd) = ready {
        peapod_shim::launch::report_serving(fd);
    }
    // Exit when asked to, or when SIGTERM arrives (containers keep running in that case: their
    // exits are then recorded by nobody, which is why the daemon only ever sends Shutdown).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("watch SIGTERM: {e}"))?;
    let (done_tx, done_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.notified() => {}
            _ = term.recv() => {}
        }
        let _ = done_tx.send(());
    });
    close_after(server, done_rx).await;
    let _ = std::fs::remove_file(&args.socket);
    Ok(())
}

/// Shuts `server` down once `asked` resolves. The server's shutdown lets every request under
/// way finish and writes out what their handlers answered (the Shutdown reply among them)
/// before it returns, so no grace sleep is needed (one of 20 ms was most of
/// RemovePodSandbox, whose daemon waits for the shim's exit).
pub async fn close_after(mut server: Server, asked: impl std::future::Future) {
    asked.await;
    let _ = server.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::{FakeProcesses, FakeRuntime};
    use containerd_shim_protos::api::ShutdownRequest;
    use containerd_shim_protos::shim_async::{Client, TaskClient};

    /// The shim exits as soon as it is asked to, and the Shutdown reply still reaches the
    /// client every time.
    #[tokio::test(flavor = "current_thread")]
    async fn the_shutdown_reply_reaches_the_client_before_the_server_closes() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("shim.sock");
            let asked = Arc::new(Notify::new());
            let processes = Arc::new(FakeProcesses::default());
            let tasks = Arc::new(TaskService::new(
                Backends::runtime_only(Arc::new(FakeRuntime::new(processes.clone()))),
                processes,
                dir.path().to_path_buf(),
                asked.clone(),
            ));
            let server = serve_ttrpc(&socket, create_task(Arc::new(TaskApi(tasks))))
                .await
                .unwrap();
            let served = tokio::spawn(async move {
                close_after(server, asked.notified()).await;
            });
            let raw = Client::connect(&format!("unix://{}", socket.display()))
                .await
                .unwrap();
            let client = TaskClient::new(raw);
            let mut req = ShutdownRequest::new();
            req.now = true;
            let reply = client
                .shutdown(ttrpc::context::with_timeout(5_000_000_000), &req)
                .await;
            assert!(reply.is_ok(), "round {round}: {reply:?}");
            tokio::time::timeout(std::time::Duration::from_secs(5), served)
                .await
                .expect("the server closes once asked")
                .unwrap();
        }
    }
}
