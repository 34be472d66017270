//! A CRI client over a unix socket (tonic with a unix-socket connector), for the command-line
//! tools, the benchmarks and the integration tests.

use hyper_util::rt::TokioIo;
use peapod_proto::v1::image_service_client::ImageServiceClient;
use peapod_proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use tonic::transport::{Channel, Endpoint};

/// A client of both CRI services.
#[derive(Clone)]
pub struct CriClient {
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
    /// The connection both use, for calls made without the generated clients.
    pub channel: Channel,
}

impl CriClient {
    /// Connects to `unix:///path` or a bare path.
    pub async fn connect(endpoint: &str) -> Result<CriClient, tonic::transport::Error> {
        let path = PathBuf::from(endpoint.trim_start_matches("unix://"));
        Ok(CriClient::on(channel(&path).await?))
    }

    /// The clients on a connection made already.
    pub fn on(channel: Channel) -> CriClient {
        CriClient {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            image: ImageServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            channel,
        }
    }
}

/// The name the command-line tools and tests use.
pub type Cri = CriClient;

pub async fn channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is ignored by the connector; tonic needs one. The receive window grows with
    // the answers (HTTP/2's BDP estimate, as grpc-go's clients such as the kubelet do): with
    // the fixed 64 KiB default a list answer of 1000 pods (0.4-0.8 MB) waits for a window
    // update every 64 KiB.
    let channel = Endpoint::from_static("http://[::]:50051")
        .http2_adaptive_window(true)
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(channel)
}
