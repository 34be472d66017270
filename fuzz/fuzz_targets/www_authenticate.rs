//! A registry's `WWW-Authenticate` header: parsed or refused, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((scheme, params)) = peapod_image::fuzzing::parse_challenge(h) {
        assert_eq!(scheme, scheme.to_ascii_lowercase());
        for (k, _) in params {
            assert_eq!(k, k.to_ascii_lowercase());
        }
    }
});
