//! peapod's ttrpc extension service (`peapod.shim.v1.Shim`): what the Task API has no call
//! for. Today one method, ReopenLog, for CRI ReopenContainerLog (log rotation).

use crate::error::{reply, ShimError};
use crate::task::TaskService;
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
use containerd_shim_protos::protobuf::Message;
use peapod_host::sync::LockUnpoisoned;
use peapod_shim::protocol;
use std::collections::HashMap;
use std::sync::Arc;
use ttrpc::asynchronous::{MethodHandler, Service, TtrpcContext};
use ttrpc::{Request, Response};

/// The extension service, to register beside the Task service.
pub fn service(tasks: Arc<TaskService>) -> (String, Service) {
    let mut methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
    methods.insert(
        protocol::METHOD_REOPEN_LOG.to_string(),
        Box::new(ReopenLog { tasks }),
    );
    (
        protocol::EXTENSION_SERVICE.to_string(),
        Service {
            methods,
            streams: HashMap::new(),
        },
    )
}

const METHOD: &str = "peapod.shim.v1.Shim/ReopenLog";

/// `peapod.shim.v1.Shim/ReopenLog`: reopens the container's CRI log file (a StateRequest
/// names the container).
struct ReopenLog {
    tasks: Arc<TaskService>,
}

impl ReopenLog {
    fn reopen(&self, payload: &[u8]) -> Result<Vec<u8>, ShimError> {
        let request = api::StateRequest::parse_from_bytes(payload)
            .map_err(|e| ShimError::InvalidArgument(format!("decode request: {e}")))?;
        let io = self.tasks.io(&request.id, "")?;
        let Some(log) = io.log.as_ref() else {
            return Err(ShimError::FailedPrecondition(format!(
                "container {} has no log file",
                request.id
            )));
        };
        log.lock_unpoisoned()
            .reopen()
            .map_err(|e| ShimError::io("reopen log", e))?;
        Empty::new()
            .write_to_bytes()
            .map_err(|e| ShimError::io("encode response", std::io::Error::other(e)))
    }
}

#[async_trait]
impl MethodHandler for ReopenLog {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        let mut resp = Response::new();
        resp.payload = reply(METHOD, "", self.reopen(&req.payload))?;
        Ok(resp)
    }
}
