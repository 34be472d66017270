//! Runtime-spec pieces for the pause container's spec (app containers' specs come whole from
//! `peapod-spec`, whose defaults the pause shares), and the one writer of a bundle's
//! config.json.

use crate::error::{Error, Result};
use oci_spec::runtime::{
    LinuxNamespace, LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder,
};
use std::path::Path;

/// The runtime-spec version peapod writes (the same as for app containers).
pub use peapod_spec::OCI_VERSION;

/// Writes `bundle/config.json` with peapod-spec's serialization, which sorts the capability
/// sets so that a spec always serializes alike.
pub fn write_config(bundle: &Path, spec: &oci_spec::runtime::Spec) -> Result<()> {
    let path = bundle.join("config.json");
    let bytes = peapod_spec::spec_json(spec)?;
    std::fs::write(&path, bytes).map_err(|e| Error::path("write", &path, e))
}

pub fn spec_err(e: oci_spec::OciSpecError) -> Error {
    Error::internal(format!("runtime spec: {e}"))
}

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub fn bind(dest: &str, source: &Path, options: &[&str]) -> Result<Mount> {
    let mut opts = vec!["rbind"];
    opts.extend_from_slice(options);
    MountBuilder::default()
        .destination(dest)
        .typ("bind")
        .source(source)
        .options(strings(&opts))
        .build()
        .map_err(spec_err)
}

pub fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> Result<LinuxNamespace> {
    let mut b = LinuxNamespaceBuilder::default().typ(typ);
    if let Some(p) = path {
        b = b.path(p);
    }
    b.build().map_err(spec_err)
}
