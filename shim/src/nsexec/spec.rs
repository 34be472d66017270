//! The parts of the OCI runtime spec an exec needs: the exec's process (`process.json`, the
//! container's own process with other arguments) and the container's seccomp profile
//! (`config.json` in the bundle). Fields this module does not name are not read: anything
//! that changes what the process becomes and is not handled here is refused by
//! [`unsupported`], so the exec goes through the runtime instead.

use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub rlimits: Vec<Rlimit>,
    #[serde(default)]
    pub no_new_privileges: bool,
    #[serde(default)]
    pub apparmor_profile: String,
    pub oom_score_adj: Option<i32>,
    #[serde(default)]
    pub selinux_label: String,
    /// Set by a newer spec: an exec's own scheduler or I/O priority, CPU affinity.
    pub scheduler: Option<serde_json::Value>,
    pub io_priority: Option<serde_json::Value>,
    pub exec_cpu_affinity: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
    /// Only a native create reads it: it refuses a process that sets one.
    pub umask: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Capabilities {
    #[serde(default)]
    pub bounding: Vec<String>,
    #[serde(default)]
    pub effective: Vec<String>,
    #[serde(default)]
    pub inheritable: Vec<String>,
    #[serde(default)]
    pub permitted: Vec<String>,
    #[serde(default)]
    pub ambient: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

/// The container's `config.json`, as far as an exec joins it.
#[derive(Debug, Default, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub linux: Linux,
    /// The container's own process (the resident helper takes its oom_score_adj).
    pub process: Option<Process>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    pub seccomp: Option<Seccomp>,
    /// A container whose processes run with an SELinux mount label or personality: left to
    /// the runtime.
    pub personality: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    pub default_action: String,
    pub default_errno_ret: Option<u32>,
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub listener_path: String,
    #[serde(default)]
    pub syscalls: Vec<Syscall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Syscall {
    #[serde(default)]
    pub names: Vec<String>,
    pub action: String,
    pub errno_ret: Option<u32>,
    #[serde(default)]
    pub args: Vec<SyscallArg>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyscallArg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: String,
}

/// Reads a JSON document of the spec.
pub fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("parse {}: {e}", path.display()))
}

/// Why this exec is left to the OCI runtime, if it is: what the native path does not do.
pub fn unsupported(process: &Process, config: &Config, lsm: &Lsm) -> Option<&'static str> {
    unsupported_exec_process(process, lsm).or_else(|| unsupported_config(config))
}

/// What a native pause or create refuses in its process: a terminal at create (the console
/// of a container's init is the runtime's), and what [`unsupported_exec_process`] refuses.
pub fn unsupported_process(process: &Process, lsm: &Lsm) -> Option<&'static str> {
    if process.terminal {
        return Some("a terminal (the runtime allocates the pty inside the container)");
    }
    unsupported_exec_process(process, lsm)
}

/// What [`unsupported`] finds in the exec's own process (an exec's terminal is made by the
/// helper's child in the container, and its master sent to the console socket).
pub fn unsupported_exec_process(process: &Process, lsm: &Lsm) -> Option<&'static str> {
    if process.args.is_empty() {
        return Some("no arguments");
    }
    if !process.apparmor_profile.is_empty() && lsm.apparmor {
        return Some("an AppArmor profile");
    }
    if !process.selinux_label.is_empty() && lsm.selinux {
        return Some("an SELinux label");
    }
    if process.scheduler.is_some() || process.io_priority.is_some() {
        return Some("a scheduler or I/O priority");
    }
    if process.exec_cpu_affinity.is_some() {
        return Some("an exec CPU affinity");
    }
    None
}

/// What [`unsupported`] finds in the container's spec: the same for every exec in it.
pub fn unsupported_config(config: &Config) -> Option<&'static str> {
    if config.linux.personality.is_some() {
        return Some("a personality");
    }
    if let Some(s) = &config.linux.seccomp {
        if !s.listener_path.is_empty()
            || s.default_action == "SCMP_ACT_NOTIFY"
            || s.syscalls.iter().any(|c| c.action == "SCMP_ACT_NOTIFY")
        {
            return Some("a seccomp notify listener");
        }
    }
    None
}

/// Which Linux security modules this host enforces (a label the host does not enforce is
/// ignored by the runtime too).
#[derive(Debug, Clone, Copy, Default)]
pub struct Lsm {
    pub apparmor: bool,
    pub selinux: bool,
}

impl Lsm {
    pub fn of_host() -> Lsm {
        let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .map(|s| s.trim() == "Y")
            .unwrap_or(false);
        let selinux = Path::new("/sys/fs/selinux/enforce").exists();
        Lsm { apparmor, selinux }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(json: &str) -> Process {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn what_the_native_path_leaves_to_the_runtime() {
        let none = Lsm::default();
        let cfg = Config::default();
        let plain = process(r#"{"args":["true"],"user":{"uid":0,"gid":0}}"#);
        assert_eq!(unsupported(&plain, &cfg, &none), None);
        let tty = process(r#"{"args":["sh"],"terminal":true}"#);
        assert_eq!(
            unsupported(&tty, &cfg, &none),
            None,
            "an exec's terminal is native"
        );
        assert!(unsupported_process(&tty, &none)
            .unwrap()
            .contains("terminal"));
        let aa = process(r#"{"args":["true"],"apparmorProfile":"x"}"#);
        assert_eq!(unsupported(&aa, &cfg, &none), None, "not enforced here");
        let enforced = Lsm {
            apparmor: true,
            selinux: false,
        };
        assert!(unsupported(&aa, &cfg, &enforced)
            .unwrap()
            .contains("AppArmor"));
        let notify: Config = serde_json::from_str(
            r#"{"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW",
                "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}}}"#,
        )
        .unwrap();
        assert!(unsupported(&plain, &notify, &none)
            .unwrap()
            .contains("notify"));
        let empty = process(r#"{"args":[]}"#);
        assert!(unsupported(&empty, &cfg, &none).is_some());
    }
}
