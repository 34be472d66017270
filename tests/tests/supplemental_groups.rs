//! SupplementalGroupsPolicy: Merge (the default) adds the image's /etc/group memberships of the
//! user to the CRI supplemental groups, Strict does not; ContainerStatus reports the groups the
//! process really has, and RuntimeStatus advertises the feature.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_adds_the_image_groups_and_strict_does_not() {
    let mut d = TestDaemon::start("suppgroups").await;
    let features = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .features
        .expect("features");
    assert!(features.supplemental_groups_policy);

    let images = Images::start();
    let spec = busybox()
        .passwd_line("default-user:x:1000:1000::/home:/bin/sh")
        .group_line("default-user:x:1000:")
        .group_line("group-defined-in-image:x:50000:default-user");
    let image = images.push("busybox:groups", &spec);
    d.pull(&image).await;
    let pod = d.run_pod("groups-pod").await;

    for (name, policy, want) in [
        (
            "merge",
            cri::SupplementalGroupsPolicy::Merge,
            vec![1000, 1234, 50000],
        ),
        (
            "strict",
            cri::SupplementalGroupsPolicy::Strict,
            vec![1000, 1234],
        ),
    ] {
        let mut config = sh(name, &image, "id -G; sleep 300 & wait");
        let linux = config.linux.get_or_insert_with(Default::default);
        let sc = linux.security_context.get_or_insert_with(Default::default);
        sc.run_as_user = Some(cri::Int64Value { value: 1000 });
        sc.supplemental_groups = vec![1234];
        sc.supplemental_groups_policy = policy as i32;
        let id = d.run_container(&pod, config).await;
        let text: Vec<String> = want.iter().map(|g| g.to_string()).collect();
        let line = text.join(" ");
        let lines = d.wait_log(&id, &line, Duration::from_secs(30)).await;
        assert_eq!(lines[0].text, line, "{name}: {lines:?}");

        let st = d.container_status(&id).await;
        let user = st.user.and_then(|u| u.linux).expect("user");
        assert_eq!((user.uid, user.gid), (1000, 1000), "{name}");
        let mut groups = user.supplemental_groups.clone();
        groups.sort_unstable();
        assert_eq!(groups, want, "{name}");

        // An exec'd process gets the same groups.
        let out = d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["id".into(), "-G".into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), line, "{name}");
    }
    d.remove_pod(&pod).await;
}
