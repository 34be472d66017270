//! The containerd face's own behaviour over the fake runtime and processes: what containerd
//! does differently from peapod's daemon (Wait before Start, Shutdown after every Delete,
//! runc's options in Create, Checkpoint). No root, no runc, no containerd.

use super::*;
use crate::fakes::{FakeProcesses, FakeRuntime};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use std::time::Duration;
use tokio::sync::Notify;

struct Fixture {
    task: Arc<ContainerdTask>,
    processes: Arc<FakeProcesses>,
    shutdown: Arc<Notify>,
    dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    fixture_with(RuntimeOptions::default())
}

/// A shim launched with `runtime`'s options.
fn fixture_with(options: RuntimeOptions) -> Fixture {
    fixture_full(options, Publisher::start(None, "ns".into()))
}

/// A shim launched with `runtime`'s options, publishing with `events`.
fn fixture_full(options: RuntimeOptions, events: Publisher) -> Fixture {
    let processes = Arc::new(FakeProcesses::default());
    let runtime = Arc::new(FakeRuntime::new(processes.clone()));
    let dir = tempfile::tempdir().unwrap();
    let shutdown = Arc::new(Notify::new());
    let tasks = Arc::new(TaskService::new(
        crate::backend::Backends::runtime_only(runtime),
        processes.clone(),
        dir.path().to_path_buf(),
        shutdown.clone(),
    ));
    Fixture {
        task: Arc::new(ContainerdTask::new(tasks, events, options)),
        processes,
        shutdown,
        dir,
    }
}

fn ctx() -> TtrpcContext {
    TtrpcContext::default()
}

fn code<T: std::fmt::Debug>(r: TtrpcResult<T>) -> ttrpc::Code {
    match r.unwrap_err() {
        ttrpc::Error::RpcStatus(s) => s.code(),
        other => panic!("not a status: {other:?}"),
    }
}

impl Fixture {
    /// A create request as containerd sends it: no rootfs mounts (the bundle has its rootfs),
    /// no stdio, runc's options.
    fn create_request(&self, id: &str) -> api::CreateTaskRequest {
        let bundle = self.dir.path().join(id);
        std::fs::create_dir_all(&bundle).unwrap();
        let mut req = api::CreateTaskRequest::new();
        req.id = id.to_string();
        req.bundle = bundle.to_string_lossy().into_owned();
        let mut options = Any::new();
        options.type_url = "containerd.runc.v1.Options".into();
        req.options = MessageField::some(options);
        req
    }

    async fn running(&self, id: &str) -> u32 {
        let created = self.task.create(&ctx(), self.create_request(id)).await;
        let pid = created.unwrap().pid;
        let mut start = api::StartRequest::new();
        start.id = id.to_string();
        self.task.start(&ctx(), start).await.unwrap();
        pid
    }
}

#[tokio::test]
async fn an_exec_waited_for_before_its_start_reports_its_exit() {
    let f = fixture();
    f.running("c1").await;
    let mut exec = api::ExecProcessRequest::new();
    exec.id = "c1".into();
    exec.exec_id = "e1".into();
    let mut spec = Any::new();
    spec.type_url = protocol::PROCESS_TYPE_URL.into();
    spec.value = br#"{"args":["true"],"cwd":"/"}"#.to_vec();
    exec.spec = MessageField::some(spec);
    f.task.exec(&ctx(), exec).await.unwrap();
    // containerd's order: Wait first, then Start.
    let task = f.task.clone();
    let waiter = tokio::spawn(async move {
        let mut wait = api::WaitRequest::new();
        wait.id = "c1".into();
        wait.exec_id = "e1".into();
        task.wait(&ctx(), wait).await
    });
    tokio::task::yield_now().await;
    let mut start = api::StartRequest::new();
    start.id = "c1".into();
    start.exec_id = "e1".into();
    let pid = f.task.start(&ctx(), start).await.unwrap().pid;
    f.processes.exit(pid, 3);
    let resp = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("Wait returns once the exec exited")
        .unwrap()
        .unwrap();
    assert_eq!(resp.exit_status, 3);
}

#[tokio::test]
async fn a_wait_on_an_exec_deleted_before_its_start_ends_with_not_found() {
    let f = fixture();
    f.running("c1").await;
    let mut exec = api::ExecProcessRequest::new();
    exec.id = "c1".into();
    exec.exec_id = "e1".into();
    let mut spec = Any::new();
    spec.type_url = protocol::PROCESS_TYPE_URL.into();
    spec.value = b"{}".to_vec();
    exec.spec = MessageField::some(spec);
    f.task.exec(&ctx(), exec).await.unwrap();
    let task = f.task.clone();
    let waiter = tokio::spawn(async move {
        let mut wait = api::WaitRequest::new();
        wait.id = "c1".into();
        wait.exec_id = "e1".into();
        task.wait(&ctx(), wait).await
    });
    tokio::task::yield_now().await;
    let mut delete = api::DeleteRequest::new();
    delete.id = "c1".into();
    delete.exec_id = "e1".into();
    f.task.delete(&ctx(), delete).await.unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("Wait ends once the exec is deleted")
        .unwrap();
    assert_eq!(code(resp), ttrpc::Code::NOT_FOUND);
}

#[tokio::test]
async fn shutdown_keeps_the_shim_while_the_pod_has_containers() {
    let f = fixture();
    let pid = f.running("c1").await;
    let notified = f.shutdown.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    f.task
        .shutdown(&ctx(), api::ShutdownRequest::new())
        .await
        .unwrap();
    assert!(
        futures_poll_once(notified.as_mut()).await.is_none(),
        "the shim must not exit while c1 exists"
    );
    f.processes.exit(pid, 0);
    let mut wait = api::WaitRequest::new();
    wait.id = "c1".into();
    f.task.wait(&ctx(), wait).await.unwrap();
    let mut delete = api::DeleteRequest::new();
    delete.id = "c1".into();
    let deleted = f.task.delete(&ctx(), delete).await.unwrap();
    assert_eq!(deleted.pid, pid);
    f.task
        .shutdown(&ctx(), api::ShutdownRequest::new())
        .await
        .unwrap();
    assert!(futures_poll_once(notified.as_mut()).await.is_some());
}

/// Polls a future once: `Some` if it is ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test]
async fn checkpoints_and_duplicates_are_refused_clearly() {
    let f = fixture();
    let r = f
        .task
        .checkpoint(&ctx(), api::CheckpointTaskRequest::new())
        .await;
    assert_eq!(code(r), ttrpc::Code::UNIMPLEMENTED);
    let mut req = f.create_request("c1");
    req.checkpoint = "/some/checkpoint".into();
    assert_eq!(
        code(f.task.create(&ctx(), req).await),
        ttrpc::Code::UNIMPLEMENTED
    );
    f.running("c1").await;
    assert_eq!(
        code(f.task.create(&ctx(), f.create_request("c1")).await),
        ttrpc::Code::ALREADY_EXISTS
    );
    let mut req = f.create_request("c2");
    req.bundle.clear();
    assert_eq!(
        code(f.task.create(&ctx(), req).await),
        ttrpc::Code::INVALID_ARGUMENT
    );
}

/// `containerd.runc.v1.Options` with SystemdCgroup (field 9) and BinaryName (field 6).
fn runc_options(systemd: bool, binary: &str) -> Any {
    let mut value = Vec::new();
    if !binary.is_empty() {
        value.extend([6 << 3 | 2, binary.len() as u8]);
        value.extend(binary.as_bytes());
    }
    if systemd {
        value.extend([9 << 3, 1]);
    }
    let mut any = Any::new();
    any.type_url = "containerd.runc.v1.Options".into();
    any.value = value;
    any
}

#[tokio::test]
async fn a_create_whose_runtime_options_differ_from_the_shims_is_refused() {
    let shims = RuntimeOptions {
        binary: Some("/usr/sbin/runc".into()),
        root: None,
        systemd_cgroup: true,
    };
    let f = fixture_with(shims.clone());
    let mut req = f.create_request("c1");
    req.options = MessageField::some(runc_options(true, "/usr/sbin/runc"));
    let bundle = PathBuf::from(&req.bundle);
    f.task.create(&ctx(), req).await.unwrap();
    // Kept in the bundle for `delete`, which containerd 2.x runs without a `start` before it
    // for a container that joined its pod's shim.
    assert_eq!(RuntimeOptions::saved(&bundle), shims);

    let mut req = f.create_request("c2");
    req.options = MessageField::some(runc_options(false, "/usr/sbin/runc"));
    let err = f.task.create(&ctx(), req).await.unwrap_err();
    let ttrpc::Error::RpcStatus(status) = err else {
        panic!("not a status: {err:?}")
    };
    assert_eq!(status.code(), ttrpc::Code::FAILED_PRECONDITION);
    assert!(
        status.message.contains("SystemdCgroup false")
            && status.message.contains("SystemdCgroup true")
            && status.message.contains("c2"),
        "{}",
        status.message
    );
    // Nothing of c2 was made.
    assert!(f.task.tasks.task_pid("c2").is_none());
    assert!(!f.task.held().contains_key("c2"));
    // No options at all are the defaults, which differ too.
    let mut req = f.create_request("c3");
    req.options = MessageField::none();
    assert_eq!(
        code(f.task.create(&ctx(), req).await),
        ttrpc::Code::FAILED_PRECONDITION
    );
}

#[tokio::test]
async fn runtime_options_the_shim_cannot_read_are_refused() {
    let f = fixture();
    let mut req = f.create_request("c1");
    let mut any = Any::new();
    any.type_url = "io.containerd.kata.v2.Options".into();
    req.options = MessageField::some(any);
    let err = f.task.create(&ctx(), req).await.unwrap_err();
    let ttrpc::Error::RpcStatus(status) = err else {
        panic!("not a status: {err:?}")
    };
    assert_eq!(status.code(), ttrpc::Code::INVALID_ARGUMENT);
    assert!(
        status.message.contains("io.containerd.kata.v2.Options"),
        "{}",
        status.message
    );
    // A shim with the default options takes a create without any.
    let mut req = f.create_request("c2");
    req.options = MessageField::none();
    f.task.create(&ctx(), req).await.unwrap();
}

#[tokio::test]
async fn state_reports_the_stdio_paths_containerd_reattaches_to() {
    let f = fixture();
    let out = f.dir.path().join("out");
    std::fs::write(&out, "").unwrap();
    let mut req = f.create_request("c1");
    req.stdout = out.display().to_string();
    req.stderr = out.display().to_string();
    f.task.create(&ctx(), req).await.unwrap();
    let mut state = api::StateRequest::new();
    state.id = "c1".into();
    let resp = f.task.state(&ctx(), state).await.unwrap();
    assert_eq!(resp.stdout, out.display().to_string());
    assert_eq!(resp.stderr, out.display().to_string());
    assert_eq!(resp.stdin, "");
}

#[tokio::test]
async fn pids_fail_while_containerd_has_not_taken_an_exit() {
    // containerd is down: nothing listens at its address, so TaskExit stays undelivered.
    let down = tempfile::tempdir().unwrap();
    let address = format!("unix://{}", down.path().join("ttrpc.sock").display());
    let f = fixture_full(
        RuntimeOptions::default(),
        Publisher::start(Some(address), "ns".into()),
    );
    let pid = f.running("c1").await;
    let mut pids = api::PidsRequest::new();
    pids.id = "c1".into();
    let running = f.task.pids(&ctx(), pids.clone()).await.unwrap();
    assert_eq!(running.processes.len(), 1);
    assert_eq!(running.processes[0].pid, pid);

    f.processes.exit(pid, 7);
    let mut wait = api::WaitRequest::new();
    wait.id = "c1".into();
    assert_eq!(f.task.wait(&ctx(), wait).await.unwrap().exit_status, 7);
    // The exit watch queues TaskExit on its own task, just after the exit.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match f.task.pids(&ctx(), pids.clone()).await {
            Err(ttrpc::Error::RpcStatus(status)) => break status,
            other => assert!(
                std::time::Instant::now() < deadline,
                "Pids of an exited container with an undelivered exit: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(refused.code(), ttrpc::Code::FAILED_PRECONDITION);
    assert!(refused.message.contains("c1"), "{}", refused.message);

    // Delete answers the exit: from then on the exit is containerd's, and the task gone.
    let mut delete = api::DeleteRequest::new();
    delete.id = "c1".into();
    assert_eq!(f.task.delete(&ctx(), delete).await.unwrap().exit_status, 7);
    assert!(!f.task.unreported_exits.lock_unpoisoned().contains("c1"));
    assert_ne!(
        code(f.task.pids(&ctx(), pids).await),
        ttrpc::Code::FAILED_PRECONDITION
    );
}
