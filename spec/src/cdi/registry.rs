//! The CDI devices known at one moment: every device of the loaded spec files, by its
//! fully-qualified name. As the reference library resolves them: a device defined in two
//! directories is the later directory's; defined twice within one directory, it is neither
//! (a conflict, reported, never guessed).

use super::document::{CdiSpec, Device};
use std::collections::HashMap;
use std::path::PathBuf;

/// The devices the daemon read from its CDI spec directories, for one CreateContainer.
#[derive(Debug, Clone, Default)]
pub struct CdiRegistry {
    specs: Vec<CdiSpec>,
    /// Qualified name -> (index in `specs`, index in its devices).
    devices: HashMap<String, (usize, usize)>,
    /// Qualified names defined by several files of one directory, with those files.
    conflicts: HashMap<String, Vec<PathBuf>>,
    /// Spec files that could not be read or parsed (named in an unknown device's error).
    unreadable: Vec<PathBuf>,
}

/// A resolved device: its spec file and its definition there.
pub(crate) struct Resolved<'a> {
    /// The index of the spec among the registry's, to apply its edits once.
    pub spec_index: usize,
    pub spec: &'a CdiSpec,
    pub device: &'a Device,
}

impl CdiRegistry {
    /// No devices: what a container that asks for none is given.
    pub fn empty() -> CdiRegistry {
        CdiRegistry::default()
    }

    /// The registry of `specs` (in any order: each carries its directory's priority), with the
    /// `unreadable` files that were skipped.
    pub fn new(specs: Vec<CdiSpec>, unreadable: Vec<PathBuf>) -> CdiRegistry {
        let mut devices: HashMap<String, (usize, usize)> = HashMap::new();
        let mut conflicts: HashMap<String, Vec<PathBuf>> = HashMap::new();
        for (si, spec) in specs.iter().enumerate() {
            for (di, name) in spec.device_names().enumerate() {
                let Some(&(other, _)) = devices.get(&name) else {
                    devices.insert(name, (si, di));
                    continue;
                };
                let other = &specs[other];
                if spec.priority > other.priority {
                    devices.insert(name, (si, di));
                } else if spec.priority == other.priority {
                    let files = conflicts.entry(name).or_default();
                    for p in [&other.path, &spec.path] {
                        if !files.contains(p) {
                            files.push(p.clone());
                        }
                    }
                }
            }
        }
        for name in conflicts.keys() {
            devices.remove(name);
        }
        CdiRegistry {
            specs,
            devices,
            conflicts,
            unreadable,
        }
    }

    /// Devices defined twice in one directory (no container gets them), for the log.
    pub fn conflicts(&self) -> impl Iterator<Item = (&str, &[PathBuf])> {
        self.conflicts
            .iter()
            .map(|(n, files)| (n.as_str(), files.as_slice()))
    }

    /// The spec file that defines the device of that fully-qualified name.
    pub fn source(&self, name: &str) -> Option<&std::path::Path> {
        self.resolve(name).ok().map(|r| r.spec.path())
    }

    /// The spec files that were skipped as unreadable.
    pub fn skipped(&self) -> &[PathBuf] {
        &self.unreadable
    }

    /// How many devices can be resolved.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The device of that fully-qualified name, or why there is none.
    pub(crate) fn resolve(&self, name: &str) -> Result<Resolved<'_>, String> {
        if let Some(files) = self.conflicts.get(name) {
            let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "the CDI device is defined in more than one spec file of one directory ({})",
                files.join(", ")
            ));
        }
        let Some(&(si, di)) = self.devices.get(name) else {
            let mut why = "no such CDI device in the CDI spec directories".to_string();
            if !self.unreadable.is_empty() {
                let files: Vec<String> = self
                    .unreadable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                why += &format!(
                    " (spec files skipped as unreadable, see the daemon's log: {})",
                    files.join(", ")
                );
            }
            return Err(why);
        };
        let spec = &self.specs[si];
        Ok(Resolved {
            spec_index: si,
            spec,
            device: &spec.devices[di],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spec(path: &str, priority: usize, kind: &str, devices: &[(&str, &str)]) -> CdiSpec {
        let devices: Vec<String> = devices
            .iter()
            .map(|(n, v)| format!(r#"{{"name":"{n}","containerEdits":{{"env":["FROM={v}"]}}}}"#))
            .collect();
        let text = format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{}]}}"#,
            devices.join(",")
        );
        CdiSpec::parse(Path::new(path), priority, text.as_bytes()).unwrap()
    }

    fn env_of(r: &CdiRegistry, name: &str) -> String {
        r.resolve(name).unwrap().device.edits.env[0].clone()
    }

    #[test]
    fn later_directories_override_earlier_ones_device_by_device() {
        let r = CdiRegistry::new(
            vec![
                spec("/var/run/cdi/v.json", 1, "v.com/gpu", &[("0", "run")]),
                spec(
                    "/etc/cdi/v.json",
                    0,
                    "v.com/gpu",
                    &[("0", "etc"), ("1", "etc")],
                ),
            ],
            Vec::new(),
        );
        assert_eq!(env_of(&r, "v.com/gpu=0"), "FROM=run");
        assert_eq!(env_of(&r, "v.com/gpu=1"), "FROM=etc", "not shadowed");
        assert_eq!(r.len(), 2);
        assert_eq!(r.conflicts().count(), 0);
        // The resolved device's spec is its own file (its spec-level edits go with it).
        assert_eq!(
            r.resolve("v.com/gpu=0").unwrap().spec.path(),
            Path::new("/var/run/cdi/v.json")
        );
    }

    #[test]
    fn a_device_twice_in_one_directory_is_a_conflict() {
        let r = CdiRegistry::new(
            vec![
                spec("/etc/cdi/a.json", 0, "v.com/gpu", &[("0", "a"), ("1", "a")]),
                spec("/etc/cdi/b.json", 0, "v.com/gpu", &[("0", "b")]),
            ],
            Vec::new(),
        );
        let err = r.resolve("v.com/gpu=0").err().unwrap();
        assert!(err.contains("/etc/cdi/a.json, /etc/cdi/b.json"), "{err}");
        assert_eq!(env_of(&r, "v.com/gpu=1"), "FROM=a");
        assert_eq!(r.conflicts().count(), 1);
        // A later directory's definition does not settle it either (the reference library's
        // rule: a conflict drops the name whatever else defines it).
        let r = CdiRegistry::new(
            vec![
                spec("/etc/cdi/a.json", 0, "v.com/gpu", &[("0", "a")]),
                spec("/etc/cdi/b.json", 0, "v.com/gpu", &[("0", "b")]),
                spec("/var/run/cdi/c.json", 1, "v.com/gpu", &[("0", "c")]),
            ],
            Vec::new(),
        );
        assert_eq!(r.conflicts().count(), 1);
        assert!(r.resolve("v.com/gpu=0").is_err(), "reported, not guessed");
    }

    #[test]
    fn unknown_devices_name_the_files_skipped() {
        let r = CdiRegistry::new(
            vec![spec("/etc/cdi/a.json", 0, "v.com/gpu", &[("0", "a")])],
            vec!["/var/run/cdi/broken.json".into()],
        );
        let err = r.resolve("v.com/gpu=1").err().unwrap();
        assert!(err.contains("no such CDI device"), "{err}");
        assert!(err.contains("/var/run/cdi/broken.json"), "{err}");
        assert!(CdiRegistry::empty().resolve("v.com/gpu=0").is_err());
        assert!(CdiRegistry::empty().is_empty());
    }
}
