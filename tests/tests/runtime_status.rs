//! Status reports RuntimeReady and NetworkReady from what is really there.

use e2e::daemon::DaemonOptions;
use e2e::TestDaemon;
use peapod_proto::v1 as cri;

async fn conditions(d: &TestDaemon) -> Vec<cri::RuntimeCondition> {
    d.cri
        .runtime
        .clone()
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
        .conditions
}

fn find<'a>(c: &'a [cri::RuntimeCondition], t: &str) -> &'a cri::RuntimeCondition {
    c.iter().find(|c| c.r#type == t).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runtime_binary_makes_the_runtime_not_ready() {
    let d = TestDaemon::start("status-ok").await;
    let c = conditions(&d).await;
    assert!(find(&c, "RuntimeReady").status, "{c:?}");
    assert!(find(&c, "NetworkReady").status, "{c:?}");
    drop(d);

    let d = TestDaemon::start_with(
        "status-bad",
        DaemonOptions {
            extra_config: "[runtime]\npath = \"/nonexistent/runc\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    let c = conditions(&d).await;
    let rt = find(&c, "RuntimeReady");
    assert!(!rt.status, "{c:?}");
    assert_eq!(rt.reason, "RuntimeBinaryNotFound");
    assert!(rt.message.contains("/nonexistent/runc"), "{}", rt.message);
}

/// UpdateRuntimeConfig with a pod CIDR, as the kubelet sends the Node's `podCIDR`.
async fn update_pod_cidr(d: &TestDaemon, cidr: &str) -> Result<(), tonic::Status> {
    d.cri
        .runtime
        .clone()
        .update_runtime_config(cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: cidr.to_string(),
                }),
            }),
        })
        .await
        .map(drop)
}

/// The kubelet hands the node's pod CIDR over with UpdateRuntimeConfig: pods of the built-in
/// network then get one address from it (host-local prepends runtime ranges to configured
/// ones, so handing it on as `ipRanges` gave two overlapping range sets and failed every ADD).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_cidr_from_update_runtime_config_is_the_builtin_networks_range() {
    let mut d = TestDaemon::start("status-cidr").await;
    // No configuration file: the built-in bridge (on this daemon's bridge and subnet).
    for f in std::fs::read_dir(&d.conf_dir).unwrap().flatten() {
        std::fs::remove_file(f.path()).unwrap();
    }
    // The upper half of this daemon's subnet, as a kubelet would give a node's CIDR.
    let base = d.subnet.trim_end_matches("0/24").to_string();
    let cidr = format!("{base}128/25");
    let bad = update_pod_cidr(&d, "10.0.0.0/99x").await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("pod_cidr"), "{}", bad.message());
    update_pod_cidr(&d, &cidr)
        .await
        .unwrap_or_else(|e| panic!("UpdateRuntimeConfig: {e}\n{}", d.log()));
    let pod = d.run_pod("cidr").await;
    let status = d
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
        .unwrap();
    let net = status.network.unwrap();
    let last: u8 = net.ip.rsplit('.').next().unwrap().parse().unwrap();
    assert!(
        net.ip.starts_with(&base) && last > 128,
        "{} is not in {cidr}",
        net.ip
    );
    assert!(net.additional_ips.is_empty(), "{:?}", net.additional_ips);
    d.remove_pod(&pod).await;
    // The kubelet sends the CIDR only when it changes: a restarted daemon keeps it.
    d.restart().await;
    let pod = d.run_pod("cidr-after-restart").await;
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
        .unwrap()
        .ip;
    let last: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
    assert!(ip.starts_with(&base) && last > 128, "{ip} after a restart");
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}");
}
