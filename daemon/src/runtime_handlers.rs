//! The runtime handlers a pod may ask for by name (RunPodSandbox's `runtime_handler`, which
//! the kubelet takes from the pod's RuntimeClass): the default one, `runtime.path`, under the
//! empty name (and the file name of its runtime, e.g. "runc", as peapod always accepted), and
//! each `[runtime.handlers.NAME]` of the configuration.
//!
//! A handler is an OCI runtime CLI and the state directory it keeps its containers in (its
//! `--root`). Handlers with the default handler's runtime share its root; one with another
//! runtime has a root of its own, so that no runtime reads another's state. The daemon's
//! own uses of a runtime (killing and deleting what a dead shim left, killing a create a dead
//! daemon left running) go through every runtime there is: a container is in one of them.
//!
//! What peapod probes at start (recursive read-only mounts, user namespaces) is probed with
//! the default runtime; a handler with another runtime does not offer those (Status says so,
//! and a pod asking for a user namespace with it is refused).

use crate::config::{Config, RuntimeHandlerConfig};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One runtime handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeHandler {
    /// The name pods ask for it by ("" for the default).
    pub name: String,
    /// The OCI runtime CLI.
    pub path: String,
    /// The runtime's state directory (`--root`).
    pub root: PathBuf,
    /// Flags before every command (`[runtime.handlers.NAME] args`; none for the default).
    pub args: Vec<String>,
    /// The runtime makes its own sandbox per pod (`sandboxed`; never the default).
    pub sandboxed: bool,
}

/// How to reach one runtime's containers: its CLI, state root and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeCommand {
    pub path: String,
    pub root: PathBuf,
    pub args: Vec<String>,
}

/// The handlers of this daemon.
#[derive(Debug, Clone)]
pub struct RuntimeHandlers {
    default: RuntimeHandler,
    named: Vec<RuntimeHandler>,
}

impl RuntimeHandlers {
    /// From `[runtime]`; runtime state goes under `state`.
    pub fn new(config: &Config) -> RuntimeHandlers {
        RuntimeHandlers::from_parts(
            &config.runtime.path,
            config
                .runtime
                .handlers
                .iter()
                .map(|(name, h)| (name.as_str(), h)),
            &config.state,
        )
    }

    /// The default runtime `default_path` and the named handlers.
    pub fn from_parts<'a>(
        default_path: &str,
        named: impl IntoIterator<Item = (&'a str, &'a RuntimeHandlerConfig)>,
        state: &Path,
    ) -> RuntimeHandlers {
        let default_root = state.join("runc");
        let named = named
            .into_iter()
            .map(|(name, h)| RuntimeHandler {
                name: name.to_string(),
                path: h.path.clone(),
                root: if h.path == default_path {
                    default_root.clone()
                } else {
                    state.join("runtimes").join(name)
                },
                args: h.args.clone(),
                sandboxed: h.is_sandboxed(),
            })
            .collect();
        RuntimeHandlers {
            default: RuntimeHandler {
                name: String::new(),
                path: default_path.to_string(),
                root: default_root,
                args: Vec::new(),
                sandboxed: false,
            },
            named,
        }
    }

    /// The default handler.
    pub fn default_handler(&self) -> &RuntimeHandler {
        &self.default
    }

    /// The other name the default handler answers to: its runtime's file name ("runc").
    pub fn default_alias(&self) -> String {
        Path::new(&self.default.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "runc".into())
    }

    /// The configured handlers, by name (not the default).
    pub fn named(&self) -> &[RuntimeHandler] {
        &self.named
    }

    /// The handler a pod asks for; an unknown name is InvalidArgument naming the field and
    /// what there is. A configured name wins over the default's alias.
    pub fn resolve(&self, name: &str) -> Result<&RuntimeHandler> {
        if name.is_empty() {
            return Ok(&self.default);
        }
        if let Some(h) = self.named.iter().find(|h| h.name == name) {
            return Ok(h);
        }
        if name == self.default_alias() || name == "runc" {
            return Ok(&self.default);
        }
        let mut known = vec![format!(
            "\"\" (the default, also {:?})",
            self.default_alias()
        )];
        known.extend(self.named.iter().map(|h| format!("{:?}", h.name)));
        Err(Error::invalid(format!(
            "runtime_handler {name:?} is not configured: peapod has {} ([runtime.handlers.NAME] in its configuration)",
            known.join(", ")
        )))
    }

    /// Whether `handler` runs the default handler's runtime (so that what was probed with
    /// it holds).
    pub fn runs_default_runtime(&self, handler: &RuntimeHandler) -> bool {
        handler.path == self.default.path
    }

    /// Every runtime there is, each once (by CLI and root, with the first handler's flags),
    /// the default's first.
    pub fn runtimes(&self) -> Vec<RuntimeCommand> {
        let mut out: Vec<RuntimeCommand> = Vec::new();
        for h in std::iter::once(&self.default).chain(&self.named) {
            if !out.iter().any(|r| r.path == h.path && r.root == h.root) {
                out.push(RuntimeCommand {
                    path: h.path.clone(),
                    root: h.root.clone(),
                    args: h.args.clone(),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn handlers() -> RuntimeHandlers {
        let handler = |path: &str, args: &[&str]| RuntimeHandlerConfig {
            path: path.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        };
        let named = [
            ("test-handler", handler("/usr/sbin/runc", &[])),
            ("fast", handler("crun", &[])),
            ("gvisor", handler("runsc", &["--platform=systrap"])),
        ];
        RuntimeHandlers::from_parts(
            "/usr/sbin/runc",
            named.iter().map(|(n, h)| (*n, h)),
            Path::new("/run/p"),
        )
    }

    #[test]
    fn the_default_answers_to_no_name_and_its_runtime_name() {
        let h = handlers();
        for name in ["", "runc"] {
            let d = h.resolve(name).unwrap();
            assert_eq!(d.name, "");
            assert_eq!(d.path, "/usr/sbin/runc");
            assert_eq!(d.root, Path::new("/run/p/runc"));
        }
    }

    #[test]
    fn named_handlers_resolve_with_their_runtime_and_root() {
        let h = handlers();
        let t = h.resolve("test-handler").unwrap();
        assert_eq!(
            (t.path.as_str(), t.root.as_path()),
            ("/usr/sbin/runc", Path::new("/run/p/runc"))
        );
        assert!(h.runs_default_runtime(t));
        let f = h.resolve("fast").unwrap();
        assert_eq!(
            (f.path.as_str(), f.root.as_path()),
            ("crun", Path::new("/run/p/runtimes/fast"))
        );
        assert!(!h.runs_default_runtime(f));
        let g = h.resolve("gvisor").unwrap();
        assert_eq!(g.args, ["--platform=systrap"]);
        assert!(g.sandboxed && !f.sandboxed && !h.default_handler().sandboxed);
        let command = |path: &str, root: &str, args: &[&str]| RuntimeCommand {
            path: path.into(),
            root: root.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        assert_eq!(
            h.runtimes(),
            vec![
                command("/usr/sbin/runc", "/run/p/runc", &[]),
                command("crun", "/run/p/runtimes/fast", &[]),
                command("runsc", "/run/p/runtimes/gvisor", &["--platform=systrap"]),
            ]
        );
    }

    #[test]
    fn an_unknown_name_is_invalid_and_names_the_field_and_what_there_is() {
        let err = handlers().resolve("kata").unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        let msg = err.to_string();
        assert!(
            msg.contains("runtime_handler \"kata\" is not configured"),
            "{msg}"
        );
        assert!(
            msg.contains("\"test-handler\"") && msg.contains("\"fast\""),
            "{msg}"
        );
    }
}
