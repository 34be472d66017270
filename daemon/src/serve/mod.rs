//! Running the daemon: the process set-up `peapod serve` does (umask, async runtime, logging),
//! the daemon assembled and recovered (`crate::daemon`), the CRI socket bound (never wider
//! than 0660), `/metrics` and the pod supervisor started, then `crate::server` serving until
//! SIGTERM or SIGINT; NRI closes last; systemd is told when the socket is ready and when the
//! daemon stops (`sd_notify`, for `Type=notify`). The test daemon (`peapod-failpoints`) runs
//! the same [`run`] after arming its crash points.

mod metrics_state;
mod sd_notify;

use crate::config::Config;
use crate::daemon::Daemon;
use crate::server::CriService;
use anyhow::Context;
use peapod_proto::v1::image_service_server::ImageServiceServer;
use peapod_proto::v1::runtime_service_server::RuntimeServiceServer;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long after SIGTERM the calls in flight have to finish before their connections are
/// dropped. HTTP/2's graceful shutdown also waits for each client to answer the PING sent with
/// the GOAWAY, which a client that is stopped, stuck or not polling its connection never does:
/// unbounded, one such client held the daemon until systemd's stop timeout and SIGKILL. A call
/// cut here is one the daemon may lose at any moment anyway (recovery at start settles it).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs the daemon with `cfg` until a signal; pods keep running after it returns.
pub fn run(cfg: Config) -> anyhow::Result<()> {
    // While the process has one thread: it changes the environment.
    sd_notify::take_from_env();
    // Before the runtime's threads: their arenas would hold the daemon's freed memory apart.
    peapod_host::heap::use_one_arena();
    // Before any file is made: everything the daemon creates (records, bundles, layers, upper
    // directories, sockets) is the owner's alone unless it sets a mode itself — the few files
    // containers must read (hosts, resolv.conf, the pause rootfs, layer roots) do.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("build the async runtime")?;
    let result = runtime.block_on(serve_until_signal(cfg));
    // Dropping the runtime would wait for every blocking task (a stuck mount, a registry
    // read): bound it, so that SIGTERM always ends the process.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    result
}

/// The log on stderr, and with `[tracing]` on the layer exporting spans (`crate::otel`); off,
/// the subscriber is the log alone, as if tracing did not exist.
fn init_logging(
    level: &str,
    tracing_cfg: &crate::config::TracingConfig,
) -> anyhow::Result<Option<crate::otel::Exporting>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file (nohup, the tests, a service manager) stays
    // plain text that grep and parsers read.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let Some((otel, exporting)) = crate::otel::layer(tracing_cfg)? else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .init();
        return Ok(None);
    };
    // The log's filter is the log's own: the exporter sees the steps' debug spans whatever
    // the log level.
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .with(otel)
        .init();
    tracing::info!(
        endpoint = %tracing_cfg.endpoint,
        sampling_rate_per_million = tracing_cfg.sampling_rate_per_million,
        "tracing: exporting spans by OTLP/gRPC"
    );
    Ok(Some(exporting))
}

async fn serve_until_signal(cfg: Config) -> anyhow::Result<()> {
    let exporting = init_logging(&cfg.log_level, &cfg.tracing)?;
    let socket = cfg.socket.clone();
    tracing::info!(version = env!("CARGO_PKG_VERSION"), root = %cfg.root.display(), state = %cfg.state.display(), "peapod starting");
    let rt = crate::daemon::Daemon::new(cfg)
        .await
        .context("initialise the runtime")?;
    let shutdown = async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Pods keep running: their shims are not the daemon's children.
        tracing::info!("signal received; stopping the CRI server, leaving pods running");
        sd_notify::notify("STOPPING=1");
    };
    let served = serve(rt.clone(), &socket, shutdown).await;
    rt.nri.shutdown().await;
    if let Some(exporting) = exporting {
        exporting.shutdown().await;
    }
    served
}

/// Serves CRI on `socket` (mode 0660) until `shutdown` resolves.
async fn serve(
    rt: Arc<Daemon>,
    socket: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // What can fail on configuration comes before the socket exists, so that a daemon that
    // refuses to start leaves no socket behind.
    let pod_settings = rt
        .config
        .pods
        .settings(&rt.config.root, rt.config.cgroup.driver)?;
    // Prometheus metrics: every call is counted by the layer whether or not /metrics is
    // served, so that turning the listener on needs no other change.
    let metrics = peapod_metrics::Metrics::new().context("metrics")?;
    let metrics_task = if rt.config.metrics.address.is_empty() {
        None
    } else {
        let state = std::sync::Arc::new(metrics_state::DaemonState(rt.clone()));
        let (addr, task) = peapod_metrics::serve(
            &rt.config.metrics.address,
            rt.config.startup_wait(),
            metrics.clone(),
            Some(state),
        )
        .await
        .with_context(|| format!("listen for metrics on {}", rt.config.metrics.address))?;
        tracing::info!(address = %addr, "serving metrics at /metrics");
        Some(task)
    };
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove stale {}", socket.display())),
    }
    let listener = bind_socket(socket)?;
    tracing::info!(socket = %socket.display(), "serving CRI");
    // Connections made from now on wait in the listen backlog until the server below takes
    // them: the daemon is ready for clients.
    sd_notify::notify("READY=1");
    // The pod supervisor (`peapod apply`) is a CRI client of this very socket.
    let pod_cri = std::sync::Arc::new(peapod_kubelet::cri::TonicCri::new(socket));
    let pods = peapod_kubelet::manager::Manager::start(pod_cri, pod_settings);
    let cri = CriService::new(rt, metrics.clone());
    let streams = cri.clone();
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        streams.end_streams();
        let _ = stopping.send(());
    };
    let grace_over = async move {
        match stopped.await {
            Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
            Err(_) => std::future::pending().await,
        }
    };
    // Any gRPC client: grpcio, grpc-java and grpcurl send the socket path as :authority.
    let incoming = peapod_uds::incoming(listener);
    let server = tonic::transport::Server::builder()
        .layer(peapod_metrics::GrpcMetricsLayer::new(metrics))
        // Calls past the client's deadline end DEADLINE_EXCEEDED, not tonic's CANCELLED;
        // inside the metrics layer, so that they are counted with that code.
        .layer(peapod_uds::deadline::DeadlineLayer)
        .add_service(RuntimeServiceServer::new(cri.clone()))
        .add_service(ImageServiceServer::new(cri))
        .add_service(peapod_kubelet::service::PodsService::new(pods).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown);
    tokio::select! {
        served = server => served.context("CRI server")?,
        // The connections still open are dropped with the server (and their tasks with the
        // async runtime, as `run` ends).
        () = grace_over => tracing::warn!(
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "calls or clients still open after the grace period; closing their connections"
        ),
    }
    if let Some(task) = metrics_task {
        task.abort();
    }
    let _ = std::fs::remove_file(socket);
    Ok(())
}

/// Binds the CRI socket so that it never exists at `socket` with a mode wider than 0660: it is
/// bound in a fresh 0700 directory beside it (under the daemon's umask, so no one else can
/// reach it there), given mode 0660, and only then renamed into place. A chmod after binding
/// at the final path would leave a moment in which the socket is there with the umask's mode.
fn bind_socket(socket: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = socket.parent().unwrap_or(Path::new("."));
    // Short, so that the staged path fits a unix socket address whenever `socket` does
    // (within a few bytes: the config allows 107).
    let private = dir.join(format!(".b{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("create {}", private.display()))?;
    let staged = private.join("s");
    let bound = (|| {
        let listener = tokio::net::UnixListener::bind(&staged)
            .with_context(|| format!("listen on {}", socket.display()))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o660))
            .with_context(|| format!("chmod {}", staged.display()))?;
        std::fs::rename(&staged, socket)
            .with_context(|| format!("move the socket to {}", socket.display()))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket appears at its path already 0660 (bound elsewhere and moved), and the
    /// private staging directory is gone afterwards.
    #[tokio::test]
    async fn the_socket_is_moved_into_place_at_0660() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("peapod.sock");
        let listener = bind_socket(&socket).unwrap();
        let meta = std::fs::metadata(&socket).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o660);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["peapod.sock".to_string()]);
        // It is the listener's socket: a client reaches it by the final path.
        let client = tokio::net::UnixStream::connect(&socket);
        let (accepted, connected) = tokio::join!(listener.accept(), client);
        accepted.unwrap();
        connected.unwrap();
    }
}
