//! ListPodSandbox and ListContainers (and their Stream* forms) against a reference: every
//! filter — id or unique id prefix, state, label selector, pod sandbox id or prefix, and
//! their combinations — keeps exactly the objects a plain scan of every object's status
//! keeps, newest first, as pods and containers are made, change state, go away, and after a
//! restart that reloads them from their records (the table's orders are rebuilt, not kept).

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use std::collections::HashMap;
use tokio_stream::StreamExt;
use tonic::Request;

/// An id or unique prefix among `ids`, as the daemon resolves it.
fn resolve(ids: &[String], prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        return None;
    }
    let matches: Vec<&String> = ids.iter().filter(|i| i.starts_with(prefix)).collect();
    match matches.as_slice() {
        [one] => Some((*one).clone()),
        _ => matches.iter().find(|i| **i == prefix).map(|i| (*i).clone()),
    }
}

fn selects(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What the test knows: the pods it made and has not removed, and its containers with
/// their pods.
#[derive(Default)]
struct Known {
    pods: Vec<String>,
    containers: Vec<(String, String)>,
}

impl Known {
    fn container_ids(&self) -> Vec<String> {
        self.containers.iter().map(|(c, _)| c.clone()).collect()
    }
}

/// A pod's status as the checks compare it: (id, created_at, state, labels).
type PodRow = (String, i64, i32, HashMap<String, String>);
/// A container's: (id, created_at, state, labels, pod).
type ContainerRow = (String, i64, i32, HashMap<String, String>, String);

/// Every known object's status, read once per check.
struct Statuses {
    pods: Vec<PodRow>,
    containers: Vec<ContainerRow>,
}

async fn statuses(h: &Harness, k: &Known) -> Statuses {
    let mut pods = Vec::new();
    for id in &k.pods {
        let s = h
            .pod_status(id)
            .await
            .expect("status")
            .status
            .expect("a status");
        pods.push((s.id, s.created_at, s.state, s.labels));
    }
    let mut containers = Vec::new();
    for (id, pod) in &k.containers {
        let s = h.container_status(id).await.expect("status");
        containers.push((s.id, s.created_at, s.state, s.labels, pod.clone()));
    }
    Statuses { pods, containers }
}

/// Newest first, then by id.
fn newest_first(mut v: Vec<(i64, String)>) -> Vec<String> {
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    v.into_iter().map(|(_, id)| id).collect()
}

fn expected_pods(k: &Known, all: &Statuses, f: &cri::PodSandboxFilter) -> Vec<String> {
    let only = resolve(&k.pods, &f.id);
    if !f.id.is_empty() && only.is_none() {
        return Vec::new();
    }
    let keep = all
        .pods
        .iter()
        .filter(|(id, _, state, labels)| {
            only.as_ref().is_none_or(|o| o == id)
                && f.state.as_ref().is_none_or(|st| st.state == *state)
                && selects(labels, &f.label_selector)
        })
        .map(|(id, created, _, _)| (*created, id.clone()))
        .collect();
    newest_first(keep)
}

fn expected_containers(k: &Known, all: &Statuses, f: &cri::ContainerFilter) -> Vec<String> {
    let only = resolve(&k.container_ids(), &f.id);
    let pod = resolve(&k.pods, &f.pod_sandbox_id);
    if (!f.id.is_empty() && only.is_none()) || (!f.pod_sandbox_id.is_empty() && pod.is_none()) {
        return Vec::new();
    }
    let keep = all
        .containers
        .iter()
        .filter(|(id, _, state, labels, in_pod)| {
            only.as_ref().is_none_or(|o| o == id)
                && pod.as_ref().is_none_or(|p| p == in_pod)
                && f.state.as_ref().is_none_or(|st| st.state == *state)
                && selects(labels, &f.label_selector)
        })
        .map(|(id, created, _, _, _)| (*created, id.clone()))
        .collect();
    newest_first(keep)
}

/// Filter values to try on ids: none, every id whole and as a 3-character prefix, 1-character
/// prefixes (often ambiguous), and a prefix of nothing.
fn id_choices(ids: &[String]) -> Vec<String> {
    let mut out = vec![String::new(), "zz".to_string()];
    for id in ids {
        out.push(id.clone());
        out.push(id[..3].to_string());
        out.push(id[..1].to_string());
    }
    out.sort();
    out.dedup();
    out
}

fn selectors() -> Vec<HashMap<String, String>> {
    let m = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>()
    };
    vec![
        m(&[]),
        m(&[("tier", "web")]),
        m(&[("tier", "db"), ("zone", "a")]),
        m(&[("missing", "x")]),
    ]
}

async fn check_pods(h: &Harness, k: &Known, all: &Statuses) {
    let states = [
        None,
        Some(cri::PodSandboxState::SandboxReady),
        Some(cri::PodSandboxState::SandboxNotready),
    ];
    for id in id_choices(&k.pods) {
        for state in states {
            for label_selector in selectors() {
                let filter = cri::PodSandboxFilter {
                    id: id.clone(),
                    state: state.map(|s| cri::PodSandboxStateValue { state: s as i32 }),
                    label_selector,
                };
                let want = expected_pods(k, all, &filter);
                let got: Vec<String> = h
                    .cri
                    .list_pod_sandbox(Request::new(cri::ListPodSandboxRequest {
                        filter: Some(filter.clone()),
                    }))
                    .await
                    .expect("ListPodSandbox")
                    .into_inner()
                    .received()
                    .expect("decode")
                    .items
                    .into_iter()
                    .map(|p| p.id)
                    .collect();
                assert_eq!(got, want, "ListPodSandbox {filter:?}");
                let streamed: Vec<String> = h
                    .cri
                    .stream_pod_sandboxes(Request::new(cri::StreamPodSandboxesRequest {
                        filter: Some(filter.clone()),
                    }))
                    .await
                    .expect("StreamPodSandboxes")
                    .into_inner()
                    .map(|m| {
                        m.expect("a message")
                            .received()
                            .expect("decode")
                            .pod_sandboxes
                    })
                    .collect::<Vec<_>>()
                    .await
                    .into_iter()
                    .flatten()
                    .map(|p| p.id)
                    .collect();
                assert_eq!(streamed, want, "StreamPodSandboxes {filter:?}");
            }
        }
    }
    // No filter at all: every pod.
    let listed: Vec<String> = h.pods().await.into_iter().map(|p| p.id).collect();
    assert_eq!(
        listed,
        expected_pods(k, all, &Default::default()),
        "no filter"
    );
}

async fn check_containers(h: &Harness, k: &Known, all: &Statuses) {
    let states = [
        None,
        Some(cri::ContainerState::ContainerCreated),
        Some(cri::ContainerState::ContainerRunning),
        Some(cri::ContainerState::ContainerExited),
    ];
    let mut pod_choices = vec![String::new(), "zz".to_string()];
    for p in &k.pods {
        pod_choices.push(p.clone());
        pod_choices.push(p[..2].to_string());
    }
    for id in id_choices(&k.container_ids()) {
        for pod in &pod_choices {
            for state in states {
                for label_selector in selectors() {
                    let filter = cri::ContainerFilter {
                        id: id.clone(),
                        state: state.map(|s| cri::ContainerStateValue { state: s as i32 }),
                        pod_sandbox_id: pod.clone(),
                        label_selector,
                    };
                    let want = expected_containers(k, all, &filter);
                    let got: Vec<String> = h
                        .cri
                        .list_containers(Request::new(cri::ListContainersRequest {
                            filter: Some(filter.clone()),
                        }))
                        .await
                        .expect("ListContainers")
                        .into_inner()
                        .received()
                        .expect("decode")
                        .containers
                        .into_iter()
                        .map(|c| c.id)
                        .collect();
                    assert_eq!(got, want, "ListContainers {filter:?}");
                    let streamed: Vec<String> = h
                        .cri
                        .stream_containers(Request::new(cri::StreamContainersRequest {
                            filter: Some(filter.clone()),
                        }))
                        .await
                        .expect("StreamContainers")
                        .into_inner()
                        .map(|m| m.expect("a message").received().expect("decode").containers)
                        .collect::<Vec<_>>()
                        .await
                        .into_iter()
                        .flatten()
                        .map(|c| c.id)
                        .collect();
                    assert_eq!(streamed, want, "StreamContainers {filter:?}");
                }
            }
        }
    }
    let listed: Vec<String> = h.containers().await.into_iter().map(|c| c.id).collect();
    assert_eq!(
        listed,
        expected_containers(k, all, &Default::default()),
        "no filter"
    );
}

async fn check(h: &Harness, k: &Known) {
    let all = statuses(h, k).await;
    check_pods(h, k, &all).await;
    check_containers(h, k, &all).await;
}

#[tokio::test]
async fn list_filters_match_a_scan_of_every_status_through_changes_and_a_restart() {
    let mut h = Harness::new().await;
    let mut k = Known::default();
    for i in 0..6 {
        let mut config = h.pod_config(&format!("p{i}"));
        let tier = if i % 2 == 0 { "web" } else { "db" };
        config.labels = HashMap::from([
            ("tier".to_string(), tier.to_string()),
            (
                "zone".to_string(),
                if i < 3 { "a" } else { "b" }.to_string(),
            ),
        ]);
        k.pods
            .push(h.run_pod_with(config).await.expect("RunPodSandbox"));
    }
    // Containers in three pods: created, running, exited.
    for (n, pod) in k.pods.clone().iter().take(3).enumerate() {
        for j in 0..3 {
            let mut config = h.container_config(&format!("c{j}"));
            config.labels = HashMap::from([
                (
                    "tier".to_string(),
                    if j == 1 { "db" } else { "web" }.to_string(),
                ),
                ("zone".to_string(), "a".to_string()),
            ]);
            let id = h
                .create_container_with(pod, config)
                .await
                .expect("CreateContainer");
            if (j + n) % 3 != 0 {
                h.start_container(&id).await.expect("StartContainer");
            }
            if (j + n) % 3 == 2 {
                h.stop_container(&id, 0).await.expect("StopContainer");
            }
            k.containers.push((id, pod.clone()));
        }
    }
    h.stop_pod(&k.pods[4]).await.expect("StopPodSandbox");
    check(&h, &k).await;

    // Updates and removals: a container removed, a pod stopped (its containers exit) and one
    // removed with its containers.
    let (gone, _) = k.containers.remove(1);
    h.remove_container(&gone).await.expect("RemoveContainer");
    h.stop_pod(&k.pods[2]).await.expect("StopPodSandbox");
    let pod = k.pods.remove(0);
    h.stop_pod(&pod).await.expect("StopPodSandbox");
    h.remove_pod(&pod).await.expect("RemovePodSandbox");
    k.containers.retain(|(_, p)| *p != pod);
    check(&h, &k).await;

    // A restart: the tables and their orders come back from the records alone.
    h.restart().await;
    check(&h, &k).await;
    // And a pod made after it sorts first.
    k.pods
        .push(h.run_pod("after-restart").await.expect("RunPodSandbox"));
    assert_eq!(h.pods().await[0].id, *k.pods.last().expect("a pod"));
    check(&h, &k).await;
}
