//! The shim's programs are linked as position-dependent executables (`-no-pie`). One shim runs
//! per pod, so its private memory counts per pod: in a position-independent executable the
//! dynamic loader writes every absolute address in the program's data at start, which makes
//! those pages private to each shim; linked at a fixed address they stay shared, read-only
//! pages of the file. The code is the same (position-independent code runs anywhere). The
//! cost: the program's own image is not placed at a random address (its heap, stack and
//! libraries still are), as with Go programs such as containerd-shim-runc-v2, which are not
//! PIE either. Measured: 0.73 -> 0.57 MB PSS per shim with 20 pods.
//!
//! `peapod-shim`'s code is laid out in the order of `text-order.txt` (scripts/text-order):
//! the code a shim runs packed together, see peapod_link_order.
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    peapod_link_order::link_in_order("peapod-shim", "text-order.txt");
}
