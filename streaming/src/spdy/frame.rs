//! SPDY/3 frames: their in-memory form, an encoder and an incremental decoder.
//!
//! Wire layout (all big endian):
//!
//! ```text
//! control: |1| version(15) | type(16) | flags(8) | length(24) | payload...
//! data:    |0| stream id(31)          | flags(8) | length(24) | payload...
//! ```
//!
//! The decoder hands DATA payloads out in pieces of at most [`MAX_DATA_CHUNK`] bytes as they
//! arrive instead of buffering a whole frame: a DATA frame may legally be 16 MiB, and holding
//! it whole would let a peer make us allocate that per frame. Control frames are buffered
//! whole but bounded by a configurable limit (the Kubernetes protocols only ever send a few
//! short headers in them).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::headers::{HeaderCompressor, HeaderDecompressor, Headers};
use super::SpdyError;

/// The protocol version this module speaks.
pub const VERSION: u16 = 3;
/// Largest payload a SPDY frame can describe (24-bit length).
pub const MAX_FRAME_PAYLOAD: usize = (1 << 24) - 1;
/// Largest DATA piece the decoder hands out at once.
pub const MAX_DATA_CHUNK: usize = 64 * 1024;

/// FIN flag of SYN_STREAM, SYN_REPLY, HEADERS and DATA: the sender will send no more.
pub const FLAG_FIN: u8 = 0x01;
/// UNIDIRECTIONAL flag of SYN_STREAM: the receiver must not send on the stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status codes.
pub mod rst {
    /// Generic protocol violation.
    pub const PROTOCOL_ERROR: u32 = 1;
    /// Frame for a stream that is not open.
    pub const INVALID_STREAM: u32 = 2;
    /// Stream not processed (limits, or shutting down).
    pub const REFUSED_STREAM: u32 = 3;
    /// Stream no longer needed.
    pub const CANCEL: u32 = 5;
    /// Internal error.
    pub const INTERNAL_ERROR: u32 = 6;
}

/// GOAWAY status codes.
pub mod goaway {
    /// Normal teardown.
    pub const OK: u32 = 0;
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: u32 = 1;
    /// Our own failure.
    pub const INTERNAL_ERROR: u32 = 2;
}

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// One SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// FLAG_SETTINGS_PERSIST_VALUE / PERSISTED.
    pub flags: u8,
    /// Setting id (24 bits).
    pub id: u32,
    /// Value.
    pub value: u32,
}

/// A decoded (or to-be-encoded) frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Opens a stream.
    SynStream {
        /// New stream id (odd from clients, even from servers).
        stream_id: u32,
        /// Stream this one is associated to (0: none).
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// FIN / UNIDIRECTIONAL.
        flags: u8,
        /// The stream's headers.
        headers: Headers,
    },
    /// Accepts a stream.
    SynReply {
        /// Stream being accepted.
        stream_id: u32,
        /// FIN.
        flags: u8,
        /// Reply headers.
        headers: Headers,
    },
    /// Aborts a stream.
    RstStream {
        /// Stream being reset.
        stream_id: u32,
        /// One of [`rst`].
        status: u32,
    },
    /// Connection settings (accepted and ignored).
    Settings {
        /// CLEAR_SETTINGS.
        flags: u8,
        /// Entries.
        entries: Vec<Setting>,
    },
    /// Liveness check; the receiver echoes a ping it did not originate.
    Ping {
        /// Odd from clients, even from servers.
        id: u32,
    },
    /// The sender will open no more streams.
    GoAway {
        /// Last stream the sender processed.
        last_good_stream_id: u32,
        /// One of [`goaway`].
        status: u32,
    },
    /// Extra headers for a stream (accepted and ignored, but still inflated).
    Headers {
        /// Stream.
        stream_id: u32,
        /// FIN.
        flags: u8,
        /// Headers.
        headers: Headers,
    },
    /// Flow-control credit (accepted and ignored: Kubernetes peers do not do flow control).
    WindowUpdate {
        /// Stream.
        stream_id: u32,
        /// Credit in bytes.
        delta: u32,
    },
    /// Stream payload. From the decoder this may be one piece of a larger frame; `fin` is
    /// set only on the last piece.
    Data {
        /// Stream.
        stream_id: u32,
        /// Last data of the stream from this sender.
        fin: bool,
        /// Payload.
        data: Bytes,
    },
}

/// Serialises frames; owns the connection's outgoing header compression context, so frames
/// must be encoded in exactly the order they are written.
pub struct FrameEncoder {
    compressor: HeaderCompressor,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameEncoder {
    /// A fresh encoder for a new connection.
    pub fn new() -> Self {
        Self {
            compressor: HeaderCompressor::new(),
        }
    }

    /// Appends the wire form of `frame` to `dst`.
    pub fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), SpdyError> {
        match frame {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id)?;
                let block = self.compressor.compress(headers)?;
                control_header(dst, TYPE_SYN_STREAM, *flags, 10 + block.len())?;
                dst.put_u32(stream_id & 0x7fff_ffff);
                dst.put_u32(associated_to & 0x7fff_ffff);
                dst.put_u8((priority & 0x07) << 5);
                dst.put_u8(0); // credential slot: unused
                dst.put_slice(&block);
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id)?;
                let block = self.compressor.compress(headers)?;
                control_header(dst, TYPE_SYN_REPLY, *flags, 4 + block.len())?;
                dst.put_u32(stream_id & 0x7fff_ffff);
                dst.put_slice(&block);
            }
            Frame::RstStream { stream_id, status } => {
                check_stream_id(*stream_id)?;
                control_header(dst, TYPE_RST_STREAM, 0, 8)?;
                dst.put_u32(stream_id & 0x7fff_ffff);
                dst.put_u32(*status);
            }
            Frame::Settings { flags, entries } => {
                control_header(dst, TYPE_SETTINGS, *flags, 4 + 8 * entries.len())?;
                dst.put_u32(entries.len() as u32);
                for e in entries {
                    dst.put_u32((u32::from(e.flags) << 24) | (e.id & 0x00ff_ffff));
                    dst.put_u32(e.value);
                }
            }
            Frame::Ping { id } => {
                control_header(dst, TYPE_PING, 0, 4)?;
                dst.put_u32(*id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control_header(dst, TYPE_GOAWAY, 0, 8)?;
                dst.put_u32(last_good_stream_id & 0x7fff_ffff);
                dst.put_u32(*status);
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id)?;
                let block = self.compressor.compress(headers)?;
                control_header(dst, TYPE_HEADERS, *flags, 4 + block.len())?;
                dst.put_u32(stream_id & 0x7fff_ffff);
                dst.put_slice(&block);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_header(dst, TYPE_WINDOW_UPDATE, 0, 8)?;
                dst.put_u32(stream_id & 0x7fff_ffff);
                dst.put_u32(delta & 0x7fff_ffff);
            }
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                check_stream_id(*stream_id)?;
                if data.len() > MAX_FRAME_PAYLOAD {
                    return Err(SpdyError::FrameTooLarge {
                        len: data.len(),
                        max: MAX_FRAME_PAYLOAD,
                    });
                }
                dst.reserve(8 + data.len());
                dst.put_u32(stream_id & 0x7fff_ffff);
                let flags = if *fin { FLAG_FIN } else { 0 };
                dst.put_u32((u32::from(flags) << 24) | data.len() as u32);
                dst.put_slice(data);
            }
        }
        Ok(())
    }
}

fn check_stream_id(id: u32) -> Result<(), SpdyError> {
    if id == 0 || id > 0x7fff_ffff {
        return Err(SpdyError::Protocol(format!("invalid stream id {id}")));
    }
    Ok(())
}

fn control_header(dst: &mut BytesMut, ty: u16, flags: u8, len: usize) -> Result<(), SpdyError> {
    if len > MAX_FRAME_PAYLOAD {
        return Err(SpdyError::FrameTooLarge {
            len,
            max: MAX_FRAME_PAYLOAD,
        });
    }
    dst.reserve(8 + len);
    dst.put_u16(0x8000 | VERSION);
    dst.put_u16(ty);
    dst.put_u32((u32::from(flags) << 24) | len as u32);
    Ok(())
}

enum DecodeState {
    /// Waiting for the next 8-byte frame header.
    Header,
    /// Inside a DATA frame's payload.
    Data {
        stream_id: u32,
        flags: u8,
        remaining: usize,
    },
    /// Discarding the payload of a control frame type we do not know (the spec says to
    /// ignore those).
    Skip { remaining: usize },
}

/// Incremental frame parser; owns the connection's incoming header compression context.
pub struct FrameDecoder {
    decompressor: HeaderDecompressor,
    max_control_payload: usize,
    state: DecodeState,
}

impl FrameDecoder {
    /// `max_control_payload` bounds a buffered control frame, `max_header_block` one inflated
    /// header block.
    pub fn new(max_control_payload: usize, max_header_block: usize) -> Self {
        Self {
            decompressor: HeaderDecompressor::new(max_header_block),
            max_control_payload,
            state: DecodeState::Header,
        }
    }

    /// How many more bytes the decoder needs before it can make progress (a hint for read
    /// buffer sizing; never more than the control frame limit).
    pub fn wanted(&self, buffered: usize) -> usize {
        match self.state {
            DecodeState::Header => 8usize.saturating_sub(buffered).max(1),
            DecodeState::Data { remaining, .. } => remaining.min(MAX_DATA_CHUNK),
            DecodeState::Skip { remaining } => remaining.min(MAX_DATA_CHUNK),
        }
    }

    /// Takes the next frame (or DATA piece) out of `src`, or `None` if more bytes are needed.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
        loop {
            match self.state {
                DecodeState::Skip { remaining } => {
                    let n = remaining.min(src.len());
                    src.advance(n);
                    if n == remaining {
                        self.state = DecodeState::Header;
                    } else {
                        self.state = DecodeState::Skip {
                            remaining: remaining - n,
                        };
                        return Ok(None);
                    }
                }
                DecodeState::Data {
                    stream_id,
                    flags,
                    remaining,
                } => {
                    if src.is_empty() {
                        return Ok(None);
                    }
                    let n = remaining.min(src.len()).min(MAX_DATA_CHUNK);
                    // Copy rather than split off the read buffer: a split-off piece would pin
                    // the whole buffer allocation for as long as it sits in a stream queue, so
                    // many tiny pieces could hold far more memory than the receive budget
                    // counts.
                    let data = Bytes::copy_from_slice(&src[..n]);
                    src.advance(n);
                    let left = remaining - n;
                    self.state = if left == 0 {
                        DecodeState::Header
                    } else {
                        DecodeState::Data {
                            stream_id,
                            flags,
                            remaining: left,
                        }
                    };
                    return Ok(Some(Frame::Data {
                        stream_id,
                        fin: left == 0 && flags & FLAG_FIN != 0,
                        data,
                    }));
                }
                DecodeState::Header => {
                    if src.len() < 8 {
                        return Ok(None);
                    }
                    let first = u32::from_be_bytes([src[0], src[1], src[2], src[3]]);
                    let second = u32::from_be_bytes([src[4], src[5], src[6], src[7]]);
                    let flags = (second >> 24) as u8;
                    let len = (second & 0x00ff_ffff) as usize;
                    if first & 0x8000_0000 == 0 {
                        let stream_id = first & 0x7fff_ffff;
                        if stream_id == 0 {
                            return Err(SpdyError::Protocol("DATA frame on stream 0".into()));
                        }
                        src.advance(8);
                        if len == 0 {
                            return Ok(Some(Frame::Data {
                                stream_id,
                                fin: flags & FLAG_FIN != 0,
                                data: Bytes::new(),
                            }));
                        }
                        self.state = DecodeState::Data {
                            stream_id,
                            flags,
                            remaining: len,
                        };
                        continue;
                    }
                    let version = ((first >> 16) & 0x7fff) as u16;
                    let ty = (first & 0xffff) as u16;
                    if version != VERSION {
                        return Err(SpdyError::Version(version));
                    }
                    let known = matches!(
                        ty,
                        TYPE_SYN_STREAM
                            | TYPE_SYN_REPLY
                            | TYPE_RST_STREAM
                            | TYPE_SETTINGS
                            | TYPE_PING
                            | TYPE_GOAWAY
                            | TYPE_HEADERS
                            | TYPE_WINDOW_UPDATE
                    );
                    if !known {
                        src.advance(8);
                        self.state = DecodeState::Skip { remaining: len };
                        continue;
                    }
                    if len > self.max_control_payload {
                        return Err(SpdyError::FrameTooLarge {
                            len,
                            max: self.max_control_payload,
                        });
                    }
                    if src.len() < 8 + len {
                        src.reserve(8 + len - src.len());
                        return Ok(None);
                    }
                    src.advance(8);
                    let payload = src.split_to(len);
                    return self.control(ty, flags, &payload).map(Some);
                }
            }
        }
    }

    fn control(&mut self, ty: u16, flags: u8, mut p: &[u8]) -> Result<Frame, SpdyError> {
        let need = |p: &[u8], n: usize, what: &str| {
            if p.len() < n {
                Err(SpdyError::Protocol(format!(
                    "{what} frame of {} bytes is too short",
                    p.len()
                )))
            } else {
                Ok(())
            }
        };
        let frame = match ty {
            TYPE_SYN_STREAM => {
                need(p, 10, "SYN_STREAM")?;
                let stream_id = p.get_u32() & 0x7fff_ffff;
                let associated_to = p.get_u32() & 0x7fff_ffff;
                let priority = p.get_u8() >> 5;
                let _slot = p.get_u8();
                // Inflate even when the frame will be refused: the zlib context is shared by
                // every later header block on the connection.
                let headers = self.decompressor.decompress(p)?;
                if stream_id == 0 {
                    return Err(SpdyError::Protocol("SYN_STREAM for stream 0".into()));
                }
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    flags,
                    headers,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                need(p, 4, "SYN_REPLY/HEADERS")?;
                let stream_id = p.get_u32() & 0x7fff_ffff;
                let headers = self.decompressor.decompress(p)?;
                if stream_id == 0 {
                    return Err(SpdyError::Protocol("header frame for stream 0".into()));
                }
                if ty == TYPE_SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                need(p, 8, "RST_STREAM")?;
                Frame::RstStream {
                    stream_id: p.get_u32() & 0x7fff_ffff,
                    status: p.get_u32(),
                }
            }
            TYPE_SETTINGS => {
                need(p, 4, "SETTINGS")?;
                let n = p.get_u32() as usize;
                if n > p.len() / 8 {
                    return Err(SpdyError::Protocol(format!(
                        "SETTINGS claims {n} entries in {} bytes",
                        p.len()
                    )));
                }
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let fid = p.get_u32();
                    entries.push(Setting {
                        flags: (fid >> 24) as u8,
                        id: fid & 0x00ff_ffff,
                        value: p.get_u32(),
                    });
                }
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                need(p, 4, "PING")?;
                Frame::Ping { id: p.get_u32() }
            }
            TYPE_GOAWAY => {
                need(p, 4, "GOAWAY")?;
                let last_good_stream_id = p.get_u32() & 0x7fff_ffff;
                let status = if p.len() >= 4 {
                    p.get_u32()
                } else {
                    goaway::OK
                };
                Frame::GoAway {
                    last_good_stream_id,
                    status,
                }
            }
            TYPE_WINDOW_UPDATE => {
                need(p, 8, "WINDOW_UPDATE")?;
                Frame::WindowUpdate {
                    stream_id: p.get_u32() & 0x7fff_ffff,
                    delta: p.get_u32() & 0x7fff_ffff,
                }
            }
            other => {
                return Err(SpdyError::Protocol(format!(
                    "unexpected control frame type {other}"
                )))
            }
        };
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_all(frames: &[Frame]) -> BytesMut {
        let mut enc = FrameEncoder::new();
        let mut buf = BytesMut::new();
        for f in frames {
            enc.encode(f, &mut buf).unwrap();
        }
        buf
    }

    fn decode_all(mut buf: BytesMut) -> Vec<Frame> {
        let mut dec = FrameDecoder::new(64 * 1024, 64 * 1024);
        let mut out = Vec::new();
        while let Some(f) = dec.decode(&mut buf).unwrap() {
            out.push(f);
        }
        assert!(buf.is_empty(), "{} bytes left", buf.len());
        out
    }

    fn sample_frames() -> Vec<Frame> {
        vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: Headers::new().with("streamtype", "error"),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: Headers::new(),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 1,
                priority: 7,
                flags: FLAG_FIN | FLAG_UNIDIRECTIONAL,
                headers: Headers::new()
                    .with("streamtype", "data")
                    .with("port", "8080")
                    .with("requestid", "0"),
            },
            Frame::Data {
                stream_id: 3,
                fin: false,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: Bytes::new(),
            },
            Frame::RstStream {
                stream_id: 5,
                status: rst::CANCEL,
            },
            Frame::Settings {
                flags: 1,
                entries: vec![Setting {
                    flags: 1,
                    id: 7,
                    value: 65536,
                }],
            },
            Frame::Ping { id: 2 },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: goaway::OK,
            },
            Frame::Headers {
                stream_id: 3,
                flags: FLAG_FIN,
                headers: Headers::new().with("x", "y"),
            },
            Frame::WindowUpdate {
                stream_id: 3,
                delta: 1000,
            },
        ]
    }

    #[test]
    fn frames_round_trip() {
        let frames = sample_frames();
        assert_eq!(decode_all(encode_all(&frames)), frames);
    }

    #[test]
    fn frames_round_trip_fed_byte_by_byte() {
        let frames = sample_frames();
        let wire = encode_all(&frames);
        let mut dec = FrameDecoder::new(64 * 1024, 64 * 1024);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        // Data arrives in 1-byte pieces; glue the pieces of each DATA frame back together.
        let mut glued: Vec<Frame> = Vec::new();
        for f in out {
            if let (
                Some(Frame::Data {
                    stream_id: s1,
                    fin: false,
                    data: d1,
                }),
                Frame::Data {
                    stream_id: s2,
                    fin,
                    data,
                },
            ) = (glued.last(), &f)
            {
                if s1 == s2 && !data.is_empty() && d1.len() < 5 {
                    let mut joined = d1.to_vec();
                    joined.extend_from_slice(data);
                    let s = *s1;
                    glued.pop();
                    glued.push(Frame::Data {
                        stream_id: s,
                        fin: *fin,
                        data: Bytes::from(joined),
                    });
                    continue;
                }
            }
            glued.push(f);
        }
        assert_eq!(glued, frames);
    }

    #[test]
    fn known_byte_vectors() {
        let mut buf = BytesMut::new();
        let mut enc = FrameEncoder::new();
        enc.encode(&Frame::Ping { id: 1 }, &mut buf).unwrap();
        assert_eq!(&buf[..], &[0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1]);
        buf.clear();
        enc.encode(
            &Frame::RstStream {
                stream_id: 3,
                status: rst::CANCEL,
            },
            &mut buf,
        )
        .unwrap();
        assert_eq!(
            &buf[..],
            &[0x80, 0x03, 0x00, 0x03, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 5]
        );
        buf.clear();
        enc.encode(
            &Frame::Data {
                stream_id: 1,
                fin: true,
                data: Bytes::from_static(b"ab"),
            },
            &mut buf,
        )
        .unwrap();
        assert_eq!(&buf[..], &[0, 0, 0, 1, 0x01, 0, 0, 2, b'a', b'b']);
        buf.clear();
        enc.encode(
            &Frame::GoAway {
                last_good_stream_id: 7,
                status: goaway::PROTOCOL_ERROR,
            },
            &mut buf,
        )
        .unwrap();
        assert_eq!(
            &buf[..],
            &[0x80, 0x03, 0x00, 0x07, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 1]
        );
    }

    /// A SYN_STREAM whose header block came from C zlib, as a Go client's would.
    #[test]
    fn decodes_a_syn_stream_from_a_reference_compressor() {
        let block: Vec<u8> = [
            0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0xa6, 0x23, 0x46, 0x70, 0x3a, 0x2b, 0x29,
            0x4a, 0x4d, 0xcc, 0x85, 0x16, 0x25, 0xac, 0xa9, 0xa0, 0x80, 0x06, 0x00, 0x00, 0x00,
            0xff, 0xff,
        ]
        .to_vec();
        let mut wire = BytesMut::new();
        wire.put_u16(0x8003);
        wire.put_u16(1);
        wire.put_u32(10 + block.len() as u32);
        wire.put_u32(1);
        wire.put_u32(0);
        wire.put_u8(0);
        wire.put_u8(0);
        wire.put_slice(&block);
        let frames = decode_all(wire);
        match &frames[..] {
            [Frame::SynStream {
                stream_id: 1,
                headers,
                ..
            }] => assert_eq!(headers.get("streamType"), Some("error")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn large_data_frames_come_out_in_bounded_pieces() {
        let payload = vec![7u8; 200_000];
        let wire = encode_all(&[Frame::Data {
            stream_id: 9,
            fin: true,
            data: Bytes::from(payload.clone()),
        }]);
        let pieces = decode_all(wire);
        assert_eq!(pieces.len(), 4);
        let mut total = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            let Frame::Data {
                stream_id: 9,
                fin,
                data,
            } = p
            else {
                panic!("{p:?}")
            };
            assert!(data.len() <= MAX_DATA_CHUNK);
            assert_eq!(*fin, i == pieces.len() - 1);
            total.extend_from_slice(data);
        }
        assert_eq!(total, payload);
    }

    #[test]
    fn unknown_control_frames_are_skipped() {
        let mut wire = BytesMut::new();
        wire.put_u16(0x8003);
        wire.put_u16(0x0a); // CREDENTIAL, or anything we do not know
        wire.put_u32(3);
        wire.put_slice(b"xyz");
        wire.unsplit(encode_all(&[Frame::Ping { id: 5 }]));
        assert_eq!(decode_all(wire), vec![Frame::Ping { id: 5 }]);
    }

    #[test]
    fn hostile_frames_are_refused() {
        let mut dec = FrameDecoder::new(1024, 1024);
        // Oversized control frame: refused from its header, before its payload arrives.
        let mut b = BytesMut::from(&[0x80, 0x03, 0x00, 0x01, 0x00, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            dec.decode(&mut b),
            Err(SpdyError::FrameTooLarge { .. })
        ));
        let mut dec = FrameDecoder::new(1024, 1024);
        let mut b = BytesMut::from(&[0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert!(matches!(dec.decode(&mut b), Err(SpdyError::Version(2))));
        let mut dec = FrameDecoder::new(1024, 1024);
        let mut b = BytesMut::from(&[0, 0, 0, 0, 0, 0, 0, 1, 0][..]);
        assert!(dec.decode(&mut b).is_err());
        let mut dec = FrameDecoder::new(1024, 1024);
        let mut b =
            BytesMut::from(&[0x80, 0x03, 0x00, 0x04, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(
            dec.decode(&mut b).is_err(),
            "SETTINGS count beyond its length"
        );
        let mut dec = FrameDecoder::new(1024, 1024);
        let mut b = BytesMut::from(&[0x80, 0x03, 0x00, 0x06, 0, 0, 0, 2, 0, 0][..]);
        assert!(dec.decode(&mut b).is_err(), "short PING");
    }

    #[test]
    fn encoder_refuses_stream_zero() {
        let mut enc = FrameEncoder::new();
        let mut buf = BytesMut::new();
        assert!(enc
            .encode(
                &Frame::Data {
                    stream_id: 0,
                    fin: false,
                    data: Bytes::new()
                },
                &mut buf
            )
            .is_err());
    }
}
