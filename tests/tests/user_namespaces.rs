//! User namespaces (CRI `NamespaceOption.userns_options`): a pod with NamespaceMode POD runs in
//! a user namespace of its own with the requested mapping (pause and containers share it), its
//! container root is the mapping's host id, and the image's files appear owned by root inside
//! (idmapped layers: runc 1.1 cannot idmap, so peapod does); NODE keeps the host's; invalid
//! requests are refused naming the field and leave nothing; removal leaves no mount.

use e2e::pods::{busybox, in_pod, sh, Images, Pod};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

const HOST_ID: u32 = 1_000_000;
const LENGTH: u32 = 65536;

fn mapping(container_id: u32, host_id: u32, length: u32) -> cri::IdMapping {
    cri::IdMapping {
        container_id,
        host_id,
        length,
    }
}

fn userns(mode: cri::NamespaceMode, maps: Vec<cri::IdMapping>) -> cri::UserNamespace {
    cri::UserNamespace {
        mode: mode as i32,
        uids: maps.clone(),
        gids: maps,
    }
}

fn set_userns(config: &mut cri::PodSandboxConfig, u: cri::UserNamespace) {
    config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default)
        .userns_options = Some(u);
}

fn host_ids(pid: u32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u32 {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {status}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (field("Uid:"), field("Gid:"))
}

const SCRIPT: &str = "cat /proc/self/uid_map /proc/self/gid_map; echo ids $(id -u) $(id -g); \
    echo owners $(stat -c '%u:%g' / /bin/busybox /etc/passwd); \
    echo > /written-by-root && echo wrote $(stat -c '%u:%g' /written-by-root); \
    echo volume $(stat -c '%u:%g' /vol/from-host) $(cat /vol/from-host); \
    echo > /vol/from-pod && echo volume-wrote $(stat -c '%u:%g' /vol/from-pod); \
    echo plain $(stat -c '%u:%g' /plain/from-host); \
    echo sysctl $(cat /proc/sys/net/ipv4/ip_unprivileged_port_start); \
    echo addr $(ip -4 -o addr show eth0); \
    echo image-volume $(stat -c '%u:%g' /img/bin/busybox); \
    echo lo $(ip -4 -o addr show lo | grep -o 'inet [0-9./]*'); \
    echo done; sleep 300 & wait";

/// The uid_map a new container `name` of `pod` sees (its first line, split).
async fn uid_map_in(d: &mut TestDaemon, pod: &Pod, image: &str, name: &str) -> Vec<String> {
    let config = in_pod(pod, sh(name, image, "cat /proc/self/uid_map; echo done"));
    let id = d.run_container(pod, config).await;
    let lines = d.wait_log(&id, "done", Duration::from_secs(60)).await;
    words(&lines[0].text)
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_its_own_user_namespace() {
    let mut d = TestDaemon::start("userns-pod").await;
    let status = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let features = status.runtime_handlers[0].features.expect("features");
    assert!(
        features.user_namespaces,
        "this host (kernel 6.18, idmapped ext4 layers) can: {}",
        d.log()
    );
    // The verbose info says it too (and would say why not).
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    assert_eq!(info["userNamespaces"]["supported"], true, "{info}");

    let images = Images::start();
    let image = images.push("busybox:userns", &busybox());
    d.pull(&image).await;
    let pod = d
        .run_pod_with("userns", |c| {
            set_userns(
                c,
                userns(cri::NamespaceMode::Pod, vec![mapping(0, HOST_ID, LENGTH)]),
            );
            // A net.* sysctl: settable only because the pod's network namespace is owned by
            // its user namespace (runc writes it as root of the pod).
            c.linux
                .get_or_insert_with(Default::default)
                .sysctls
                .insert("net.ipv4.ip_unprivileged_port_start".into(), "0".into());
        })
        .await;
    // A volume as the kubelet gives it to such a pod (the pod's mapping on the mount), and the
    // same directory without mappings.
    let volume = d.dir.join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("from-host"), "written by host root\n").unwrap();
    let mut config = in_pod(&pod, sh("inside", &image, SCRIPT));
    let maps = vec![mapping(0, HOST_ID, LENGTH)];
    config.mounts = vec![
        cri::Mount {
            container_path: "/vol".into(),
            host_path: volume.display().to_string(),
            uid_mappings: maps.clone(),
            gid_mappings: maps,
            ..Default::default()
        },
        cri::Mount {
            container_path: "/plain".into(),
            host_path: volume.display().to_string(),
            readonly: true,
            ..Default::default()
        },
        // An image volume: its layers idmapped like the container's root.
        cri::Mount {
            container_path: "/img".into(),
            image: Some(cri::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            readonly: true,
            uid_mappings: vec![mapping(0, HOST_ID, LENGTH)],
            gid_mappings: vec![mapping(0, HOST_ID, LENGTH)],
            ..Default::default()
        },
    ];
    let id = d.run_container(&pod, config).await;
    // The staged idmapped bind is the container's own now: nothing of it stays on the host.
    let staged = d.state.join("containers").join(&id).join("idmapped-mounts");
    assert!(
        e2e::host::mounts_under(&staged).is_empty(),
        "{:?}",
        e2e::host::mounts_under(&staged)
    );
    let lines = d.wait_log(&id, "done", Duration::from_secs(60)).await;
    let text: Vec<String> = lines.iter().map(|l| l.text.clone()).collect();

    // The mapping, as the process inside sees it (uid_map and gid_map).
    let want_map = vec!["0".to_string(), HOST_ID.to_string(), LENGTH.to_string()];
    assert_eq!(words(&text[0]), want_map, "{text:?}");
    assert_eq!(words(&text[1]), want_map, "{text:?}");
    // Root inside; the image's files (owned by host root on disk) owned by root inside; what
    // root writes is root's.
    assert_eq!(text[2], "ids 0 0", "{text:?}");
    assert_eq!(text[3], "owners 0:0 0:0 0:0", "{text:?}");
    assert_eq!(text[4], "wrote 0:0", "{text:?}");
    // The idmapped volume: host root's file is root's inside, and root's writes are host
    // root's; without the mapping the same file belongs to nobody (65534, the overflow id).
    assert_eq!(text[5], "volume 0:0 written by host root", "{text:?}");
    assert_eq!(text[6], "volume-wrote 0:0", "{text:?}");
    assert_eq!(text[7], "plain 65534:65534", "{text:?}");
    let written = std::fs::metadata(volume.join("from-pod")).unwrap();
    assert_eq!((written.uid(), written.gid()), (0, 0));
    // The pod's network: the sysctl took, and CNI gave eth0 the pod's address.
    assert_eq!(text[8], "sysctl 0", "{text:?}");
    let ip = d
        .cri
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: pod.id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .unwrap_or_default();
    assert!(!ip.is_empty());
    assert!(text[9].contains(&format!(" {ip}/")), "{ip}: {text:?}");
    assert_eq!(text[10], "image-volume 0:0", "{text:?}");
    // The namespace owned by the pod's user namespace has its loopback up too.
    assert_eq!(text[11], "lo inet 127.0.0.1/8", "{text:?}");

    // Seen from the host: container root is the mapping's host id, and what it wrote is
    // stored with that id in the container's own writable layer (only the shared image layers
    // are idmapped).
    let pid = d.container_info(&id).await["pid"].as_u64().expect("pid") as u32;
    assert_eq!(host_ids(pid), (HOST_ID, HOST_ID));
    let upper = d
        .root
        .join("image/containers")
        .join(&id)
        .join("upper/written-by-root");
    let meta = std::fs::metadata(&upper).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (HOST_ID, HOST_ID),
        "{}",
        upper.display()
    );
    // The shared image layers were not chowned: on disk, busybox is still host root's.
    let layers: Vec<_> = std::fs::read_dir(d.root.join("image/layers"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("fs/bin/busybox"))
        .filter(|p| p.exists())
        .collect();
    assert!(!layers.is_empty());
    for l in &layers {
        assert_eq!(std::fs::metadata(l).unwrap().uid(), 0, "{}", l.display());
    }

    // Pause and container share the pod's user namespace (one namespace, not two alike).
    let pause_pid = d.pod_info(&pod.id).await["pid"]
        .as_u64()
        .expect("pause pid") as u32;
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/user")).unwrap();
    assert_eq!(ns(pid), ns(pause_pid));
    assert_ne!(ns(pid), std::fs::read_link("/proc/self/ns/user").unwrap());

    // An exec'd process joins it too.
    let out = d
        .cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["cat".into(), "/proc/self/uid_map".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(words(&String::from_utf8_lossy(&out.stdout)), want_map);

    // After a daemon restart the pod's user namespace is still found for a new container.
    assert!(d.restart().await);
    assert_eq!(
        uid_map_in(&mut d, &pod, &image, "after-restart").await,
        want_map
    );

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_mode_keeps_the_hosts_user_namespace() {
    let mut d = TestDaemon::start("userns-node").await;
    let images = Images::start();
    let image = images.push("busybox:userns-node", &busybox());
    d.pull(&image).await;
    let pod = d
        .run_pod_with("userns-node", |c| {
            set_userns(c, userns(cri::NamespaceMode::Node, vec![]))
        })
        .await;
    let host = std::fs::read_to_string("/proc/self/uid_map").unwrap();
    assert_eq!(uid_map_in(&mut d, &pod, &image, "node").await, words(&host));
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

async fn pods_of(d: &mut TestDaemon) -> Vec<cri::PodSandbox> {
    d.cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items
}

/// RunPodSandbox refuses `config` with InvalidArgument naming `field`.
async fn assert_invalid(d: &mut TestDaemon, config: cri::PodSandboxConfig, field: &str) {
    let name = config.metadata.clone().unwrap_or_default().name;
    let err = d
        .cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
        .expect_err(&name);
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name}: {err}");
    assert!(err.message().contains(field), "{name}: {}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_user_namespaces_are_refused_naming_the_field() {
    let mut d = TestDaemon::start("userns-bad").await;
    let good = vec![mapping(0, HOST_ID, LENGTH)];
    let cases: Vec<(&str, cri::UserNamespace, Option<cri::NamespaceMode>, &str)> = vec![
        (
            "two-mappings",
            userns(
                cri::NamespaceMode::Pod,
                vec![mapping(0, 1000, 100000), mapping(0, 2000, 100000)],
            ),
            None,
            "userns_options.uids",
        ),
        (
            "root-unmapped",
            userns(cri::NamespaceMode::Pod, vec![mapping(1, 1000, 100000)]),
            None,
            "uids[0].container_id",
        ),
        (
            "no-mapping",
            userns(cri::NamespaceMode::Pod, vec![]),
            None,
            "userns_options.uids",
        ),
        (
            "container",
            userns(cri::NamespaceMode::Container, vec![]),
            None,
            "userns_options.mode",
        ),
        (
            "target",
            userns(cri::NamespaceMode::Target, vec![]),
            None,
            "userns_options.mode",
        ),
        (
            "host-network",
            userns(cri::NamespaceMode::Pod, good.clone()),
            Some(cri::NamespaceMode::Node),
            "namespace_options.network",
        ),
    ];
    for (name, u, network, field) in cases {
        let mut config = e2e::fixtures::sandbox_config(name, &d.cgroup_parent);
        set_userns(&mut config, u);
        if let Some(n) = network {
            config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut())
                .unwrap()
                .network = n as i32;
        }
        assert_invalid(&mut d, config, field).await;
    }
    // The pause's own user must be mapped too: refused before anything is made.
    let mut config = e2e::fixtures::sandbox_config("unmapped-pause", &d.cgroup_parent);
    set_userns(
        &mut config,
        userns(cri::NamespaceMode::Pod, vec![mapping(0, HOST_ID, 1000)]),
    );
    config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .unwrap()
        .run_as_user = Some(cri::Int64Value { value: 5000 });
    assert_invalid(&mut d, config, "run_as_user").await;
    let pods = pods_of(&mut d).await;
    assert!(pods.is_empty(), "{pods:?}");
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_user_namespace_pod_leaves_nothing() {
    let mut d = TestDaemon::start("userns-fail").await;
    // Accepted by validation, refused by the kernel when runc writes it in the pod's network
    // namespace: the failure comes after the user and network namespaces were pinned, the
    // shim started and the pause's idmapped root mounted.
    let mut config = e2e::fixtures::sandbox_config("userns-fail", &d.cgroup_parent);
    set_userns(
        &mut config,
        userns(cri::NamespaceMode::Pod, vec![mapping(0, HOST_ID, LENGTH)]),
    );
    config
        .linux
        .as_mut()
        .unwrap()
        .sysctls
        .insert("net.ipv4.ip_forward".into(), "not-a-number".into());
    let err = d
        .cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("a sysctl the kernel refuses");
    // The runtime's refusal, not validation's: everything had been made by then.
    assert_eq!(err.code(), tonic::Code::Internal, "{err}");
    assert!(err.message().contains("ip_forward"), "{err}");
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

/// RunPodSandbox of a pod with its own user namespace dies at `failpoint` (the daemon exits
/// there): after the restart the half-made pod is gone with everything it had (the pinned
/// user and network namespaces, the pause's idmapped root), and the same pod runs.
async fn userns_pod_killed_at(name: &str, failpoint: &str) {
    let mut d = TestDaemon::start(name).await;
    d.failpoints = Some(format!("{failpoint}=exit"));
    d.restart().await;
    let mut config = e2e::fixtures::sandbox_config(name, &d.cgroup_parent);
    set_userns(
        &mut config,
        userns(cri::NamespaceMode::Pod, vec![mapping(0, HOST_ID, LENGTH)]),
    );
    let request = cri::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    };
    let call = d.cri.runtime.run_pod_sandbox(request.clone()).await;
    assert!(call.is_err(), "the call died with the daemon: {call:?}");
    assert!(
        d.wait_daemon_exit(Duration::from_secs(20)),
        "the daemon did not exit at {failpoint}:\n{}",
        d.log()
    );
    d.failpoints = None;
    d.restart().await;
    let pods = pods_of(&mut d).await;
    assert!(pods.is_empty(), "the half-made pod is gone: {pods:?}");
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
    let id = d
        .cri
        .runtime
        .run_pod_sandbox(request)
        .await
        .unwrap_or_else(|e| panic!("the same pod runs: {e}\n{}", d.log()))
        .into_inner()
        .pod_sandbox_id;
    let pod = Pod {
        id,
        config: e2e::fixtures::sandbox_config(name, &d.cgroup_parent),
    };
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_user_and_network_namespaces_are_pinned() {
    userns_pod_killed_at("uns-kill-netns", "sandbox.run.after-netns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_pause_started_on_its_idmapped_root() {
    userns_pod_killed_at("uns-kill-pause", "sandbox.run.after-pause-start").await;
}
