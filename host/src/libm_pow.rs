//! `pow`, defined here so that `peapod` and `peapod-shim` do not load libm.
//!
//! It is the only libm function either program calls (tokio's multi-thread scheduler uses it
//! for its poll-time average; a shim never runs that scheduler, but the workspace's tokio has it
//! compiled in). Loading libm cost every daemon 0.5 MB of resident pages (its text, relocation
//! and symbol tables, mapped 64 KiB around each page the loader touches), every shim about
//! 45 kB of PSS, and every helper the shim runs the loading itself. The `libm` crate is a port of
//! musl's libm: the same results to the last place in the cases glibc is correct.
//!
//! A definition in the program itself takes precedence over a shared library's, so the linker
//! finds no need for libm (it links `--as-needed`).

/// C's `pow(x, y)`.
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pow_is_cs_pow() {
        for (x, y, want) in [
            (2.0, 10.0, 1024.0),
            (0.5, 2.0, 0.25),
            (9.0, 0.5, 3.0),
            (10.0, -2.0, 0.01),
            (-2.0, 3.0, -8.0),
            (0.0, 0.0, 1.0),
        ] {
            assert_eq!(super::pow(x, y), want, "pow({x}, {y})");
        }
        assert!(super::pow(-1.0, 0.5).is_nan());
        assert_eq!(super::pow(0.0, -1.0), f64::INFINITY);
    }
}
