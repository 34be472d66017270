//! The container's seccomp profile compiled to a BPF program, as runc compiles it: with
//! libseccomp (linked in statically; the library runc itself links), the same rules in
//! the same order (runc's `InitSeccomp` and `matchCall`): rules with the default action
//! skipped, unknown syscall names skipped, a rule whose conditions name one argument twice
//! split into one rule per condition, the no_new_privs bit left to the caller, binary-tree
//! optimisation for long profiles. The program is loaded with `seccomp(2)` by the caller, at
//! the point runc loads it.
//!
//! One difference: runc patches the program so that syscalls newer than the profile's
//! newest answer ENOSYS; here they meet the default action.

use crate::spec::{Seccomp, SyscallArg};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};

/// The profile, if any, compiled (with libseccomp: before any mount namespace is joined)
/// and its load flags: what [`load`] takes at the point runc loads it.
pub fn program(profile: Option<&Seccomp>) -> Result<Option<(Vec<u8>, c_uint)>, String> {
    match profile {
        Some(profile) => Ok(Some((compile(profile)?, load_flags(profile)?))),
        None => Ok(None),
    }
}

/// The seccomp(2) flags a profile's `flags` ask for (TSYNC needs nothing here: the process is
/// single-threaded when it loads the filter).
pub fn load_flags(profile: &Seccomp) -> Result<c_uint, String> {
    let mut flags = 0;
    for f in &profile.flags {
        flags |= match f.as_str() {
            "SECCOMP_FILTER_FLAG_TSYNC" => 0,
            "SECCOMP_FILTER_FLAG_LOG" => libc::SECCOMP_FILTER_FLAG_LOG as c_uint,
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW as c_uint,
            other => return Err(format!("seccomp flag {other:?} is not known")),
        };
    }
    Ok(flags)
}

/// libseccomp's action values.
fn action(name: &str, errno: Option<u32>) -> Result<u32, String> {
    let ret = |e: Option<u32>| e.unwrap_or(libc::EPERM as u32) & 0xffff;
    Ok(match name {
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => 0x0000_0000,
        "SCMP_ACT_KILL_PROCESS" => 0x8000_0000,
        "SCMP_ACT_TRAP" => 0x0003_0000,
        "SCMP_ACT_ERRNO" => 0x0005_0000 | ret(errno),
        "SCMP_ACT_TRACE" => 0x7ff0_0000 | ret(errno),
        "SCMP_ACT_LOG" => 0x7ffc_0000,
        "SCMP_ACT_ALLOW" => 0x7fff_0000,
        other => return Err(format!("seccomp action {other:?} is not known")),
    })
}

fn arch(name: &str) -> Result<u32, String> {
    // AUDIT_ARCH_* values, which are libseccomp's architecture tokens.
    const LE: u32 = 0x4000_0000;
    const B64: u32 = 0x8000_0000;
    Ok(match name {
        "SCMP_ARCH_X86" => 3 | LE,
        "SCMP_ARCH_X86_64" => 62 | B64 | LE,
        "SCMP_ARCH_X32" => 62 | LE,
        "SCMP_ARCH_AARCH64" => 183 | B64 | LE,
        "SCMP_ARCH_ARM" => 40 | LE,
        other => {
            return Err(format!(
                "seccomp architecture {other:?} is not supported here"
            ))
        }
    })
}

fn compare(op: &str) -> Result<c_int, String> {
    Ok(match op {
        "SCMP_CMP_NE" => 1,
        "SCMP_CMP_LT" => 2,
        "SCMP_CMP_LE" => 3,
        "SCMP_CMP_EQ" => 4,
        "SCMP_CMP_GE" => 5,
        "SCMP_CMP_GT" => 6,
        "SCMP_CMP_MASKED_EQ" => 7,
        other => return Err(format!("seccomp operator {other:?} is not known")),
    })
}

/// `struct scmp_arg_cmp`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ArgCmp {
    arg: c_uint,
    op: c_int,
    datum_a: u64,
    datum_b: u64,
}

type Ctx = *mut c_void;

// libseccomp, linked in statically (libseccomp.a, from libseccomp-dev at build time): loaded
// with dlopen it cost every shim its pages of data and relocations (about 20 kB of private
// memory a pod) and the loader's work, and a host without libseccomp.so.2 sent seccomp
// profiles to runc. Its code and syscall tables sit in the program's file pages, touched
// only by the helpers that compile a profile.
// Not bundled into this crate's rlib (`-bundle`): the program that links the crate (the
// shim, this crate's tests) takes the archive from the system's library path.
#[link(name = "seccomp", kind = "static", modifiers = "-bundle")]
extern "C" {
    fn seccomp_init(def_action: u32) -> Ctx;
    fn seccomp_release(ctx: Ctx);
    fn seccomp_arch_add(ctx: Ctx, arch_token: u32) -> c_int;
    fn seccomp_attr_set(ctx: Ctx, attr: c_int, value: u32) -> c_int;
    fn seccomp_syscall_resolve_name(name: *const c_char) -> c_int;
    fn seccomp_rule_add_array(
        ctx: Ctx,
        action: u32,
        syscall: c_int,
        arg_cnt: c_uint,
        arg_array: *const ArgCmp,
    ) -> c_int;
    fn seccomp_export_bpf(ctx: Ctx, fd: c_int) -> c_int;
}

const ATTR_CTL_NNP: c_int = 3;
const ATTR_CTL_OPTIMIZE: c_int = 8;
/// libseccomp's "architecture already present".
const EEXIST: c_int = -libc::EEXIST;

/// The profile as a BPF program (`struct sock_filter` array, 8 bytes an instruction).
pub fn compile(profile: &Seccomp) -> Result<Vec<u8>, String> {
    let default = action(&profile.default_action, profile.default_errno_ret)?;
    // SAFETY: seccomp_init returns a context or null; it is released on every path below.
    let ctx = unsafe { seccomp_init(default) };
    if ctx.is_null() {
        return Err("seccomp_init failed".into());
    }
    struct Release(Ctx);
    impl Drop for Release {
        fn drop(&mut self) {
            // SAFETY: the context came from seccomp_init and is released once.
            unsafe { seccomp_release(self.0) }
        }
    }
    let _release = Release(ctx);
    let check = |what: &str, rc: c_int| {
        if rc < 0 && rc != EEXIST {
            Err(format!(
                "seccomp: {what}: {}",
                std::io::Error::from_raw_os_error(-rc)
            ))
        } else {
            Ok(())
        }
    };
    for a in &profile.architectures {
        // SAFETY: a live context and a plain integer.
        check(a, unsafe { seccomp_arch_add(ctx, arch(a)?) })?;
    }
    if profile.syscalls.len() > 32 {
        // SAFETY: as above.
        check("optimize", unsafe {
            seccomp_attr_set(ctx, ATTR_CTL_OPTIMIZE, 2)
        })?;
    }
    // SAFETY: as above.
    check("no_new_privs attribute", unsafe {
        seccomp_attr_set(ctx, ATTR_CTL_NNP, 0)
    })?;
    for call in &profile.syscalls {
        let act = action(&call.action, call.errno_ret)?;
        if act == default {
            continue;
        }
        let conditions = call
            .args
            .iter()
            .map(condition)
            .collect::<Result<Vec<_>, _>>()?;
        // Several conditions on one argument cannot be one libseccomp rule: each becomes a
        // rule of its own (runc's "old behaviour").
        let mut seen = [0u8; 6];
        for c in &call.args {
            if let Some(n) = seen.get_mut(c.index as usize) {
                *n += 1;
            }
        }
        let rules: Vec<Vec<ArgCmp>> = if seen.iter().any(|&n| n > 1) {
            conditions.iter().map(|c| vec![*c]).collect()
        } else {
            vec![conditions]
        };
        for name in &call.names {
            let cname = CString::new(name.as_str()).map_err(|e| e.to_string())?;
            // SAFETY: a valid C string.
            let nr = unsafe { seccomp_syscall_resolve_name(cname.as_ptr()) };
            if nr < 0 {
                // Unknown to this libseccomp (and so to this kernel's table): skipped, as
                // runc skips it.
                continue;
            }
            for rule in &rules {
                // SAFETY: `rule` is a live array of `rule.len()` scmp_arg_cmp.
                let rc = unsafe {
                    seccomp_rule_add_array(ctx, act, nr, rule.len() as c_uint, rule.as_ptr())
                };
                check(&format!("rule for {name}"), rc)?;
            }
        }
    }
    let mut out = memfd()?;
    use std::io::{Read, Seek};
    use std::os::fd::AsRawFd;
    // SAFETY: a live context and an open descriptor.
    check("export", unsafe {
        seccomp_export_bpf(ctx, out.as_raw_fd())
    })?;
    let mut bpf = Vec::new();
    out.rewind()
        .and_then(|_| out.read_to_end(&mut bpf))
        .map_err(|e| format!("seccomp: read the program: {e}"))?;
    if bpf.is_empty() || bpf.len() % 8 != 0 {
        return Err(format!("seccomp: a program of {} bytes", bpf.len()));
    }
    Ok(bpf)
}

fn condition(a: &SyscallArg) -> Result<ArgCmp, String> {
    if a.index > 5 {
        return Err(format!(
            "seccomp: argument index {} is out of range",
            a.index
        ));
    }
    Ok(ArgCmp {
        arg: a.index,
        op: compare(&a.op)?,
        datum_a: a.value,
        datum_b: a.value_two,
    })
}

fn memfd() -> Result<std::fs::File, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: a valid C string; the descriptor is owned by the File from here on.
    let fd = unsafe { libc::memfd_create(c"seccomp-bpf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Loads `bpf` into this process (single-threaded: no TSYNC needed).
pub fn load(bpf: &[u8], flags: c_uint) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: (bpf.len() / 8) as u16,
        filter: bpf.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at a live program of `len` instructions for the call's length.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(json: &str) -> Seccomp {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn actions_and_flags_are_libseccomps() {
        assert_eq!(action("SCMP_ACT_ALLOW", None).unwrap(), 0x7fff_0000);
        assert_eq!(action("SCMP_ACT_ERRNO", None).unwrap(), 0x0005_0001);
        assert_eq!(action("SCMP_ACT_ERRNO", Some(38)).unwrap(), 0x0005_0026);
        assert!(action("SCMP_ACT_NOPE", None).is_err());
        let p =
            profile(r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG"]}"#);
        assert_eq!(
            load_flags(&p).unwrap(),
            libc::SECCOMP_FILTER_FLAG_LOG as c_uint
        );
    }

    #[test]
    fn a_profile_compiles_with_libseccomp() {
        let p = profile(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86"],
               "syscalls":[{"names":["read","write","no_such_call"],"action":"SCMP_ACT_ALLOW"},
                           {"names":["personality"],"action":"SCMP_ACT_ALLOW",
                            "args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"},
                                    {"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                           {"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38},
                           {"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        let bpf = compile(&p).unwrap();
        assert!(bpf.len() >= 8 * 8, "{} bytes", bpf.len());
        let bad = profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_ERRNO","args":[{"index":7,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
        );
        assert!(compile(&bad).unwrap_err().contains("index 7"));
    }
}
