//! The CRI gRPC surface on a unix socket: thin adapters that validate, call the core and map
//! errors to `Status`. One file per group of calls; this file only routes.

mod container;
mod events;
mod exec;
mod image;
mod metrics;
mod runtime_info;
mod sandbox;
mod stats;
mod unimplemented;

use crate::daemon::Daemon;
use crate::error::Error;
use peapod_proto::v1 as cri;
use peapod_proto::v1::image_service_server::{ImageService, ImageServiceServer};
use peapod_proto::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

type RpcResult<T> = Result<Response<T>, Status>;

/// InvalidArgument naming `field` when a required string is empty.
fn required(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    Ok(())
}

/// What a request is about, for its RPC's span: the sandbox or container it names.
trait Subject {
    fn sandbox_id(&self) -> &str {
        ""
    }
    fn container_id(&self) -> &str {
        ""
    }
}

macro_rules! subject {
    (sandbox: $($t:ident),* ; container: $($c:ident),* ; none: $($n:ident),*) => {
        $(impl Subject for cri::$t {
            fn sandbox_id(&self) -> &str {
                &self.pod_sandbox_id
            }
        })*
        $(impl Subject for cri::$c {
            fn container_id(&self) -> &str {
                &self.container_id
            }
        })*
        $(impl Subject for cri::$n {})*
    };
}

subject!(
    sandbox: StopPodSandboxRequest, RemovePodSandboxRequest, PodSandboxStatusRequest,
        CreateContainerRequest, PortForwardRequest, PodSandboxStatsRequest;
    container: StartContainerRequest, StopContainerRequest, RemoveContainerRequest,
        ContainerStatusRequest, UpdateContainerResourcesRequest, ReopenContainerLogRequest,
        ExecSyncRequest, ExecRequest, AttachRequest, ContainerStatsRequest,
        CheckpointContainerRequest;
    none: VersionRequest, StatusRequest, RuntimeConfigRequest, UpdateRuntimeConfigRequest,
        RunPodSandboxRequest, ListPodSandboxRequest, ListContainersRequest,
        ListContainerStatsRequest, ListPodSandboxStatsRequest, GetEventsRequest,
        ListMetricDescriptorsRequest, ListPodSandboxMetricsRequest, ListImagesRequest,
        ImageStatusRequest, PullImageRequest, RemoveImageRequest, ImageFsInfoRequest
);

/// Runs one RPC: in a span naming the method and the object it is about (handlers add `pod`
/// or `image` when they know it), and, if it fails, logs the method, code and cause and
/// turns the error into the client's status. Every handler goes through here, so this is
/// the one place where core errors become statuses.
async fn rpc<Req, T, Fut>(
    method: &'static str,
    request: Request<Req>,
    handler: impl FnOnce(Req) -> Fut,
) -> RpcResult<T>
where
    Req: Subject,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    use tracing::field::Empty;
    use tracing::Instrument;
    let req = request.into_inner();
    let span = tracing::info_span!(
        "rpc",
        method,
        sandbox = Empty,
        container = Empty,
        pod = Empty,
        image = Empty
    );
    if !req.sandbox_id().is_empty() {
        span.record("sandbox", req.sandbox_id());
    }
    if !req.container_id().is_empty() {
        span.record("container", req.container_id());
    }
    async move {
        match handler(req).await {
            Ok(reply) => Ok(Response::new(reply)),
            Err(err) => {
                log_failure(method, &err);
                Err(err.to_status())
            }
        }
    }
    .instrument(span)
    .await
}

fn log_failure(method: &str, err: &Error) {
    let code = err.code();
    let causes = err.causes();
    // A missing object or a bad request is the client's business (the kubelet asks for
    // removed containers all the time); a failure of the daemon or the host is a warning.
    if code.is_client_error() {
        tracing::info!(method, ?code, error = %err, ?causes, "call failed");
    } else {
        tracing::warn!(method, ?code, error = %err, ?causes, "call failed");
    }
}

/// Both CRI services (RuntimeService and ImageService) over the daemon.
#[derive(Clone)]
pub struct CriService {
    daemon: Arc<Daemon>,
    metrics: Arc<peapod_metrics::Metrics>,
    /// Set to true when the server shuts down: open GetContainerEvents streams end on it.
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl CriService {
    pub fn new(daemon: Arc<Daemon>, metrics: Arc<peapod_metrics::Metrics>) -> CriService {
        CriService {
            daemon,
            metrics,
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Ends every open event stream (and any opened later). Graceful shutdown waits for open
    /// streams to finish, and an event stream never finishes on its own: without this, a
    /// kubelet's GetContainerEvents would keep SIGTERM from ever stopping the daemon.
    pub fn end_streams(&self) {
        self.stopping.send_replace(true);
    }
}

/// Serves CRI on `socket` (mode 0660) until `shutdown` resolves.
pub async fn serve(
    rt: Arc<Daemon>,
    socket: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use anyhow::Context;
    // What can fail on configuration comes before the socket exists, so that a daemon that
    // refuses to start leaves no socket behind.
    let pod_settings = rt.config.pods.settings(&rt.config.root)?;
    // Prometheus metrics: every call is counted by the layer whether or not /metrics is
    // served, so that turning the listener on needs no other change.
    let metrics = peapod_metrics::Metrics::new().context("metrics")?;
    let metrics_task = if rt.config.metrics.address.is_empty() {
        None
    } else {
        let state = std::sync::Arc::new(metrics::DaemonState(rt.clone()));
        let (addr, task) =
            peapod_metrics::serve(&rt.config.metrics.address, metrics.clone(), Some(state))
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
    // The pod supervisor (`peapod apply`) is a CRI client of this very socket.
    let pod_cri = std::sync::Arc::new(peapod_pod::cri::TonicCri::new(socket));
    let pods = peapod_pod::manager::Manager::start(pod_cri, pod_settings);
    let cri = CriService::new(rt, metrics.clone());
    let streams = cri.clone();
    let shutdown = async move {
        shutdown.await;
        streams.end_streams();
    };
    // Any gRPC client: grpcio, grpc-java and grpcurl send the socket path as :authority.
    let incoming = peapod_uds::incoming(listener);
    tonic::transport::Server::builder()
        .layer(peapod_metrics::GrpcMetricsLayer::new(metrics))
        .add_service(RuntimeServiceServer::new(cri.clone()))
        .add_service(ImageServiceServer::new(cri))
        .add_service(peapod_pod::service::PodsService::new(pods).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .context("CRI server")?;
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
    use anyhow::Context;
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

type EventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for CriService {
    async fn version(&self, r: Request<cri::VersionRequest>) -> RpcResult<cri::VersionResponse> {
        rpc("Version", r, |req| {
            std::future::ready(runtime_info::version(&self.daemon, req))
        })
        .await
    }
    async fn status(&self, r: Request<cri::StatusRequest>) -> RpcResult<cri::StatusResponse> {
        // Status reads the CNI configuration directory and looks plugins and the runtime up on
        // disk: blocking file I/O, so it runs on the blocking pool.
        let daemon = self.daemon.clone();
        rpc("Status", r, |req| async move {
            tokio::task::spawn_blocking(move || runtime_info::status(&daemon, req))
                .await
                .map_err(|e| Error::internal(format!("Status task: {e}")))?
        })
        .await
    }
    async fn runtime_config(
        &self,
        r: Request<cri::RuntimeConfigRequest>,
    ) -> RpcResult<cri::RuntimeConfigResponse> {
        rpc("RuntimeConfig", r, |req| {
            std::future::ready(runtime_info::runtime_config(&self.daemon, req))
        })
        .await
    }
    async fn update_runtime_config(
        &self,
        r: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> RpcResult<cri::UpdateRuntimeConfigResponse> {
        rpc("UpdateRuntimeConfig", r, |req| {
            std::future::ready(runtime_info::update_runtime_config(&self.daemon, req))
        })
        .await
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<cri::RunPodSandboxRequest>,
    ) -> RpcResult<cri::RunPodSandboxResponse> {
        rpc("RunPodSandbox", r, |req| sandbox::run(&self.daemon, req)).await
    }
    async fn stop_pod_sandbox(
        &self,
        r: Request<cri::StopPodSandboxRequest>,
    ) -> RpcResult<cri::StopPodSandboxResponse> {
        rpc("StopPodSandbox", r, |req| sandbox::stop(&self.daemon, req)).await
    }
    async fn remove_pod_sandbox(
        &self,
        r: Request<cri::RemovePodSandboxRequest>,
    ) -> RpcResult<cri::RemovePodSandboxResponse> {
        rpc("RemovePodSandbox", r, |req| {
            sandbox::remove(&self.daemon, req)
        })
        .await
    }
    async fn pod_sandbox_status(
        &self,
        r: Request<cri::PodSandboxStatusRequest>,
    ) -> RpcResult<cri::PodSandboxStatusResponse> {
        rpc("PodSandboxStatus", r, |req| {
            sandbox::status(&self.daemon, req)
        })
        .await
    }
    async fn list_pod_sandbox(
        &self,
        r: Request<cri::ListPodSandboxRequest>,
    ) -> RpcResult<cri::ListPodSandboxResponse> {
        rpc("ListPodSandbox", r, |req| {
            std::future::ready(sandbox::list(&self.daemon, req))
        })
        .await
    }

    async fn create_container(
        &self,
        r: Request<cri::CreateContainerRequest>,
    ) -> RpcResult<cri::CreateContainerResponse> {
        rpc("CreateContainer", r, |req| {
            container::create(&self.daemon, req)
        })
        .await
    }
    async fn start_container(
        &self,
        r: Request<cri::StartContainerRequest>,
    ) -> RpcResult<cri::StartContainerResponse> {
        rpc("StartContainer", r, |req| {
            container::start(&self.daemon, req)
        })
        .await
    }
    async fn stop_container(
        &self,
        r: Request<cri::StopContainerRequest>,
    ) -> RpcResult<cri::StopContainerResponse> {
        rpc("StopContainer", r, |req| container::stop(&self.daemon, req)).await
    }
    async fn remove_container(
        &self,
        r: Request<cri::RemoveContainerRequest>,
    ) -> RpcResult<cri::RemoveContainerResponse> {
        rpc("RemoveContainer", r, |req| {
            container::remove(&self.daemon, req)
        })
        .await
    }
    async fn list_containers(
        &self,
        r: Request<cri::ListContainersRequest>,
    ) -> RpcResult<cri::ListContainersResponse> {
        rpc("ListContainers", r, |req| {
            std::future::ready(container::list(&self.daemon, req))
        })
        .await
    }
    async fn container_status(
        &self,
        r: Request<cri::ContainerStatusRequest>,
    ) -> RpcResult<cri::ContainerStatusResponse> {
        rpc("ContainerStatus", r, |req| {
            container::status(&self.daemon, req)
        })
        .await
    }
    async fn update_container_resources(
        &self,
        r: Request<cri::UpdateContainerResourcesRequest>,
    ) -> RpcResult<cri::UpdateContainerResourcesResponse> {
        rpc("UpdateContainerResources", r, |req| {
            container::update_resources(&self.daemon, req)
        })
        .await
    }
    async fn reopen_container_log(
        &self,
        r: Request<cri::ReopenContainerLogRequest>,
    ) -> RpcResult<cri::ReopenContainerLogResponse> {
        rpc("ReopenContainerLog", r, |req| {
            container::reopen_log(&self.daemon, req)
        })
        .await
    }

    async fn exec_sync(
        &self,
        r: Request<cri::ExecSyncRequest>,
    ) -> RpcResult<cri::ExecSyncResponse> {
        rpc("ExecSync", r, |req| exec::exec_sync(&self.daemon, req)).await
    }
    async fn exec(&self, r: Request<cri::ExecRequest>) -> RpcResult<cri::ExecResponse> {
        rpc("Exec", r, |req| exec::exec(&self.daemon, req)).await
    }
    async fn attach(&self, r: Request<cri::AttachRequest>) -> RpcResult<cri::AttachResponse> {
        rpc("Attach", r, |req| exec::attach(&self.daemon, req)).await
    }
    async fn port_forward(
        &self,
        r: Request<cri::PortForwardRequest>,
    ) -> RpcResult<cri::PortForwardResponse> {
        rpc("PortForward", r, |req| {
            exec::port_forward(&self.daemon, req)
        })
        .await
    }

    async fn container_stats(
        &self,
        r: Request<cri::ContainerStatsRequest>,
    ) -> RpcResult<cri::ContainerStatsResponse> {
        rpc("ContainerStats", r, |req| {
            stats::container_stats(&self.daemon, req)
        })
        .await
    }
    async fn list_container_stats(
        &self,
        r: Request<cri::ListContainerStatsRequest>,
    ) -> RpcResult<cri::ListContainerStatsResponse> {
        rpc("ListContainerStats", r, |req| {
            stats::list_container_stats(&self.daemon, req)
        })
        .await
    }
    async fn pod_sandbox_stats(
        &self,
        r: Request<cri::PodSandboxStatsRequest>,
    ) -> RpcResult<cri::PodSandboxStatsResponse> {
        rpc("PodSandboxStats", r, |req| {
            stats::pod_sandbox_stats(&self.daemon, req)
        })
        .await
    }
    async fn list_pod_sandbox_stats(
        &self,
        r: Request<cri::ListPodSandboxStatsRequest>,
    ) -> RpcResult<cri::ListPodSandboxStatsResponse> {
        rpc("ListPodSandboxStats", r, |req| {
            stats::list_pod_sandbox_stats(&self.daemon, req)
        })
        .await
    }
    async fn checkpoint_container(
        &self,
        r: Request<cri::CheckpointContainerRequest>,
    ) -> RpcResult<cri::CheckpointContainerResponse> {
        rpc("CheckpointContainer", r, |req| {
            std::future::ready(unimplemented::checkpoint_container(&self.daemon, req))
        })
        .await
    }

    type GetContainerEventsStream = EventStream;
    async fn get_container_events(
        &self,
        r: Request<cri::GetEventsRequest>,
    ) -> RpcResult<Self::GetContainerEventsStream> {
        rpc("GetContainerEvents", r, |req| {
            std::future::ready(events::container_events(
                &self.daemon,
                req,
                self.stopping.subscribe(),
            ))
        })
        .await
    }
    async fn list_metric_descriptors(
        &self,
        r: Request<cri::ListMetricDescriptorsRequest>,
    ) -> RpcResult<cri::ListMetricDescriptorsResponse> {
        rpc("ListMetricDescriptors", r, |req| {
            std::future::ready(stats::list_metric_descriptors(&self.daemon, req))
        })
        .await
    }
    async fn list_pod_sandbox_metrics(
        &self,
        r: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> RpcResult<cri::ListPodSandboxMetricsResponse> {
        rpc("ListPodSandboxMetrics", r, |req| {
            stats::list_pod_sandbox_metrics(&self.daemon, req)
        })
        .await
    }
}

#[tonic::async_trait]
impl ImageService for CriService {
    async fn list_images(
        &self,
        r: Request<cri::ListImagesRequest>,
    ) -> RpcResult<cri::ListImagesResponse> {
        rpc("ListImages", r, |req| image::list(&self.daemon, req)).await
    }
    async fn image_status(
        &self,
        r: Request<cri::ImageStatusRequest>,
    ) -> RpcResult<cri::ImageStatusResponse> {
        rpc("ImageStatus", r, |req| image::status(&self.daemon, req)).await
    }
    async fn pull_image(
        &self,
        r: Request<cri::PullImageRequest>,
    ) -> RpcResult<cri::PullImageResponse> {
        rpc("PullImage", r, |req| {
            image::pull(&self.daemon, &self.metrics, req)
        })
        .await
    }
    async fn remove_image(
        &self,
        r: Request<cri::RemoveImageRequest>,
    ) -> RpcResult<cri::RemoveImageResponse> {
        rpc("RemoveImage", r, |req| image::remove(&self.daemon, req)).await
    }
    async fn image_fs_info(
        &self,
        r: Request<cri::ImageFsInfoRequest>,
    ) -> RpcResult<cri::ImageFsInfoResponse> {
        rpc("ImageFsInfo", r, |req| image::fs_info(&self.daemon, req)).await
    }
}
