//! ExecSync: runs a command to its end and returns its output, as exec probes do.

use super::{read_capped, ExecGuard, ExecOutput, ExecService, Fifos, Prepared};
use super::{MAX_EXEC_SYNC_OUTPUT, OUTPUT_GRACE};
use crate::error::{Error, Result};
use crate::shim::ExecIo;
use peapod_host::sync::LockUnpoisoned;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How much longer than its own timeout an ExecSync may take in all (the shim's exec and
/// start before the command runs, its kill after): past it, the shim is taken as stopped or
/// hung and the call ends, the process left to be killed once the shim answers again.
const SHIM_GRACE: Duration = Duration::from_secs(5);

impl ExecService {
    /// ExecSync: runs `cmd`, returns its output and exit code; past `timeout_s` (0: none) the
    /// process is killed and DeadlineExceeded returned. With a timeout, the whole call is
    /// bounded by it plus [`SHIM_GRACE`]: a pod's shim that stops answering (SIGSTOP, a hang)
    /// gets DeadlineExceeded naming it, not a caller left waiting.
    pub async fn exec_sync(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        timeout_s: i64,
    ) -> Result<ExecOutput> {
        if timeout_s <= 0 {
            return self.exec_sync_unbounded(id, cmd, timeout_s).await;
        }
        let bound = Duration::from_secs(timeout_s as u64) + SHIM_GRACE;
        match tokio::time::timeout(bound, self.exec_sync_unbounded(id, cmd, timeout_s)).await {
            Ok(result) => result,
            Err(_) => Err(Error::deadline_exceeded(format!(
                "ExecSync in container {id}: the pod's shim (peapod-shim) did not answer within {}s (stopped or hung?); the command is killed once it answers again",
                bound.as_secs()
            ))),
        }
    }

    async fn exec_sync_unbounded(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        timeout_s: i64,
    ) -> Result<ExecOutput> {
        let Prepared {
            rec,
            process,
            shim,
            exec_id,
        } = self.prepare(id, &cmd, false).await?;
        let fifos = Fifos::create(&rec.bundle.join("exec"), &exec_id, false, true, true)?;
        let open = |p: &Option<PathBuf>| -> Result<tokio::net::unix::pipe::Receiver> {
            let path = p.as_ref().ok_or_else(|| Error::internal("fifo missing"))?;
            tokio::net::unix::pipe::OpenOptions::new()
                .open_receiver(path)
                .map_err(|e| Error::path("open fifo", path, e))
        };
        let (out_rx, err_rx) = (open(&fifos.stdout)?, open(&fifos.stderr)?);
        let io = ExecIo {
            terminal: false,
            stdin: String::new(),
            stdout: Fifos::path_str(&fifos.stdout),
            stderr: Fifos::path_str(&fifos.stderr),
        };
        shim.exec(&rec.id, &exec_id, process, &io).await?;
        let guard = ExecGuard::new(shim.clone(), &rec.id, &exec_id);
        shim.start(&rec.id, &exec_id).await?;
        // Readers start only now: a FIFO read with no writer yet would be an immediate EOF.
        let (out_buf, err_buf) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(Mutex::new(Vec::new())),
        );
        let out_task = tokio::spawn(read_capped(out_rx, out_buf.clone(), MAX_EXEC_SYNC_OUTPUT));
        let err_task = tokio::spawn(read_capped(err_rx, err_buf.clone(), MAX_EXEC_SYNC_OUTPUT));
        let waited = if timeout_s > 0 {
            match tokio::time::timeout(
                Duration::from_secs(timeout_s as u64),
                shim.wait(&rec.id, &exec_id),
            )
            .await
            {
                Ok(w) => w,
                Err(_) => {
                    out_task.abort();
                    err_task.abort();
                    // Bounded: a shim that stopped answering must not hold the caller (the
                    // guard, dropped unfinished, kills the process once the shim answers).
                    let _ = tokio::time::timeout(SHIM_GRACE, guard.kill_and_finish()).await;
                    return Err(Error::deadline_exceeded(format!(
                        "command {cmd:?} in container {} timed out after {timeout_s}s",
                        rec.id
                    )));
                }
            }
        } else {
            shim.wait(&rec.id, &exec_id).await
        };
        let exit = waited?;
        let mut dropped = [0usize; 2];
        for (i, task) in [out_task, err_task].into_iter().enumerate() {
            let abort = task.abort_handle();
            match tokio::time::timeout(OUTPUT_GRACE, task).await {
                Ok(Ok(n)) => dropped[i] = n,
                _ => abort.abort(),
            }
        }
        guard.finish().await;
        drop(fifos);
        let take = |b: Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock_unpoisoned());
        let mut out = ExecOutput {
            stdout: take(out_buf),
            stderr: take(err_buf),
            exit_code: exit.code as i32,
        };
        for (i, name) in ["stdout", "stderr"].iter().enumerate() {
            if dropped[i] > 0 {
                out.stderr.extend_from_slice(
                    format!(
                        "\npeapod: {name} truncated: {} bytes past the {MAX_EXEC_SYNC_OUTPUT}-byte limit were dropped\n",
                        dropped[i]
                    )
                    .as_bytes(),
                );
            }
        }
        Ok(out)
    }
}
