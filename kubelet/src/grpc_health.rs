//! The gRPC health checking protocol (grpc.health.v1.Health/Check) for grpc probes, with the
//! two messages written out by hand: no generated code needed for a two-field protocol.

use tonic::codegen::http::uri::PathAndQuery;

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    /// 1 = SERVING.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

const SERVING: i32 = 1;

/// Ok when the server answers SERVING for `service`.
pub async fn check(host: &str, port: u16, service: &str) -> Result<(), String> {
    let addr = format!("http://{host}:{port}");
    let channel = tonic::transport::Endpoint::from_shared(addr.clone())
        .map_err(|e| format!("{addr}: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("failed to connect service {host}:{port} within timeout: {e}"))?;
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|e| format!("{e}"))?;
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let resp = client
        .unary(
            tonic::Request::new(HealthCheckRequest {
                service: service.to_string(),
            }),
            path,
            codec,
        )
        .await
        .map_err(|s| format!("health rpc failed: {}", s.message()))?;
    let status = resp.into_inner().status;
    if status == SERVING {
        Ok(())
    } else {
        Err(format!("service unhealthy (responded with {status:?})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real grpc.health.v1 server (tonic-health) on loopback.
    #[tokio::test]
    async fn serving_and_not_serving() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("ok", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("down", tonic_health::ServingStatus::NotServing)
            .await;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
        );
        check("127.0.0.1", port, "ok").await.unwrap();
        // The empty service name is the server as a whole, which tonic-health reports serving.
        check("127.0.0.1", port, "").await.unwrap();
        let e = check("127.0.0.1", port, "down").await.unwrap_err();
        assert!(e.contains("service unhealthy"), "{e}");
        let e = check("127.0.0.1", port, "unknown").await.unwrap_err();
        assert!(e.contains("health rpc failed"), "{e}");
    }
}
