//! The HTTP/2 `:authority` rewrite below h2 on the CRI socket: any client bytes, fed in any
//! pieces, come out as a byte stream (rewritten or passed through) without a panic, and the
//! same bytes fed whole or in pieces come out the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_uds::AuthorityRewriter;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    // Half the inputs start with the connection preface, so frames are reached.
    let mut input = Vec::new();
    if cut & 1 == 1 {
        input.extend_from_slice(PREFACE);
    }
    input.extend_from_slice(rest);

    let mut whole = Vec::new();
    let mut w = AuthorityRewriter::default();
    w.feed(&input, &mut whole);
    w.finish(&mut whole);

    let step = (cut as usize >> 1) % 97 + 1;
    let mut pieces = Vec::new();
    let mut p = AuthorityRewriter::default();
    for chunk in input.chunks(step) {
        p.feed(chunk, &mut pieces);
    }
    p.finish(&mut pieces);
    assert_eq!(whole, pieces, "the output does not depend on how reads split the input");
});
