//! Bootstrap of `peapod-shim serve`: the reaper, the real runtime CLI and processes, the Task
//! and extension services on the ttrpc socket, until Shutdown or SIGTERM.

use crate::native_exec::{ExecMode, NativeExec};
use crate::native_pause::NativePause;
use crate::native_runc::NativeRunc;
use crate::process_control::HostProcesses;
use crate::reaper::Reaper;
use crate::runc::Runc;
use crate::runtime_cli::RuntimeCli;
use crate::task::TaskService;
use crate::task_api::TaskApi;
use crate::{extension, Args};
use containerd_shim_protos::shim_async::create_task;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use ttrpc::asynchronous::Server;

/// Serves until Shutdown.
/// Serves `services` over ttrpc on `socket` (a stale socket file is replaced); both faces
/// of the shim (peapod's and containerd's) listen this way.
pub async fn serve_ttrpc(
    socket: &Path,
    services: std::collections::HashMap<String, ttrpc::asynchronous::Service>,
) -> Result<Server, String> {
    let _ = std::fs::remove_file(socket);
    let address = format!("unix://{}", socket.display());
    let mut server = Server::new()
        .bind(&address)
        .map_err(|e| format!("bind {address}: {e}"))?
        .register_service(services);
    server.start().await.map_err(|e| format!("serve: {e}"))?;
    Ok(server)
}

pub async fn run(args: Arc<Args>) -> Result<(), String> {
    let reaper = Reaper::start().map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
    std::fs::create_dir_all(&args.runtime_root)
        .map_err(|e| format!("create {}: {e}", args.runtime_root.display()))?;
    let shutdown = Arc::new(Notify::new());
    let runc = Arc::new(Runc::new(
        args.runtime.clone(),
        args.runtime_root.clone(),
        reaper.clone(),
    ));
    let helper = std::env::current_exe().map_err(|e| format!("which program am I: {e}"))?;
    // Innermost, on runc: the runc commands the shim does itself (start, kill, delete), so
    // that the exec layer above removes a container's resident helper before either deletes.
    let runc: Arc<dyn RuntimeCli> = Arc::new(NativeRunc::new(
        runc,
        &args.runtime,
        args.runtime_root.clone(),
    ));
    let cli: Arc<dyn RuntimeCli> = match args.exec {
        ExecMode::Runtime => runc,
        ExecMode::Native => Arc::new(NativeExec::new(runc, helper.clone(), reaper.clone())),
    };
    // Outermost: the pause's create never reaches the runtime when the helper can do it.
    let cli: Arc<dyn RuntimeCli> =
        Arc::new(NativePause::new(cli, &args.runtime, helper, reaper.clone()));
    let tasks = Arc::new(TaskService::new(
        cli,
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
    let mut server = serve_ttrpc(&args.socket, services).await?;
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
    let _ = done_rx.await;
    // Let the Shutdown reply reach the client before the socket goes away.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = server.shutdown().await;
    let _ = std::fs::remove_file(&args.socket);
    Ok(())
}
