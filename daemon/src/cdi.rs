//! CDI spec files on this host: the daemon's half of CDI devices. `peapod-spec` resolves a
//! container's devices and applies their edits, purely; reading `[cdi] spec_dirs` is done
//! here, for each CreateContainer that asks for a device, and nowhere else.
//!
//! No cache: device plugins write and remove their spec files at any time (the kubelet's
//! sample device plugin writes `/var/run/cdi/example.com.json` as it starts, a moment before
//! the kubelet creates containers with its devices), and a create that asks for one reads a
//! few small files. The reference library gets the same freshness by watching the
//! directories.

use crate::config::CdiConfig;
use crate::error::{Error, Result};
use peapod_proto::v1::ContainerConfig;
use peapod_spec::cdi::{is_spec_file, CdiSpec, CdiSpecError};
use peapod_spec::CdiRegistry;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A spec file larger than this is skipped: a runaway writer must not make every create read
/// (and parse) gigabytes. Vendors' files are kilobytes; a large GPU node's, a few hundred.
const MAX_SPEC_BYTES: u64 = 16 << 20;

/// Where the CDI spec files are, and whether CDI is on (`[cdi]`).
#[derive(Debug, Clone)]
pub struct CdiDirs {
    enabled: bool,
    dirs: Vec<PathBuf>,
}

impl CdiDirs {
    pub fn new(config: &CdiConfig) -> CdiDirs {
        CdiDirs {
            enabled: config.enabled,
            dirs: config.spec_dirs.clone(),
        }
    }

    /// The registry `config`'s CDI devices are resolved in: empty, with nothing read, when it
    /// asks for none; InvalidArgument naming the field when a name is malformed or CDI is off
    /// (as containerd 2.x: a device asked for is never silently left out).
    pub fn registry_for(&self, config: &ContainerConfig) -> Result<CdiRegistry> {
        let requests = peapod_spec::cdi::requested_devices(config).map_err(Error::from)?;
        let Some(first) = requests.first() else {
            return Ok(CdiRegistry::empty());
        };
        if !self.enabled {
            let names: Vec<&str> = requests.iter().map(|r| r.name.as_str()).collect();
            return Err(Error::invalid(format!(
                "{}: CDI devices ({}) asked for, but CDI is disabled here (cdi.enabled = false)",
                first.field,
                names.join(", ")
            )));
        }
        let registry = crate::blocking::off_runtime(|| load(&self.dirs));
        for r in &requests {
            match registry.source(&r.name) {
                Some(file) => {
                    tracing::info!(device = %r.name, spec = %file.display(), "CDI device")
                }
                None => tracing::info!(device = %r.name, "CDI device not found"),
            }
        }
        Ok(registry)
    }
}

/// Every spec file of `dirs` (a missing directory is none: /etc/cdi often does not exist),
/// with the index of its directory as its priority. A file that cannot be read or parsed is
/// logged and skipped, not fatal: one vendor's broken file must not take other vendors'
/// devices away (the reference library's rule); a device it would have defined is then
/// unknown, and its error names the skipped files.
pub fn load(dirs: &[PathBuf]) -> CdiRegistry {
    let mut specs = Vec::new();
    let mut unreadable = Vec::new();
    for (priority, dir) in dirs.iter().enumerate() {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "CDI spec directory unreadable; skipped");
                continue;
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_spec_file(p))
            .collect();
        // Within a directory, in name order (as the reference library reads them): the
        // order of a conflict's files in messages does not change from create to create.
        paths.sort();
        for path in paths {
            match read_spec(&path, priority) {
                Ok(Some(spec)) => specs.push(spec),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "CDI spec file skipped");
                    unreadable.push(path);
                }
            }
        }
    }
    let registry = CdiRegistry::new(specs, unreadable);
    for (device, files) in registry.conflicts() {
        tracing::warn!(
            device,
            ?files,
            "CDI device defined by several spec files of one directory: no container gets it"
        );
    }
    registry
}

/// The spec file at `path`; `None` for a directory named like one.
fn read_spec(path: &Path, priority: usize) -> std::result::Result<Option<CdiSpec>, CdiSpecError> {
    let problem = |problem: String| CdiSpecError {
        path: path.to_path_buf(),
        problem,
    };
    let md = std::fs::metadata(path).map_err(|e| problem(e.to_string()))?;
    if md.is_dir() {
        return Ok(None);
    }
    // Never open a FIFO or a device: reading it could wait forever.
    if !md.is_file() {
        return Err(problem("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SPEC_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| problem(e.to_string()))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(problem(format!("larger than {MAX_SPEC_BYTES} bytes")));
    }
    CdiSpec::parse(path, priority, &bytes).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::CdiDevice;

    fn spec(kind: &str, device: &str, env: &str) -> String {
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{{"name":"{device}","containerEdits":{{"env":["{env}"]}}}}]}}"#
        )
    }

    fn asking(names: &[&str]) -> ContainerConfig {
        ContainerConfig {
            cdi_devices: names
                .iter()
                .map(|n| CdiDevice {
                    name: n.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn loads_both_formats_later_directories_win_bad_files_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let (etc, run) = (tmp.path().join("etc"), tmp.path().join("run"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(run.join("sub.json")).unwrap();
        std::fs::write(etc.join("a.json"), spec("v.com/gpu", "0", "FROM=etc")).unwrap();
        std::fs::write(
            etc.join("b.yaml"),
            "cdiVersion: 0.3.0\nkind: v.com/nic\ndevices:\n  - name: a\n    containerEdits:\n      env: [NIC=a]\n",
        )
        .unwrap();
        std::fs::write(run.join("a.json"), spec("v.com/gpu", "0", "FROM=run")).unwrap();
        std::fs::write(run.join("broken.json"), "{").unwrap();
        std::fs::write(run.join("notes.txt"), "not a spec").unwrap();
        let missing = tmp.path().join("missing");
        let registry = load(&[etc.clone(), run.clone(), missing]);
        assert_eq!(
            registry.len(),
            2,
            "v.com/gpu=0 and v.com/nic=a; skipped {:?}",
            registry.skipped()
        );

        let dirs = CdiDirs::new(&CdiConfig {
            enabled: true,
            spec_dirs: vec![etc, run.clone()],
        });
        assert!(dirs.registry_for(&asking(&[])).unwrap().is_empty());
        let r = dirs.registry_for(&asking(&["v.com/gpu=0"])).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.source("v.com/gpu=0"), Some(run.join("a.json").as_path()));
        assert_eq!(r.skipped(), [run.join("broken.json")]);
    }

    #[test]
    fn disabled_or_malformed_is_refused_before_reading() {
        let off = CdiDirs::new(&CdiConfig {
            enabled: false,
            spec_dirs: vec!["/nonexistent".into()],
        });
        assert!(off.registry_for(&asking(&[])).unwrap().is_empty());
        let err = off
            .registry_for(&asking(&["v.com/gpu=0", "v.com/gpu=1"]))
            .unwrap_err();
        assert_eq!(err.code(), crate::error::Code::InvalidArgument);
        assert!(
            err.message().starts_with(
                "config.cdi_devices[0]: CDI devices (v.com/gpu=0, v.com/gpu=1) asked for, but CDI is disabled"
            ),
            "{err}"
        );
        let on = CdiDirs::new(&CdiConfig::default());
        let err = on.registry_for(&asking(&["gpu0"])).unwrap_err();
        assert_eq!(err.code(), crate::error::Code::InvalidArgument);
        assert!(
            err.message().contains("config.cdi_devices[0] \"gpu0\""),
            "{err}"
        );
    }

    #[test]
    fn oversized_and_special_files_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let big = tmp.path().join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_SPEC_BYTES + 1)
            .unwrap();
        assert!(read_spec(&fifo, 0)
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        assert!(read_spec(&big, 0)
            .unwrap_err()
            .to_string()
            .contains("larger than"));
        assert!(load(&[tmp.path().to_path_buf()]).is_empty());
    }
}
