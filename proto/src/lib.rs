//! The CRI v1 API (package `runtime.v1`), generated at build time from the vendored
//! `proto/api.proto`. See `proto/README.md` for the cri-api version it came from.
//! Also peapod's own pod-supervisor API (`peapod.pods.v1`, `proto/pods.proto`) that the
//! `peapod apply/get/describe/wait/delete` verbs use.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod runtime {
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod peapod {
    pub mod pods {
        pub mod v1 {
            tonic::include_proto!("peapod.pods.v1");
        }
    }
}

pub use peapod::pods::v1 as pods;
pub use runtime::v1;
