//! The `peapod.pods.v1.Pods` gRPC service over the manager: pods and events as Kubernetes JSON.

use crate::manager::{Deletion, Manager};
use peapod_proto::pods as api;
use peapod_proto::pods::pods_server::{Pods, PodsServer};
use std::sync::Arc;
use tonic::{Request, Response, Status};
use tracing::Instrument;

#[derive(Clone)]
pub struct PodsService {
    manager: Arc<Manager>,
}

impl PodsService {
    pub fn new(manager: Arc<Manager>) -> PodsService {
        PodsService { manager }
    }

    pub fn into_server(self) -> PodsServer<PodsService> {
        PodsServer::new(self)
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, Status> {
    serde_json::to_string(v).map_err(|e| Status::internal(format!("encode JSON: {e}")))
}

fn namespace(ns: &str) -> &str {
    if ns.is_empty() {
        "default"
    } else {
        ns
    }
}

fn required(field: &str, v: &str) -> Result<(), Status> {
    if v.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

#[tonic::async_trait]
impl Pods for PodsService {
    async fn apply(
        &self,
        r: Request<api::ApplyRequest>,
    ) -> Result<Response<api::ApplyResponse>, Status> {
        let r = r.into_inner();
        let span =
            tracing::info_span!("Apply", source = %r.source, namespace = %namespace(&r.namespace));
        let results = self
            .manager
            .apply(namespace(&r.namespace), &r.manifest, &r.source)
            .instrument(span)
            .await
            .inspect_err(|e| tracing::info!(error = %e, "apply refused"))?;
        Ok(Response::new(api::ApplyResponse {
            results: results
                .into_iter()
                .map(|a| api::ApplyResult {
                    namespace: a.namespace,
                    name: a.name,
                    action: a.action.to_string(),
                })
                .collect(),
        }))
    }

    async fn get(&self, r: Request<api::GetRequest>) -> Result<Response<api::GetResponse>, Status> {
        let r = r.into_inner();
        required("name", &r.name)?;
        let pod = self.manager.get(namespace(&r.namespace), &r.name)?;
        Ok(Response::new(api::GetResponse {
            pod_json: json(&pod)?,
        }))
    }

    async fn list(
        &self,
        r: Request<api::ListRequest>,
    ) -> Result<Response<api::ListResponse>, Status> {
        let r = r.into_inner();
        let ns = (!r.all_namespaces).then(|| namespace(&r.namespace).to_string());
        let pods = self.manager.list(ns.as_deref());
        Ok(Response::new(api::ListResponse {
            pod_json: pods.iter().map(json).collect::<Result<_, _>>()?,
        }))
    }

    async fn delete(
        &self,
        r: Request<api::DeleteRequest>,
    ) -> Result<Response<api::DeleteResponse>, Status> {
        let r = r.into_inner();
        required("name", &r.name)?;
        let grace = (r.grace_period_seconds >= 0).then_some(r.grace_period_seconds);
        let span = tracing::info_span!("DeletePod", namespace = %namespace(&r.namespace), name = %r.name, wait = r.wait);
        let deletion = Deletion {
            namespace: namespace(&r.namespace),
            name: &r.name,
            grace_seconds: grace,
            wait: r.wait,
        };
        self.manager.delete(deletion).instrument(span).await?;
        Ok(Response::new(api::DeleteResponse {}))
    }

    async fn events(
        &self,
        r: Request<api::EventsRequest>,
    ) -> Result<Response<api::EventsResponse>, Status> {
        let r = r.into_inner();
        required("name", &r.name)?;
        let events = self.manager.events(namespace(&r.namespace), &r.name)?;
        Ok(Response::new(api::EventsResponse {
            event_json: events.iter().map(json).collect::<Result<_, _>>()?,
        }))
    }
}
