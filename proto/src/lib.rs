//! The CRI v1 API (package `runtime.v1`), generated at build time from the vendored
//! `proto/api.proto`. See `proto/README.md` for the cri-api version it came from.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod runtime {
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

pub use runtime::v1;
