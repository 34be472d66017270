//! Checkpoint archives (KEP-2008, "forensic container checkpointing"): what CheckpointContainer
//! writes and what a CreateContainer whose image is such an archive restores from.
//!
//! The layout is CRI-O's (and checkpointctl's, which reads it), a plain tar of:
//!
//! | entry | what |
//! | --- | --- |
//! | `checkpoint/` | CRIU's images of the container's processes (`runc checkpoint`) |
//! | `config.dump` | [`layout::ConfigDump`]: id, name, image, runtime, times |
//! | `spec.dump` | the container's OCI runtime spec (its bundle's `config.json`) |
//! | `rootfs-diff.tar` | the files the container wrote: its overlay upper directory, whiteouts left out |
//! | `deleted.files` | a JSON list of the image's paths the container removed |
//! | `dump.log` | CRIU's log of the dump |
//! | `container-config.dump` | peapod's own: the CRI `ContainerConfig` the container was created with |
//!
//! The last one is what a restore makes the new container from (command, environment, user,
//! mounts to expect); an archive without it (another runtime's) is refused by name.
//!
//! - [`layout`]: the names, the metadata and reading an unpacked archive, pure;
//! - [`archive`]: writing the tar (atomically, at the caller's path) and unpacking one safely;
//! - [`rootfs_diff`]: the upper directory as `rootfs-diff.tar` and `deleted.files`, and
//!   applying both to a new root filesystem;
//! - [`criu`]: whether CRIU works on this host, asked once.

pub mod archive;
pub mod criu;
pub mod layout;
pub mod rootfs_diff;

pub use criu::{Criu, CriuCheck};
pub use layout::{ArchiveError, ConfigDump, Restorable};
