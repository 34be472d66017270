//! SPDY/3.1 frames as the streaming server reads them from a client: any bytes, cut at any
//! points, give frames or an error, never a panic, a hang or a buffer past the limits.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use peapod_streaming::spdy::frame::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the input is split into reads.
    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let step = (cut as usize % 64) + 1;
    let mut decoder = FrameDecoder::new(64 << 10, 256 << 10);
    let mut buf = BytesMut::new();
    for chunk in data.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(_frame)) => continue,
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(buf.len() <= data.len());
        let _ = decoder.wanted(buf.len());
    }
});
