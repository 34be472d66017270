//! systemd as the cgroup driver's manager: whether it runs as PID 1, the cgroup path of a
//! slice or scope unit, and the unit calls a runtime makes over systemd's private D-Bus socket
//! ([`crate::dbus`]): a transient slice or scope started (and waited for), a unit's properties
//! set, a unit stopped.
//!
//! The kubelet's systemd driver and runc's name units alike: a slice's name says where it is
//! (`kubepods-burstable-pod1.slice` lives in `kubepods.slice/kubepods-burstable.slice/`), a
//! container is the scope `<prefix>-<id>.scope` in its pod's slice.

use crate::dbus::{CallError, Connection, Value};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// systemd's own socket for root (`systemctl` uses it): no bus daemon between us.
pub const PRIVATE_SOCKET: &str = "/run/systemd/private";
const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// Whether systemd is the init system here (what `sd_booted` checks).
pub fn booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// The slice of a cgroupfs-style path, as the kubelet's systemd driver names them: each
/// component's own dashes become underscores (a dash is systemd's nesting, so a pod UID's
/// dashes would otherwise make a slice per part), then the components are joined by dashes:
/// `/kubepods/burstable/pod1-2` is `kubepods-burstable-pod1_2.slice`. A path that already
/// ends in a slice is that slice; the root is `system.slice` (runc's default parent).
pub fn slice_name(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return "system.slice".into();
    }
    let last = trimmed.rsplit('/').next().unwrap_or(trimmed);
    if last.ends_with(".slice") {
        return last.to_string();
    }
    let parts: Vec<String> = trimmed
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.replace('-', "_"))
        .collect();
    format!("{}.slice", parts.join("-"))
}

/// The cgroup path (from the cgroup root, with a leading `/`) of slice `name`:
/// `a-b-c.slice` is `/a.slice/a-b.slice/a-b-c.slice`; `-.slice` (the root) is `/`.
pub fn slice_path(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".slice")?;
    if stem == "-" {
        return Some("/".into());
    }
    if stem.is_empty() || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return None;
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
    }
    Some(path)
}

/// A runtime spec's systemd `cgroupsPath`, `slice:prefix:name`, as its unit name and its
/// cgroup path: `("kubepods-pod1.slice", "peapod", "abc")` is the scope `peapod-abc.scope` at
/// `/kubepods.slice/kubepods-pod1.slice/peapod-abc.scope`. An empty slice is `system.slice`
/// (runc's default). `None`: not of that form.
pub fn scope_of(cgroups_path: &str) -> Option<(String, String)> {
    let mut parts = cgroups_path.split(':');
    let (Some(slice), Some(prefix), Some(name), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if name.is_empty() || name.contains('/') || prefix.contains('/') {
        return None;
    }
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let unit = if name.ends_with(".slice") {
        // runc's form for a slice of its own: the container is that slice.
        name.to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    let path = format!("{}/{unit}", slice_path(slice)?.trim_end_matches('/'));
    Some((unit, path))
}

/// Why a unit call failed.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("systemd: {unit}: {source}")]
    Call {
        unit: String,
        #[source]
        source: CallError,
    },
    #[error("systemd: {unit}: job {result}")]
    Job { unit: String, result: String },
    #[error("systemd: {0}")]
    Connect(io::Error),
}

impl UnitError {
    /// The D-Bus error name systemd answered with, if it answered with one.
    pub fn remote_name(&self) -> Option<&str> {
        match self {
            UnitError::Call {
                source: CallError::Remote { name, .. },
                ..
            } => Some(name),
            _ => None,
        }
    }
}

/// A connection to systemd's manager, subscribed to its job signals.
pub struct Systemd {
    conn: Connection,
    timeout: Duration,
}

impl Systemd {
    /// Connects to [`PRIVATE_SOCKET`]; each call then waits at most `timeout`.
    pub fn connect(timeout: Duration) -> Result<Systemd, UnitError> {
        let conn =
            Connection::connect(Path::new(PRIVATE_SOCKET), timeout).map_err(UnitError::Connect)?;
        let mut s = Systemd { conn, timeout };
        // Job results come as JobRemoved signals, sent to subscribers only.
        s.manager("Subscribe", "", &[])?;
        Ok(s)
    }

    fn manager(
        &mut self,
        member: &str,
        unit: &str,
        args: &[Value],
    ) -> Result<Vec<Value>, UnitError> {
        let deadline = Instant::now() + self.timeout;
        self.conn
            .call(DESTINATION, MANAGER_PATH, MANAGER, member, args, deadline)
            .map_err(|source| UnitError::Call {
                unit: unit.to_string(),
                source,
            })
    }

    /// Waits for the end of job `job` (an object path) of `unit`; its result must be "done".
    fn wait_job(&mut self, unit: &str, job: &str) -> Result<(), UnitError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let m = self
                .conn
                .next_signal(deadline)
                .map_err(|e| UnitError::Call {
                    unit: unit.to_string(),
                    source: CallError::Io(e),
                })?;
            if m.member.as_deref() != Some("JobRemoved") {
                continue;
            }
            // JobRemoved(u id, o job, s unit, s result)
            if m.body.get(1).and_then(Value::as_str) != Some(job) {
                continue;
            }
            let result = m.body.get(3).and_then(Value::as_str).unwrap_or_default();
            if result == "done" {
                return Ok(());
            }
            return Err(UnitError::Job {
                unit: unit.to_string(),
                result: result.to_string(),
            });
        }
    }

    /// Starts transient unit `name` (a slice or a scope) with `properties` (`a(sv)` entries,
    /// [`Value::property`]) and waits until systemd has started it: for a scope, its processes
    /// (`PIDs`) are then in its cgroup.
    pub fn start_transient_unit(
        &mut self,
        name: &str,
        properties: Vec<Value>,
    ) -> Result<(), UnitError> {
        let reply = self.manager(
            "StartTransientUnit",
            name,
            &[
                Value::Str(name.into()),
                Value::Str("fail".into()),
                Value::Array("(sv)".into(), properties),
                Value::Array("(sa(sv))".into(), Vec::new()),
            ],
        )?;
        let job = reply
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.wait_job(name, &job)
    }

    /// Sets properties of a running unit for its lifetime (not persisted in unit files).
    pub fn set_unit_properties(
        &mut self,
        name: &str,
        properties: Vec<Value>,
    ) -> Result<(), UnitError> {
        self.manager(
            "SetUnitProperties",
            name,
            &[
                Value::Str(name.into()),
                Value::Bool(true),
                Value::Array("(sv)".into(), properties),
            ],
        )
        .map(|_| ())
    }

    /// Stops unit `name` and waits for it; a unit systemd does not know is already stopped.
    pub fn stop_unit(&mut self, name: &str) -> Result<(), UnitError> {
        let reply = match self.manager(
            "StopUnit",
            name,
            &[Value::Str(name.into()), Value::Str("replace".into())],
        ) {
            Ok(r) => r,
            Err(e) if e.remote_name() == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        let job = reply
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.wait_job(name, &job)?;
        // A unit that failed stays loaded (and its name taken) until its failure is reset.
        let _ = self.manager("ResetFailedUnit", name, &[Value::Str(name.into())]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_paths_as_slices() {
        for (path, slice) in [
            ("/kubepods/burstable/pod1", "kubepods-burstable-pod1.slice"),
            (
                "/kubepods/pod22a6c8c0-a1ce-4368",
                "kubepods-pod22a6c8c0_a1ce_4368.slice",
            ),
            (
                "kubepods-besteffort-pod2.slice",
                "kubepods-besteffort-pod2.slice",
            ),
            ("/a.slice/b-c.slice", "b-c.slice"),
            ("/", "system.slice"),
            ("", "system.slice"),
            ("/peapod-e2e-1//kubepods/", "peapod_e2e_1-kubepods.slice"),
        ] {
            assert_eq!(slice_name(path), slice, "{path}");
        }
    }

    #[test]
    fn slices_nest_by_their_dashes() {
        assert_eq!(slice_path("-.slice").as_deref(), Some("/"));
        assert_eq!(slice_path("system.slice").as_deref(), Some("/system.slice"));
        assert_eq!(
            slice_path("kubepods-burstable-pod1_2.slice").as_deref(),
            Some("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice")
        );
        for bad in ["kubepods", "-a.slice", "a-.slice", "a--b.slice", ".slice"] {
            assert_eq!(slice_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_systemd_cgroups_path_is_a_scope_in_its_slice() {
        assert_eq!(
            scope_of("kubepods-pod1.slice:peapod:abc"),
            Some((
                "peapod-abc.scope".into(),
                "/kubepods.slice/kubepods-pod1.slice/peapod-abc.scope".into()
            ))
        );
        assert_eq!(
            scope_of(":peapod:abc"),
            Some((
                "peapod-abc.scope".into(),
                "/system.slice/peapod-abc.scope".into()
            ))
        );
        assert_eq!(
            scope_of("-.slice::x"),
            Some(("x.scope".into(), "/x.scope".into()))
        );
        for bad in [
            "/kubepods/pod1/abc",
            "a.slice:p",
            "a.slice:p:x:y",
            "nope:p:x",
            "a.slice:p:",
        ] {
            assert_eq!(scope_of(bad), None, "{bad}");
        }
    }

    /// Against the real systemd (the guest: `scripts/vm run target/debug/deps/peapod_host-*
    /// --ignored systemd`): a transient scope in a transient slice holds its process, takes
    /// a property, and stopping it kills the process and removes the cgroup.
    #[test]
    #[ignore = "needs systemd as PID 1: runs in the guest (scripts/vm)"]
    fn a_transient_scope_in_a_slice_holds_its_process_until_stopped() {
        assert!(booted(), "systemd is not PID 1 here");
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut sd = Systemd::connect(Duration::from_secs(60)).unwrap();
        let slice = "peapod_hosttest.slice";
        sd.start_transient_unit(
            slice,
            vec![Value::property(
                "Description",
                Value::Str("peapod host test".into()),
            )],
        )
        .unwrap();
        let scope = format!("peapod-hosttest-{pid}.scope");
        sd.start_transient_unit(
            &scope,
            vec![
                Value::property("Slice", Value::Str(slice.into())),
                Value::property("PIDs", Value::Array("u".into(), vec![Value::U32(pid)])),
                Value::property("Delegate", Value::Bool(true)),
                Value::property("MemoryAccounting", Value::Bool(true)),
            ],
        )
        .unwrap();
        let (unit, path) = scope_of(&format!("{slice}:peapod:hosttest-{pid}")).unwrap();
        assert_eq!(unit, scope);
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert_eq!(cg.trim_end(), format!("0::{path}"));
        sd.set_unit_properties(
            &scope,
            vec![Value::property("MemoryMax", Value::U64(64 << 20))],
        )
        .unwrap();
        let max = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).unwrap();
        assert_eq!(max.trim(), (64u64 << 20).to_string());
        // Starting it again is refused: the name is taken.
        let again = sd.start_transient_unit(&scope, vec![]).unwrap_err();
        assert_eq!(
            again.remote_name(),
            Some("org.freedesktop.systemd1.UnitExists"),
            "{again}"
        );
        sd.stop_unit(&scope).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the scope's stop killed its process");
        assert!(!Path::new(&format!("/sys/fs/cgroup{path}")).exists());
        sd.stop_unit(slice).unwrap();
        assert!(!Path::new("/sys/fs/cgroup/peapod_hosttest.slice").exists());
        // Stopping what systemd does not know is success.
        sd.stop_unit("peapod-hosttest-gone.scope").unwrap();
    }

    /// Against the real systemd: connections made and dropped from several threads at once,
    /// as the pod supervisor's blocking calls do, each get their answers.
    #[test]
    #[ignore = "needs systemd as PID 1: runs in the guest (scripts/vm)"]
    fn concurrent_short_connections_are_answered() {
        assert!(booted(), "systemd is not PID 1 here");
        let slice = "peapod_hosttest2.slice";
        Systemd::connect(Duration::from_secs(60))
            .unwrap()
            .start_transient_unit(slice, vec![])
            .unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..10u64 {
                        let started = Instant::now();
                        let mut sd = Systemd::connect(Duration::from_secs(60))
                            .unwrap_or_else(|e| panic!("thread {t} round {i}: {e}"));
                        sd.set_unit_properties(
                            slice,
                            vec![Value::property("CPUWeight", Value::U64(100 + i))],
                        )
                        .unwrap_or_else(|e| panic!("thread {t} round {i}: {e}"));
                        eprintln!("thread {t} round {i}: {:?}", started.elapsed());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        Systemd::connect(Duration::from_secs(60))
            .unwrap()
            .stop_unit(slice)
            .unwrap();
    }
}
