//! SPDY/3 name/value header blocks and their zlib compression.
//!
//! A header block is `u32 count` then, per pair, `u32 len, name, u32 len, value`, all big
//! endian; several values of one name are joined with NUL. The block is deflated with zlib,
//! primed with [`HEADER_DICTIONARY`], and — the part that is easy to get wrong — each direction
//! of a connection keeps *one* zlib stream for its whole life: every block is a sync-flushed
//! continuation of the previous one. So each connection owns one [`HeaderCompressor`] (used in
//! the order frames hit the wire) and one [`HeaderDecompressor`] (used in the order they arrive).

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::HEADER_DICTIONARY;
use super::SpdyError;

/// Name/value pairs of a SYN_STREAM, SYN_REPLY or HEADERS frame.
///
/// Names are kept lowercase (SPDY requires it on the wire; Go peers lowercase what they send
/// and canonicalise what they read, so `streamType` travels as `streamtype`). Lookups are
/// case-insensitive so callers can use the Kubernetes spelling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    pairs: Vec<(String, String)>,
}

impl Headers {
    /// An empty header set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value; a second value for the same name is kept as another value of that name.
    pub fn insert(&mut self, name: &str, value: impl Into<String>) {
        self.pairs.push((name.to_ascii_lowercase(), value.into()));
    }

    /// Builder form of [`Headers::insert`].
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.insert(name, value);
        self
    }

    /// The first value of `name` (case-insensitive), as Go's `http.Header.Get` returns.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All pairs in order; a name may repeat.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Serialises the uncompressed block. Values of a repeated name are NUL-joined into one
    /// entry, since SPDY forbids a name appearing twice in a block.
    pub fn encode_block(&self) -> Vec<u8> {
        let mut names: Vec<&str> = Vec::new();
        for (n, _) in &self.pairs {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        let mut out = Vec::with_capacity(4 + self.pairs.len() * 32);
        out.extend_from_slice(&(names.len() as u32).to_be_bytes());
        for name in names {
            let joined = self
                .pairs
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join("\0");
            out.extend_from_slice(&(name.len() as u32).to_be_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(joined.len() as u32).to_be_bytes());
            out.extend_from_slice(joined.as_bytes());
        }
        out
    }

    /// Parses an uncompressed block. Every length is checked against what is left, so a
    /// hostile count or length cannot make us allocate more than the block itself; and since
    /// a NUL-joined value becomes one pair per piece, each carrying its own copy of the name,
    /// the decoded size (name + value + [`PAIR_OVERHEAD`] per pair) is bounded by
    /// `max_decoded` too — otherwise a long name with a value of NULs multiplies into
    /// gigabytes from one small block.
    pub fn decode_block(mut block: &[u8], max_decoded: usize) -> Result<Headers, SpdyError> {
        let count = take_u32(&mut block)? as usize;
        // Each pair takes at least 8 bytes: refuse counts the block cannot hold.
        if count > block.len() / 8 {
            return Err(SpdyError::Protocol(format!(
                "header block claims {count} pairs in {} bytes",
                block.len()
            )));
        }
        let mut headers = Headers::new();
        let mut decoded = 0usize;
        for _ in 0..count {
            let name = take_string(&mut block)?;
            let value = take_string(&mut block)?;
            if name.is_empty() {
                return Err(SpdyError::Protocol("empty header name".into()));
            }
            let name = name.to_ascii_lowercase();
            for v in value.split('\0') {
                // Counted before the copy is made, so the bound holds for what is allocated.
                decoded = decoded.saturating_add(name.len() + v.len() + PAIR_OVERHEAD);
                if decoded > max_decoded {
                    return Err(SpdyError::Protocol(format!(
                        "header block decodes past {max_decoded} bytes"
                    )));
                }
                headers.pairs.push((name.clone(), v.to_string()));
            }
        }
        if !block.is_empty() {
            return Err(SpdyError::Protocol(format!(
                "{} trailing bytes after header block",
                block.len()
            )));
        }
        Ok(headers)
    }
}

/// What one decoded pair costs beyond its bytes (two `String`s and the tuple), charged so that
/// many empty values are not free.
pub const PAIR_OVERHEAD: usize = 64;

fn take_u32(buf: &mut &[u8]) -> Result<u32, SpdyError> {
    if buf.len() < 4 {
        return Err(SpdyError::Protocol("truncated header block".into()));
    }
    let v = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    *buf = &buf[4..];
    Ok(v)
}

fn take_string(buf: &mut &[u8]) -> Result<String, SpdyError> {
    let len = take_u32(buf)? as usize;
    if len > buf.len() {
        return Err(SpdyError::Protocol(format!(
            "header string of {len} bytes overruns the block"
        )));
    }
    let s = std::str::from_utf8(&buf[..len])
        .map_err(|_| SpdyError::Protocol("header is not UTF-8".into()))?
        .to_string();
    *buf = &buf[len..];
    Ok(s)
}

/// The sending side of a connection's header compression context.
pub struct HeaderCompressor {
    z: Compress,
}

impl Default for HeaderCompressor {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderCompressor {
    /// A fresh context primed with the SPDY dictionary.
    pub fn new() -> Self {
        let mut z = Compress::new(Compression::best(), true);
        // Priming before the first deflate call makes zlib emit FDICT and the dictionary id,
        // which is what the peer's inflate uses to ask for the same dictionary.
        z.set_dictionary(HEADER_DICTIONARY)
            .expect("priming a fresh deflate stream with a dictionary cannot fail");
        Self { z }
    }

    /// Compresses one header block as the next sync-flushed piece of this context.
    pub fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, SpdyError> {
        let input = headers.encode_block();
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let mut consumed = 0usize;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(256));
            }
            let before_in = self.z.total_in();
            let status = self
                .z
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compression(e.to_string()))?;
            consumed += (self.z.total_in() - before_in) as usize;
            // A sync flush is complete once all input is in and zlib left spare room in the
            // output (it stops early only when the buffer filled up).
            if consumed == input.len() && out.len() < out.capacity() {
                break;
            }
            if status == Status::StreamEnd {
                break;
            }
        }
        Ok(out)
    }
}

/// The receiving side of a connection's header compression context.
pub struct HeaderDecompressor {
    z: Decompress,
    max_block: usize,
}

impl HeaderDecompressor {
    /// A fresh context; `max_block` bounds one inflated header block, so a small compressed
    /// frame cannot expand into a large allocation ("zip bomb").
    pub fn new(max_block: usize) -> Self {
        Self {
            z: Decompress::new(true),
            max_block,
        }
    }

    /// Inflates one header block (the whole payload of one frame) and parses it.
    pub fn decompress(&mut self, input: &[u8]) -> Result<Headers, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity((input.len() * 4).clamp(64, self.max_block));
        let mut consumed = 0usize;
        loop {
            if out.len() >= self.max_block {
                return Err(SpdyError::Protocol(format!(
                    "header block inflates past {} bytes",
                    self.max_block
                )));
            }
            if out.capacity() == out.len() {
                let grow = out.capacity().max(256).min(self.max_block - out.len());
                out.reserve_exact(grow);
            }
            let before_in = self.z.total_in();
            let before_out = out.len();
            let res = self
                .z
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync);
            consumed += (self.z.total_in() - before_in) as usize;
            match res {
                Ok(Status::StreamEnd) => {
                    return Err(SpdyError::Protocol(
                        "peer ended its header compression stream".into(),
                    ))
                }
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    // The first block announces the dictionary by its Adler-32 id.
                    Some(id) if id == adler32(HEADER_DICTIONARY) => {
                        self.z
                            .set_dictionary(HEADER_DICTIONARY)
                            .map_err(|e| SpdyError::Compression(e.to_string()))?;
                        continue;
                    }
                    Some(id) => {
                        return Err(SpdyError::Protocol(format!(
                            "header block wants unknown zlib dictionary {id:#010x}"
                        )))
                    }
                    None => return Err(SpdyError::Compression(e.to_string())),
                },
            }
            let progressed = self.z.total_in() != before_in || out.len() != before_out;
            if consumed == input.len() && out.len() < out.capacity() {
                break;
            }
            if !progressed && out.len() < out.capacity() {
                // zlib can make no progress with room to spare: what is left is not deflate.
                return Err(SpdyError::Compression(format!(
                    "{} undecodable bytes in header block",
                    input.len() - consumed
                )));
            }
        }
        Headers::decode_block(&out, self.max_block)
    }
}

/// Adler-32 as zlib computes it (the dictionary id in a zlib header).
pub(crate) fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 is the largest run before `b` could overflow a u32.
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn dictionary_has_the_spdy3_id() {
        assert_eq!(HEADER_DICTIONARY.len(), 1423);
        assert_eq!(adler32(HEADER_DICTIONARY), 0xe3c6_a7c2);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn block_encoding_matches_the_wire_layout() {
        let h = Headers::new().with("streamType", "error");
        assert_eq!(
            h.encode_block(),
            unhex("000000010000000a73747265616d74797065000000056572726f72")
        );
    }

    #[test]
    fn repeated_names_are_nul_joined_and_split_back() {
        let h = Headers::new().with("a", "1").with("b", "x").with("a", "2");
        let back = Headers::decode_block(&h.encode_block(), 4096).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            vec![("a", "1"), ("a", "2"), ("b", "x")]
        );
    }

    /// Two consecutive blocks made by C zlib (level 9, SPDY dictionary, sync flush) on one
    /// stream: the second only inflates if our context carried over from the first.
    #[test]
    fn decodes_blocks_compressed_by_reference_zlib() {
        let mut d = HeaderDecompressor::new(64 * 1024);
        let first = d
            .decompress(&unhex(
                "78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff",
            ))
            .unwrap();
        assert_eq!(first.get("streamType"), Some("error"));
        let second = d
            .decompress(&unhex("c22a054ccc29f9a52500000000ffff"))
            .unwrap();
        assert_eq!(second.get("StreamType"), Some("stdout"));
    }

    #[test]
    fn compressor_announces_the_dictionary_and_round_trips() {
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new(64 * 1024);
        let first = c
            .compress(&Headers::new().with("streamtype", "error"))
            .unwrap();
        // zlib header: CMF 0x78, FLG with FDICT, then the dictionary id.
        assert_eq!(first[0], 0x78);
        assert_ne!(first[1] & 0x20, 0);
        assert_eq!(&first[2..6], &[0xe3, 0xc6, 0xa7, 0xc2]);
        // A sync flush ends with an empty stored block.
        assert_eq!(&first[first.len() - 4..], &[0, 0, 0xff, 0xff]);
        for i in 0..50 {
            let h = Headers::new()
                .with("streamtype", "data")
                .with("port", format!("{}", 8000 + i))
                .with("requestid", format!("{i}"));
            let block = if i == 0 {
                first.clone()
            } else {
                c.compress(&h).unwrap()
            };
            let back = d.decompress(&block).unwrap();
            if i == 0 {
                assert_eq!(back.get("streamtype"), Some("error"));
            } else {
                assert_eq!(back, h);
            }
        }
    }

    #[test]
    fn large_blocks_round_trip() {
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new(1024 * 1024);
        let big: String = (0..100_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let h = Headers::new().with("x-big", big.clone());
        let back = d.decompress(&c.compress(&h).unwrap()).unwrap();
        assert_eq!(back.get("x-big"), Some(big.as_str()));
    }

    #[test]
    fn inflation_is_bounded() {
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new(4096);
        let h = Headers::new().with("x", "y".repeat(100_000));
        let block = c.compress(&h).unwrap();
        assert!(block.len() < 4096, "compresses well: {}", block.len());
        assert!(matches!(d.decompress(&block), Err(SpdyError::Protocol(_))));
    }

    /// A long name with a value of NULs would become one copy of the name per NUL: a 256 KiB
    /// block (the daemon's bound) would decode to about 16 GiB. Refused, through the whole
    /// compressed path, and a fair block under the same bound still decodes.
    #[test]
    fn nul_split_values_cannot_multiply_the_name() {
        let name = "n".repeat(128 * 1024);
        let nuls = "\0".repeat(128 * 1024 - 64);
        let bomb = Headers::new().with(&name, nuls);
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new(256 * 1024);
        let block = c.compress(&bomb).unwrap();
        match d.decompress(&block) {
            Err(SpdyError::Protocol(m)) => assert!(m.contains("decodes past"), "{m}"),
            other => panic!("bomb decoded: {:?}", other.map(|h| h.len())),
        }
        // Many empty values of a short name are charged their overhead too.
        let empties = Headers::new().with("a", "\0".repeat(10_000));
        assert!(Headers::decode_block(&empties.encode_block(), 64 * 1024).is_err());
        let fair = Headers::new()
            .with("streamtype", "stdout")
            .with("a", "1")
            .with("a", "2");
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new(256 * 1024);
        assert_eq!(d.decompress(&c.compress(&fair).unwrap()).unwrap(), fair);
    }

    #[test]
    fn hostile_counts_and_lengths_are_refused() {
        assert!(Headers::decode_block(&unhex("ffffffff"), 1024).is_err());
        assert!(Headers::decode_block(&unhex("00000001ffffffff00000000"), 1024).is_err());
        assert!(Headers::decode_block(&unhex("0000000100000001"), 1024).is_err());
        assert!(Headers::decode_block(&unhex("00"), 1024).is_err());
        assert!(HeaderDecompressor::new(1024)
            .decompress(b"garbage!")
            .is_err());
    }
}
