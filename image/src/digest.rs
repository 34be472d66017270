//! sha256 digests, hashing readers and layer decompression.

use crate::Error;
use sha2::{Digest as _, Sha256};
use std::io::{self, BufRead, BufReader, Read};

/// `sha256:<hex>` of a byte slice.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// The hex part of a `sha256:` digest (callers have validated it).
pub(crate) fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

pub(crate) fn verify(what: &str, expected: &str, data: &[u8]) -> Result<(), Error> {
    let actual = sha256_digest(data);
    if actual != expected {
        return Err(Error::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Hashes and counts everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads the rest of the stream (e.g. the zero blocks after a tar's end
    /// marker) so that the digest covers all of it.
    pub fn drain(&mut self) -> io::Result<()> {
        io::copy(self, &mut io::sink()).map(drop)
    }

    pub fn finish(self) -> (String, u64, R) {
        (
            format!("sha256:{}", hex::encode(self.hasher.finalize())),
            self.count,
            self.inner,
        )
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Sniffs the compression from magic bytes rather than trusting the media type:
/// docker-save archives and some registries label layers loosely.
pub fn sniff<R: BufRead>(r: &mut R) -> io::Result<Compression> {
    let head = r.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    })
}

/// Wraps a (possibly compressed) layer stream in the matching decoder.
/// gzip may have several members (pigz); zstd several frames, skippable ones included.
pub fn decompress<'a, R: Read + 'a>(r: R) -> io::Result<Box<dyn Read + 'a>> {
    let mut br = BufReader::with_capacity(128 * 1024, r);
    Ok(match sniff(&mut br)? {
        Compression::None => Box::new(br),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(br)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(br)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn roundtrip_all_compressions() {
        let data = b"hello layer".repeat(1000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let zs = zstd::encode_all(&data[..], 3).unwrap();
        for input in [data.clone(), gz, zs] {
            let mut out = Vec::new();
            decompress(&input[..])
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, data);
        }
        let mut h = HashingReader::new(&data[..]);
        h.drain().unwrap();
        let (d, n, _) = h.finish();
        assert_eq!(d, sha256_digest(&data));
        assert_eq!(n, data.len() as u64);
    }
}
