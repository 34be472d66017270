//! Streaming one layer blob from a registry into the unpacker, resumed where it stopped when
//! the connection is cut in the middle (a reset, a proxy that gives up): the rest is asked for
//! with `Range: bytes=<received>-`; a registry that ignores ranges sends it all again and what
//! was already received is skipped. The unpacker sees one continuous stream and verifies the
//! blob's digest and diff_id over all of it, so a resumed download is trusted only as a whole.

use crate::error::Error;
use crate::manifest::Descriptor;
use crate::progress::Tracker;
use crate::registry::Session;
use bytes::Buf;
use futures_util::StreamExt;
use std::time::Duration;
use tokio::sync::mpsc::Sender;

/// Resumptions of one blob's download.
const MAX_RESUMES: u32 = 5;

/// Sends blob `desc` (from endpoint `ep` first) into `tx` in order; Ok once all of it is sent
/// (or the unpacker stopped reading: it says why).
pub(super) async fn pump_blob(
    session: &Session,
    ep: usize,
    desc: &Descriptor,
    tracker: &Tracker,
    idx: usize,
    tx: &Sender<std::io::Result<bytes::Bytes>>,
) -> Result<(), Error> {
    let declared = desc.size as u64;
    let mut received: u64 = 0;
    let mut resumes = 0;
    let mut resp = session.blob(&desc.digest, ep).await?;
    loop {
        let url = resp.url().to_string();
        let mut skip = 0u64;
        if received > 0 {
            if resp.status() == reqwest::StatusCode::PARTIAL_CONTENT {
                let start = content_range_start(resp.headers());
                if start != Some(received) {
                    return Err(Error::Registry {
                        url,
                        message: format!(
                            "resumed blob {} at byte {received}, but the registry sent a range starting at {start:?}",
                            desc.digest
                        ),
                    });
                }
            } else {
                skip = received;
            }
        }
        let mut stream = resp.bytes_stream();
        let mut cut = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(mut c) => {
                    if skip > 0 {
                        let n = skip.min(c.len() as u64) as usize;
                        c.advance(n);
                        skip -= n as u64;
                        if c.is_empty() {
                            continue;
                        }
                    }
                    received += c.len() as u64;
                    if received > declared {
                        return Err(Error::InvalidImage(format!(
                            "blob {} is larger than its declared {declared} bytes",
                            desc.digest
                        )));
                    }
                    tracker.add_bytes(idx, c.len() as u64);
                    if tx.send(Ok(c)).await.is_err() {
                        return Ok(());
                    }
                }
                Err(e) => {
                    cut = Some(Error::Http {
                        url: url.clone(),
                        source: e,
                    });
                    break;
                }
            }
        }
        let cut = match cut {
            Some(e) => e,
            None if received < declared && skip == 0 => Error::Registry {
                url: url.clone(),
                message: format!(
                    "blob {} ended after {received} of {declared} bytes",
                    desc.digest
                ),
            },
            None => return Ok(()),
        };
        if resumes >= MAX_RESUMES {
            return Err(cut);
        }
        resumes += 1;
        tracing::warn!(blob = %desc.digest, received, declared, resume = resumes, error = %cut, "layer download cut; resuming where it stopped");
        tokio::time::sleep(Duration::from_millis(200 * u64::from(resumes))).await;
        resp = session.blob_from(&desc.digest, ep, received).await?;
    }
}

/// The first byte of a `Content-Range: bytes N-M/T`.
fn content_range_start(h: &reqwest::header::HeaderMap) -> Option<u64> {
    let v = h.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    let range = v.trim().strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_start_is_read() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(content_range_start(&h), None);
        h.insert(
            reqwest::header::CONTENT_RANGE,
            "bytes 100-199/200".parse().unwrap(),
        );
        assert_eq!(content_range_start(&h), Some(100));
        h.insert(
            reqwest::header::CONTENT_RANGE,
            "bytes */200".parse().unwrap(),
        );
        assert_eq!(content_range_start(&h), None);
    }
}
