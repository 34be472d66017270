//! The byte-level part: reads the client's side of an HTTP/2 connection and, when the first
//! request's `:authority` is not a valid URI authority, re-encodes every header block with
//! `:authority: localhost`. Pure (bytes in, bytes out), so that it is tested without sockets.
//!
//! HPACK is stateful (a dynamic table shared by all header blocks of a connection), so a block
//! cannot be edited in place. Two modes keep the server's decoder consistent:
//! - the first header block decides. When its authority is acceptable (the case for grpc-go,
//!   tonic and every TCP client), everything, that block included, is forwarded unchanged and the
//!   connection turns into a plain pass-through: no decoding, no copy beyond the buffer.
//! - otherwise every block of the connection is decoded with the client's HPACK state and
//!   re-encoded as literals without indexing, which never touch the server's dynamic table.

use loona_hpack::Decoder;

/// What HTTP/2 clients send first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// What replaces an authority the server would refuse. grpc-go sends this on unix sockets.
pub const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest frame a peer may send before SETTINGS_MAX_FRAME_SIZE raises it; re-encoded
/// blocks are cut to this so that they fit whatever the server allows.
const MAX_FRAME_PAYLOAD: usize = 16_384;
/// A header block larger than this is not inspected (gRPC requests carry a few hundred bytes);
/// it is forwarded as it came and the server's own limits apply.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// The HPACK table size the server advertises unless it says otherwise (RFC 7541 §6.5.2).
const DEFAULT_HEADER_TABLE_SIZE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Waiting for the client preface; holds how many of its bytes have been seen.
    Preface(usize),
    /// Before the first header block: not yet known whether it needs rewriting.
    Inspect,
    /// Re-encoding every header block.
    Rewrite,
    /// Forwarding bytes as they come.
    PassThrough,
}

/// A header block being gathered (a HEADERS frame and its CONTINUATIONs).
struct PendingBlock {
    /// The frames exactly as received, forwarded unchanged when no rewrite is needed.
    raw: Vec<u8>,
    /// The concatenated header block fragments.
    fragment: Vec<u8>,
    stream_id: u32,
    /// END_STREAM of the HEADERS frame.
    end_stream: bool,
    /// The 5-byte priority field of the HEADERS frame, if it had one.
    priority: Option<[u8; 5]>,
}

/// Rewrites the client-to-server byte stream of one HTTP/2 connection.
pub struct AuthorityRewriter {
    mode: Mode,
    decoder: Decoder<'static>,
    /// Received bytes not yet processed (an incomplete frame header or HEADERS frame).
    input: Vec<u8>,
    /// Payload bytes of the current non-header frame still to forward as they arrive.
    forward: usize,
    block: Option<PendingBlock>,
}

impl Default for AuthorityRewriter {
    fn default() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(DEFAULT_HEADER_TABLE_SIZE);
        AuthorityRewriter {
            mode: Mode::Preface(0),
            decoder,
            input: Vec::new(),
            forward: 0,
            block: None,
        }
    }
}

/// True when h2 (through the `http` crate) accepts `value` as an `:authority`.
pub fn authority_is_valid(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

impl AuthorityRewriter {
    /// True once the connection needs no more work: bytes can go straight through.
    pub fn is_pass_through(&self) -> bool {
        self.mode == Mode::PassThrough && self.input.is_empty() && self.block.is_none()
    }

    /// True when header blocks of this connection are being re-encoded.
    pub fn is_rewriting(&self) -> bool {
        self.mode == Mode::Rewrite
    }

    /// Takes bytes read from the client and appends to `out` what the server should read.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.mode == Mode::PassThrough && self.input.is_empty() {
            out.extend_from_slice(data);
            return;
        }
        self.input.extend_from_slice(data);
        self.process(out);
    }

    /// The client closed its side: whatever is held back goes to the server as it came, so
    /// that the server sees (and reports) the same truncated stream.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.block.take() {
            out.extend_from_slice(&block.raw);
        }
        out.append(&mut self.input);
        self.mode = Mode::PassThrough;
    }

    fn process(&mut self, out: &mut Vec<u8>) {
        loop {
            match self.mode {
                Mode::PassThrough => {
                    out.append(&mut self.input);
                    return;
                }
                Mode::Preface(seen) => {
                    let want = PREFACE.len() - seen;
                    let n = want.min(self.input.len());
                    if self.input[..n] != PREFACE[seen..seen + n] {
                        // Not HTTP/2 with prior knowledge: not ours to touch.
                        self.mode = Mode::PassThrough;
                        continue;
                    }
                    out.extend(self.input.drain(..n));
                    if n < want {
                        self.mode = Mode::Preface(seen + n);
                        return;
                    }
                    self.mode = Mode::Inspect;
                }
                Mode::Inspect | Mode::Rewrite => {
                    if self.forward > 0 {
                        let n = self.forward.min(self.input.len());
                        out.extend(self.input.drain(..n));
                        self.forward -= n;
                        if self.forward > 0 {
                            return;
                        }
                    }
                    if !self.next_frame(out) {
                        return;
                    }
                }
            }
        }
    }

    /// Handles the frame at the start of `input`; false when more bytes are needed.
    fn next_frame(&mut self, out: &mut Vec<u8>) -> bool {
        if self.input.len() < FRAME_HEADER_LEN {
            return false;
        }
        let h = &self.input[..FRAME_HEADER_LEN];
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (kind, flags) = (h[3], h[4]);
        let stream_id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let is_header_frame = kind == TYPE_HEADERS
            || (kind == TYPE_CONTINUATION
                && self
                    .block
                    .as_ref()
                    .is_some_and(|b| b.stream_id == stream_id));
        let gathered = self.block.as_ref().map_or(0, |b| b.raw.len());
        if !is_header_frame || gathered + FRAME_HEADER_LEN + len > MAX_HEADER_BLOCK {
            // A frame between HEADERS and its CONTINUATION is a protocol error the server
            // reports; an oversized block is the server's to refuse. Either way the bytes go
            // on unchanged and this connection is no longer inspected.
            if let Some(block) = self.block.take() {
                out.extend_from_slice(&block.raw);
                self.mode = Mode::PassThrough;
                return true;
            }
            if !is_header_frame {
                out.extend(self.input.drain(..FRAME_HEADER_LEN));
                self.forward = len;
                return true;
            }
            self.mode = Mode::PassThrough;
            return true;
        }
        if self.input.len() < FRAME_HEADER_LEN + len {
            return false;
        }
        let frame: Vec<u8> = self.input.drain(..FRAME_HEADER_LEN + len).collect();
        let payload = &frame[FRAME_HEADER_LEN..];
        if kind == TYPE_HEADERS {
            let Some((fragment, priority)) = split_headers_payload(flags, payload) else {
                // Malformed padding or priority: the server refuses it; pass it on as it is.
                out.extend_from_slice(&frame);
                self.mode = Mode::PassThrough;
                return true;
            };
            self.block = Some(PendingBlock {
                raw: frame.clone(),
                fragment: fragment.to_vec(),
                stream_id,
                end_stream: flags & FLAG_END_STREAM != 0,
                priority,
            });
        } else if let Some(block) = self.block.as_mut() {
            block.raw.extend_from_slice(&frame);
            block.fragment.extend_from_slice(payload);
        }
        if flags & FLAG_END_HEADERS != 0 {
            if let Some(block) = self.block.take() {
                self.finish_block(block, out);
            }
        }
        true
    }

    fn finish_block(&mut self, block: PendingBlock, out: &mut Vec<u8>) {
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let decoded = self.decoder.decode_with_cb(&block.fragment, |name, value| {
            headers.push((name.into_owned(), value.into_owned()))
        });
        if decoded.is_err() {
            // The server's decoder will fail on it too and close the connection.
            out.extend_from_slice(&block.raw);
            self.mode = Mode::PassThrough;
            return;
        }
        let bad_authority = headers
            .iter()
            .any(|(n, v)| n.as_slice() == b":authority" && !authority_is_valid(v));
        if self.mode == Mode::Inspect && !bad_authority {
            out.extend_from_slice(&block.raw);
            self.mode = Mode::PassThrough;
            return;
        }
        self.mode = Mode::Rewrite;
        for (name, value) in headers.iter_mut() {
            if name.as_slice() == b":authority" && !authority_is_valid(value) {
                *value = REPLACEMENT_AUTHORITY.to_vec();
            }
        }
        let encoded = encode_literals(&headers);
        write_header_frames(&block, &encoded, out);
    }
}

/// The header block fragment and priority field of a HEADERS payload (RFC 9113 §6.2).
fn split_headers_payload(flags: u8, payload: &[u8]) -> Option<(&[u8], Option<[u8; 5]>)> {
    let mut rest = payload;
    let mut pad = 0usize;
    if flags & FLAG_PADDED != 0 {
        let (&n, tail) = rest.split_first()?;
        pad = n as usize;
        rest = tail;
    }
    let mut priority = None;
    if flags & FLAG_PRIORITY != 0 {
        if rest.len() < 5 {
            return None;
        }
        let mut p = [0u8; 5];
        p.copy_from_slice(&rest[..5]);
        priority = Some(p);
        rest = &rest[5..];
    }
    if pad > rest.len() {
        return None;
    }
    Some((&rest[..rest.len() - pad], priority))
}

/// HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the bits above it.
fn encode_integer(mut value: usize, prefix_bits: u8, first: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// Every header as "literal header field without indexing, new name" with raw (not Huffman)
/// strings (RFC 7541 §6.2.2): the server's dynamic table is never touched.
fn encode_literals(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        encode_integer(name.len(), 7, 0, &mut out);
        out.extend_from_slice(name);
        encode_integer(value.len(), 7, 0, &mut out);
        out.extend_from_slice(value);
    }
    out
}

fn frame_header(len: usize, kind: u8, flags: u8, stream_id: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream_id.to_be_bytes());
}

/// One HEADERS frame, then CONTINUATIONs, none larger than the default frame size.
fn write_header_frames(block: &PendingBlock, encoded: &[u8], out: &mut Vec<u8>) {
    let priority_len = if block.priority.is_some() { 5 } else { 0 };
    let first_len = encoded.len().min(MAX_FRAME_PAYLOAD - priority_len);
    let (first, mut rest) = encoded.split_at(first_len);
    let mut flags = 0;
    if block.end_stream {
        flags |= FLAG_END_STREAM;
    }
    if block.priority.is_some() {
        flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    frame_header(
        priority_len + first.len(),
        TYPE_HEADERS,
        flags,
        block.stream_id,
        out,
    );
    if let Some(p) = block.priority {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME_PAYLOAD);
        let (chunk, tail) = rest.split_at(n);
        let flags = if tail.is_empty() { FLAG_END_HEADERS } else { 0 };
        frame_header(n, TYPE_CONTINUATION, flags, block.stream_id, out);
        out.extend_from_slice(chunk);
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loona_hpack::Encoder;

    fn headers_frame(stream_id: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame_header(payload.len(), TYPE_HEADERS, flags, stream_id, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame_header(payload.len(), kind, flags, stream_id, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn request_headers(authority: &str) -> Headers {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/runtime.v1.RuntimeService/Version"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
    }

    fn encode(enc: &mut Encoder, headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        enc.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())))
    }

    /// A client connection: preface, SETTINGS, then per request HEADERS (+ DATA).
    fn connection(authority: &str, requests: u32) -> Vec<u8> {
        let mut enc = Encoder::new();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        for i in 0..requests {
            let id = 1 + 2 * i;
            let block = encode(&mut enc, &request_headers(authority));
            bytes.extend(headers_frame(id, FLAG_END_HEADERS, &block));
            bytes.extend(frame(0x0, FLAG_END_STREAM, id, b"\0\0\0\0\x04\x0a\x02v1"));
        }
        bytes
    }

    type Headers = Vec<(Vec<u8>, Vec<u8>)>;
    /// (type, flags, stream id, payload)
    type RawFrame = (u8, u8, u32, Vec<u8>);

    /// Splits a server-side byte stream into frames and decodes every header block.
    fn server_view(bytes: &[u8]) -> (Vec<RawFrame>, Vec<Headers>) {
        assert!(bytes.starts_with(PREFACE));
        let mut rest = &bytes[PREFACE.len()..];
        let mut frames = Vec::new();
        let mut blocks = Vec::new();
        let mut dec = Decoder::new();
        let mut fragment = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let (kind, flags) = (rest[3], rest[4]);
            let id = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            let payload = rest[9..9 + len].to_vec();
            if kind == TYPE_HEADERS || kind == TYPE_CONTINUATION {
                let frag = if kind == TYPE_HEADERS {
                    split_headers_payload(flags, &payload).unwrap().0.to_vec()
                } else {
                    payload.clone()
                };
                fragment.extend(frag);
                if flags & FLAG_END_HEADERS != 0 {
                    blocks.push(dec.decode(&fragment).unwrap());
                    fragment.clear();
                }
            }
            frames.push((kind, flags, id, payload));
            rest = &rest[9 + len..];
        }
        (frames, blocks)
    }

    fn run(input: &[u8], chunk: usize) -> Vec<u8> {
        let mut rw = AuthorityRewriter::default();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            rw.feed(piece, &mut out);
        }
        rw.finish(&mut out);
        out
    }

    #[test]
    fn valid_authority_passes_unchanged() {
        let input = connection("localhost", 3);
        for chunk in [1, 7, 4096] {
            assert_eq!(run(&input, chunk), input, "chunk {chunk}");
        }
        let mut rw = AuthorityRewriter::default();
        rw.feed(&input, &mut Vec::new());
        assert!(rw.is_pass_through());
    }

    #[test]
    fn socket_path_authority_becomes_localhost_in_every_request() {
        for authority in ["%2Frun%2Fpeapod%2Fpeapod.sock", "/run/peapod/peapod.sock"] {
            assert!(!authority_is_valid(authority.as_bytes()));
            let input = connection(authority, 3);
            for chunk in [1, 5, 9, 100, 1 << 16] {
                let out = run(&input, chunk);
                let (frames, blocks) = server_view(&out);
                assert_eq!(blocks.len(), 3, "chunk {chunk}");
                for block in &blocks {
                    let mut expect = request_headers("localhost");
                    expect.sort();
                    let mut got = block.clone();
                    got.sort();
                    assert_eq!(got, expect);
                }
                // SETTINGS, then HEADERS + DATA per request, DATA untouched.
                let kinds: Vec<u8> = frames.iter().map(|f| f.0).collect();
                assert_eq!(kinds, vec![4, 1, 0, 1, 0, 1, 0]);
                assert_eq!(frames[2].3, b"\0\0\0\0\x04\x0a\x02v1");
                assert_eq!(frames[2].1, FLAG_END_STREAM);
            }
        }
    }

    #[test]
    fn continuation_padding_and_priority_are_understood() {
        let mut enc = Encoder::new();
        let mut headers = request_headers("%2Ftmp%2Fs.sock");
        headers.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
        let block = encode(&mut enc, &headers);
        let (a, b) = block.split_at(10);
        // PADDED (3 bytes) and PRIORITY on the HEADERS frame, the rest in a CONTINUATION.
        let mut payload = vec![3u8];
        payload.extend_from_slice(&[0, 0, 0, 0, 15]);
        payload.extend_from_slice(a);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(
            1,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
            &payload,
        ));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b));
        let out = run(&input, 333);
        let (frames, blocks) = server_view(&out);
        assert_eq!(blocks.len(), 1);
        let authority = blocks[0].iter().find(|(n, _)| n == b":authority").unwrap();
        assert_eq!(authority.1, b"localhost");
        assert_eq!(
            blocks[0]
                .iter()
                .find(|(n, _)| n == b"x-big")
                .unwrap()
                .1
                .len(),
            40_000
        );
        // Re-cut to the default frame size, END_STREAM and priority kept.
        assert!(frames.iter().all(|f| f.3.len() <= MAX_FRAME_PAYLOAD));
        assert_eq!(
            frames[0].1 & (FLAG_END_STREAM | FLAG_PRIORITY),
            FLAG_END_STREAM | FLAG_PRIORITY
        );
        assert_eq!(&frames[0].3[..5], &[0, 0, 0, 0, 15]);
        assert_eq!(frames.last().unwrap().0, TYPE_CONTINUATION);
    }

    #[test]
    fn not_http2_and_garbage_pass_through() {
        let input = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(run(&input, 3), input);
        // A header block HPACK cannot decode goes on unchanged for the server to refuse.
        let mut bad = PREFACE.to_vec();
        bad.extend(headers_frame(1, FLAG_END_HEADERS, &[0xff, 0xff, 0xff]));
        assert_eq!(run(&bad, 4), bad);
        // A stream that ends inside a header block reaches the server as it came.
        let conn = connection("%2Fx", 1);
        let cut = &conn[..PREFACE.len() + 15 + 12];
        assert_eq!(run(cut, 5), cut);
    }

    #[test]
    fn integers_encode_as_rfc7541_examples() {
        let mut out = Vec::new();
        encode_integer(10, 5, 0, &mut out);
        assert_eq!(out, [10]);
        out.clear();
        encode_integer(1337, 5, 0, &mut out);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        encode_integer(42, 8, 0, &mut out);
        assert_eq!(out, [42]);
    }
}
