//! List calls whose answers are taken as bytes, not decoded: the runtime's part of a list
//! call (finding the items, encoding them, sending them) without this client's decoding of
//! the answer, which costs the same for any runtime that sends the same items and is timed
//! on its own (the "decoding" row). The same connection, request and answer as the decoded
//! calls; the caller checks that the answer has at least 64 bytes per item it holds.

use peapod_proto::v1 as cri;
use prost::Message as _;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

/// ListPodSandbox with an empty filter (the kubelet's relist): the answer's bytes.
pub async fn list_pod_sandbox(channel: &Channel) -> Result<bytes::Bytes, tonic::Status> {
    let request = cri::ListPodSandboxRequest {
        filter: Some(Default::default()),
    };
    call(
        channel,
        "/runtime.v1.RuntimeService/ListPodSandbox",
        request.encode_to_vec(),
    )
    .await
}

/// ListContainers with an empty filter: the answer's bytes.
pub async fn list_containers(channel: &Channel) -> Result<bytes::Bytes, tonic::Status> {
    let request = cri::ListContainersRequest {
        filter: Some(Default::default()),
    };
    call(
        channel,
        "/runtime.v1.RuntimeService/ListContainers",
        request.encode_to_vec(),
    )
    .await
}

async fn call(
    channel: &Channel,
    method: &'static str,
    request: Vec<u8>,
) -> Result<bytes::Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(64 << 20);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("not ready: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(method);
    Ok(grpc
        .unary(tonic::Request::new(request), path, Raw)
        .await?
        .into_inner())
}

/// Messages as bytes, both ways.
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = bytes::Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<bytes::Bytes>, tonic::Status> {
        use bytes::Buf as _;
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}
