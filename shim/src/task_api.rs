//! containerd's `Task` ttrpc trait over [`TaskService`]: request fields in, responses out,
//! every failure logged and turned into a status by [`reply`]. No logic of its own.

use crate::error::reply;
use crate::task::{ProcessState, TaskService};
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::MessageField;
use containerd_shim_protos::shim_async::Task;
use containerd_shim_protos::types::task::ProcessInfo;
use peapod_shim::protocol::ExitRecord;
use std::sync::Arc;
use ttrpc::asynchronous::TtrpcContext;

type TtrpcResult<T> = ttrpc::Result<T>;

/// The Task API of one shim.
pub struct TaskApi(pub Arc<TaskService>);

/// Runs a call that changes the runtime (create, start) in a task of its own: ttrpc drops a
/// handler when its client disconnects (the daemon was killed mid-call), and a create cut off
/// half-way would leave a container in the runtime that this shim does not know, so that
/// nobody would ever delete it. Run to its end, the container lands here for the daemon's
/// recovery to find and delete.
async fn to_completion<T, F>(work: F) -> crate::error::Result<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = crate::error::Result<T>> + Send + 'static,
{
    tokio::spawn(work).await.unwrap_or_else(|e| {
        Err(crate::error::ShimError::FailedPrecondition(format!(
            "the call's task failed: {e}"
        )))
    })
}

/// What a call is about, for the log: `ID` or `ID/EXEC_ID`.
fn object(id: &str, exec_id: &str) -> String {
    if exec_id.is_empty() {
        id.to_string()
    } else {
        format!("{id}/{exec_id}")
    }
}

fn timestamp(ns: i64) -> MessageField<Timestamp> {
    let mut ts = Timestamp::new();
    ts.seconds = ns.div_euclid(1_000_000_000);
    ts.nanos = ns.rem_euclid(1_000_000_000) as i32;
    MessageField::some(ts)
}

/// `exit_status` and `exited_at` of a response, from an exit record.
fn exit_fields(exit: Option<ExitRecord>) -> (u32, MessageField<Timestamp>) {
    match exit {
        Some(e) => (e.exit_code as u32, timestamp(e.exited_at_ns)),
        None => (0, MessageField::none()),
    }
}

fn state_response(id: &str, exec_id: &str, s: ProcessState) -> api::StateResponse {
    let mut resp = api::StateResponse::new();
    resp.id = id.to_string();
    resp.exec_id = exec_id.to_string();
    resp.bundle = s.bundle.to_string_lossy().into_owned();
    resp.pid = s.pid;
    resp.status = s.status.into();
    resp.terminal = s.terminal;
    resp.stdout = s.stdout;
    (resp.exit_status, resp.exited_at) = exit_fields(s.exit);
    resp
}

#[async_trait]
impl Task for TaskApi {
    async fn create(
        &self,
        _ctx: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        let mut resp = api::CreateTaskResponse::new();
        let id = req.id.clone();
        let svc = self.0.clone();
        let created = to_completion(async move { svc.create(req).await }).await;
        resp.pid = reply("Create", &id, created)?;
        Ok(resp)
    }

    async fn start(
        &self,
        _ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        let mut resp = api::StartResponse::new();
        let svc = self.0.clone();
        let (id, exec_id) = (req.id.clone(), req.exec_id.clone());
        let started = to_completion(async move { svc.start(&id, &exec_id).await }).await;
        resp.pid = reply("Start", &object(&req.id, &req.exec_id), started)?;
        Ok(resp)
    }

    async fn state(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        let s = reply(
            "State",
            &object(&req.id, &req.exec_id),
            self.0.state(&req.id, &req.exec_id),
        )?;
        Ok(state_response(&req.id, &req.exec_id, s))
    }

    async fn delete(
        &self,
        _ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        let (pid, exit) = reply(
            "Delete",
            &object(&req.id, &req.exec_id),
            self.0.delete(&req.id, &req.exec_id).await,
        )?;
        let mut resp = api::DeleteResponse::new();
        resp.pid = pid;
        (resp.exit_status, resp.exited_at) = exit_fields(exit);
        Ok(resp)
    }

    async fn pids(
        &self,
        _ctx: &TtrpcContext,
        req: api::PidsRequest,
    ) -> TtrpcResult<api::PidsResponse> {
        let mut resp = api::PidsResponse::new();
        resp.processes = reply("Pids", &req.id, self.0.pids(&req.id).await)?
            .into_iter()
            .map(|pid| {
                let mut p = ProcessInfo::new();
                p.pid = pid;
                p
            })
            .collect();
        Ok(resp)
    }

    async fn checkpoint(
        &self,
        _ctx: &TtrpcContext,
        req: api::CheckpointTaskRequest,
    ) -> TtrpcResult<Empty> {
        let svc = self.0.clone();
        let id = req.id.clone();
        // To its end, as a create: a dump cut off half-way would leave the container frozen.
        let done = to_completion(async move {
            svc.checkpoint(&req.id, &req.path, req.options.as_ref())
                .await
        })
        .await;
        reply("Checkpoint", &id, done)?;
        Ok(Empty::new())
    }

    async fn pause(&self, _ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<Empty> {
        reply("Pause", &req.id, self.0.pause(&req.id).await)?;
        Ok(Empty::new())
    }

    async fn resume(&self, _ctx: &TtrpcContext, req: api::ResumeRequest) -> TtrpcResult<Empty> {
        reply("Resume", &req.id, self.0.resume(&req.id).await)?;
        Ok(Empty::new())
    }

    async fn kill(&self, _ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<Empty> {
        reply(
            "Kill",
            &object(&req.id, &req.exec_id),
            self.0
                .kill(&req.id, &req.exec_id, req.signal, req.all)
                .await,
        )?;
        Ok(Empty::new())
    }

    async fn exec(&self, _ctx: &TtrpcContext, req: api::ExecProcessRequest) -> TtrpcResult<Empty> {
        let what = object(&req.id, &req.exec_id);
        reply("Exec", &what, self.0.exec(req))?;
        Ok(Empty::new())
    }

    async fn resize_pty(
        &self,
        _ctx: &TtrpcContext,
        req: api::ResizePtyRequest,
    ) -> TtrpcResult<Empty> {
        reply(
            "ResizePty",
            &object(&req.id, &req.exec_id),
            self.0
                .resize_pty(&req.id, &req.exec_id, req.width, req.height),
        )?;
        Ok(Empty::new())
    }

    async fn close_io(&self, _ctx: &TtrpcContext, req: api::CloseIORequest) -> TtrpcResult<Empty> {
        if req.stdin {
            reply(
                "CloseIO",
                &object(&req.id, &req.exec_id),
                self.0.close_stdin(&req.id, &req.exec_id).await,
            )?;
        }
        Ok(Empty::new())
    }

    async fn update(&self, _ctx: &TtrpcContext, req: api::UpdateTaskRequest) -> TtrpcResult<Empty> {
        reply(
            "Update",
            &req.id,
            self.0.update(&req.id, req.resources.as_ref()).await,
        )?;
        Ok(Empty::new())
    }

    async fn wait(
        &self,
        _ctx: &TtrpcContext,
        req: api::WaitRequest,
    ) -> TtrpcResult<api::WaitResponse> {
        let exit = reply(
            "Wait",
            &object(&req.id, &req.exec_id),
            self.0.wait(&req.id, &req.exec_id).await,
        )?;
        let mut resp = api::WaitResponse::new();
        (resp.exit_status, resp.exited_at) = exit_fields(Some(exit));
        Ok(resp)
    }

    async fn connect(
        &self,
        _ctx: &TtrpcContext,
        req: api::ConnectRequest,
    ) -> TtrpcResult<api::ConnectResponse> {
        let mut resp = api::ConnectResponse::new();
        resp.shim_pid = std::process::id();
        resp.version = env!("CARGO_PKG_VERSION").to_string();
        resp.task_pid = self.0.task_pid(&req.id).unwrap_or(0);
        Ok(resp)
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, req: api::ShutdownRequest) -> TtrpcResult<Empty> {
        reply("Shutdown", "", self.0.shutdown(req.now))?;
        Ok(Empty::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::types::task::Status;

    #[test]
    fn state_responses_carry_the_exit_as_status_and_timestamp() {
        let exit = ExitRecord {
            pid: 42,
            exit_code: 137,
            exited_at_ns: 1_700_000_000_123_456_789,
            oom_killed: true,
        };
        let resp = state_response(
            "c1",
            "e1",
            ProcessState {
                pid: 42,
                status: Status::STOPPED,
                terminal: true,
                stdout: String::new(),
                bundle: "/run/b".into(),
                exit: Some(exit),
            },
        );
        assert_eq!((resp.id.as_str(), resp.exec_id.as_str()), ("c1", "e1"));
        assert_eq!((resp.pid, resp.exit_status, resp.terminal), (42, 137, true));
        assert_eq!(resp.status.enum_value(), Ok(Status::STOPPED));
        assert_eq!(resp.bundle, "/run/b");
        let at = resp.exited_at.as_ref().unwrap();
        assert_eq!((at.seconds, at.nanos), (1_700_000_000, 123_456_789));

        let (code, at) = exit_fields(None);
        assert_eq!(code, 0);
        assert!(at.is_none());
    }

    #[test]
    fn objects_name_the_exec_when_there_is_one() {
        assert_eq!(object("c1", ""), "c1");
        assert_eq!(object("c1", "e1"), "c1/e1");
    }
}
