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
