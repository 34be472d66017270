//! Pod sandboxes end to end: real daemon, real runc, real CNI bridge plugin.

use e2e::fixtures::{sandbox_config, verbose_info};
use e2e::{host, DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::path::PathBuf;
use tonic::Code;

async fn try_run(d: &mut TestDaemon, name: &str) -> Result<String, tonic::Status> {
    d.cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config(name, &d.cgroup_parent)),
            runtime_handler: String::new(),
        })
        .await
        .map(|r| r.into_inner().pod_sandbox_id)
}

async fn run(d: &mut TestDaemon, name: &str) -> String {
    match try_run(d, name).await {
        Ok(id) => id,
        Err(e) => panic!("RunPodSandbox {name}: {e}\n{}", d.log()),
    }
}

async fn status(
    d: &mut TestDaemon,
    id: &str,
) -> Result<cri::PodSandboxStatusResponse, tonic::Status> {
    d.cri
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        })
        .await
        .map(|r| r.into_inner())
}

async fn list(d: &mut TestDaemon, filter: cri::PodSandboxFilter) -> Vec<String> {
    let mut ids: Vec<String> = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

async fn stop(d: &mut TestDaemon, id: &str) -> Result<(), tonic::Status> {
    d.cri
        .runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map(|_| ())
}

async fn remove(d: &mut TestDaemon, id: &str) -> Result<(), tonic::Status> {
    d.cri
        .runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map(|_| ())
}

struct PodView {
    ip: String,
    netns: PathBuf,
    pid: u32,
    dir: PathBuf,
}

async fn view(d: &mut TestDaemon, id: &str) -> PodView {
    let st = status(d, id).await.expect("PodSandboxStatus");
    let info = verbose_info(&st.info);
    let s = st.status.expect("status");
    assert_eq!(s.state, cri::PodSandboxState::SandboxReady as i32);
    PodView {
        ip: s.network.expect("network status").ip,
        netns: PathBuf::from(info["netnsPath"].as_str().expect("netnsPath")),
        pid: info["pid"].as_u64().expect("pid") as u32,
        dir: PathBuf::from(info["sandboxDir"].as_str().expect("sandboxDir")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_get_their_own_network_and_leave_nothing_behind() {
    let mut d = TestDaemon::start("two_pods").await;

    let st = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conditions: HashMap<String, bool> = st
        .status
        .unwrap()
        .conditions
        .into_iter()
        .map(|c| (c.r#type, c.status))
        .collect();
    assert!(conditions["RuntimeReady"]);
    assert!(conditions["NetworkReady"]);

    let a = run(&mut d, "pod-a").await;
    let b = run(&mut d, "pod-b").await;
    assert_eq!(a.len(), 64);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    let va = view(&mut d, &a).await;
    let vb = view(&mut d, &b).await;

    // Distinct IPs from the test's subnet, really configured inside each netns.
    assert_ne!(va.ip, vb.ip);
    let prefix = d.subnet.trim_end_matches("0/24");
    assert!(
        va.ip.starts_with(prefix) && vb.ip.starts_with(prefix),
        "{} {} in {}",
        va.ip,
        vb.ip,
        d.subnet
    );
    assert_eq!(host::ipv4_addrs_in(&va.netns, "eth0"), vec![va.ip.clone()]);
    assert_eq!(host::ipv4_addrs_in(&vb.netns, "eth0"), vec![vb.ip.clone()]);
    assert_eq!(host::bridge_ports(&d.bridge).len(), 2);
    // Loopback is up in each (the runtime brings it up, no CNI plugin) and answers.
    assert_eq!(host::ipv4_addrs_in(&va.netns, "lo"), vec!["127.0.0.1"]);
    let ping = host::in_netns(
        &va.netns,
        &["busybox", "ping", "-c", "1", "-W", "3", "127.0.0.1"],
    );
    assert!(
        ping.status.success(),
        "ping 127.0.0.1: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // The pause container holds the pod's UTS namespace with the configured hostname.
    let hn = host::in_namespaces_of(va.pid, &["--uts"], &["hostname"]);
    assert_eq!(String::from_utf8_lossy(&hn.stdout).trim(), "pod-a");
    // Pause runs in the pinned netns.
    let pause_net = std::fs::read_link(format!("/proc/{}/ns/net", va.pid)).unwrap();
    let pinned = host::in_netns(&va.netns, &["readlink", "/proc/self/ns/net"]);
    assert_eq!(
        String::from_utf8_lossy(&pinned.stdout).trim(),
        pause_net.to_string_lossy()
    );
    // resolv.conf from the DNS config, hosts naming the pod on its IP.
    assert_eq!(
        std::fs::read_to_string(va.dir.join("resolv.conf")).unwrap(),
        "search e2e.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    assert!(std::fs::read_to_string(va.dir.join("hosts"))
        .unwrap()
        .contains(&format!("{}\tpod-a\n", va.ip)));
    // The pause cgroup sits under the configured parent, named by the sandbox id.
    assert!(host::cgroup_exists(&d.cgroup_parent, &a));

    // The pods reach each other over the bridge.
    let ping = host::in_netns(
        &va.netns,
        &["busybox", "ping", "-c", "1", "-W", "3", &vb.ip],
    );
    assert!(
        ping.status.success(),
        "ping a->b: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let ping = host::in_netns(
        &vb.netns,
        &["busybox", "ping", "-c", "1", "-W", "3", &va.ip],
    );
    assert!(
        ping.status.success(),
        "ping b->a: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // Labels, annotations and metadata come back as given.
    let sa = status(&mut d, &a).await.unwrap().status.unwrap();
    assert_eq!(sa.labels["app"], "pod-a");
    assert_eq!(sa.annotations["peapod.test/annotation"], "for pod-a");
    assert_eq!(sa.metadata.unwrap().name, "pod-a");
    assert!(sa.created_at > 0);

    // Filters: label selector, id prefix, state.
    let by_label = list(
        &mut d,
        cri::PodSandboxFilter {
            label_selector: HashMap::from([("app".to_string(), "pod-b".to_string())]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(by_label, vec![b.clone()]);
    let both = list(
        &mut d,
        cri::PodSandboxFilter {
            label_selector: HashMap::from([("suite".to_string(), "e2e".to_string())]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(both.len(), 2);
    let short = a[..12].to_string();
    assert_eq!(
        list(
            &mut d,
            cri::PodSandboxFilter {
                id: short.clone(),
                ..Default::default()
            }
        )
        .await,
        vec![a.clone()]
    );
    assert_eq!(view(&mut d, &short).await.ip, va.ip, "status by id prefix");

    // A second sandbox with the same metadata but another config is refused; the identical
    // request (a kubelet retry after a deadline) gets the first sandbox.
    let mut other = sandbox_config("pod-a", &d.cgroup_parent);
    other.hostname = "another".into();
    let dup = d
        .cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(other),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists, "{dup}");
    assert!(dup.message().contains("pod-a"), "{dup}");
    assert_eq!(
        try_run(&mut d, "pod-a").await.unwrap(),
        a,
        "an identical retry"
    );

    // Stop: NOTREADY, network gone, record kept; stopping again is fine.
    stop(&mut d, &a).await.unwrap();
    let sa = status(&mut d, &a).await.unwrap().status.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxNotready as i32);
    assert!(!va.netns.exists(), "netns file still there after stop");
    assert_eq!(
        host::bridge_ports(&d.bridge).len(),
        1,
        "veth of a still on the bridge"
    );
    assert!(
        std::fs::read_link(format!("/proc/{}/exe", va.pid)).is_err()
            || !host::cgroup_exists(&d.cgroup_parent, &a)
    );
    stop(&mut d, &a).await.unwrap();
    let ready = list(
        &mut d,
        cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ready, vec![b.clone()]);

    // Remove: NotFound afterwards; removing and stopping again succeed.
    remove(&mut d, &a).await.unwrap();
    assert_eq!(status(&mut d, &a).await.unwrap_err().code(), Code::NotFound);
    remove(&mut d, &a).await.unwrap();
    stop(&mut d, &a).await.unwrap();

    // Remove b without stopping first.
    remove(&mut d, &b).await.unwrap();
    assert!(list(&mut d, cri::PodSandboxFilter::default())
        .await
        .is_empty());
    let left = d.leftovers();
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert!(
        !host::cgroup_exists(&d.cgroup_parent, &a) && !host::cgroup_exists(&d.cgroup_parent, &b)
    );
    // The name is free again.
    let again = run(&mut d, "pod-a").await;
    remove(&mut d, &again).await.unwrap();
    assert!(d.leftovers().is_empty());
}

/// A CNI plugin that fails after the bridge plugin has already plugged a veth and taken an IP.
const FAILING_PLUGIN: &str = "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then\n  echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"peapod-test-fail refuses the pod\",\"details\":\"by design\"}'\n  exit 1\nfi\nexit 0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_cni_plugin_fails_the_sandbox_and_leaves_nothing() {
    let bin = std::env::temp_dir().join(format!("peapod-e2e-failcni-{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    host::write_script(&bin.join("peapod-test-fail"), FAILING_PLUGIN);
    let conflist = r#"{"cniVersion":"1.0.0","name":"e2e-fail","plugins":[
        {"type":"bridge","bridge":"{bridge}","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"{subnet}"}]],"dataDir":"{dir}/ipam"}},
        {"type":"peapod-test-fail"}]}"#;
    let mut d = TestDaemon::start_with(
        "failing_cni",
        DaemonOptions {
            conflist: Some(conflist.into()),
            extra_cni_bin: Some(bin.clone()),
            ..Default::default()
        },
    )
    .await;

    let err = try_run(&mut d, "doomed").await.unwrap_err();
    assert!(
        err.message().contains("peapod-test-fail refuses the pod"),
        "{err}"
    );
    assert!(list(&mut d, cri::PodSandboxFilter::default())
        .await
        .is_empty());
    let left = d.leftovers();
    assert!(left.is_empty(), "left behind: {left:#?}");
    // The name was released: a retry fails the same way, not with AlreadyExists.
    let again = try_run(&mut d, "doomed").await.unwrap_err();
    assert_ne!(again.code(), Code::AlreadyExists, "{again}");
    assert!(d.leftovers().is_empty());
    drop(d);
    let _ = std::fs::remove_dir_all(&bin);
}

/// RunPodSandbox with `script` as the pod's shim: its error, once the test has seen that the
/// failed pod left nothing behind (its shim's process included).
async fn run_with_shim(name: &str, script: &str) -> tonic::Status {
    let mut d = TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: "[runtime]\nshim_path = \"{dir}/shim\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    host::write_script(&d.dir.join("shim"), script);
    let err = try_run(&mut d, "doomed").await.unwrap_err();
    assert!(list(&mut d, cri::PodSandboxFilter::default())
        .await
        .is_empty());
    let left = d.leftovers();
    assert!(left.is_empty(), "left behind: {left:#?}");
    err
}

/// A shim that dies before it serves (the daemon waits on its readiness pipe, not a timer).
const DYING_SHIM: &str = "#!/bin/sh\necho 'peapod-test-shim: cannot go on' >&2\nexit 7\n";

/// A shim that never serves and never ends (its command line names the daemon's state
/// directory, so a shim left running is a leftover).
const HUNG_SHIM: &str =
    "#!/bin/sh\necho 'peapod-test-shim: stuck' >&2\nwhile :; do sleep 1; done\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_that_dies_before_serving_fails_the_sandbox_and_leaves_nothing() {
    let err = run_with_shim("dying_shim", DYING_SHIM).await;
    assert_eq!(err.code(), Code::Internal, "{err}");
    assert!(
        err.message().contains("exited before serving")
            && err.message().contains("exit status: 7")
            && err.message().contains("peapod-test-shim: cannot go on"),
        "names the shim, its status and its last words: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_that_never_serves_is_killed_and_leaves_nothing() {
    let err = run_with_shim("hung_shim", HUNG_SHIM).await;
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(
        err.message().contains("did not serve within")
            && err.message().contains("peapod-test-shim: stuck"),
        "names the shim and its last words: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_change_nothing() {
    let mut d = TestDaemon::start("bad_requests").await;
    let mut no_meta = sandbox_config("x", &d.cgroup_parent);
    no_meta.metadata = None;
    let mut no_uid = sandbox_config("x", &d.cgroup_parent);
    no_uid.metadata.as_mut().unwrap().uid.clear();
    let cases = [
        (Some(no_meta), "", "metadata"),
        (Some(no_uid), "", "metadata.uid"),
        (
            Some(sandbox_config("x", &d.cgroup_parent)),
            "kata",
            "runtime_handler",
        ),
        (None, "", "config"),
    ];
    for (config, handler, field) in cases {
        let err = d
            .cri
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config,
                runtime_handler: handler.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        assert!(err.message().contains(field), "{field}: {err}");
    }

    assert_eq!(
        status(&mut d, &"0".repeat(64)).await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        status(&mut d, "").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    stop(&mut d, &"f".repeat(64)).await.unwrap();
    remove(&mut d, &"f".repeat(64)).await.unwrap();
    assert!(list(&mut d, cri::PodSandboxFilter::default())
        .await
        .is_empty());
    assert!(d.leftovers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pod_has_no_netns_and_no_cni() {
    let mut d = TestDaemon::start("host_network").await;
    let mut config = sandbox_config("hostnet", &d.cgroup_parent);
    let ns = config
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap();
    ns.network = cri::NamespaceMode::Node as i32;
    let id = d
        .cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", d.log()))
        .into_inner()
        .pod_sandbox_id;
    let st = status(&mut d, &id).await.unwrap();
    let info = verbose_info(&st.info);
    assert!(info["netnsPath"].is_null());
    assert!(st.status.unwrap().network.is_none());
    let pid = info["pid"].as_u64().unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(),
        std::fs::read_link("/proc/self/ns/net").unwrap()
    );
    assert!(host::bridge_ports(&d.bridge).is_empty());
    remove(&mut d, &id).await.unwrap();
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_lists_its_pods_and_they_kept_running() {
    let mut d = TestDaemon::start("restart").await;
    let id = run(&mut d, "survivor").await;
    let before = view(&mut d, &id).await;
    d.stop_daemon();
    // The pod outlives the daemon.
    assert!(std::path::Path::new(&format!("/proc/{}", before.pid)).exists());
    let restarted = d.restart().await;
    assert!(restarted);
    assert_eq!(
        list(&mut d, cri::PodSandboxFilter::default()).await,
        vec![id.clone()]
    );
    let after = view(&mut d, &id).await;
    assert_eq!(after.ip, before.ip);
    assert_eq!(after.pid, before.pid);
    stop(&mut d, &id).await.unwrap();
    remove(&mut d, &id).await.unwrap();
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
