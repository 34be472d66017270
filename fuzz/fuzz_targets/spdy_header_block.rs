//! SPDY header blocks: the zlib stream with SPDY's dictionary (kept across frames, as on a
//! connection) and the decoded name/value block, bounded by the configured size.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_streaming::spdy::headers::HeaderDecompressor;
use peapod_streaming::spdy::Headers;

const MAX: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    // The raw block decoder on the bytes themselves...
    if let Ok(h) = Headers::decode_block(data, MAX) {
        let encoded = h.encode_block();
        let again = Headers::decode_block(&encoded, MAX).expect("a block we encoded decodes");
        assert_eq!(again.len(), h.len());
    }
    // ...and the connection's decompressor on the bytes split into two frames.
    let mut d = HeaderDecompressor::new(MAX);
    let (a, b) = data.split_at(data.len() / 2);
    if let Ok(h) = d.decompress(a) {
        assert!(h.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>() <= MAX);
        let _ = d.decompress(b);
    }
});
