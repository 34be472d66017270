//! GetContainerEvents.

use super::EventStream;
use crate::daemon::Daemon;
use crate::error::Result;
use peapod_proto::v1 as cri;
use tokio::sync::{broadcast, mpsc, watch};

/// Events waiting for a slow subscriber before forwarding waits for it.
const BUFFER: usize = 64;

/// A stream of the daemon's container events from now on. It ends when the client goes away
/// or when `stopping` turns true (the server is shutting down): a forwarding task sits between
/// the publisher and the response so that either ends it, even while the task waits on a slow
/// client.
pub fn container_events(
    daemon: &Daemon,
    _req: cri::GetEventsRequest,
    mut stopping: watch::Receiver<bool>,
) -> Result<EventStream> {
    let mut events = daemon.events.subscribe();
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let forward = async {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        if tx.send(Ok(event)).await.is_err() {
                            return; // the client went away
                        }
                    }
                    // A subscriber that fell behind misses the oldest events; the kubelet
                    // relists.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "a container event subscriber fell behind");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        tokio::select! {
            _ = forward => {}
            // Err: the server is gone altogether; the stream ends all the same.
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}
