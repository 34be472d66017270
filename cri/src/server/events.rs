//! GetContainerEvents.

use super::EventStream;
use crate::daemon::Daemon;
use crate::error::Result;
use peapod_proto::v1 as cri;

pub fn container_events(daemon: &Daemon, _req: cri::GetEventsRequest) -> Result<EventStream> {
    use tokio_stream::StreamExt;
    let stream = tokio_stream::wrappers::BroadcastStream::new(daemon.events.subscribe())
        .filter_map(|e| match e {
            Ok(event) => Some(Ok(event)),
            // A subscriber that fell behind misses the oldest events; the kubelet relists.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "a container event subscriber fell behind");
                None
            }
        });
    Ok(Box::pin(stream))
}
