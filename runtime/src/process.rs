//! A process the helpers start in a container, as runc's init makes it, in runc's order; in
//! a helper's own process (single-threaded, so that joining a user or mount namespace and
//! forking are allowed and safe).
//!
//! Before anything changes ([`prepare`]): the arguments, capability sets and rlimits read
//! from the spec's process; what the native paths refuse in a process is [`unsupported`].
//! For an exec, once, when its resident helper starts ([`join_container`]): the container's
//! cgroups joined (the paths of its init in `/proc/PID/cgroup`, every hierarchy); its
//! oom_score_adj set,
//! then every namespace of the init that differs from ours joined at once through the init's
//! pidfd. For each process ([`start`]): a clone with `CLONE_PARENT`, so that the child, in
//! the container's PID namespace, is the shim's (as after `runc exec --detach`), and the
//! child becomes the process.
//!
//! In the child (`become_process`): its root made and pivoted into (a container created
//! natively) or chrooted into (a pause, after the steps that need the host's /proc), the
//! AppArmor profile its execve is to enter, a session of its own, rlimits (the open files'
//! soft limit first raised to the hard one, as Go raises runc's), no_new_privs, seccomp
//! (here when no_new_privs is off: loading it then needs CAP_SYS_ADMIN), the bounding set,
//! supplementary groups, gid, uid (keeping the permitted set), HOME from the container's
//! /etc/passwd when the environment has none, the working directory, the capability sets,
//! the wait for its start (a container created natively), seccomp (here when no_new_privs is
//! on: as late as possible), then execve. A failure on the way is written to a close-on-exec
//! pipe; an empty pipe at EOF means execve succeeded (or, for a created container, that it
//! waits for its start).

use crate::caps::{self, Sets};
use crate::cgroups;
use crate::host::Lsm;
use crate::namespaces;
use crate::rootfs::Plan;
use crate::seccomp;
use crate::spec::Process;
use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

fn os(what: impl std::fmt::Display) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn pidfd_open(pid: i32) -> Result<OwnedFd, String> {
    crate::pidfd::Pidfd::open(pid as u32)
        .map(crate::pidfd::Pidfd::into_owned)
        .map_err(|e| format!("pidfd_open({pid}): {e}"))
}

fn pipe() -> Result<(std::fs::File, std::fs::File), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned by the Files from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(os("pipe"));
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

/// Everything the child needs, made before the fork.
pub(crate) struct Prepared {
    argv: Vec<CString>,
    env: Vec<String>,
    cwd: String,
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    sets: Sets,
    last_cap: u32,
    no_new_privs: bool,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    bpf: Option<(Vec<u8>, libc::c_uint)>,
    /// A root to chroot into before anything else (a pause started natively); an exec's
    /// process has its container's root already.
    root: Option<CString>,
    /// A root to make and pivot into before anything else (a container created natively).
    rootfs: Option<Plan>,
    /// A container created natively waits, ready to exec, until a byte comes on this
    /// descriptor (its start); end of file (its shim gone) ends it instead.
    start_fd: Option<RawFd>,
    /// The failure pipe of [`start`]: closed by a process that waits for its start,
    /// which tells the helper it is ready.
    ready_fd: Option<RawFd>,
    /// A terminal's exec: the pty is made in the child and its master sent here.
    console: Option<RawFd>,
    /// The AppArmor profile the process's execve enters (where the host enforces AppArmor).
    apparmor: Option<CString>,
}

impl Prepared {
    /// The process becomes rooted at `root` (chroot, as root, before the working directory).
    pub(crate) fn with_root(mut self, root: &Path) -> Result<Prepared, String> {
        use std::os::unix::ffi::OsStrExt;
        let root = CString::new(root.as_os_str().as_bytes())
            .map_err(|_| format!("root {} holds a NUL", root.display()))?;
        self.root = Some(root);
        Ok(self)
    }

    /// The process gets a terminal, made in its container (whose mount namespace the
    /// helper has joined), its master sent over the connected socket `console` as runc sends
    /// it to a console socket.
    pub(crate) fn with_console(mut self, console: RawFd) -> Prepared {
        self.console = Some(console);
        self
    }

    /// The process makes its root by `plan` and waits on `start_fd` before it execs (a
    /// container created natively).
    pub(crate) fn created(mut self, plan: Plan, start_fd: RawFd) -> Prepared {
        self.rootfs = Some(plan);
        self.start_fd = Some(start_fd);
        self
    }
}

/// What the native paths refuse in any process they start (a pause, a container's init, an
/// exec): the runtime CLI is left to do it. An exec's terminal is done here (the helper's
/// child makes the pty in the container and sends its master to the console socket).
pub fn unsupported(process: &Process, lsm: &Lsm) -> Option<&'static str> {
    if process.args.is_empty() {
        return Some("no arguments");
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

/// What a native pause or create refuses in its container's own process: a terminal (the
/// console of a container's init is the runtime's), and what [`unsupported`] refuses.
pub fn unsupported_init(process: &Process, lsm: &Lsm) -> Option<&'static str> {
    if process.terminal {
        return Some("a terminal (the runtime allocates the pty inside the container)");
    }
    unsupported(process, lsm)
}

fn rlimit_resource(name: &str) -> Result<libc::__rlimit_resource_t, String> {
    Ok(match name {
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        other => return Err(format!("rlimit {other:?} is not known")),
    })
}

/// What the child needs of `process`; `lsm`: the security modules the host enforces (a
/// profile it does not enforce is not applied, as runc does not apply it).
pub(crate) fn prepare(
    process: &Process,
    bpf: Option<(Vec<u8>, libc::c_uint)>,
    lsm: &Lsm,
) -> Result<Prepared, String> {
    let argv = process
        .args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| format!("argument {a:?} holds a NUL")))
        .collect::<Result<Vec<_>, _>>()?;
    let last_cap = caps::last_cap();
    let c = process
        .capabilities
        .as_ref()
        .ok_or("the process has no capabilities")?;
    let sets = Sets {
        bounding: caps::mask(&c.bounding, last_cap),
        effective: caps::mask(&c.effective, last_cap),
        permitted: caps::mask(&c.permitted, last_cap),
        inheritable: caps::mask(&c.inheritable, last_cap),
        ambient: caps::mask(&c.ambient, last_cap),
    };
    let rlimits = process
        .rlimits
        .iter()
        .map(|r| {
            Ok((
                rlimit_resource(&r.kind)?,
                libc::rlimit {
                    rlim_cur: r.soft,
                    rlim_max: r.hard,
                },
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let apparmor = (lsm.apparmor && !process.apparmor_profile.is_empty())
        .then(|| CString::new(format!("exec {}", process.apparmor_profile)))
        .transpose()
        .map_err(|_| "the AppArmor profile holds a NUL".to_string())?;
    Ok(Prepared {
        argv,
        env: process.env.clone(),
        cwd: if process.cwd.is_empty() {
            "/".into()
        } else {
            process.cwd.clone()
        },
        uid: process.user.uid,
        gid: process.user.gid,
        groups: process.user.additional_gids.clone(),
        sets,
        last_cap,
        no_new_privs: process.no_new_privileges,
        rlimits,
        bpf,
        root: None,
        rootfs: None,
        start_fd: None,
        ready_fd: None,
        console: None,
        apparmor,
    })
}

/// Joins the container of `init_pid`: its cgroups in every hierarchy (v1, hybrid or v2),
/// before its cgroup namespace (from inside it, where cgroup2 is mounted with nsdelegate as
/// systemd mounts it, no move out of a cgroup the namespace cannot see works, nor clone3's
/// `CLONE_INTO_CGROUP`), then (with `oom_score_adj` set while this process may still
/// lower it) every namespace of the init that differs from ours, at once through its pidfd.
/// The PID and time namespaces apply to the children made after this. Returns the init's
/// pidfd.
pub(crate) fn join_container(init_pid: i32, oom_score_adj: Option<i32>) -> Result<OwnedFd, String> {
    let pidfd = pidfd_open(init_pid)?;
    let flags = namespaces::to_join(init_pid)?;
    cgroups::join_those_of(init_pid)?;
    if let Some(adj) = oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
    }
    // The init is still there: a pidfd of a process that has exited refuses setns.
    // SAFETY: setns with a live pidfd and namespace flags.
    if flags != 0 && unsafe { libc::setns(pidfd.as_raw_fd(), flags) } < 0 {
        return Err(os(format_args!("join the namespaces of {init_pid}")));
    }
    Ok(pidfd)
}

/// A fork as the shim's child (`CLONE_PARENT`), with `flags`' new namespaces: 0 in the
/// child, the child's pid in this process.
fn clone_child(flags: libc::c_int) -> Result<libc::c_long, String> {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD | flags) as libc::c_ulong;
    // SAFETY: as above. A raw clone, as fork(2) is one, for CLONE_PARENT.
    let child = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if child < 0 {
        return Err(os("clone"));
    }
    Ok(child)
}

/// Clones the exec's process as a child of this helper's parent (the shim), which becomes
/// `p` on `stdio` and execs it; returns its pid once it has, or why it could not (a process
/// that could not is left to exit, for the shim to reap). `new_namespaces`: clone flags of
/// namespaces the process gets anew (a native pause's PID namespace, of which it is init).
pub(crate) fn start(
    p: &mut Prepared,
    stdio: [RawFd; 3],
    new_namespaces: libc::c_int,
) -> Result<i32, String> {
    let (mut reader, writer) = pipe()?;
    let child = clone_child(new_namespaces)?;
    match child {
        0 => {
            drop(reader);
            p.ready_fd = Some(writer.as_raw_fd());
            let stdio = match p.console.map(make_terminal) {
                None => Ok(stdio),
                Some(Ok(slave)) => Ok([slave; 3]),
                Some(Err(e)) => Err(e),
            };
            let err = match stdio.and_then(take_stdio) {
                Err(e) => e,
                Ok(()) => become_process(p),
            };
            if p.ready_fd.is_none() {
                // Ready was told and the pipe closed: the failure goes to the process's
                // stderr (its log), as a runtime's init tells a failed exec after start.
                std::mem::forget(writer);
                let _ = std::io::stderr().write_all(format!("{err}\n").as_bytes());
                // SAFETY: leave without running the helper's exit handlers in the child.
                unsafe { libc::_exit(127) }
            }
            let mut w = writer;
            let _ = w.write_all(err.as_bytes());
            // SAFETY: leave without running the helper's exit handlers in the child.
            unsafe { libc::_exit(1) }
        }
        child => {
            drop(writer);
            let mut failure = String::new();
            let _ = reader.read_to_string(&mut failure);
            if failure.is_empty() {
                Ok(child as i32)
            } else {
                Err(failure)
            }
        }
    }
}

/// In the child: a pty in the container's devpts (its `/dev/ptmx`), unlocked, its master
/// sent over `console` with its name (as runc's `SendFd`); returns the slave.
fn make_terminal(console: RawFd) -> Result<RawFd, String> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    // SAFETY: open of a C string; the descriptors below are this child's.
    let master = unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if master < 0 {
        return Err(os("exec failed: open /dev/ptmx"));
    }
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK with a pointer to a live int.
    if unsafe { libc::ioctl(master, libc::TIOCSPTLCK, &unlock) } < 0 {
        return Err(os("exec failed: unlock the pty"));
    }
    // SAFETY: TIOCGPTPEER with flags; the slave descriptor is this child's from here on.
    let slave = unsafe { libc::ioctl(master, libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY) };
    if slave < 0 {
        return Err(os("exec failed: open the pty's slave"));
    }
    let name = b"/dev/ptmx";
    let fds = [master];
    sendmsg::<()>(
        console,
        &[std::io::IoSlice::new(name)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| format!("exec failed: send the terminal's master: {e}"))?;
    // SAFETY: the master is the shim's now; the socket is not used again.
    unsafe {
        libc::close(master);
        libc::close(console);
    }
    Ok(slave)
}

/// In the child: `fds` become its stdin, stdout and stderr (they are above 2: the helper's
/// own stdio is open).
fn take_stdio(fds: [RawFd; 3]) -> Result<(), String> {
    for (target, fd) in fds.into_iter().enumerate() {
        // SAFETY: dup2 of descriptors this process holds.
        if unsafe { libc::dup2(fd, target as i32) } < 0 {
            return Err(os(format_args!("exec failed: dup2 stdio {target}")));
        }
    }
    Ok(())
}

/// In the child: becomes the process and execs it. Returns only on failure, with why.
fn become_process(p: &mut Prepared) -> String {
    match setup(p) {
        Ok(never) => match never {},
        Err(e) => format!("exec failed: unable to start container process: {e}"),
    }
}

enum Never {}

fn setup(p: &mut Prepared) -> Result<Never, String> {
    if let Some(plan) = &p.rootfs {
        plan.enter()?;
    }
    // Before the pause's chroot (its root has no /proc); the profile applies from the
    // execve on, wherever it is written (runc writes it before no_new_privs for a create,
    // after the user for an exec: the same from an unconfined helper).
    if let Some(profile) = &p.apparmor {
        apply_apparmor(profile)?;
    }
    reset_signals();
    // SAFETY: setsid has no preconditions.
    if unsafe { libc::setsid() } < 0 {
        return Err(os("setsid"));
    }
    // SAFETY: ioctl on stdin, a terminal's slave when there is a console.
    if p.console.is_some() && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
        return Err(os("set the controlling terminal"));
    }
    raise_open_files();
    for (resource, limit) in &p.rlimits {
        // SAFETY: a valid rlimit.
        if unsafe { libc::setrlimit(*resource, limit) } < 0 {
            return Err(os(format_args!("setrlimit {resource}")));
        }
    }
    // Descriptors other than stdio do not reach the program.
    // SAFETY: close_range with integer arguments.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if p.no_new_privs {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
            return Err(os("set no_new_privs"));
        }
    }
    if let (Some((bpf, flags)), false) = (&p.bpf, p.no_new_privs) {
        seccomp::load(bpf, *flags).map_err(|e| format!("load the seccomp filter: {e}"))?;
    }
    if let Some(root) = &p.root {
        // SAFETY: valid C strings.
        if unsafe { libc::chroot(root.as_ptr()) } < 0 || unsafe { libc::chdir(c"/".as_ptr()) } < 0 {
            return Err(os(format_args!("chroot to {}", root.to_string_lossy())));
        }
    }
    let cwd = CString::new(p.cwd.as_str()).map_err(|_| "cwd holds a NUL".to_string())?;
    // First as root (a directory root may enter and the user not), again after the user.
    // SAFETY: a valid C string.
    let mut in_cwd = unsafe { libc::chdir(cwd.as_ptr()) } == 0;
    caps::apply_bounding(p.sets.bounding, p.last_cap)?;
    caps::keep_caps(true)?;
    set_user(p)?;
    if !in_cwd {
        // SAFETY: as above.
        if unsafe { libc::chdir(cwd.as_ptr()) } < 0 {
            return Err(os(format_args!(
                "chdir to cwd ({:?}) set in config.json failed",
                p.cwd
            )));
        }
        in_cwd = true;
    }
    let _ = in_cwd;
    caps::keep_caps(false)?;
    caps::apply(&p.sets, p.last_cap)?;
    if let Some(start_fd) = p.start_fd {
        wait_for_start(p, start_fd)?;
    }
    if let (Some((bpf, flags)), true) = (&p.bpf, p.no_new_privs) {
        seccomp::load(bpf, *flags).map_err(|e| format!("load the seccomp filter: {e}"))?;
    }
    exec(p)
}

/// The soft limit of open files raised to the hard one, as the process finds it after runc:
/// Go (1.19 on, runc 1.1.5's Debian build) raises it at every start, and runc's init passes
/// its own on; the spec's rlimits, set after, still decide where they name it.
fn raise_open_files() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a live struct, setrlimit with it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// runc's `apparmor.ApplyProfile`: `exec PROFILE` written to this task's own `exec`
/// attribute (AppArmor's own file since Linux 5.8, else the one every module shares), which
/// the next execve enters; a file that is not procfs's (a container that mounted over its
/// /proc) is refused, as runc refuses it.
fn apply_apparmor(profile: &CStr) -> Result<(), String> {
    let own = "/proc/self/attr/apparmor/exec";
    let path = if Path::new(own).exists() {
        own
    } else {
        "/proc/self/attr/exec"
    };
    let failed = |e: std::io::Error| format!("apparmor failed to apply profile: write {path}: {e}");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(failed)?;
    // SAFETY: a plain C struct, for which all zeroes is a valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs of an open descriptor into that struct.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } < 0
        || fs.f_type != libc::PROC_SUPER_MAGIC
    {
        return Err(format!(
            "apparmor failed to apply profile: {path} is not on procfs"
        ));
    }
    file.write_all(profile.to_bytes()).map_err(failed)
}

/// A created container's init: its program found (a missing one is create's error, as with
/// runc), ready told (the failure pipe closed), then a wait for its start's byte.
fn wait_for_start(p: &mut Prepared, start_fd: RawFd) -> Result<(), String> {
    let program = p.argv[0].to_string_lossy().into_owned();
    let path = resolve(&program, &p.env)?;
    // A path given whole must be there too (Go's LookPath, which runc's init runs).
    if program.contains('/') {
        if let Err(e) = std::fs::metadata(path.to_string_lossy().as_ref()) {
            return Err(format!("exec: {program:?}: stat {program}: {e}"));
        }
    }
    if let Some(fd) = p.ready_fd.take() {
        // SAFETY: the pipe's write end, owned by start_process, which no longer writes it.
        unsafe { libc::close(fd) };
    }
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: a read into a live one-byte buffer.
        let n = unsafe { libc::read(start_fd, byte.as_mut_ptr().cast(), 1) };
        match n {
            1 => break,
            0 => return Err("the shim went away before the container was started".into()),
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(os("wait for the start")),
        }
    }
    // SAFETY: the descriptor is not used again.
    unsafe { libc::close(start_fd) };
    Ok(())
}

/// Signal dispositions and mask as the program finds them after `runc exec`: every signal
/// back to its default action and unblocked, but for signal 32 (glibc's own, which neither
/// runc nor glibc lets anyone touch, so an inherited "ignore" stays). What the shim inherited
/// does not leak through: a daemon started under nohup ignores SIGHUP, and a Rust helper
/// starts with SIGPIPE ignored; an ignored signal stays ignored across execve. The raw
/// syscall: glibc refuses to touch its signals 32 and 33.
fn reset_signals() {
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: libc::c_ulong,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for signal in 1..=64 {
        if matches!(signal, libc::SIGKILL | libc::SIGSTOP | 32) {
            continue;
        }
        // SAFETY: rt_sigaction with a valid action and the kernel's sigset size.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            )
        };
    }
    // SAFETY: an empty set, filled by sigemptyset before use.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

fn set_user(p: &mut Prepared) -> Result<(), String> {
    // stdio owned by the user it now serves (runc's fixStdioPermissions), /dev/null aside.
    let null = std::fs::metadata("/dev/null").ok();
    for fd in 0..3 {
        // SAFETY: a plain C struct, for which all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into that struct.
        if unsafe { libc::fstat(fd, &mut st) } < 0 {
            continue;
        }
        use std::os::unix::fs::MetadataExt;
        if null.as_ref().is_some_and(|n| n.rdev() == st.st_rdev)
            && st.st_mode & libc::S_IFMT == libc::S_IFCHR
        {
            continue;
        }
        if st.st_uid == p.uid && st.st_gid == p.gid {
            continue;
        }
        // SAFETY: fchown of an open descriptor.
        if unsafe { libc::fchown(fd, p.uid, p.gid) } < 0 {
            let e = std::io::Error::last_os_error();
            // A read-only or foreign file (EINVAL, EPERM) stays as it is, as in runc.
            if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)) {
                return Err(format!("chown stdio fd {fd}: {e}"));
            }
        }
    }
    let setgroups_allowed = std::fs::read_to_string("/proc/self/setgroups")
        .map(|s| s.trim() != "deny")
        .unwrap_or(true);
    if setgroups_allowed {
        // SAFETY: a live array of `len` gids.
        if unsafe { libc::setgroups(p.groups.len(), p.groups.as_ptr()) } < 0 {
            return Err(os("setgroups"));
        }
    }
    // The raw calls: this thread is the process.
    // SAFETY: setresgid/setresuid with integer arguments.
    if unsafe { libc::syscall(libc::SYS_setresgid, p.gid, p.gid, p.gid) } < 0 {
        return Err(os(format_args!("setgid {}", p.gid)));
    }
    // SAFETY: as above.
    if unsafe { libc::syscall(libc::SYS_setresuid, p.uid, p.uid, p.uid) } < 0 {
        return Err(os(format_args!("setuid {}", p.uid)));
    }
    if !p.env.iter().any(|e| e.starts_with("HOME=")) {
        let home = home_of(p.uid).unwrap_or_else(|| "/".into());
        p.env.push(format!("HOME={home}"));
    }
    Ok(())
}

/// The home directory of `uid` in the container's /etc/passwd.
fn home_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[5].to_string())
    })
}

/// The program's path: as given when it holds a '/', else the first match on the process's
/// own PATH (as runc looks it up, with the process's environment).
fn resolve(program: &str, env: &[String]) -> Result<CString, String> {
    let not_found = || format!("exec: {program:?}: executable file not found in $PATH");
    if program.contains('/') {
        return CString::new(program).map_err(|_| not_found());
    }
    let path = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("");
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = Path::new(dir).join(program);
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(&candidate) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return CString::new(candidate.to_string_lossy().as_bytes())
                    .map_err(|_| not_found());
            }
        }
    }
    Err(not_found())
}

fn exec(p: &Prepared) -> Result<Never, String> {
    let program = p.argv[0].to_string_lossy().into_owned();
    let path = resolve(&program, &p.env)?;
    let env = p
        .env
        .iter()
        .map(|e| {
            CString::new(e.as_str()).map_err(|_| format!("environment entry {e:?} holds a NUL"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: NUL-terminated arrays of live C strings.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Err(os(format_args!("exec {}", path.to_string_lossy())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_the_processs_own_path() {
        let env = vec!["PATH=/nonexistent:/usr/bin:/bin".to_string()];
        assert_eq!(resolve("/x/y", &env).unwrap().to_str().unwrap(), "/x/y");
        let sh = resolve("sh", &env).unwrap();
        assert!(sh.to_str().unwrap().ends_with("/sh"), "{sh:?}");
        let e = resolve("no-such-program-here", &env).unwrap_err();
        assert!(e.contains("executable file not found in $PATH"), "{e}");
        assert!(
            resolve("sh", &[]).is_err(),
            "no PATH: only names with a slash"
        );
    }
}
