//! containerd's command line for a shim, in Go `flag` syntax: `-name value`, `-name=value`,
//! `--name value`, boolean `-debug`, then the action.

use super::options::RuntimeOptions;
use std::path::PathBuf;

pub const USAGE: &str = "usage: containerd-shim-peapod-v2 -namespace NS -address SOCK \
[-publish-binary BIN] -id ID [-bundle DIR] [-debug] start|delete|version";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    pub namespace: String,
    /// containerd's gRPC socket.
    pub address: String,
    pub publish_binary: String,
    pub id: String,
    /// The bundle; containerd also makes it the working directory.
    pub bundle: Option<PathBuf>,
    pub debug: bool,
    /// The shim's own socket (for `serve`, which `start` runs).
    pub socket: Option<PathBuf>,
    /// The runtime options `start` read (for `serve`): `-runtime-binary`, `-runtime-root`,
    /// `-systemd-cgroup`.
    pub runtime: RuntimeOptions,
    pub action: String,
}

impl Flags {
    pub fn parse(argv: impl Iterator<Item = String>) -> Result<Flags, String> {
        let mut flags = Flags::default();
        let mut argv = argv.peekable();
        while let Some(arg) = argv.next() {
            let Some(flag) = arg.strip_prefix('-') else {
                if !flags.action.is_empty() {
                    return Err(format!("unexpected argument {arg:?}"));
                }
                flags.action = arg;
                continue;
            };
            let flag = flag.strip_prefix('-').unwrap_or(flag);
            let (name, inline) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (flag, None),
            };
            let on = inline.as_deref() != Some("false");
            match name {
                "debug" => flags.debug = on,
                "systemd-cgroup" => flags.runtime.systemd_cgroup = on,
                "v" => flags.action = "version".into(),
                _ => {}
            }
            if matches!(name, "debug" | "v" | "systemd-cgroup") {
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => argv
                    .next()
                    .ok_or_else(|| format!("flag -{name} needs a value"))?,
            };
            match name {
                "namespace" => flags.namespace = value,
                "address" => flags.address = value,
                "publish-binary" => flags.publish_binary = value,
                "id" => flags.id = value,
                "bundle" => flags.bundle = Some(PathBuf::from(value)),
                "socket" => flags.socket = Some(PathBuf::from(value)),
                "runtime-binary" => flags.runtime.binary = Some(value),
                "runtime-root" => flags.runtime.root = Some(PathBuf::from(value)),
                other => return Err(format!("unknown flag -{other}")),
            }
        }
        if flags.action.is_empty() {
            return Err("no action given".into());
        }
        if flags.action != "version" {
            if flags.id.is_empty() {
                return Err("-id is required".into());
            }
            if flags.namespace.is_empty() {
                return Err("-namespace is required".into());
            }
        }
        Ok(flags)
    }

    /// The bundle: `-bundle`, else the working directory containerd gave us.
    pub fn bundle_dir(&self) -> Result<PathBuf, String> {
        match &self.bundle {
            Some(dir) => Ok(dir.clone()),
            None => std::env::current_dir().map_err(|e| format!("working directory: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Flags, String> {
        Flags::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn reads_containerds_start_and_delete_lines() {
        let f = parse(&[
            "-namespace",
            "k8s.io",
            "-address",
            "/run/containerd/containerd.sock",
            "-publish-binary",
            "/usr/bin/containerd",
            "-id",
            "abc",
            "-debug",
            "start",
        ])
        .unwrap();
        assert_eq!(f.namespace, "k8s.io");
        assert_eq!(f.address, "/run/containerd/containerd.sock");
        assert_eq!(f.publish_binary, "/usr/bin/containerd");
        assert_eq!(f.id, "abc");
        assert!(f.debug);
        assert_eq!(f.action, "start");
        let f = parse(&["--namespace=ns", "-id=x", "-bundle", "/b", "delete"]).unwrap();
        assert_eq!(f.bundle, Some(PathBuf::from("/b")));
        assert_eq!(f.action, "delete");
    }

    #[test]
    fn names_what_is_wrong() {
        assert!(parse(&["-namespace", "n", "start"])
            .unwrap_err()
            .contains("-id"));
        assert!(parse(&["-id", "x", "start"])
            .unwrap_err()
            .contains("-namespace"));
        assert!(parse(&["-bogus", "1", "start"])
            .unwrap_err()
            .contains("-bogus"));
        assert!(parse(&["-namespace", "n", "-id"])
            .unwrap_err()
            .contains("-id"));
        assert!(parse(&["-namespace", "n", "-id", "x"])
            .unwrap_err()
            .contains("action"));
        assert_eq!(parse(&["-v"]).unwrap().action, "version");
    }

    #[test]
    fn reads_the_runtime_options_start_passes_to_serve() {
        let f = parse(&[
            "-namespace",
            "k8s.io",
            "-id",
            "pod",
            "-runtime-binary",
            "/usr/sbin/runc",
            "-runtime-root=/run/r",
            "-systemd-cgroup",
            "serve",
        ])
        .unwrap();
        assert_eq!(
            f.runtime,
            RuntimeOptions {
                binary: Some("/usr/sbin/runc".into()),
                root: Some("/run/r".into()),
                systemd_cgroup: true,
            }
        );
        let f = parse(&["-namespace", "n", "-id", "x", "serve"]).unwrap();
        assert_eq!(f.runtime, RuntimeOptions::default());
    }
}
