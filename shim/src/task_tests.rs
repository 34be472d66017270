//! The Task service over the fake runtime and processes: the lifecycle of containers and
//! execs, what each failure returns and what it cleans up. No root, no runc.

use super::*;
use crate::fakes::{failed, FakeProcesses, FakeRuntime};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::MessageField;
use ttrpc::Code;

struct Fixture {
    tasks: TaskService,
    runtime: Arc<FakeRuntime>,
    processes: Arc<FakeProcesses>,
    dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let processes = Arc::new(FakeProcesses::default());
    let runtime = Arc::new(FakeRuntime::new(processes.clone()));
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskService::new(
        Backends::runtime_only(runtime.clone()),
        processes.clone(),
        dir.path().to_path_buf(),
        Arc::new(Notify::new()),
    );
    Fixture {
        tasks,
        runtime,
        processes,
        dir,
    }
}

impl Fixture {
    fn bundle(&self, id: &str) -> PathBuf {
        let b = self.dir.path().join(id);
        std::fs::create_dir_all(&b).unwrap();
        b
    }

    fn request(&self, id: &str, options: Option<CreateOptions>) -> api::CreateTaskRequest {
        let mut req = api::CreateTaskRequest::new();
        req.id = id.to_string();
        req.bundle = self.bundle(id).to_string_lossy().into_owned();
        if let Some(o) = options {
            let mut any = Any::new();
            any.type_url = protocol::CREATE_OPTIONS_TYPE_URL.to_string();
            any.value = serde_json::to_vec(&o).unwrap();
            req.options = MessageField::some(any);
        }
        req
    }

    async fn create_with(&self, id: &str, options: CreateOptions) -> Result<u32> {
        self.tasks.create(self.request(id, Some(options))).await
    }

    async fn create(&self, id: &str) -> u32 {
        self.tasks.create(self.request(id, None)).await.unwrap()
    }

    /// A created and started container.
    async fn running(&self, id: &str) -> u32 {
        let pid = self.create(id).await;
        self.tasks.start(id, "").await.unwrap();
        pid
    }

    fn status(&self, id: &str, exec_id: &str) -> Status {
        self.tasks.state(id, exec_id).unwrap().status
    }

    fn exec_request(&self, id: &str, exec_id: &str) -> api::ExecProcessRequest {
        let mut req = api::ExecProcessRequest::new();
        req.id = id.to_string();
        req.exec_id = exec_id.to_string();
        let mut any = Any::new();
        any.type_url = protocol::PROCESS_TYPE_URL.to_string();
        any.value = br#"{"args":["sh"],"cwd":"/"}"#.to_vec();
        req.spec = MessageField::some(any);
        req
    }
}

fn code<T: std::fmt::Debug>(r: Result<T>) -> Code {
    r.unwrap_err().code()
}

#[tokio::test]
async fn create_start_kill_wait_delete() {
    let f = fixture();
    let pid = f.create("c1").await;
    assert_eq!(f.status("c1", ""), Status::CREATED);
    assert_eq!(f.tasks.task_pid("c1"), Some(pid));
    assert_eq!(f.tasks.start("c1", "").await.unwrap(), pid);
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    // Started once only.
    assert_eq!(
        code(f.tasks.start("c1", "").await),
        Code::FAILED_PRECONDITION
    );
    // A running container is not deleted.
    assert_eq!(
        code(f.tasks.delete("c1", "").await),
        Code::FAILED_PRECONDITION
    );

    f.tasks.kill("c1", "", 15, false).await.unwrap();
    let exit = f.tasks.wait("c1", "").await.unwrap();
    assert_eq!(
        (exit.pid, exit.exit_code, exit.oom_killed),
        (pid, 143, false)
    );
    // The exit was recorded durably before it was reported.
    let recorded = ExitRecord::read(&f.bundle("c1").join("exit"))
        .unwrap()
        .unwrap();
    assert_eq!(recorded, exit);
    let state = f.tasks.state("c1", "").unwrap();
    assert_eq!((state.status, state.exit), (Status::STOPPED, Some(exit)));
    // Killing what has exited is fine and does not ask the runtime.
    let calls = f.runtime.calls().len();
    f.tasks.kill("c1", "", 9, false).await.unwrap();
    assert_eq!(f.runtime.calls().len(), calls);

    let (deleted_pid, deleted_exit) = f.tasks.delete("c1", "").await.unwrap();
    assert_eq!((deleted_pid, deleted_exit), (pid, Some(exit)));
    assert_eq!(f.runtime.status("c1"), None);
    assert!(matches!(
        f.tasks.state("c1", ""),
        Err(ShimError::ContainerNotFound { .. })
    ));
    assert_eq!(
        f.runtime.calls(),
        vec!["create c1", "start c1", "kill c1 15", "delete --force c1"]
    );
    f.tasks.shutdown(false).unwrap();
}

#[tokio::test]
async fn create_with_start_runs_it_and_start_only_reports_the_pid() {
    let f = fixture();
    let options = CreateOptions {
        start: true,
        ..Default::default()
    };
    let pid = f.create_with("c1", options).await.unwrap();
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    assert_eq!(f.tasks.start("c1", "").await.unwrap(), pid);
    assert_eq!(f.runtime.calls(), vec!["run c1"]);
}

#[tokio::test]
async fn bad_create_requests_change_nothing() {
    let f = fixture();
    let mut req = f.request("c1", None);
    req.bundle.clear();
    assert_eq!(code(f.tasks.create(req).await), Code::INVALID_ARGUMENT);

    let mut req = f.request("c1", None);
    let mut any = Any::new();
    any.type_url = "example.com/Other".into();
    req.options = MessageField::some(any);
    assert_eq!(code(f.tasks.create(req).await), Code::INVALID_ARGUMENT);

    let mut req = f.request("c1", None);
    let mut any = Any::new();
    any.type_url = protocol::CREATE_OPTIONS_TYPE_URL.into();
    any.value = b"not json".to_vec();
    req.options = MessageField::some(any);
    let err = f.tasks.create(req).await.unwrap_err();
    assert_eq!(err.code(), Code::INVALID_ARGUMENT);
    assert!(err.to_string().contains("create options"), "{err}");

    assert!(f.runtime.calls().is_empty());
    assert!(f.tasks.state("c1", "").is_err());

    f.create("c1").await;
    assert_eq!(
        code(f.tasks.create(f.request("c1", None)).await),
        Code::ALREADY_EXISTS
    );
    assert_eq!(f.runtime.calls(), vec!["create c1"]);
}

#[tokio::test]
async fn a_failed_runtime_create_is_deleted_and_not_recorded() {
    let f = fixture();
    f.runtime.fail_next("create", failed("create"));
    let err = f.tasks.create(f.request("c1", None)).await.unwrap_err();
    assert!(matches!(err, ShimError::Runtime(_)), "{err:?}");
    assert_eq!(err.code(), Code::UNKNOWN);
    assert_eq!(f.runtime.calls(), vec!["create c1", "delete --force c1"]);
    assert!(f.tasks.state("c1", "").is_err());
    // The id is free again.
    f.create("c1").await;
}

#[tokio::test]
async fn a_runtime_that_writes_no_pid_is_an_internal_error() {
    let f = fixture();
    f.runtime.fail_next(
        "create",
        RuntimeCliError::NoPidFile {
            runtime: "fake-runc".into(),
            command: "create".into(),
            path: f.bundle("c1").join("init.pid"),
        },
    );
    let err = f.tasks.create(f.request("c1", None)).await.unwrap_err();
    assert_eq!(err.code(), Code::INTERNAL);
    assert_eq!(f.runtime.calls(), vec!["create c1", "delete --force c1"]);
}

#[tokio::test]
async fn a_failed_attach_socket_deletes_the_created_container() {
    let f = fixture();
    let options = CreateOptions {
        attach_socket: f
            .dir
            .path()
            .join("missing-dir/attach.sock")
            .to_string_lossy()
            .into_owned(),
        ..Default::default()
    };
    let err = f.create_with("c1", options).await.unwrap_err();
    assert_eq!(err.code(), Code::INTERNAL);
    assert!(err.to_string().contains("attach socket"), "{err}");
    assert_eq!(f.runtime.calls(), vec!["create c1", "delete --force c1"]);
    assert_eq!(f.runtime.status("c1"), None);
    assert!(f.tasks.state("c1", "").is_err());
}

#[tokio::test]
async fn the_attach_socket_serves_until_the_container_is_deleted() {
    let f = fixture();
    let sock = f.dir.path().join("attach.sock");
    let options = CreateOptions {
        attach_socket: sock.to_string_lossy().into_owned(),
        ..Default::default()
    };
    f.create_with("c1", options).await.unwrap();
    assert!(tokio::net::UnixStream::connect(&sock).await.is_ok());
    f.tasks.delete("c1", "").await.unwrap();
    assert!(f.tasks.state("c1", "").is_err());
}

#[tokio::test]
async fn deleting_a_created_container_kills_its_init_and_reports_the_exit() {
    let f = fixture();
    let pid = f.create("c1").await;
    let (deleted, exit) = f.tasks.delete("c1", "").await.unwrap();
    assert_eq!(deleted, pid);
    assert_eq!(exit.map(|e| e.exit_code), Some(137));
    assert_eq!(f.runtime.calls(), vec!["create c1", "delete --force c1"]);
}

#[tokio::test]
async fn delete_is_done_when_the_runtime_no_longer_knows_the_container() {
    let f = fixture();
    let pid = f.running("c1").await;
    f.processes.exit(pid, 0);
    f.tasks.wait("c1", "").await.unwrap();
    f.runtime.forget("c1");
    let (_, exit) = f.tasks.delete("c1", "").await.unwrap();
    assert_eq!(exit.map(|e| e.exit_code), Some(0));
    assert!(f.tasks.state("c1", "").is_err());
}

#[tokio::test]
async fn a_failed_runtime_delete_keeps_the_container() {
    let f = fixture();
    let pid = f.running("c1").await;
    f.processes.exit(pid, 1);
    f.tasks.wait("c1", "").await.unwrap();
    f.runtime.fail_next("delete", failed("delete"));
    let err = f.tasks.delete("c1", "").await.unwrap_err();
    assert_eq!(err.code(), Code::UNKNOWN);
    // Classified by asking the runtime, which still knows it.
    assert!(f.runtime.calls().contains(&"state c1".to_string()));
    assert_eq!(f.status("c1", ""), Status::STOPPED);
    // A retry succeeds.
    f.tasks.delete("c1", "").await.unwrap();
}

#[tokio::test]
async fn kill_failures_are_classified_by_the_runtime_state() {
    let f = fixture();
    f.running("c1").await;

    // Gone from the runtime (deleted behind the shim's back): NotFound.
    let pid = f.tasks.task_pid("c1").unwrap();
    f.runtime.forget("c1");
    let err = f.tasks.kill("c1", "", 15, false).await.unwrap_err();
    assert!(matches!(err, ShimError::RuntimeNotFound { .. }), "{err:?}");
    assert_eq!(err.code(), Code::NOT_FOUND);
    assert!(!f.processes.has_exited(pid));

    let f = fixture();
    f.running("c2").await;
    f.runtime.fail_next("kill", failed("kill"));
    // Still running in the runtime: the failure is the runtime's.
    assert_eq!(code(f.tasks.kill("c2", "", 15, true).await), Code::UNKNOWN);
    assert!(f.runtime.calls().contains(&"kill --all c2 15".to_string()));
    assert_eq!(f.status("c2", ""), Status::RUNNING);
}

#[tokio::test]
async fn kill_of_a_container_the_runtime_reports_stopped_succeeds() {
    let f = fixture();
    let pid = f.running("c1").await;
    // Its init died, but the shim has not seen the exit yet: the runtime's kill fails.
    f.runtime.mark_stopped("c1");
    f.tasks.kill("c1", "", 15, false).await.unwrap();
    assert_eq!(
        f.runtime.calls()[2..],
        ["kill c1 15".to_string(), "state c1".to_string()]
    );
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    f.processes.exit(pid, 0);
    assert_eq!(f.tasks.wait("c1", "").await.unwrap().exit_code, 0);
}

#[tokio::test]
async fn start_failure_of_a_container_the_runtime_lost_is_not_found() {
    let f = fixture();
    f.create("c1").await;
    f.runtime.forget("c1");
    assert_eq!(code(f.tasks.start("c1", "").await), Code::NOT_FOUND);
    assert_eq!(f.status("c1", ""), Status::CREATED);

    f.create("c2").await;
    f.runtime.fail_next("start", failed("start"));
    assert_eq!(code(f.tasks.start("c2", "").await), Code::UNKNOWN);
    assert_eq!(f.status("c2", ""), Status::CREATED);
}

#[tokio::test]
async fn unknown_containers_are_not_found_everywhere() {
    let f = fixture();
    assert_eq!(code(f.tasks.start("nope", "").await), Code::NOT_FOUND);
    assert_eq!(code(f.tasks.state("nope", "")), Code::NOT_FOUND);
    assert_eq!(code(f.tasks.delete("nope", "").await), Code::NOT_FOUND);
    assert_eq!(
        code(f.tasks.kill("nope", "", 9, false).await),
        Code::NOT_FOUND
    );
    assert_eq!(code(f.tasks.wait("nope", "").await), Code::NOT_FOUND);
    assert_eq!(code(f.tasks.update("nope", None).await), Code::NOT_FOUND);
    assert_eq!(
        code(f.tasks.exec(f.exec_request("nope", "e1"))),
        Code::NOT_FOUND
    );
    assert_eq!(code(f.tasks.io("nope", "").map(drop)), Code::NOT_FOUND);
    assert_eq!(f.tasks.task_pid("nope"), None);
    assert!(f.runtime.calls().is_empty());
    // pids and pause go to the runtime, which does not know it either.
    assert_eq!(code(f.tasks.pids("nope").await), Code::NOT_FOUND);
    f.runtime.fail_next("pause", failed("pause"));
    assert_eq!(code(f.tasks.pause("nope").await), Code::NOT_FOUND);
}

#[tokio::test]
async fn exec_lifecycle() {
    let f = fixture();
    f.create("c1").await;
    // Not before the container runs.
    assert_eq!(
        code(f.tasks.exec(f.exec_request("c1", "e1"))),
        Code::FAILED_PRECONDITION
    );
    f.tasks.start("c1", "").await.unwrap();
    f.tasks.exec(f.exec_request("c1", "e1")).unwrap();
    assert_eq!(
        code(f.tasks.exec(f.exec_request("c1", "e1"))),
        Code::ALREADY_EXISTS
    );
    assert_eq!(f.status("c1", "e1"), Status::CREATED);
    // An exec that is not started has no stdio.
    assert_eq!(code(f.tasks.io("c1", "e1").map(drop)), Code::NOT_FOUND);
    // Kill before start: nothing to signal.
    f.tasks.kill("c1", "e1", 9, false).await.unwrap();
    assert!(f.processes.signals().is_empty());

    let pid = f.tasks.start("c1", "e1").await.unwrap();
    assert_eq!(f.status("c1", "e1"), Status::RUNNING);
    assert_eq!(
        code(f.tasks.start("c1", "e1").await),
        Code::FAILED_PRECONDITION
    );
    // The runtime was given the process spec, which is removed afterwards.
    let spec_file = f.bundle("c1").join("exec-e1.json");
    assert_eq!(
        f.runtime.seen_file(&spec_file).unwrap(),
        br#"{"args":["sh"],"cwd":"/"}"#.to_vec()
    );
    assert!(!spec_file.exists());
    assert!(f.tasks.io("c1", "e1").is_ok());

    f.tasks.kill("c1", "e1", 15, false).await.unwrap();
    assert_eq!(f.processes.signals(), vec![(pid, 15)]);
    f.processes.exit(pid, 3);
    let exit = f.tasks.wait("c1", "e1").await.unwrap();
    assert_eq!((exit.pid, exit.exit_code), (pid, 3));
    assert_eq!(f.status("c1", "e1"), Status::STOPPED);
    // The init's exit file is the init's only.
    assert!(ExitRecord::read(&f.bundle("c1").join("exit"))
        .unwrap()
        .is_none());
    let (deleted, exit) = f.tasks.delete("c1", "e1").await.unwrap();
    assert_eq!((deleted, exit.map(|e| e.exit_code)), (pid, Some(3)));
    assert!(matches!(
        f.tasks.state("c1", "e1"),
        Err(ShimError::ExecNotFound { .. })
    ));
    // Killed only by the explicit SIGTERM: it had exited before Delete.
    assert_eq!(f.processes.signals(), vec![(pid, 15)]);
}

#[tokio::test]
async fn deleting_a_running_exec_kills_its_tree() {
    let f = fixture();
    f.running("c1").await;
    f.tasks.exec(f.exec_request("c1", "e1")).unwrap();
    let pid = f.tasks.start("c1", "e1").await.unwrap();
    let (deleted, exit) = f.tasks.delete("c1", "e1").await.unwrap();
    assert_eq!((deleted, exit), (pid, None));
    assert_eq!(f.processes.signals(), vec![(pid, libc::SIGKILL)]);
}

#[tokio::test]
async fn a_failed_exec_start_leaves_the_exec_unstarted_and_no_files() {
    let f = fixture();
    f.running("c1").await;
    f.tasks.exec(f.exec_request("c1", "e1")).unwrap();
    f.runtime.fail_next("exec", failed("exec"));
    assert_eq!(code(f.tasks.start("c1", "e1").await), Code::UNKNOWN);
    assert_eq!(f.status("c1", "e1"), Status::CREATED);
    let bundle = f.bundle("c1");
    assert!(!bundle.join("exec-e1.json").exists());
    assert!(!bundle.join("exec-e1.pid").exists());
    // It can be started later.
    f.tasks.start("c1", "e1").await.unwrap();
    assert_eq!(f.status("c1", "e1"), Status::RUNNING);
}

#[tokio::test]
async fn bad_exec_requests_and_unknown_execs() {
    let f = fixture();
    f.running("c1").await;
    let mut req = f.exec_request("c1", "");
    assert_eq!(code(f.tasks.exec(req.clone())), Code::INVALID_ARGUMENT);
    req.exec_id = "e1".into();
    req.spec = MessageField::none();
    assert_eq!(code(f.tasks.exec(req)), Code::INVALID_ARGUMENT);

    let missing = |r: Result<()>| match r {
        Err(ShimError::ExecNotFound { id, exec_id }) => (id, exec_id),
        other => panic!("{other:?}"),
    };
    let want = ("c1".to_string(), "e9".to_string());
    assert_eq!(missing(f.tasks.start("c1", "e9").await.map(drop)), want);
    assert_eq!(missing(f.tasks.state("c1", "e9").map(drop)), want);
    assert_eq!(missing(f.tasks.kill("c1", "e9", 9, false).await), want);
    assert_eq!(missing(f.tasks.wait("c1", "e9").await.map(drop)), want);
    assert_eq!(missing(f.tasks.delete("c1", "e9").await.map(drop)), want);
    assert_eq!(missing(f.tasks.io("c1", "e9").map(drop)), want);
}

#[tokio::test]
async fn exec_into_an_exited_container_is_refused() {
    let f = fixture();
    let pid = f.running("c1").await;
    f.tasks.exec(f.exec_request("c1", "e1")).unwrap();
    f.processes.exit(pid, 0);
    f.tasks.wait("c1", "").await.unwrap();
    assert_eq!(
        code(f.tasks.exec(f.exec_request("c1", "e2"))),
        Code::FAILED_PRECONDITION
    );
    assert_eq!(
        code(f.tasks.start("c1", "e1").await),
        Code::FAILED_PRECONDITION
    );
    assert!(!f.runtime.calls().iter().any(|c| c.starts_with("exec")));
}

#[tokio::test]
async fn pause_and_resume() {
    let f = fixture();
    f.running("c1").await;
    f.tasks.pause("c1").await.unwrap();
    assert_eq!(f.status("c1", ""), Status::PAUSED);
    f.runtime.fail_next("resume", failed("resume"));
    assert_eq!(code(f.tasks.resume("c1").await), Code::UNKNOWN);
    assert_eq!(f.status("c1", ""), Status::PAUSED);
    f.tasks.resume("c1").await.unwrap();
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    assert_eq!(f.tasks.pids("c1").await.unwrap().len(), 1);
}

#[tokio::test]
async fn update_passes_the_resources_in_a_file_it_removes() {
    let f = fixture();
    f.running("c1").await;
    assert_eq!(
        code(f.tasks.update("c1", None).await),
        Code::INVALID_ARGUMENT
    );
    let mut any = Any::new();
    any.type_url = "example.com/Other".into();
    assert_eq!(
        code(f.tasks.update("c1", Some(&any)).await),
        Code::INVALID_ARGUMENT
    );
    any.type_url = protocol::RESOURCES_TYPE_URL.into();
    any.value = br#"{"cpu":{"shares":512}}"#.to_vec();
    f.tasks.update("c1", Some(&any)).await.unwrap();
    let file = f.bundle("c1").join("update-resources.json");
    assert_eq!(f.runtime.seen_file(&file).unwrap(), any.value);
    assert!(!file.exists());

    f.runtime.fail_next("update", failed("update"));
    assert_eq!(code(f.tasks.update("c1", Some(&any)).await), Code::UNKNOWN);
    assert!(!file.exists());
    assert_eq!(
        f.runtime
            .calls()
            .iter()
            .filter(|c| *c == "update c1")
            .count(),
        2
    );
}

#[tokio::test]
async fn an_oom_kill_is_recorded_with_the_exit() {
    let f = fixture();
    let counter = f.dir.path().join("memory.events");
    std::fs::write(&counter, "oom 0\noom_kill 0\n").unwrap();
    // The fake's next pid: set before create reads the baseline.
    let next = f.create("probe").await + 1;
    f.processes.set_oom_file(next, counter.clone());
    let pid = f.running("c1").await;
    assert_eq!(pid, next);
    std::fs::write(&counter, "oom 1\noom_kill 1\n").unwrap();
    f.processes.exit(pid, 137);
    let exit = f.tasks.wait("c1", "").await.unwrap();
    assert!(exit.oom_killed);
    assert!(
        ExitRecord::read(&f.bundle("c1").join("exit"))
            .unwrap()
            .unwrap()
            .oom_killed
    );
}

#[tokio::test]
async fn shutdown_waits_for_containers_to_be_deleted() {
    let f = fixture();
    f.create("c1").await;
    assert_eq!(code(f.tasks.shutdown(false)), Code::FAILED_PRECONDITION);
    f.tasks.shutdown(true).unwrap();
    f.tasks.delete("c1", "").await.unwrap();
    f.tasks.shutdown(false).unwrap();
}

#[tokio::test]
async fn exit_files_go_where_the_options_say() {
    let f = fixture();
    let exit_file = f.dir.path().join("records/c1.exit");
    std::fs::create_dir_all(exit_file.parent().unwrap()).unwrap();
    let options = CreateOptions {
        exit_file: exit_file.to_string_lossy().into_owned(),
        ..Default::default()
    };
    let pid = f.create_with("c1", options).await.unwrap();
    f.tasks.start("c1", "").await.unwrap();
    f.processes.exit(pid, 7);
    f.tasks.wait("c1", "").await.unwrap();
    assert_eq!(
        ExitRecord::read(&exit_file).unwrap().map(|e| e.exit_code),
        Some(7)
    );
    assert!(!f.bundle("c1").join("exit").exists());
}

#[tokio::test]
async fn a_log_file_that_cannot_be_opened_fails_create_before_the_runtime_runs() {
    let f = fixture();
    let not_a_dir = f.dir.path().join("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let options = CreateOptions {
        log_path: not_a_dir.join("c1.log").to_string_lossy().into_owned(),
        ..Default::default()
    };
    let err = f.create_with("c1", options).await.unwrap_err();
    assert_eq!(err.code(), Code::INTERNAL);
    assert!(err.to_string().starts_with("container stdio: "), "{err}");
    assert!(f.runtime.calls().is_empty());
    assert!(f.tasks.state("c1", "").is_err());
}

#[tokio::test]
async fn exec_stdio_that_cannot_be_opened_fails_start_before_the_runtime_runs() {
    let f = fixture();
    f.running("c1").await;
    let mut req = f.exec_request("c1", "e1");
    req.stdout = f
        .dir
        .path()
        .join("no-such-fifo")
        .to_string_lossy()
        .into_owned();
    f.tasks.exec(req).unwrap();
    let err = f.tasks.start("c1", "e1").await.unwrap_err();
    assert_eq!(err.code(), Code::INTERNAL);
    assert!(err.to_string().contains("no-such-fifo"), "{err}");
    assert!(!f.runtime.calls().iter().any(|c| c.starts_with("exec")));
    assert!(!f.bundle("c1").join("exec-e1.json").exists());
    assert_eq!(f.status("c1", "e1"), Status::CREATED);
}

#[tokio::test]
async fn a_restore_is_the_runtimes_restore_and_runs_at_once() {
    let f = fixture();
    let options = CreateOptions {
        restore: "/images".into(),
        ..Default::default()
    };
    let mut req = f.request("c1", Some(options));
    req.options.mut_or_insert_default().type_url = protocol::RESTORE_OPTIONS_TYPE_URL.into();
    let pid = f.tasks.create(req).await.unwrap();
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    // Restored processes run already: Start reports the pid and calls nothing.
    assert_eq!(f.tasks.start("c1", "").await.unwrap(), pid);
    assert_eq!(f.runtime.calls(), vec!["restore c1"]);
    // Restore options without the images: refused, nothing run.
    let mut req = f.request("c2", Some(CreateOptions::default()));
    req.options.mut_or_insert_default().type_url = protocol::RESTORE_OPTIONS_TYPE_URL.into();
    assert_eq!(code(f.tasks.create(req).await), Code::INVALID_ARGUMENT);
    assert_eq!(f.runtime.calls(), vec!["restore c1"]);
}

fn checkpoint_options(work_path: &str) -> Any {
    let mut any = Any::new();
    any.type_url = protocol::CHECKPOINT_OPTIONS_TYPE_URL.to_string();
    any.value = serde_json::to_vec(&protocol::CheckpointOptions {
        work_path: work_path.into(),
        timeout_ms: 0,
    })
    .unwrap();
    any
}

#[tokio::test]
async fn checkpoints_go_to_the_runtime_for_running_containers_only() {
    let f = fixture();
    let opts = checkpoint_options("/work");
    // Unknown: NotFound, and the runtime is not asked.
    let unknown = f.tasks.checkpoint("c0", "/img", Some(&opts)).await;
    assert_eq!(code(unknown), Code::NOT_FOUND);
    // Created, not started: nothing runs to dump.
    f.create("c1").await;
    let created = f.tasks.checkpoint("c1", "/img", Some(&opts)).await;
    assert_eq!(code(created), Code::FAILED_PRECONDITION);
    f.tasks.start("c1", "").await.unwrap();
    // Bad requests name what is wrong.
    let no_path = f.tasks.checkpoint("c1", "", Some(&opts)).await;
    assert!(no_path.unwrap_err().message().contains("path"));
    let no_work = f.tasks.checkpoint("c1", "/img", None).await;
    assert!(no_work.unwrap_err().message().contains("work_path"));
    assert!(!f
        .runtime
        .calls()
        .iter()
        .any(|c| c.starts_with("checkpoint")));

    f.tasks.checkpoint("c1", "/img", Some(&opts)).await.unwrap();
    assert_eq!(
        f.runtime.calls().last().map(String::as_str),
        Some("checkpoint c1 /img /work")
    );
    // A failed dump is the runtime's error; the container still runs.
    f.runtime.fail_next("checkpoint", failed("checkpoint"));
    assert!(f.tasks.checkpoint("c1", "/img", Some(&opts)).await.is_err());
    assert_eq!(f.status("c1", ""), Status::RUNNING);
    // One past its limit is the caller's deadline.
    let timeout = RuntimeCliError::Timeout {
        runtime: "runc".into(),
        command: "checkpoint".into(),
        limit: Duration::from_secs(1),
    };
    f.runtime.fail_next("checkpoint", timeout);
    let late = f.tasks.checkpoint("c1", "/img", Some(&opts)).await;
    assert_eq!(code(late), Code::DEADLINE_EXCEEDED);
}
