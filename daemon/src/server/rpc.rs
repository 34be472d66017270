//! What every RPC goes through: its span, the check of required fields, and the one place
//! where the daemon's errors become the client's statuses (and failed calls are logged).

use crate::error::Error;
use peapod_proto::v1 as cri;
use tonic::{Request, Response, Status};

pub(super) type RpcResult<T> = Result<Response<T>, Status>;

/// InvalidArgument naming `field` when a required string is empty.
pub(super) fn required(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    Ok(())
}

/// What a request is about, for its RPC's span: the sandbox or container it names.
pub(super) trait Subject {
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
        CreateContainerRequest, PortForwardRequest, PodSandboxStatsRequest,
        UpdatePodSandboxResourcesRequest, CheckpointPodRequest;
    container: StartContainerRequest, StopContainerRequest, RemoveContainerRequest,
        ContainerStatusRequest, UpdateContainerResourcesRequest, ReopenContainerLogRequest,
        ExecSyncRequest, ExecRequest, AttachRequest, ContainerStatsRequest,
        CheckpointContainerRequest;
    none: VersionRequest, StatusRequest, RuntimeConfigRequest, UpdateRuntimeConfigRequest,
        RunPodSandboxRequest, ListPodSandboxRequest, ListContainersRequest,
        ListContainerStatsRequest, ListPodSandboxStatsRequest, GetEventsRequest,
        ListMetricDescriptorsRequest, ListPodSandboxMetricsRequest, ListImagesRequest,
        ImageStatusRequest, PullImageRequest, RemoveImageRequest, ImageFsInfoRequest,
        StreamPodSandboxesRequest, StreamContainersRequest, StreamContainerStatsRequest,
        StreamPodSandboxStatsRequest, StreamPodSandboxMetricsRequest, StreamImagesRequest,
        RestorePodRequest
);

/// Runs one RPC: in a span naming the method and the object it is about (handlers add `pod`
/// or `image` when they know it), and, if it fails, logs the method, code and cause and
/// turns the error into the client's status. Every handler goes through here, so this is
/// the one place where core errors become statuses.
pub(super) async fn rpc<Req, T, Fut>(
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
    // The otel.* fields are filled only when traces are exported (crate::otel): empty, the
    // log shows neither.
    let span = tracing::info_span!(
        "rpc",
        method,
        sandbox = Empty,
        container = Empty,
        pod = Empty,
        image = Empty,
        otel.name = Empty,
        otel.kind = Empty
    );
    crate::otel::adopt_caller(&span, method, request.metadata());
    let req = request.into_inner();
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
                let status = err.to_status();
                crate::otel::record_failure(&tracing::Span::current(), status.message());
                Err(status)
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
