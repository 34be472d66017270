//! GetContainerEvents: the lifecycle of a pod and its container as the evented PLEG sees it.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::time::Duration;
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_and_container_lifecycle_events_arrive_in_order() {
    let mut d = TestDaemon::start("events").await;
    let images = Images::start();
    let image = images.push("busybox:events", &busybox());
    d.pull(&image).await;
    let mut stream = d
        .cri
        .runtime
        .get_container_events(cri::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();

    let pod = d.run_pod("events-pod").await;
    let id = d.run_container(&pod, sh("once", &image, "true")).await;
    d.wait_exited(&id, Duration::from_secs(20)).await;
    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    d.remove_pod(&pod).await;

    use cri::ContainerEventType::*;
    let want = vec![
        (pod.id.clone(), ContainerCreatedEvent),
        (pod.id.clone(), ContainerStartedEvent),
        (id.clone(), ContainerCreatedEvent),
        (id.clone(), ContainerStartedEvent),
        (id.clone(), ContainerStoppedEvent),
        (id.clone(), ContainerDeletedEvent),
        (pod.id.clone(), ContainerStoppedEvent),
        (pod.id.clone(), ContainerDeletedEvent),
    ];
    let mut got = Vec::new();
    while got.len() < want.len() {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap_or_else(|_| panic!("no more events after {got:?}"))
            .expect("stream open")
            .expect("event");
        assert!(event.created_at > 0);
        if event.container_id == id && event.container_event_type == ContainerStoppedEvent as i32 {
            // The event carries the container's exit in the pod's container statuses.
            let st = event
                .containers_statuses
                .iter()
                .find(|s| s.id == id)
                .expect("status of the container");
            assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
            assert_eq!(st.reason, "Completed");
            assert_eq!(
                event.pod_sandbox_status.as_ref().map(|s| s.id.clone()),
                Some(pod.id.clone())
            );
        }
        got.push((
            event.container_id,
            cri::ContainerEventType::try_from(event.container_event_type).unwrap(),
        ));
    }
    assert_eq!(got, want);
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

/// SIGTERM while a client (a kubelet's evented PLEG) holds a GetContainerEvents stream open:
/// graceful shutdown waits for open streams, so the daemon must end them itself. It exits
/// within the bound, cleanly, and the client sees its stream end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_while_event_streams_are_open() {
    let mut d = TestDaemon::start("events-term").await;
    let mut streams = Vec::new();
    for _ in 0..2 {
        streams.push(
            d.cri
                .runtime
                .get_container_events(cri::GetEventsRequest {})
                .await
                .unwrap()
                .into_inner(),
        );
    }
    // The streams are live: Version on the same connection still answers.
    d.cri
        .runtime
        .version(cri::VersionRequest::default())
        .await
        .unwrap();
    let status = tokio::task::block_in_place(|| d.terminate(Duration::from_secs(10)))
        .unwrap_or_else(|| panic!("the daemon ignored SIGTERM for 10 s\n{}", d.log()));
    assert!(status.success(), "exit status {status:?}\n{}", d.log());
    for mut stream in streams {
        let end = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the stream stayed open after the daemon exited");
        // Ended cleanly (None) or cut with the connection (an error): either way, no event.
        assert!(!matches!(end, Some(Ok(_))), "{end:?}");
    }
    assert!(!d.socket.exists(), "the daemon removes its socket on exit");
}

/// SIGTERM while a client holds a connection it no longer drives (a process stopped or
/// stuck, or whose runtime is not polled): HTTP/2's graceful shutdown sends GOAWAY with a
/// PING and waits for the answer, which never comes. Found under systemd with a test client
/// idle across `systemctl restart peapod`: the stop waited out systemd's 90 s timeout and
/// ended in SIGKILL. The daemon bounds that wait and exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_while_a_client_stops_answering() {
    use std::io::{Read, Write};
    let mut d = TestDaemon::start("silent-client").await;
    let mut conn = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    // HTTP/2's preface and an empty SETTINGS frame, then nothing: no frame acknowledged.
    conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .unwrap();
    // The server's own SETTINGS: the connection is being served.
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "not a SETTINGS frame: {head:?}");
    let started = std::time::Instant::now();
    let status = tokio::task::block_in_place(|| d.terminate(Duration::from_secs(30)))
        .unwrap_or_else(|| panic!("the daemon ignored SIGTERM for 30 s\n{}", d.log()));
    assert!(status.success(), "exit status {status:?}\n{}", d.log());
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    assert!(!d.socket.exists(), "the daemon removes its socket on exit");
}
