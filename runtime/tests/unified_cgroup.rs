//! The v2 pieces of the native paths against the real kernel, in a scratch cgroup of the
//! unified hierarchy (`/sys/fs/cgroup` on a v2 host, `/sys/fs/cgroup/unified` on a hybrid one
//! such as the development machine, whose v1 hierarchies stay as they are): the device
//! filter loaded and attached, and what it lets a process in the cgroup open; the freezer;
//! `cgroup.kill`. Needs root, as the project's tests do.

use peapod_runtime::cgroups::{device_filter, devices, v2};
use peapod_runtime::spec::Resources;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A cgroup of its own in the unified hierarchy, removed (its processes killed) when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let root = Path::new("/sys/fs/cgroup");
        let unified = if root.join("cgroup.controllers").exists() {
            root.to_path_buf()
        } else {
            root.join("unified")
        };
        assert!(
            unified.join("cgroup.procs").exists(),
            "no unified hierarchy at {}",
            unified.display()
        );
        let dir = unified.join(format!("peapod-runtime-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).expect("make the scratch cgroup");
        Scratch(dir)
    }

    fn procs(&self) -> PathBuf {
        self.0.join("cgroup.procs")
    }

    /// `script` run by a shell that first joins this cgroup.
    fn sh(&self, script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("echo $$ > {} && {script}", self.procs().display()));
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.freeze"), "0");
        v2::kill(&self.0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn opens(s: &Scratch, device: &str) -> bool {
    let out = s
        .sh(&format!("exec 3<{device} && echo opened"))
        .output()
        .expect("run sh");
    String::from_utf8_lossy(&out.stdout).trim() == "opened"
}

#[test]
fn the_device_filter_lets_through_what_the_rules_allow_and_nothing_else() {
    let s = Scratch::new("devices");
    // A container's rules: nothing but runc's defaults (/dev/null, /dev/zero, ..., mknod).
    let r: Resources =
        serde_json::from_str(r#"{"devices": [{"allow": false, "access": "rwm"}]}"#).unwrap();
    assert!(opens(&s, "/dev/kmsg"), "before the filter");
    let dir = std::fs::File::open(&s.0).unwrap();
    device_filter::install(&dir, &devices::emulate(&r.devices)).expect("install the filter");
    assert!(opens(&s, "/dev/null"));
    assert!(opens(&s, "/dev/zero"));
    assert!(!opens(&s, "/dev/kmsg"), "a device the rules do not allow");
    // Installed again (an update that changed the rules): the one program is replaced.
    let all: Resources =
        serde_json::from_str(r#"{"devices": [{"allow": true, "access": "rwm"}]}"#).unwrap();
    device_filter::install(&dir, &devices::emulate(&all.devices)).expect("replace the filter");
    assert!(opens(&s, "/dev/kmsg"), "allow-all replaced deny");
}

#[test]
fn freeze_thaw_and_kill_through_the_cgroups_own_files() {
    let s = Scratch::new("freezer");
    let mut child = s.sh("exec sleep 300").spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(s.procs())
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the child did not join");
        std::thread::sleep(Duration::from_millis(10));
    }
    v2::freeze(&s.0, true).expect("freeze");
    let state = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    assert!(
        std::fs::read_to_string(s.0.join("cgroup.events"))
            .unwrap()
            .contains("frozen 1"),
        "{state}"
    );
    v2::freeze(&s.0, false).expect("thaw");
    assert!(std::fs::read_to_string(s.0.join("cgroup.events"))
        .unwrap()
        .contains("frozen 0"));
    assert!(v2::kill(&s.0), "cgroup.kill");
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}
