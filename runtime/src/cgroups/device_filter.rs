//! A container's device rules on cgroup v2, where there is no devices controller: a
//! `BPF_PROG_TYPE_CGROUP_DEVICE` program made from the rules as runc's devices emulator
//! leaves them ([`super::devices`]), loaded and attached to the container's cgroup with the
//! raw `bpf(2)` calls, as runc 1.1 does (`libcontainer/cgroups/ebpf`): the program
//! that was there already (systemd's, on a scope) is replaced, any others detached, so
//! that the container's rules are the only ones that apply.
//!
//! The program: the kernel calls it with `struct bpf_cgroup_dev_ctx { u32 access_type; u32
//! major; u32 minor; }` (the device type in the low 16 bits of `access_type`, the access in
//! the high 16) and lets the access through when it returns 1. One block per exception,
//! each jumping to the next when the device or access does not match and returning the
//! exception's verdict when all do; after the last, the default verdict.

use super::devices::{DeviceRule, Emulated};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One BPF instruction, as the kernel reads it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    /// dst in the low 4 bits, src in the high 4.
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcodes (linux/bpf_common.h, linux/bpf.h).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU32_AND_K: u8 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const ALU32_RSH_K: u8 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
const ALU32_MOV_K: u8 = 0xb4; // BPF_ALU | BPF_MOV | BPF_K
const ALU32_MOV_X: u8 = 0xbc; // BPF_ALU | BPF_MOV | BPF_X
const JMP_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JMP_JNE_X: u8 = 0x5d; // BPF_JMP | BPF_JNE | BPF_X
const JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

// What `access_type` holds (linux/bpf.h).
const DEVCG_DEV_BLOCK: i32 = 1;
const DEVCG_DEV_CHAR: i32 = 2;
const DEVCG_ACC_MKNOD: i32 = 1;
const DEVCG_ACC_READ: i32 = 2;
const DEVCG_ACC_WRITE: i32 = 4;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// A jump whose target is the end of the block being built, fixed once its length is known.
const TO_BLOCK_END: i16 = i16::MIN;

/// The program for `rules`: r2 the device type, r3 the access, r4 the major, r5 the minor,
/// then a block per exception and the default.
pub fn program(rules: &Emulated) -> Result<Vec<Insn>, String> {
    let mut p = vec![
        insn(LDX_MEM_W, 2, 1, 0, 0),
        insn(ALU32_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_MEM_W, 3, 1, 0, 0),
        insn(ALU32_RSH_K, 3, 0, 0, 16),
        insn(LDX_MEM_W, 4, 1, 4, 0),
        insn(LDX_MEM_W, 5, 1, 8, 0),
    ];
    for rule in &rules.exceptions {
        p.extend(block(rule, !rules.default_allow)?);
    }
    p.push(insn(ALU32_MOV_K, 0, 0, 0, i32::from(rules.default_allow)));
    p.push(insn(JMP_EXIT, 0, 0, 0, 0));
    Ok(p)
}

/// The instructions that give `verdict` to an access `rule` matches.
fn block(rule: &DeviceRule, verdict: bool) -> Result<Vec<Insn>, String> {
    let kind = match rule.kind {
        'c' => DEVCG_DEV_CHAR,
        'b' => DEVCG_DEV_BLOCK,
        other => {
            return Err(format!(
                "a device rule of type {other:?} in a device filter"
            ))
        }
    };
    let access = rule.access.chars().fold(0, |acc, c| {
        acc | match c {
            'r' => DEVCG_ACC_READ,
            'w' => DEVCG_ACC_WRITE,
            _ => DEVCG_ACC_MKNOD,
        }
    });
    let number = |n: Option<i64>, what: &str| -> Result<Option<i32>, String> {
        n.map(|v| {
            u32::try_from(v)
                .map(|v| v as i32)
                .map_err(|_| format!("device {what} {v} in a device filter"))
        })
        .transpose()
    };
    let (major, minor) = (number(rule.major, "major")?, number(rule.minor, "minor")?);
    let mut b = vec![insn(JMP_JNE_K, 2, 0, TO_BLOCK_END, kind)];
    if access != DEVCG_ACC_READ | DEVCG_ACC_WRITE | DEVCG_ACC_MKNOD {
        // The access asked for must be within the rule's: (r3 & access) == r3.
        b.push(insn(ALU32_MOV_X, 1, 3, 0, 0));
        b.push(insn(ALU32_AND_K, 1, 0, 0, access));
        b.push(insn(JMP_JNE_X, 1, 3, TO_BLOCK_END, 0));
    }
    if let Some(major) = major {
        b.push(insn(JMP_JNE_K, 4, 0, TO_BLOCK_END, major));
    }
    if let Some(minor) = minor {
        b.push(insn(JMP_JNE_K, 5, 0, TO_BLOCK_END, minor));
    }
    b.push(insn(ALU32_MOV_K, 0, 0, 0, i32::from(verdict)));
    b.push(insn(JMP_EXIT, 0, 0, 0, 0));
    let len = b.len();
    for (i, ins) in b.iter_mut().enumerate() {
        if ins.off == TO_BLOCK_END {
            // Relative to the next instruction.
            ins.off = (len - i - 1) as i16;
        }
    }
    Ok(b)
}

// bpf(2) commands and constants (linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
const BPF_F_REPLACE: u32 = 4;

/// `union bpf_attr` for BPF_PROG_LOAD, as far as it is used.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// For BPF_PROG_ATTACH and BPF_PROG_DETACH.
#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// For BPF_PROG_QUERY.
#[repr(C)]
#[derive(Default)]
struct ProgQuery {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
}

/// For BPF_PROG_GET_FD_BY_ID.
#[repr(C)]
#[derive(Default)]
struct GetFdById {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised bpf_attr prefix of the size passed; the kernel
    // zero-extends what it does not get and reads or writes nothing beyond it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Loads `insns` as a cgroup device program.
fn load(insns: &[Insn]) -> std::io::Result<OwnedFd> {
    let license = c"Apache";
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    let fd = match bpf(BPF_PROG_LOAD, &mut attr) {
        // Kernels before 5.11 charge BPF programs to RLIMIT_MEMLOCK: raised for the load (as
        // runc does), then put back, so that the processes this helper starts do not
        // inherit it.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            with_memlock_unlimited(|| bpf(BPF_PROG_LOAD, &mut attr))?
        }
        other => other?,
    };
    // SAFETY: BPF_PROG_LOAD returned a new descriptor, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn with_memlock_unlimited<T>(f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old) } < 0 {
        return f();
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit with a valid struct.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
    let out = f();
    // SAFETY: as above; the limit it had.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &old) };
    out
}

/// The device programs attached to the cgroup `dir`.
fn attached(dir: RawFd) -> std::io::Result<Vec<OwnedFd>> {
    // A cgroup holds at most 64 programs of one attach type.
    let mut ids = [0u32; 64];
    let mut attr = ProgQuery {
        target_fd: dir as u32,
        attach_type: BPF_CGROUP_DEVICE,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..Default::default()
    };
    bpf(BPF_PROG_QUERY, &mut attr)?;
    let mut out = Vec::new();
    for &prog_id in &ids[..(attr.prog_cnt as usize).min(ids.len())] {
        let mut by_id = GetFdById {
            prog_id,
            ..Default::default()
        };
        match bpf(BPF_PROG_GET_FD_BY_ID, &mut by_id) {
            // SAFETY: a new descriptor, owned from here on.
            Ok(fd) => out.push(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            // A program a security module hides from us only narrows access further.
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            // Detached meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Makes `rules` the device rules of the cgroup whose directory `dir` is open: the program
/// loaded and attached in the place of the one there (or beside several, which are then
/// detached).
pub fn install(dir: &std::fs::File, rules: &Emulated) -> Result<(), String> {
    let insns = program(rules)?;
    let prog = load(&insns).map_err(|e| format!("load the device filter: {e}"))?;
    let dirfd = dir.as_raw_fd();
    let old = attached(dirfd).map_err(|e| format!("list the cgroup's device filters: {e}"))?;
    let mut attr = ProgAttach {
        target_fd: dirfd as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    if let [one] = old.as_slice() {
        attr.attach_flags |= BPF_F_REPLACE;
        attr.replace_bpf_fd = one.as_raw_fd() as u32;
        match bpf(BPF_PROG_ATTACH, &mut attr) {
            Ok(_) => return Ok(()),
            // A kernel without BPF_F_REPLACE (before 5.6): attach, then detach the old one.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                attr.attach_flags = BPF_F_ALLOW_MULTI;
                attr.replace_bpf_fd = 0;
            }
            Err(e) => return Err(format!("attach the device filter: {e}")),
        }
    }
    bpf(BPF_PROG_ATTACH, &mut attr).map_err(|e| format!("attach the device filter: {e}"))?;
    for prog in old {
        let mut detach = ProgAttach {
            target_fd: dirfd as u32,
            attach_bpf_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            ..Default::default()
        };
        bpf(BPF_PROG_DETACH, &mut detach)
            .map_err(|e| format!("detach an old device filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::devices::emulate;

    /// Runs `p` on a device access as the kernel would: true if it lets it through.
    fn run(p: &[Insn], kind: i32, access: i32, major: u32, minor: u32) -> bool {
        let ctx = [(access << 16 | kind) as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0x0f) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_MEM_W => r[dst] = u64::from(ctx[i.off as usize / 4]),
                ALU32_AND_K => r[dst] = (r[dst] as u32 & i.imm as u32) as u64,
                ALU32_RSH_K => r[dst] = ((r[dst] as u32) >> i.imm) as u64,
                ALU32_MOV_K => r[dst] = i.imm as u32 as u64,
                ALU32_MOV_X => r[dst] = r[src] as u32 as u64,
                JMP_JNE_K if r[dst] != i.imm as i64 as u64 => pc += i.off as usize,
                JMP_JNE_X if r[dst] != r[src] => pc += i.off as usize,
                JMP_JNE_K | JMP_JNE_X => {}
                JMP_EXIT => return r[0] == 1,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    fn rules(json: serde_json::Value) -> Emulated {
        let r: crate::spec::Resources = serde_json::from_value(json).unwrap();
        emulate(&r.devices)
    }

    const R: i32 = DEVCG_ACC_READ;
    const W: i32 = DEVCG_ACC_WRITE;
    const M: i32 = DEVCG_ACC_MKNOD;
    const C: i32 = DEVCG_DEV_CHAR;
    const B: i32 = DEVCG_DEV_BLOCK;

    #[test]
    fn an_allow_list_lets_through_runcs_defaults_and_the_specs_own() {
        let p = program(&rules(serde_json::json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
        ]})))
        .unwrap();
        assert!(run(&p, C, R | W, 1, 3), "/dev/null");
        assert!(run(&p, C, R, 136, 7), "a pty slave");
        assert!(run(&p, C, M, 8, 1), "mknod of any character device");
        assert!(run(&p, B, M, 8, 1), "mknod of any block device");
        assert!(run(&p, C, R | W, 10, 229), "the spec's fuse");
        assert!(run(&p, C, M, 99, 1), "mknod of any device: c *:* m");
        assert!(!run(&p, C, R, 10, 230), "another misc device");
        assert!(!run(&p, B, R | W, 8, 0), "a disk");
        assert!(!run(&p, C, R | W, 4, 1), "a tty");
    }

    #[test]
    fn a_deny_list_and_allow_all() {
        let all = program(&rules(serde_json::json!({"devices": [
            {"allow": true, "access": "rwm"}]})))
        .unwrap();
        assert!(run(&all, B, R | W | M, 8, 0));
        assert_eq!(all.len(), 8, "no blocks: {all:?}");
        let deny = program(&rules(serde_json::json!({"devices": [
            {"allow": true, "access": "rwm"},
            {"allow": false, "type": "b", "major": 8, "access": "w"}]})))
        .unwrap();
        assert!(run(&deny, B, R, 8, 0));
        assert!(!run(&deny, B, W, 8, 0));
        // As runc's program: a rule matches an access within its own, so a read-write
        // open is not one of the writes denied (the kernel asks once for both).
        assert!(run(&deny, B, R | W, 8, 3));
        assert!(run(&deny, B, W, 9, 0));
        assert!(run(&deny, C, W, 8, 0));
    }

    #[test]
    fn rules_the_kernel_cannot_take_are_refused() {
        let e = Emulated {
            default_allow: false,
            exceptions: vec![DeviceRule {
                kind: 'c',
                major: Some(1 << 40),
                minor: None,
                access: "r".into(),
            }],
        };
        assert!(program(&e).unwrap_err().contains("major"));
    }
}
