//! Containers created without runc (`runtime.create = "native"`, the default): the shim makes
//! the container itself. The same containers created both ways are the same containers: two
//! daemons, one creating natively and one with `runc create`, run the same container under
//! each security context and resource setting of the table; its init writes what it is (ids,
//! groups, capability sets, no_new_privs, seccomp, namespaces, limits, environment, working
//! directory, umask, hostname, its mount table, its /dev, its cgroup files and limits as the
//! container sees them, masked and read-only paths), and both must write the same. Then an
//! update of its resources, and its exit code when stopped, must come out the same. The
//! runtime is a runc that logs its command lines, so the test also proves which path each
//! daemon took. (What stays with runc, such as a user namespace, is decided by
//! `create::unsupported`, unit-tested in the shim; the user-namespace case here proves the
//! fallback.)

use e2e::pods::{busybox, exec_sync_in, in_pod, kubelet_proc_mask, namespace_options, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;

/// What the container's init writes about itself to /dev/shm/described (a tmpfs, writable
/// with a read-only root), then it waits for TERM.
const DESCRIBE: &str = r#"
{
for f in Uid Gid Groups CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs Seccomp Seccomp_filters SigBlk SigIgn; do
  grep "^$f:" /proc/self/status
done
echo "pid $$"
for n in mnt net ipc uts pid cgroup user; do echo "ns $n $(readlink /proc/self/ns/$n | cut -d: -f1)"; done
cat /proc/self/limits
env | sort
echo "cwd $(pwd)"
echo "umask $(umask)"
echo "hostname $(hostname)"
echo "oom_score_adj $(cat /proc/self/oom_score_adj)"
if touch /native-create-probe 2>/dev/null; then echo "root: writable"; rm -f /native-create-probe; else echo "root: read-only"; fi
if touch /proc/sys/kernel/hostname 2>/dev/null; then echo "proc/sys: writable"; else echo "proc/sys: read-only"; fi
echo "kcore $(stat -c '%F %t:%T' /proc/kcore 2>&1)"
echo "acpi $(ls -a /proc/acpi 2>&1 | wc -l)"
echo "== mounts"
awk '{ for (i = 7; i <= NF; i++) if ($i == "-") s = i; print $5, $6, $(s + 1) }' /proc/self/mountinfo
echo "== dev"
for f in /dev/* /dev/pts/* /dev/shm /dev/mqueue; do stat -c '%n %A %u %g %t:%T %N' "$f"; done
echo "== cgroup"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  # cgroup v2: in a cgroup namespace of its own its cgroup is the root, else (privileged)
  # its directory is below. Ids and the daemon's slot differ between the two daemons.
  own=$(cut -d: -f3 /proc/self/cgroup)
  echo "cgroup $own" | sed -e 's/[0-9a-f]\{64\}/ID/g' -e 's/peapod[-_]e2e[-_][0-9]*/PARENT/g'
  d=/sys/fs/cgroup; [ "$own" = / ] || d=/sys/fs/cgroup$own
  ls $d | tr '\n' ' '; echo
  for f in cgroup.controllers cgroup.subtree_control cgroup.type cgroup.freeze memory.max memory.swap.max \
           memory.low memory.high memory.min cpu.weight cpu.max pids.max cpuset.cpus cpuset.mems io.weight; do
    echo "$f: $(cat $d/$f 2>&1 | tr '\n' ' ')"
  done
  if mkdir $d/probe 2>/dev/null; then rmdir $d/probe; echo "cgroupfs: writable"; else echo "cgroupfs: read-only"; fi
else
  ls /sys/fs/cgroup
  for f in memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes memory/memory.soft_limit_in_bytes \
           cpu/cpu.shares cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us pids/pids.max cpuset/cpuset.cpus \
           devices/devices.list; do
    echo "$f: $(cat /sys/fs/cgroup/$f 2>&1 | tr '\n' ' ')"
  done
  if touch /sys/fs/cgroup/memory/probe 2>/dev/null; then echo "cgroupfs: writable"; else echo "cgroupfs: read-only"; fi
fi
echo "== devices"
# What the device rules let through: the defaults, and a device made here that no rule allows
# (/dev/loop-control's numbers, in the container's /dev tmpfs: a device whose opening the
# kernel checks no capability for).
for f in /dev/null /dev/zero /dev/full /dev/random /dev/tty; do
  if (exec 3<>$f) 2>/dev/null; then echo "open $f: yes"; else echo "open $f: no"; fi
done
if mknod /dev/probe-loop c 10 237 2>/dev/null; then
  if (exec 3</dev/probe-loop) 2>/dev/null; then echo "loop-control: opened"; else echo "loop-control: denied"; fi
  rm -f /dev/probe-loop
else
  echo "loop-control: no mknod"
fi
echo "== volume"
cat /data/file 2>&1
if touch /data/probe 2>/dev/null; then echo "volume: writable"; else echo "volume: read-only"; fi
} > /dev/shm/described 2>&1
trap 'exit 7' TERM
sleep 3600 & wait
"#;

/// The limits an update changes, as the container sees them.
const LIMITS: &str = r#"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  own=$(cut -d: -f3 /proc/self/cgroup); d=/sys/fs/cgroup; [ "$own" = / ] || d=/sys/fs/cgroup$own
  cat $d/memory.max $d/memory.swap.max $d/cpu.max $d/cpu.weight
else
  cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.shares
fi
"#;

struct Case {
    name: &'static str,
    pod: fn(&mut cri::PodSandboxConfig),
    container: fn(&mut cri::ContainerConfig),
    /// Lines the description must hold (so that the case is what it says).
    expect: &'static [&'static str],
    /// And those of its cgroup, on a v1 host and on v2.
    expect_cgroup: (&'static [&'static str], &'static [&'static str]),
}

fn security(c: &mut cri::ContainerConfig) -> &mut cri::LinuxContainerSecurityContext {
    c.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

fn resources(c: &mut cri::ContainerConfig) -> &mut cri::LinuxContainerResources {
    c.linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default)
}

fn no_pod_change(_: &mut cri::PodSandboxConfig) {}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "root",
            pod: no_pod_change,
            container: |_| {},
            expect: &[
                "Uid:\t0\t0\t0\t0",
                "root: writable",
                "proc/sys: read-only",
                "open /dev/null: yes",
                "loop-control: denied",
            ],
            expect_cgroup: (
                &[],
                &["cgroup /", "cgroupfs: read-only", "memory.max: max "],
            ),
        },
        Case {
            name: "nonroot-limits",
            pod: no_pod_change,
            container: |c| {
                let sc = security(c);
                sc.run_as_user = Some(cri::Int64Value { value: 1000 });
                sc.run_as_group = Some(cri::Int64Value { value: 3000 });
                sc.supplemental_groups = vec![4000];
                let r = resources(c);
                r.memory_limit_in_bytes = 64 << 20;
                r.memory_swap_limit_in_bytes = 64 << 20;
                r.cpu_quota = 50_000;
                r.cpu_period = 100_000;
                r.cpu_shares = 512;
                r.cpuset_cpus = "0".into();
            },
            expect: &["Uid:\t1000\t1000\t1000\t1000", "loop-control: no mknod"],
            expect_cgroup: (
                &[
                    "memory/memory.limit_in_bytes: 67108864 ",
                    "cpu/cpu.cfs_quota_us: 50000 ",
                ],
                &[
                    "memory.max: 67108864 ",
                    "memory.swap.max: 0 ",
                    "cpu.max: 50000 100000 ",
                    "cpu.weight: 20 ",
                    "cpuset.cpus: 0 ",
                ],
            ),
        },
        Case {
            name: "privileged",
            pod: |p| {
                p.linux
                    .get_or_insert_with(Default::default)
                    .security_context
                    .get_or_insert_with(Default::default)
                    .privileged = true;
            },
            container: |c| security(c).privileged = true,
            expect: &["Seccomp:\t0", "proc/sys: writable", "loop-control: opened"],
            expect_cgroup: (&[], &["cgroupfs: writable"]),
        },
        Case {
            name: "read-only-root-seccomp",
            pod: no_pod_change,
            container: |c| {
                let sc = security(c);
                sc.readonly_rootfs = true;
                sc.no_new_privs = true;
                sc.seccomp = Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                });
                sc.capabilities = Some(cri::Capability {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    drop_capabilities: vec!["CHOWN".into()],
                    add_ambient_capabilities: vec![],
                });
            },
            expect: &["root: read-only", "Seccomp:\t2", "NoNewPrivs:\t1"],
            expect_cgroup: (&[], &[]),
        },
        Case {
            name: "user-namespace",
            pod: |p| {
                let map = cri::IdMapping {
                    container_id: 0,
                    host_id: 300_000,
                    length: 65536,
                };
                namespace_options(p).userns_options = Some(cri::UserNamespace {
                    mode: cri::NamespaceMode::Pod as i32,
                    uids: vec![map],
                    gids: vec![map],
                });
            },
            container: |_| {},
            expect: &["Uid:\t0\t0\t0\t0"],
            expect_cgroup: (&[], &[]),
        },
    ]
}

fn create_calls(dir: &Path) -> usize {
    e2e::host::runtime_calls(dir)
        .iter()
        .filter(|l| l.split_whitespace().any(|w| w == "create"))
        .count()
}

/// What each case's container is, its resources after an update, and its exit code when
/// stopped, in one daemon.
async fn observe(d: &mut TestDaemon, image: &str, volume: &Path) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    for case in cases() {
        let pod = d.run_pod_with(case.name, case.pod).await;
        let mut config = in_pod(&pod, sh("app", image, DESCRIBE));
        config.mounts.push(cri::Mount {
            container_path: "/data".into(),
            host_path: volume.display().to_string(),
            readonly: true,
            ..Default::default()
        });
        // What the kubelet sends for procMount Default (a case may clear it).
        kubelet_proc_mask(security(&mut config));
        (case.container)(&mut config);
        let id = d.run_container(&pod, config).await;
        let mut text = String::new();
        for _ in 0..100 {
            let r = exec_sync_in(d, &id, &["cat", "/dev/shm/described"]).await;
            text = String::from_utf8_lossy(&r.stdout).into_owned();
            if text.contains("== volume")
                && text
                    .lines()
                    .last()
                    .is_some_and(|l| l.starts_with("volume:"))
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (v1, v2) = case.expect_cgroup;
        let cgroup = if e2e::host::unified_cgroups() { v2 } else { v1 };
        for want in case.expect.iter().chain(cgroup) {
            assert!(
                text.lines().any(|l| l.starts_with(want)),
                "{}: no line {want:?} in\n{text}",
                case.name
            );
        }
        // An update, as the kubelet resizes a container.
        let updated = d
            .cri
            .runtime
            .update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(cri::LinuxContainerResources {
                    memory_limit_in_bytes: 96 << 20,
                    memory_swap_limit_in_bytes: 96 << 20,
                    cpu_quota: 20_000,
                    cpu_period: 100_000,
                    cpu_shares: 256,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map(|_| "ok".to_string())
            .unwrap_or_else(|e| format!("{:?}", e.code()));
        let after = exec_sync_in(d, &id, &["sh", "-c", LIMITS]).await;
        let after = String::from_utf8_lossy(&after.stdout).replace('\n', " ");
        d.stop_container(&id, 10).await;
        let status = d.container_status(&id).await;
        // Pids and namespace inodes differ between any two containers: the pid line stays
        // (1 or not), the rest is the text.
        let text = format!(
            "{text}update: {updated}, then {after}\nexit code {}\n",
            status.exit_code
        );
        seen.push((case.name.to_string(), text));
        d.remove_pod(&pod).await;
    }
    seen
}

async fn daemon(name: &str, create: &str, dir: &Path) -> TestDaemon {
    let runtime = e2e::host::logging_runc(dir);
    TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: format!(
                "[runtime]\npath = \"{}\"\ncreate = \"{create}\"\n",
                runtime.display()
            ),
            ..Default::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_creates_are_the_containers_runc_create_makes() {
    let images = Images::start();
    let image = images.push("busybox:native-create", &busybox());
    let volume = tempfile::tempdir().expect("tempdir");
    std::fs::write(volume.path().join("file"), "from the host\n").unwrap();

    let native_dir = std::env::temp_dir().join("peapod-native-create-native");
    let runc_dir = std::env::temp_dir().join("peapod-native-create-runc");
    let _ = std::fs::remove_dir_all(&native_dir);
    let _ = std::fs::remove_dir_all(&runc_dir);

    let mut native = daemon("native-create", "native", &native_dir).await;
    native.pull(&image).await;
    let by_native = observe(&mut native, &image, volume.path()).await;
    // Only the user-namespace case went to runc.
    assert_eq!(
        create_calls(&native_dir),
        1,
        "the native daemon's runc creates:\n{}",
        std::fs::read_to_string(native_dir.join("runtime-calls")).unwrap_or_default()
    );
    let left = native.leftovers();
    assert!(left.is_empty(), "native daemon left {left:?}");
    drop(native);

    let mut runc = daemon("runc-create", "runc", &runc_dir).await;
    runc.pull(&image).await;
    let by_runc = observe(&mut runc, &image, volume.path()).await;
    assert_eq!(create_calls(&runc_dir), cases().len());
    drop(runc);

    eprintln!("{}:\n{}", by_native[1].0, by_native[1].1);
    for ((name, native_text), (_, runc_text)) in by_native.iter().zip(by_runc.iter()) {
        if native_text != runc_text {
            for (n, r) in native_text.lines().zip(runc_text.lines()) {
                if n != r {
                    eprintln!("{name}: native {n:?}\n{name}: runc   {r:?}");
                }
            }
        }
        assert_eq!(
            native_text, runc_text,
            "{name}: the native create (left) and runc create (right) differ"
        );
        assert!(native_text.contains("exit code 7"), "{name}: {native_text}");
    }
    let _ = std::fs::remove_dir_all(&native_dir);
    let _ = std::fs::remove_dir_all(&runc_dir);
}
