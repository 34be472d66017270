//! Runtime handlers against fakes: RunPodSandbox's `runtime_handler` picks the OCI runtime
//! (and its root) the pod's shim drives, an unknown name is refused naming the field and
//! leaves nothing, and Status lists every handler. The harness's configuration has
//! `test-handler` (runc, the default's runtime) and `other-runtime` (crun).

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use tonic::{Code, Request};

#[tokio::test]
async fn a_configured_handler_runs_the_pod_on_its_runtime() {
    let h = Harness::new().await;
    let state = h.dir.path().join("state");

    let id = h
        .run_pod_with_handler(h.pod_config("rc"), "test-handler")
        .await
        .expect("RunPodSandbox with test-handler");
    let used = h.shims.handler_of(&id).expect("a shim");
    assert_eq!(
        (used.name.as_str(), used.path.as_str()),
        ("test-handler", "runc")
    );
    assert_eq!(used.root, state.join("runc"), "the default runtime's root");
    let status = h.pod_status(&id).await.unwrap().status.unwrap();
    assert_eq!(status.runtime_handler, "test-handler");
    let listed = h.pods().await;
    assert_eq!(listed[0].runtime_handler, "test-handler");

    let other = h
        .run_pod_with_handler(h.pod_config("fast"), "other-runtime")
        .await
        .expect("RunPodSandbox with other-runtime");
    let used = h.shims.handler_of(&other).expect("a shim");
    assert_eq!(used.path, "crun");
    assert_eq!(
        used.root,
        state.join("runtimes/other-runtime"),
        "a root of its own"
    );

    // The default, by no name and by its runtime's name.
    for (name, handler) in [("plain", ""), ("named", "runc")] {
        let id = h
            .run_pod_with_handler(h.pod_config(name), handler)
            .await
            .unwrap();
        let used = h.shims.handler_of(&id).unwrap();
        assert_eq!((used.name.as_str(), used.path.as_str()), ("", "runc"));
        h.remove_pod(&id).await.unwrap();
    }
    h.remove_pod(&id).await.unwrap();
    h.remove_pod(&other).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn an_unknown_handler_is_refused_naming_the_field_and_leaves_nothing() {
    let h = Harness::new().await;
    let err = h
        .run_pod_with_handler(h.pod_config("rc"), "kata")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let msg = err.message();
    assert!(
        msg.contains("runtime_handler \"kata\" is not configured"),
        "{msg}"
    );
    assert!(
        msg.contains("\"test-handler\"") && msg.contains("\"other-runtime\""),
        "{msg}"
    );
    assert!(h.shims.live().is_empty(), "no shim started");
    h.assert_nothing_left().await;
    // The name is free: the same pod runs with a handler that exists.
    let id = h
        .run_pod_with_handler(h.pod_config("rc"), "test-handler")
        .await
        .unwrap();
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn status_lists_every_handler_and_what_only_the_probed_runtime_offers() {
    let h = Harness::new().await;
    let resp = h
        .cri
        .status(Request::new(cri::StatusRequest { verbose: true }))
        .await
        .unwrap()
        .into_inner();
    let handlers: Vec<(String, bool)> = resp
        .runtime_handlers
        .iter()
        .map(|r| (r.name.clone(), r.features.as_ref().unwrap().user_namespaces))
        .collect();
    // The harness's fakes can make user namespaces: the runc handlers say so, crun's not,
    // since the probe was made with runc.
    assert_eq!(
        handlers,
        vec![
            (String::new(), true),
            ("other-runtime".to_string(), false),
            ("test-handler".to_string(), true),
        ]
    );
    let info = &resp.info["config"];
    assert!(
        info.contains("\"runtimeHandlers\"") && info.contains("other-runtime"),
        "{info}"
    );
}

#[tokio::test]
async fn a_user_namespace_needs_the_probed_runtime() {
    let h = Harness::new().await;
    let map = cri::IdMapping {
        host_id: 200000,
        container_id: 0,
        length: 65536,
    };
    let mut config = h.pod_config("userns");
    config.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                userns_options: Some(cri::UserNamespace {
                    mode: cri::NamespaceMode::Pod as i32,
                    uids: vec![map],
                    gids: vec![map],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let err = h
        .run_pod_with_handler(config.clone(), "other-runtime")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("userns_options"), "{err:?}");
    assert!(err.message().contains("other-runtime"), "{err:?}");
    h.assert_nothing_left().await;
    let id = h
        .run_pod_with_handler(config, "test-handler")
        .await
        .expect("the probed runtime's handler");
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
}
