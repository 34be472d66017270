//! The Stream* calls (KEP-5825, the kubelet's CRIListStreaming gate): StreamPodSandboxes,
//! StreamContainers, StreamContainerStats, StreamPodSandboxStats, StreamPodSandboxMetrics and
//! StreamImages answer with the very items of the matching List call (same filter, same
//! order), cut into messages of at least one item, each item in exactly one of them, and
//! then the end of the stream. No items: a stream of no messages, as the CRI allows.
//!
//! The items are gathered first, as the List call gathers them (one consistent snapshot, and
//! an error is the call's status, never a stream cut half-way), then sent as a stream. A
//! message holds at most `stream_batch_items` items (the configuration's, 200 by default)
//! and, past its first item, at most [`MAX_BYTES`] of them: each stays far below gRPC's
//! default 4 MiB receive limit (tonic's and grpc-go's; the kubelet allows 16 MiB), which a
//! long List answer can exceed — the reason the Stream calls exist.

use prost::bytes::Bytes;
use prost::Message;
use std::pin::Pin;
use tokio_stream::Stream;
use tonic::Status;

/// The most encoded bytes of items in one message, unless its single item is larger.
pub const MAX_BYTES: usize = 2 << 20;

pub type ListStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Cuts `items` into runs of at most `max_items` items and (except a run of one) at most
/// `max_bytes` of their encoding as a repeated field; every run has at least one item and the
/// runs keep the items' order.
pub fn chunks<T: Message>(items: Vec<T>, max_items: usize, max_bytes: usize) -> Vec<Vec<T>> {
    chunks_by(items, max_items, max_bytes, Message::encoded_len)
}

/// [`chunks`] of items whose encoded length is `len`'s.
fn chunks_by<T>(
    items: Vec<T>,
    max_items: usize,
    max_bytes: usize,
    len: impl Fn(&T) -> usize,
) -> Vec<Vec<T>> {
    let max_items = max_items.max(1);
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut current: Vec<T> = Vec::new();
    let mut bytes = 0usize;
    for item in items {
        // As a field of the response: a tag byte, the length, the message.
        let len = len(&item);
        let size = 1 + prost::encoding::encoded_len_varint(len as u64) + len;
        if !current.is_empty() && (current.len() >= max_items || bytes + size > max_bytes) {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(item);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The stream of the responses `wrap` makes of each run of at most `max_items` of `items`.
pub fn stream<T, R>(items: Vec<T>, max_items: usize, wrap: impl Fn(Vec<T>) -> R) -> ListStream<R>
where
    T: Message,
    R: Send + 'static,
{
    messages(chunks(items, max_items, MAX_BYTES), wrap)
}

/// [`stream`] of items already encoded (`peapod_proto::v1::list_answers`).
pub fn stream_encoded<R>(
    items: Vec<Bytes>,
    max_items: usize,
    wrap: impl Fn(Vec<Bytes>) -> R,
) -> ListStream<R>
where
    R: Send + 'static,
{
    messages(chunks_by(items, max_items, MAX_BYTES, Bytes::len), wrap)
}

fn messages<T, R: Send + 'static>(runs: Vec<Vec<T>>, wrap: impl Fn(Vec<T>) -> R) -> ListStream<R> {
    let messages: Vec<Result<R, Status>> = runs.into_iter().map(|run| Ok(wrap(run))).collect();
    tracing::debug!(messages = messages.len(), "streaming the list");
    Box::pin(tokio_stream::iter(messages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1 as cri;

    fn image(id: usize, tags: usize) -> cri::Image {
        cri::Image {
            id: format!("sha256:{id:064}"),
            repo_tags: (0..tags)
                .map(|t| format!("registry.example/img{id}:{t}"))
                .collect(),
            ..Default::default()
        }
    }

    fn ids(runs: &[Vec<cri::Image>]) -> Vec<String> {
        runs.iter().flatten().map(|i| i.id.clone()).collect()
    }

    #[test]
    fn nothing_is_no_message() {
        assert!(chunks(Vec::<cri::Image>::new(), 10, 1000).is_empty());
    }

    #[test]
    fn every_item_once_in_order_in_runs_of_at_most_max() {
        let items: Vec<cri::Image> = (0..1001).map(|i| image(i, 1)).collect();
        let want: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
        let runs = chunks(items, 200, usize::MAX);
        assert_eq!(
            runs.iter().map(Vec::len).collect::<Vec<_>>(),
            [200, 200, 200, 200, 200, 1]
        );
        assert_eq!(ids(&runs), want);
    }

    #[test]
    fn runs_stay_under_the_byte_budget() {
        let items: Vec<cri::Image> = (0..300).map(|i| image(i, 20)).collect();
        let want: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
        let budget = 16 * 1024;
        let runs = chunks(items, 200, budget);
        assert!(runs.len() > 2, "{}", runs.len());
        for run in &runs {
            assert!(!run.is_empty());
            let msg = cri::StreamImagesResponse {
                images: run.clone(),
            };
            assert!(msg.encoded_len() <= budget, "{}", msg.encoded_len());
        }
        assert_eq!(ids(&runs), want);
    }

    #[test]
    fn an_item_larger_than_the_budget_goes_alone() {
        let items = vec![image(1, 1), image(2, 500), image(3, 1)];
        let runs = chunks(items, 200, 4096);
        assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1]);
    }

    #[tokio::test]
    async fn the_stream_sends_every_run_then_ends() {
        use tokio_stream::StreamExt;
        let items: Vec<cri::Image> = (0..450).map(|i| image(i, 1)).collect();
        let s = stream(items, 200, |images| cri::StreamImagesResponse { images });
        let got: Vec<usize> = s
            .map(|m| m.map(|m| m.images.len()).unwrap_or(0))
            .collect()
            .await;
        assert_eq!(got, [200, 200, 50]);
    }
}
