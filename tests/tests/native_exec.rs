//! Exec without runc (`runtime.exec = "native"`, the default): the shim joins the container
//! itself. The same processes started both ways are the same processes: two daemons, one
//! with native execs and one with `runc exec`, run the same containers under each security
//! context of the table, and an ExecSync in each prints what the process is (ids, groups,
//! the five capability sets, no_new_privs, seccomp mode and filter count, which namespaces
//! and cgroups it shares with the container's init, rlimits, environment, working directory,
//! umask, oom_score_adj, whether it leads its own session, whether the root is writable);
//! both must print the same, and exit codes and signals must come back the same. The
//! runtime is a wrapper that logs its command lines, so the test also proves which path
//! each daemon took: the native daemon never ran `runc exec`. (What stays with runc, such as
//! a terminal, is decided by `spec::unsupported`, unit-tested in the shim.)

use e2e::pods::{busybox, exec_sync_in, in_pod, namespace_options, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;

const HOST_ID: u32 = 300_000;

/// What the exec'd shell prints about itself: the same text from either path.
const DESCRIBE: &str = r#"
for f in Uid Gid Groups CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs Seccomp Seccomp_filters SigBlk SigIgn; do
  grep "^$f:" /proc/self/status
done
for n in mnt net ipc uts pid cgroup user time; do
  if [ "$(readlink /proc/self/ns/$n)" = "$(readlink /proc/1/ns/$n)" ]; then echo "ns $n: the init's"; else echo "ns $n: another"; fi
done
if [ "$(cat /proc/self/cgroup)" = "$(cat /proc/1/cgroup)" ]; then echo "cgroups: the init's"; else echo "cgroups: other"; cat /proc/self/cgroup; fi
cat /proc/self/limits
env | sort
echo "cwd $(pwd)"
echo "umask $(umask)"
echo "oom_score_adj $(cat /proc/self/oom_score_adj)"
if [ "$(cut -d' ' -f6 /proc/$$/stat)" = "$$" ]; then echo "session: its own"; else echo "session: inherited"; fi
if touch /native-exec-probe 2>/dev/null; then echo "root: writable"; rm -f /native-exec-probe; else echo "root: read-only"; fi
"#;

struct Case {
    name: &'static str,
    pod: fn(&mut cri::PodSandboxConfig),
    container: fn(&mut cri::LinuxContainerSecurityContext),
    /// Lines the description must hold (so that the case is what it says).
    expect: &'static [&'static str],
    /// Capabilities (by number) the effective set must hold, and must not.
    caps: (&'static [u32], &'static [u32]),
}

/// The effective capability set a description shows.
fn cap_eff(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no CapEff in\n{text}"))
}

fn no_pod_change(_: &mut cri::PodSandboxConfig) {}

fn profile(kind: cri::security_profile::ProfileType) -> Option<cri::SecurityProfile> {
    Some(cri::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref: String::new(),
    })
}

fn cases() -> Vec<Case> {
    use cri::security_profile::ProfileType;
    vec![
        Case {
            name: "root",
            pod: no_pod_change,
            container: |_| {},
            expect: &["Uid:\t0\t0\t0\t0", "root: writable", "ns pid: the init's"],
            caps: (&[], &[]),
        },
        Case {
            name: "nonroot-groups",
            pod: no_pod_change,
            container: |sc| {
                sc.run_as_user = Some(cri::Int64Value { value: 1000 });
                sc.run_as_group = Some(cri::Int64Value { value: 3000 });
                sc.supplemental_groups = vec![4000, 5000];
            },
            expect: &[
                "Uid:\t1000\t1000\t1000\t1000",
                "Gid:\t3000\t3000\t3000\t3000",
                "HOME=/home/user",
            ],
            caps: (&[], &[]),
        },
        Case {
            name: "caps-added-and-dropped",
            pod: no_pod_change,
            container: |sc| {
                sc.capabilities = Some(cri::Capability {
                    add_capabilities: vec!["NET_ADMIN".into(), "SYS_TIME".into()],
                    drop_capabilities: vec!["CHOWN".into(), "KILL".into()],
                    add_ambient_capabilities: vec![],
                });
            },
            expect: &[],
            // NET_ADMIN 12, SYS_TIME 25 added; CHOWN 0, KILL 5 dropped.
            caps: (&[12, 25], &[0, 5]),
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
            container: |sc| sc.privileged = true,
            expect: &["Seccomp:\t0", "NoNewPrivs:\t0"],
            caps: (&[], &[]),
        },
        Case {
            name: "read-only-root",
            pod: no_pod_change,
            container: |sc| sc.readonly_rootfs = true,
            expect: &["root: read-only"],
            caps: (&[], &[]),
        },
        Case {
            name: "seccomp-runtime-default",
            pod: no_pod_change,
            container: |sc| sc.seccomp = profile(ProfileType::RuntimeDefault),
            expect: &["Seccomp:\t2", "Seccomp_filters:\t1", "NoNewPrivs:\t0"],
            caps: (&[], &[]),
        },
        Case {
            name: "seccomp-unconfined",
            pod: no_pod_change,
            container: |sc| sc.seccomp = profile(ProfileType::Unconfined),
            expect: &["Seccomp:\t0"],
            caps: (&[], &[]),
        },
        Case {
            name: "no-new-privs-with-seccomp",
            pod: no_pod_change,
            container: |sc| {
                sc.no_new_privs = true;
                sc.run_as_user = Some(cri::Int64Value { value: 1000 });
                sc.seccomp = profile(ProfileType::RuntimeDefault);
            },
            expect: &["NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"],
            caps: (&[], &[]),
        },
        Case {
            name: "user-namespace",
            pod: |p| {
                let map = cri::IdMapping {
                    container_id: 0,
                    host_id: HOST_ID,
                    length: 65536,
                };
                namespace_options(p).userns_options = Some(cri::UserNamespace {
                    mode: cri::NamespaceMode::Pod as i32,
                    uids: vec![map],
                    gids: vec![map],
                });
            },
            container: |_| {},
            expect: &["ns user: the init's", "Uid:\t0\t0\t0\t0"],
            caps: (&[], &[]),
        },
    ]
}

/// A runtime that logs each command line to `calls` and runs runc.
fn logging_runtime(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("runc-logged");
    let calls = dir.join("runtime-calls");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nexec runc \"$@\"\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn exec_calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runtime-calls"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == "exec"))
        .count()
}

async fn daemon(name: &str, mode: &str, dir: &Path) -> TestDaemon {
    let runtime = logging_runtime(dir);
    TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: format!(
                "[runtime]\npath = \"{}\"\nexec = \"{mode}\"\n",
                runtime.display()
            ),
            ..Default::default()
        },
    )
    .await
}

/// The pids of the resident exec helpers (`peapod-shim nsexec --resident`) of container `id`
/// running now (zombies are not running).
fn resident_pids(id: &str) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| {
            let pid = p.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains("nsexec --resident") && cmdline.contains(id)).then_some(pid)
        })
        .collect()
}

fn residents_of(id: &str) -> usize {
    resident_pids(id).len()
}

/// What each case's execs print and return, in one daemon; `residents`: how many resident
/// exec helpers each container has after its execs (one with native execs, none with runc's).
async fn observe(
    d: &mut TestDaemon,
    image: &str,
    residents: usize,
) -> Vec<(String, String, Vec<i32>)> {
    let mut seen = Vec::new();
    for case in cases() {
        let pod = d.run_pod_with(case.name, case.pod).await;
        let mut config = in_pod(
            &pod,
            sh("app", image, "trap 'exit 0' TERM; sleep 3600 & wait"),
        );
        (case.container)(
            config
                .linux
                .get_or_insert_with(Default::default)
                .security_context
                .get_or_insert_with(Default::default),
        );
        let id = d.run_container(&pod, config).await;
        let described = exec_sync_in(d, &id, &["sh", "-c", DESCRIBE]).await;
        assert_eq!(
            described.exit_code,
            0,
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&described.stderr)
        );
        let text = String::from_utf8_lossy(&described.stdout).into_owned();
        let eff = cap_eff(&text);
        for &c in case.caps.0 {
            assert!(
                eff & (1 << c) != 0,
                "{}: capability {c} missing from {eff:x}",
                case.name
            );
        }
        for &c in case.caps.1 {
            assert!(
                eff & (1 << c) == 0,
                "{}: capability {c} in {eff:x}",
                case.name
            );
        }
        for want in case.expect {
            assert!(
                text.lines().any(|l| l == *want),
                "{}: no line {want:?} in\n{text}",
                case.name
            );
        }
        let mut codes = Vec::new();
        for cmd in [
            &["sh", "-c", "exit 3"][..],
            &["sh", "-c", "kill -TERM $$"],
            &["sh", "-c", "kill -KILL $$"],
            &["true"],
        ] {
            codes.push(exec_sync_in(d, &id, cmd).await.exit_code);
        }
        // A program that is not there: the same answer both ways (the code, and the
        // runtime's words for it).
        let missing = d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["no-such-program".into()],
                timeout: 30,
            })
            .await;
        let missing = match missing {
            Ok(r) => format!("exit {}", r.into_inner().exit_code),
            Err(e) => format!(
                "{:?}, not found said: {}",
                e.code(),
                e.message()
                    .contains("\"no-such-program\": executable file not found in $PATH")
            ),
        };
        let text = format!("{text}missing program: {missing}\n");
        seen.push((case.name.to_string(), text, codes));
        // Six execs, one helper that stayed for them all.
        assert_eq!(
            residents_of(&id),
            residents,
            "{}: resident helpers",
            case.name
        );
        d.remove_pod(&pod).await;
        assert_eq!(
            residents_of(&id),
            0,
            "{}: a helper outlived its container",
            case.name
        );
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_execs_are_the_processes_runc_exec_makes() {
    let images = Images::start();
    let spec = busybox()
        .passwd_line("user:x:1000:1000::/home/user:/bin/sh")
        .group_line("user:x:1000:");
    let image = images.push("busybox:native-exec", &spec);

    let native_dir = std::env::temp_dir().join("peapod-native-exec-native");
    let runc_dir = std::env::temp_dir().join("peapod-native-exec-runc");
    let _ = std::fs::remove_dir_all(&native_dir);
    let _ = std::fs::remove_dir_all(&runc_dir);

    let mut native = daemon("native-exec", "native", &native_dir).await;
    native.pull(&image).await;
    let by_native = observe(&mut native, &image, 1).await;
    assert_eq!(
        exec_calls(&native_dir),
        0,
        "the native daemon ran `runc exec`:\n{}",
        std::fs::read_to_string(native_dir.join("runtime-calls")).unwrap_or_default()
    );

    let left = native.leftovers();
    assert!(left.is_empty(), "native daemon left {left:?}");
    drop(native);

    let mut runc = daemon("runc-exec", "runc", &runc_dir).await;
    runc.pull(&image).await;
    let by_runc = observe(&mut runc, &image, 0).await;
    assert!(
        exec_calls(&runc_dir) >= 5 * cases().len(),
        "the runc daemon ran {} `runc exec`",
        exec_calls(&runc_dir)
    );
    drop(runc);

    // For the log: what one case looks like.
    eprintln!("{}:\n{}", by_native[1].0, by_native[1].1);
    for ((name, native_text, native_codes), (_, runc_text, runc_codes)) in
        by_native.iter().zip(by_runc.iter())
    {
        assert_eq!(
            native_text, runc_text,
            "{name}: the native exec (left) and runc exec (right) differ"
        );
        assert_eq!(native_codes, runc_codes, "{name}: exit codes");
    }
    // Exit codes as a shell reports them: 3, then killed by TERM and KILL.
    assert_eq!(by_native[0].2, vec![3, 143, 137, 0]);
    let _ = std::fs::remove_dir_all(&native_dir);
    let _ = std::fs::remove_dir_all(&runc_dir);
}

/// The resident helper from the outside: killed, it is replaced at the next exec (and reaped);
/// when the container's init exits it leaves by itself, before anything is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_helper_is_replaced_when_killed_and_leaves_with_its_container() {
    let images = Images::start();
    let image = images.push("busybox:resident", &busybox());
    let dir = std::env::temp_dir().join("peapod-native-exec-resident");
    let _ = std::fs::remove_dir_all(&dir);
    let mut d = daemon("resident-exec", "native", &dir).await;
    d.pull(&image).await;
    let pod = d.run_pod_with("resident", no_pod_change).await;
    let config = in_pod(
        &pod,
        sh("app", &image, "trap 'exit 0' TERM; sleep 3600 & wait"),
    );
    let id = d.run_container(&pod, config).await;

    assert_eq!(exec_sync_in(&mut d, &id, &["true"]).await.exit_code, 0);
    let first = resident_pids(&id);
    assert_eq!(first.len(), 1, "one helper after the first exec");
    // SAFETY: kill with integer arguments.
    unsafe { libc::kill(first[0], libc::SIGKILL) };
    let again = exec_sync_in(&mut d, &id, &["sh", "-c", "echo again"]).await;
    assert_eq!(
        (again.exit_code, again.stdout.as_slice()),
        (0, &b"again\n"[..])
    );
    let second = resident_pids(&id);
    assert_eq!(second.len(), 1, "one helper again");
    assert_ne!(second[0], first[0], "a new helper");
    // The killed one was reaped by the shim, not left a zombie.
    let status = std::fs::read_to_string(format!("/proc/{}/status", first[0])).unwrap_or_default();
    assert!(
        !status.contains("State:\tZ"),
        "the killed helper is a zombie"
    );

    d.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: id.clone(),
            timeout: 10,
        })
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + e2e::scaled(std::time::Duration::from_secs(5));
    while !resident_pids(&id).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the helper outlived its container's init"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "left {left:?}");
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
