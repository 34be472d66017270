//! Seccomp: choosing a profile from the CRI config, the built-in RuntimeDefault profile,
//! and loading Localhost profiles.
//!
//! The built-in profile follows Docker's and containerd's default: everything not allowed
//! fails with EPERM; an allow list of ordinary syscalls; more syscalls allowed only when the
//! container's bounding set holds the capability that makes them meaningful (`mount` and
//! `unshare` with CAP_SYS_ADMIN, `reboot` with CAP_SYS_BOOT, ...); without CAP_SYS_ADMIN,
//! `clone` only without namespace flags and `clone3` failing with ENOSYS (so that libcs fall
//! back to `clone`, whose flags can be checked).

use crate::error::{Result, SpecError};
use peapod_proto::v1::{security_profile::ProfileType, SecurityProfile};
use serde_json::{json, Value};
use std::path::Path;

/// Syscalls every container may make, grouped by what they are for.
const ALLOWED: &[&[&str]] = &[
    // files and directories
    &[
        "access",
        "chdir",
        "chmod",
        "chown",
        "chown32",
        "close",
        "close_range",
        "copy_file_range",
        "creat",
        "dup",
        "dup2",
        "dup3",
        "faccessat",
        "faccessat2",
        "fadvise64",
        "fadvise64_64",
        "fallocate",
        "fchdir",
        "fchmod",
        "fchmodat",
        "fchown",
        "fchown32",
        "fchownat",
        "fcntl",
        "fcntl64",
        "fdatasync",
        "flock",
        "fstat",
        "fstat64",
        "fstatat64",
        "fstatfs",
        "fstatfs64",
        "fsync",
        "ftruncate",
        "ftruncate64",
        "futimesat",
        "getcwd",
        "getdents",
        "getdents64",
        "lchown",
        "lchown32",
        "link",
        "linkat",
        "_llseek",
        "lseek",
        "lstat",
        "lstat64",
        "mkdir",
        "mkdirat",
        "mknod",
        "mknodat",
        "newfstatat",
        "open",
        "openat",
        "openat2",
        "pread64",
        "preadv",
        "preadv2",
        "pwrite64",
        "pwritev",
        "pwritev2",
        "read",
        "readahead",
        "readlink",
        "readlinkat",
        "readv",
        "rename",
        "renameat",
        "renameat2",
        "rmdir",
        "sendfile",
        "sendfile64",
        "splice",
        "stat",
        "stat64",
        "statfs",
        "statfs64",
        "statx",
        "symlink",
        "symlinkat",
        "sync",
        "sync_file_range",
        "syncfs",
        "tee",
        "truncate",
        "truncate64",
        "umask",
        "unlink",
        "unlinkat",
        "utime",
        "utimensat",
        "utimensat_time64",
        "utimes",
        "vmsplice",
        "write",
        "writev",
    ],
    // extended attributes
    &[
        "fgetxattr",
        "flistxattr",
        "fremovexattr",
        "fsetxattr",
        "getxattr",
        "lgetxattr",
        "listxattr",
        "llistxattr",
        "lremovexattr",
        "lsetxattr",
        "removexattr",
        "setxattr",
    ],
    // waiting for events: poll, epoll, inotify, eventfd, signalfd, timerfd, async and uring I/O
    &[
        "epoll_create",
        "epoll_create1",
        "epoll_ctl",
        "epoll_ctl_old",
        "epoll_pwait",
        "epoll_pwait2",
        "epoll_wait",
        "epoll_wait_old",
        "eventfd",
        "eventfd2",
        "fanotify_mark",
        "inotify_add_watch",
        "inotify_init",
        "inotify_init1",
        "inotify_rm_watch",
        "io_cancel",
        "io_destroy",
        "io_getevents",
        "io_pgetevents",
        "io_pgetevents_time64",
        "io_setup",
        "io_submit",
        "io_uring_enter",
        "io_uring_register",
        "io_uring_setup",
        "ioctl",
        "pause",
        "pipe",
        "pipe2",
        "poll",
        "ppoll",
        "ppoll_time64",
        "pselect6",
        "pselect6_time64",
        "select",
        "_newselect",
        "signalfd",
        "signalfd4",
        "timerfd_create",
        "timerfd_gettime",
        "timerfd_gettime64",
        "timerfd_settime",
        "timerfd_settime64",
    ],
    // processes, threads and credentials
    &[
        "capget",
        "capset",
        "execve",
        "execveat",
        "exit",
        "exit_group",
        "fork",
        "vfork",
        "get_robust_list",
        "set_robust_list",
        "get_thread_area",
        "set_thread_area",
        "set_tid_address",
        "getcpu",
        "getegid",
        "getegid32",
        "geteuid",
        "geteuid32",
        "getgid",
        "getgid32",
        "getgroups",
        "getgroups32",
        "getpgid",
        "getpgrp",
        "getpid",
        "getppid",
        "getpriority",
        "getresgid",
        "getresgid32",
        "getresuid",
        "getresuid32",
        "getrlimit",
        "getrusage",
        "getsid",
        "gettid",
        "getuid",
        "getuid32",
        "ioprio_get",
        "ioprio_set",
        "membarrier",
        "pidfd_open",
        "pidfd_send_signal",
        "prctl",
        "prlimit64",
        "process_mrelease",
        "restart_syscall",
        "rseq",
        "seccomp",
        "setfsgid",
        "setfsgid32",
        "setfsuid",
        "setfsuid32",
        "setgid",
        "setgid32",
        "setgroups",
        "setgroups32",
        "setpgid",
        "setpriority",
        "setregid",
        "setregid32",
        "setresgid",
        "setresgid32",
        "setresuid",
        "setresuid32",
        "setreuid",
        "setreuid32",
        "setrlimit",
        "setsid",
        "setuid",
        "setuid32",
        "ugetrlimit",
        "uname",
        "sysinfo",
        "times",
        "wait4",
        "waitid",
        "waitpid",
        "landlock_add_rule",
        "landlock_create_ruleset",
        "landlock_restrict_self",
    ],
    // scheduling
    &[
        "sched_getaffinity",
        "sched_getattr",
        "sched_getparam",
        "sched_get_priority_max",
        "sched_get_priority_min",
        "sched_getscheduler",
        "sched_rr_get_interval",
        "sched_rr_get_interval_time64",
        "sched_setaffinity",
        "sched_setattr",
        "sched_setparam",
        "sched_setscheduler",
        "sched_yield",
    ],
    // memory
    &[
        "brk",
        "madvise",
        "memfd_create",
        "memfd_secret",
        "mincore",
        "mlock",
        "mlock2",
        "mlockall",
        "mmap",
        "mmap2",
        "mprotect",
        "mremap",
        "msync",
        "munlock",
        "munlockall",
        "munmap",
        "remap_file_pages",
    ],
    // signals
    &[
        "kill",
        "rt_sigaction",
        "rt_sigpending",
        "rt_sigprocmask",
        "rt_sigqueueinfo",
        "rt_sigreturn",
        "rt_sigsuspend",
        "rt_sigtimedwait",
        "rt_sigtimedwait_time64",
        "rt_tgsigqueueinfo",
        "sigaltstack",
        "sigprocmask",
        "sigreturn",
        "tgkill",
        "tkill",
    ],
    // time and timers (reading the clocks; setting them needs CAP_SYS_TIME below)
    &[
        "adjtimex",
        "alarm",
        "clock_adjtime",
        "clock_adjtime64",
        "clock_getres",
        "clock_getres_time64",
        "clock_gettime",
        "clock_gettime64",
        "clock_nanosleep",
        "clock_nanosleep_time64",
        "getitimer",
        "gettimeofday",
        "nanosleep",
        "setitimer",
        "time",
        "timer_create",
        "timer_delete",
        "timer_getoverrun",
        "timer_gettime",
        "timer_gettime64",
        "timer_settime",
        "timer_settime64",
    ],
    // futexes and randomness
    &["futex", "futex_time64", "futex_waitv", "getrandom"],
    // sockets
    &[
        "accept",
        "accept4",
        "bind",
        "connect",
        "getpeername",
        "getsockname",
        "getsockopt",
        "listen",
        "recv",
        "recvfrom",
        "recvmmsg",
        "recvmmsg_time64",
        "recvmsg",
        "send",
        "sendmmsg",
        "sendmsg",
        "sendto",
        "setsockopt",
        "shutdown",
        "socket",
        "socketcall",
        "socketpair",
    ],
    // System V and POSIX IPC (in the pod's IPC namespace)
    &[
        "ipc",
        "mq_getsetattr",
        "mq_notify",
        "mq_open",
        "mq_timedreceive",
        "mq_timedreceive_time64",
        "mq_timedsend",
        "mq_timedsend_time64",
        "mq_unlink",
        "msgctl",
        "msgget",
        "msgrcv",
        "msgsnd",
        "semctl",
        "semget",
        "semop",
        "semtimedop",
        "semtimedop_time64",
        "shmat",
        "shmctl",
        "shmdt",
        "shmget",
    ],
    // ptrace of one's own children is safe since Linux 4.8 (seccomp is re-checked after it)
    &["ptrace"],
];

/// Syscalls allowed only when the bounding set has the capability that governs them.
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// `personality(2)` values that are allowed: PER_LINUX, PER_LINUX32 (0x8), with
/// UNAME26 (0x20000), and the query 0xffffffff.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
/// CLONE_NEWPID | CLONE_NEWNET: what `clone` may not ask for without CAP_SYS_ADMIN.
const CLONE_NAMESPACE_FLAGS: u64 =
    0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000;

const ENOSYS: u32 = 38;

/// The seccomp architectures of the host (the native one and its compat ABIs) and the
/// syscalls only that architecture has.
fn arch() -> (&'static [&'static str], &'static [&'static str]) {
    if cfg!(target_arch = "x86_64") {
        (
            &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            &["arch_prctl", "modify_ldt"],
        )
    } else if cfg!(target_arch = "aarch64") {
        (
            &["SCMP_ARCH_ARM", "SCMP_ARCH_AARCH64"],
            &[
                "arm_fadvise64_64",
                "arm_sync_file_range",
                "sync_file_range2",
                "breakpoint",
                "cacheflush",
                "set_tls",
            ],
        )
    } else if cfg!(target_arch = "x86") {
        (&["SCMP_ARCH_X86"], &["modify_ldt"])
    } else {
        (&[], &[])
    }
}

fn allow(names: &[&str]) -> Value {
    json!({"names": names, "action": "SCMP_ACT_ALLOW"})
}

/// The RuntimeDefault profile for a container whose bounding set is `bounding`
/// (canonical `CAP_*` names), as `linux.seccomp` JSON.
pub fn default_profile_json(bounding: &[String]) -> Value {
    let (arches, arch_syscalls) = arch();
    let has = |cap: &str| bounding.iter().any(|c| c == cap);
    let base: Vec<&str> = ALLOWED.iter().flat_map(|g| g.iter().copied()).collect();
    let mut syscalls = vec![allow(&base)];
    for p in PERSONALITIES {
        syscalls.push(json!({
            "names": ["personality"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": p, "op": "SCMP_CMP_EQ"}],
        }));
    }
    if !arch_syscalls.is_empty() {
        syscalls.push(allow(arch_syscalls));
    }
    for (cap, names) in BY_CAPABILITY {
        if has(cap) {
            syscalls.push(allow(names));
        }
    }
    if !has("CAP_SYS_ADMIN") {
        // The flags are the first argument everywhere but s390, which we do not build for.
        syscalls.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
        syscalls.push(json!({
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": ENOSYS,
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": arches,
        "syscalls": syscalls,
    })
}

/// What the CRI config asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seccomp {
    Unconfined,
    RuntimeDefault,
    Localhost(String),
}

const SECCOMP_FIELD: &str = "config.linux.security_context.seccomp";

/// The seccomp choice from the typed field, else the deprecated `seccomp_profile_path`
/// ("" and "unconfined": none, "runtime/default" and "docker/default": the default,
/// "localhost/<path>").
pub(crate) fn seccomp_choice(
    profile: Option<&SecurityProfile>,
    deprecated_path: &str,
) -> Result<Seccomp> {
    match profile {
        Some(p) => {
            let kind = ProfileType::try_from(p.profile_type).map_err(|_| {
                SpecError::invalid(format!(
                    "{SECCOMP_FIELD}.profile_type: unknown type {}",
                    p.profile_type
                ))
            })?;
            if kind != ProfileType::Localhost && !p.localhost_ref.is_empty() {
                return Err(SpecError::invalid(format!(
                    "{SECCOMP_FIELD}.localhost_ref must only be set when profile_type is Localhost"
                )));
            }
            Ok(match kind {
                ProfileType::Unconfined => Seccomp::Unconfined,
                ProfileType::RuntimeDefault => Seccomp::RuntimeDefault,
                ProfileType::Localhost => {
                    let path = p.localhost_ref.trim_start_matches("localhost/");
                    if path.is_empty() {
                        return Err(SpecError::invalid(format!(
                            "{SECCOMP_FIELD}.localhost_ref is empty"
                        )));
                    }
                    Seccomp::Localhost(path.to_string())
                }
            })
        }
        None => match deprecated_path {
            "" | "unconfined" => Ok(Seccomp::Unconfined),
            "runtime/default" | "docker/default" => Ok(Seccomp::RuntimeDefault),
            other => match other.strip_prefix("localhost/") {
                Some(path) if !path.is_empty() => Ok(Seccomp::Localhost(path.to_string())),
                _ => Err(SpecError::invalid(format!(
                    "config.linux.security_context.seccomp_profile_path: invalid profile {other:?}"
                ))),
            },
        },
    }
}

/// Most a profile file may weigh; real ones are tens of kilobytes.
const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// Loads a Localhost profile: a runtime-spec `LinuxSeccomp` JSON document (what containerd
/// reads). Docker-format extras are tolerated: `archMap` supplies `architectures` when
/// those are absent, and unknown keys (`includes`, `excludes`, `comment`) are ignored.
pub(crate) fn load_localhost_profile(path: &str) -> Result<Value> {
    let field = format!("{SECCOMP_FIELD} Localhost profile {path:?}");
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(SpecError::invalid(format!(
            "{field}: the path must be absolute"
        )));
    }
    let md = std::fs::metadata(p).map_err(|e| SpecError::invalid(format!("{field}: {e}")))?;
    if !md.is_file() || md.len() > MAX_PROFILE_BYTES {
        return Err(SpecError::invalid(format!(
            "{field}: not a regular file of at most {MAX_PROFILE_BYTES} bytes"
        )));
    }
    let bytes = std::fs::read(p).map_err(|e| SpecError::invalid(format!("{field}: {e}")))?;
    let mut v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| SpecError::invalid(format!("{field}: not JSON: {e}")))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| SpecError::invalid(format!("{field}: not a JSON object")))?;
    if !obj.contains_key("architectures") {
        if let Some(map) = obj.get("archMap").and_then(Value::as_array) {
            let mut arches = Vec::new();
            for m in map {
                if let Some(a) = m.get("architecture") {
                    arches.push(a.clone());
                }
                if let Some(subs) = m.get("subArchitectures").and_then(Value::as_array) {
                    arches.extend(subs.iter().cloned());
                }
            }
            obj.insert("architectures".into(), Value::Array(arches));
        }
    }
    // Keep only what the runtime spec defines, then check it parses as one.
    const KEYS: &[&str] = &[
        "defaultAction",
        "defaultErrnoRet",
        "architectures",
        "flags",
        "listenerPath",
        "listenerMetadata",
        "syscalls",
    ];
    obj.retain(|k, _| KEYS.contains(&k.as_str()));
    if let Some(calls) = obj.get_mut("syscalls").and_then(Value::as_array_mut) {
        for call in calls.iter_mut().filter_map(Value::as_object_mut) {
            // Docker's older single-name form.
            if let Some(name) = call.remove("name") {
                call.entry("names").or_insert_with(|| json!([name]));
            }
            call.retain(|k, _| ["names", "action", "errnoRet", "args"].contains(&k.as_str()));
        }
    }
    let parsed: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(v.clone())
        .map_err(|e| SpecError::invalid(format!("{field}: not a seccomp profile: {e}")))?;
    serde_json::to_value(parsed).map_err(|e| SpecError::internal(field, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::DEFAULT_CAPABILITIES;

    fn allowed(profile: &Value, name: &str) -> bool {
        profile["syscalls"].as_array().unwrap().iter().any(|s| {
            s["action"] == "SCMP_ACT_ALLOW"
                && s.get("args").is_none()
                && s["names"].as_array().unwrap().iter().any(|n| n == name)
        })
    }

    fn mentioned(profile: &Value, name: &str) -> bool {
        profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["names"].as_array().unwrap().iter().any(|n| n == name))
    }

    fn defaults() -> Vec<String> {
        DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn default_profile_shape() {
        let p = default_profile_json(&defaults());
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                p["architectures"],
                json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"])
            );
            assert!(allowed(&p, "arch_prctl"));
        }
        for ok in [
            "read",
            "write",
            "openat",
            "execve",
            "futex",
            "socket",
            "clock_gettime",
            "chroot",
        ] {
            assert!(allowed(&p, ok), "{ok} should be allowed");
        }
        for blocked in [
            "unshare",
            "mount",
            "umount2",
            "setns",
            "reboot",
            "bpf",
            "keyctl",
            "add_key",
            "kexec_load",
            "init_module",
            "swapon",
            "pivot_root",
            "settimeofday",
            "acct",
            "open_by_handle_at",
            "userfaultfd",
            "sethostname",
            "syslog",
        ] {
            assert!(!allowed(&p, blocked), "{blocked} should be blocked");
        }
        // No syscall is listed twice in the base allow list.
        let base = p["syscalls"][0]["names"].as_array().unwrap();
        let mut names: Vec<&str> = base.iter().map(|n| n.as_str().unwrap()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(n, names.len());
        // It parses as the OCI type, and round-trips unchanged.
        let typed: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(p.clone()).unwrap();
        assert_eq!(serde_json::to_value(typed).unwrap(), p);
    }

    #[test]
    fn clone_is_restricted_without_sys_admin() {
        let p = default_profile_json(&defaults());
        let clone = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["names"] == json!(["clone"]))
            .unwrap();
        assert_eq!(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(clone["args"][0]["value"], json!(0x7E02_0000u64));
        let clone3 = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["names"] == json!(["clone3"]))
            .unwrap();
        assert_eq!(clone3["action"], "SCMP_ACT_ERRNO");
        assert_eq!(clone3["errnoRet"], 38);
    }

    #[test]
    fn capabilities_unlock_syscalls() {
        let mut caps = defaults();
        caps.push("CAP_SYS_ADMIN".into());
        caps.push("CAP_SYS_BOOT".into());
        caps.push("CAP_SYS_TIME".into());
        let p = default_profile_json(&caps);
        for ok in [
            "unshare",
            "mount",
            "setns",
            "clone",
            "clone3",
            "reboot",
            "settimeofday",
        ] {
            assert!(allowed(&p, ok), "{ok}");
        }
        assert!(!mentioned(&p, "init_module"));
        // Without CAP_SYS_CHROOT, no chroot.
        let p = default_profile_json(&["CAP_KILL".to_string()]);
        assert!(!mentioned(&p, "chroot"));
    }

    #[test]
    fn choices() {
        let sp = |t: ProfileType, r: &str| SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.into(),
        };
        assert_eq!(seccomp_choice(None, "").unwrap(), Seccomp::Unconfined);
        assert_eq!(
            seccomp_choice(None, "unconfined").unwrap(),
            Seccomp::Unconfined
        );
        assert_eq!(
            seccomp_choice(None, "runtime/default").unwrap(),
            Seccomp::RuntimeDefault
        );
        assert_eq!(
            seccomp_choice(None, "docker/default").unwrap(),
            Seccomp::RuntimeDefault
        );
        assert_eq!(
            seccomp_choice(None, "localhost//etc/p.json").unwrap(),
            Seccomp::Localhost("/etc/p.json".into())
        );
        assert!(seccomp_choice(None, "whatever").is_err());
        assert!(seccomp_choice(None, "localhost/").is_err());
        let rd = sp(ProfileType::RuntimeDefault, "");
        assert_eq!(
            seccomp_choice(Some(&rd), "unconfined").unwrap(),
            Seccomp::RuntimeDefault
        );
        let un = sp(ProfileType::Unconfined, "");
        assert_eq!(seccomp_choice(Some(&un), "").unwrap(), Seccomp::Unconfined);
        let lh = sp(ProfileType::Localhost, "/p.json");
        assert_eq!(
            seccomp_choice(Some(&lh), "").unwrap(),
            Seccomp::Localhost("/p.json".into())
        );
        let lh = sp(ProfileType::Localhost, "localhost//p.json");
        assert_eq!(
            seccomp_choice(Some(&lh), "").unwrap(),
            Seccomp::Localhost("/p.json".into())
        );
        assert!(seccomp_choice(Some(&sp(ProfileType::Localhost, "")), "").is_err());
        assert!(seccomp_choice(Some(&sp(ProfileType::RuntimeDefault, "/x")), "").is_err());
        let bad = SecurityProfile {
            profile_type: 9,
            localhost_ref: String::new(),
        };
        assert!(seccomp_choice(Some(&bad), "").is_err());
    }

    #[test]
    fn localhost_profiles_load_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.json");
        std::fs::write(
            &path,
            r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
                "syscalls":[{"names":["sethostname"],"action":"SCMP_ACT_ERRNO"}]}"#,
        )
        .unwrap();
        let p = load_localhost_profile(path.to_str().unwrap()).unwrap();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(p["syscalls"][0]["names"], json!(["sethostname"]));

        // Docker format: archMap, single names, comments.
        let docker = dir.path().join("docker.json");
        std::fs::write(
            &docker,
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,
                "archMap":[{"architecture":"SCMP_ARCH_X86_64","subArchitectures":["SCMP_ARCH_X86"]}],
                "syscalls":[{"name":"read","action":"SCMP_ACT_ALLOW","comment":"c","includes":{}}]}"#,
        )
        .unwrap();
        let p = load_localhost_profile(docker.to_str().unwrap()).unwrap();
        assert_eq!(
            p["architectures"],
            json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"])
        );
        assert_eq!(p["syscalls"][0]["names"], json!(["read"]));
        assert_eq!(p["defaultErrnoRet"], 1);

        let missing = dir.path().join("missing.json");
        let e = load_localhost_profile(missing.to_str().unwrap()).unwrap_err();
        assert!(
            matches!(&e, SpecError::InvalidArgument(m) if m.contains("missing.json")),
            "{e}"
        );
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "{not json").unwrap();
        let e = load_localhost_profile(garbage.to_str().unwrap()).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("garbage.json")));
        let wrong = dir.path().join("wrong.json");
        std::fs::write(&wrong, r#"{"defaultAction":"SCMP_ACT_FLY"}"#).unwrap();
        assert!(load_localhost_profile(wrong.to_str().unwrap()).is_err());
        assert!(load_localhost_profile("relative.json").is_err());
        assert!(load_localhost_profile(dir.path().to_str().unwrap()).is_err());
    }
}
