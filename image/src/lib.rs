//! peapod-image: the image side of peapod. A content store under a root
//! directory, pulls over the OCI distribution protocol, `docker save` / OCI
//! layout imports, safe layer unpacking, and overlay root filesystems for
//! containers.
//!
//! # The contract with the daemon
//!
//! ```text
//! Store::open(root, RegistryConfig) -> Arc<Store>      one per root (flock); cleans leftovers
//! store.pull(reference, Option<&Credentials>) -> Image  verified, deduplicated, all-or-nothing
//! store.list() -> Vec<Image>
//! store.resolve(reference) -> Option<Image>             tag | name@digest | id | bare hex | unique prefix
//! store.remove(reference)                               whole image, all names (CRI RemoveImage); unknown is Ok
//! store.untag(reference)                                one name only (CLI `image rm NAME`)
//! store.set_pinned(reference, bool)                     the sandbox image is pinned
//! store.import(archive) -> Vec<Image>                   docker save / OCI layout tar (.gz/.zst too)
//! store.add_local_image(name, files, ImageConfig)       one-layer image built here (built-in pause)
//! store.fs_info() -> FsInfo                             ImageFsInfo: image fs and container fs
//! store.create_rootfs(image, container_id, target, ro)  overlay mount; keeps the layers alive
//! store.remove_rootfs(container_id, target)             unmount (lazy if busy), delete; idempotent
//! store.rootfs_usage(container_id) -> (bytes, inodes)   writable layer usage
//! store.progress(reference) / progress_path(reference)  pull progress, in-process / as a JSON file
//! store.config_json(reference), store.layers(reference)  raw config and diff_ids, for verbose ImageStatus
//! image_user(config_user) -> (Option<uid>, username)    CRI ImageStatus uid/username
//! normalize_reference("busybox") == "docker.io/library/busybox:latest"
//! Error::kind() -> ErrorKind                            NotFound, InvalidArgument, Unauthenticated, ...
//! ```
//!
//! Root filesystem choices: a writable rootfs is an overlay of the image's
//! layers (top-most first) plus `<root>/containers/<id>/{upper,work}`. A
//! read-only one has no writable layer: a single-layer image is bind-mounted
//! read-only, a multi-layer one gets a lower-only overlay mounted read-only.
//! When the overlay option string would exceed a page (many layers, long
//! paths), the new mount API adds layers one at a time (`lowerdir+`, Linux 6.8+).
//!
//! Pull progress: see [`progress`]. While a pull runs the store rewrites
//! `<root>/pulls/<sha256 of the normalised ref>.json` every 250 ms (atomically)
//! and removes it at the end, so another process (the CLI) can draw a bar.
//!
//! Layers are unpacked one directory each (keyed by diff_id), whiteouts
//! turned into overlay whiteouts; see [`unpack`] for the rules that keep a
//! hostile layer inside its directory. Pulls speak the distribution protocol
//! themselves (see `registry.rs` for why not oci-client): basic and bearer
//! auth with all four CRI AuthConfig forms, mirrors, plain HTTP for loopback
//! and `insecure` hosts.
//!
//! Requirements: Linux 5.6+ (openat2), root (device whiteouts, chown,
//! `trusted.` xattrs, mounts). Tests additionally use Debian's
//! `docker-registry`, `skopeo`, `apache2-utils` (htpasswd) and `busybox-static`.

mod digest;
mod endpoints;
mod error;
mod fsutil;
mod hosts;
mod http;
mod import;
pub mod manifest;
mod mount;
mod policy;
pub mod progress;
mod reference;
mod registry;
mod retry;
mod store;
mod sys;
pub mod tarball;
pub mod unpack;
mod user;

#[cfg(feature = "testsupport")]
pub mod testsupport;

/// Private parsers, reached by the fuzz targets only (`fuzzing` feature; fuzz/ is outside
/// the workspace, so no build users run has it).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// A registry's `WWW-Authenticate` header: the scheme and its parameters, if it parses.
    pub fn parse_challenge(h: &str) -> Option<(String, Vec<(String, String)>)> {
        crate::registry::parse_challenge(h).map(|c| (c.scheme, c.params.into_iter().collect()))
    }
}

pub use digest::sha256_digest;
pub use error::{Error, ErrorKind};
pub use hosts::check_all as check_hosts_dir;
pub use mount::is_mountpoint;
pub use progress::{read_progress, LayerProgress, LayerStatus, PullProgress};
pub use reference::{normalize_reference, validate_digest, Reference};
pub use registry::{Credentials, RegistryConfig};
pub use store::{progress_path, FsInfo, FsUsage, Image, ImageConfig, Rootfs, RootfsRequest, Store};
pub use user::image_user;
