//! `peapod-shim`: one process per pod that runs every container of the pod (through the OCI
//! runtime CLI, or its own native paths: `peapod-runtime`), holds their stdio, writes their
//! CRI logs and records their exits durably.
//!
//! The library half is the protocol the daemon and the shim share: containerd's shim v2 Task
//! API over ttrpc (from `containerd-shim-protos`), plus the few things that API has no field
//! for, defined in [`protocol`], and how a launcher knows the shim serves ([`launch`]). The
//! binary half (`src/main.rs` and its modules) is the shim.

pub mod launch;
pub mod protocol;
