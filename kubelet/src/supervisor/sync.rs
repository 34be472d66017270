//! Reconciliation: the sandbox (pod cgroup, volumes, re-creation when it dies), container
//! states from CRI, then the actions `plan` decides for the containers (init containers in
//! order, app containers, restarts with back-off), carried out here.

use super::plan::{self, Action, Phase, RestartPolicy, RestartStep};
use super::*;

impl Supervisor {
    pub(super) async fn sync(&mut self) {
        // Refused pods have nothing to drive; finished ones are done once their sandbox stopped.
        if self.rec.rejection.is_some()
            || (self.rec.final_phase.is_some() && self.rec.sandbox_stopped)
        {
            return;
        }
        if plan::deadline_exceeded(&self.rec, now_ms()) {
            let msg = "Pod was active on the node longer than the specified deadline";
            self.event("Warning", "DeadlineExceeded", None, msg.into());
            self.rec.final_phase = Some(Phase::Failed.as_str().into());
            self.rec.terminal_reason = Some(("DeadlineExceeded".into(), msg.into()));
            self.finish().await;
            return;
        }
        if !self.ensure_sandbox().await {
            return;
        }
        if self.sandbox_died().await {
            self.recreate_sandbox().await;
            if !self.ensure_sandbox().await {
                return;
            }
        }
        self.observe().await;
        let phase = self.current_phase();
        for action in plan::plan(&self.rec, phase) {
            match action {
                Action::Finish => return self.finish().await,
                Action::Start { name, again } => {
                    if let Some(c) = self.container_spec(&name) {
                        self.start(&c, again).await;
                    }
                }
                Action::Restart { name } => {
                    if let Some(c) = self.container_spec(&name) {
                        self.restart(&c).await;
                    }
                }
            }
        }
    }

    /// Takes a ContainerStatus in: the state, and the termination message of an exit.
    pub(super) fn record_status(&mut self, name: &str, s: &cri::ContainerStatus) {
        let mut obs = observed_from(s);
        if obs.state == RunState::Exited && obs.message.is_empty() {
            obs.message = self.termination_message(name, s);
        }
        let r = self.rec.container(name);
        r.observed = Some(obs);
        if !s.image_ref.is_empty() {
            r.image_id = s.image_ref.clone();
        }
    }

    /// What the exited attempt left at its terminationMessagePath (or its log's tail).
    fn termination_message(&self, name: &str, s: &cri::ContainerStatus) -> String {
        let Some(c) = self.container_spec(name) else {
            return String::new();
        };
        if c.termination_message_path
            .as_deref()
            .unwrap_or("")
            .is_empty()
        {
            return String::new();
        }
        let attempt = s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
        let file = crate::termination::host_file(&self.pod_dir(), name, attempt);
        let log = self
            .pod_dir()
            .join("logs")
            .join(name)
            .join(format!("{attempt}.log"));
        let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        crate::termination::message(&file, &log, s.exit_code, fallback)
    }

    pub(super) fn current_phase(&mut self) -> Option<Phase> {
        if let Some(p) = &self.rec.final_phase {
            return Phase::parse(p);
        }
        let status = status::compute(&mut self.rec, &self.settings.host_ip);
        status.phase.as_deref().and_then(Phase::parse)
    }

    pub(super) fn cgroup_path(&self) -> String {
        cgroup::pod_cgroup_path(
            &self.settings.cgroup_parent,
            qos_class(self.rec.spec()),
            self.rec.uid(),
        )
    }

    pub(super) fn pod_dir(&self) -> PathBuf {
        cri_config::pod_dir(&self.settings, self.rec.uid())
    }

    pub(super) fn sandbox_config(&self) -> cri::PodSandboxConfig {
        cri_config::sandbox_config(&self.rec, &self.settings, &self.cgroup_path())
    }

    /// The pod cgroup, the volumes and the sandbox; false while they cannot be made.
    pub(super) async fn ensure_sandbox(&mut self) -> bool {
        if self.volumes.is_none() {
            match volumes::set_up(self.rec.spec(), &self.pod_dir()) {
                Ok(v) => self.volumes = Some(v),
                Err(e) => {
                    self.event("Warning", "FailedMount", None, e.to_string());
                    return false;
                }
            }
        }
        if self.rec.sandbox_id.is_some() {
            return true;
        }
        // A failing sandbox (CNI, runtime) is retried with back-off, not on every sync.
        if now_ms() < self.rec.sandbox_not_before_ms {
            return false;
        }
        let path = self.cgroup_path();
        let values = crate::resources::pod_cgroup(self.rec.spec());
        let cgroups = self.settings.cgroups.clone();
        let made = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || cgroups.create(&path, &values))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        };
        if let Err(e) = made {
            self.event(
                "Warning",
                "FailedCreatePodSandBox",
                None,
                format!("Failed to create the pod cgroup: {e}"),
            );
            return false;
        }
        let (cgroups, parent) = (
            self.settings.cgroups.clone(),
            self.settings.cgroup_parent.clone(),
        );
        let (cpu, memory) = (
            self.settings.allocatable.cpu_milli,
            self.settings.allocatable.memory,
        );
        let besteffort = qos_class(self.rec.spec()) == crate::resources::QosClass::BestEffort;
        let _ = tokio::task::spawn_blocking(move || {
            cgroups.set_node_allocatable(&parent, cpu, memory);
            if besteffort {
                cgroups.set_besteffort_shares(&parent);
            }
        })
        .await;
        self.rec.cgroup = Some(path);
        self.save();
        match self.cri.run_pod_sandbox(self.sandbox_config()).await {
            Ok(id) => {
                self.rec.sandbox_failures = 0;
                self.rec.sandbox_id = Some(id.clone());
                self.rec.pod_ip = self.cri.pod_sandbox_ip(&id).await.unwrap_or_default();
                if self.rec.pod_ip.is_empty() && self.rec.spec().host_network.unwrap_or(false) {
                    self.rec.pod_ip = self.settings.host_ip.clone();
                }
                self.save();
                true
            }
            Err(e) => {
                let base = self.settings.backoff_base.as_millis() as i64;
                let max = self.settings.max_backoff().as_millis() as i64;
                self.rec.sandbox_failures += 1;
                let shift = (self.rec.sandbox_failures - 1).min(10);
                self.rec.sandbox_not_before_ms = now_ms() + (base << shift).min(max);
                self.event(
                    "Warning",
                    "FailedCreatePodSandBox",
                    None,
                    format!("Failed to create pod sandbox: {}", e.message()),
                );
                false
            }
        }
    }

    pub(super) async fn sandbox_died(&self) -> bool {
        let Some(id) = &self.rec.sandbox_id else {
            return false;
        };
        // A Never pod is not run again: its killed containers make it Failed instead.
        if RestartPolicy::of(self.rec.spec()) == RestartPolicy::Never {
            return false;
        }
        // An error answering is not a death: only a clear "not ready" is.
        matches!(self.cri.pod_sandbox_ready(id).await, Ok(false))
    }

    /// The kubelet's answer to a dead sandbox: kill the pod's containers, make a new sandbox
    /// and run everything again in it (init containers too), each as its next attempt.
    pub(super) async fn recreate_sandbox(&mut self) {
        self.event(
            "Normal",
            "SandboxChanged",
            None,
            "Pod sandbox changed, it will be killed and re-created.".into(),
        );
        self.stop_probes();
        self.observe().await;
        let grace = self
            .rec
            .spec()
            .termination_grace_period_seconds
            .unwrap_or(30);
        let running: Vec<String> = self
            .rec
            .containers
            .values()
            .filter(|r| r.observed.as_ref().map(|o| o.state) == Some(RunState::Running))
            .filter_map(|r| r.id.clone())
            .collect();
        for id in running {
            let _ = self.cri.stop_container(&id, grace).await;
        }
        self.observe().await;
        if let Some(old) = self.rec.sandbox_id.take() {
            let _ = self.cri.stop_pod_sandbox(&old).await;
            // Removing the sandbox removes its containers; their exits stay in lastState.
            if let Err(e) = self.cri.remove_pod_sandbox(&old).await {
                tracing::warn!(sandbox = %old, error = %e, "RemovePodSandbox of a dead sandbox");
            }
        }
        for r in self.rec.containers.values_mut() {
            if r.id.is_none() {
                continue;
            }
            if let Some(t) = current_termination(r) {
                r.last_terminated = Some(t);
            }
            r.id = None;
            r.previous_id = None;
            r.observed = None;
            r.waiting = None;
            r.restart_count += 1;
        }
        self.rec.pod_ip.clear();
        self.save();
    }

    /// Refreshes every current container's CRI state.
    pub(super) async fn observe(&mut self) {
        let names: Vec<String> = self.rec.containers.keys().cloned().collect();
        for name in names {
            let Some(id) = self.rec.containers[&name].id.clone() else {
                continue;
            };
            match self.cri.container_status(&id).await {
                Ok(s) => self.record_status(&name, &s),
                Err(e) if e.code() == Code::NotFound => {
                    // Gone behind our back: the next sync makes a new one.
                    tracing::warn!(container = %name, %id, "container vanished; it will be created again");
                    let r = self.rec.container(&name);
                    r.id = None;
                    r.observed = None;
                }
                Err(e) => tracing::warn!(container = %name, error = %e, "ContainerStatus failed"),
            }
        }
    }

    /// A restart, unless the container is in back-off (CrashLoopBackOff): then it waits,
    /// with one BackOff event per back-off period.
    pub(super) async fn restart(&mut self, c: &Container) {
        let base = self.settings.backoff_base.as_millis() as u64;
        let max = self.settings.max_backoff().as_millis() as u64;
        let pod_ref = self.rec.pod_ref();
        let r = self.rec.container(&c.name);
        match plan::restart_step(r, now_ms(), base, max) {
            RestartStep::NotExited => {}
            RestartStep::Wait { backoff_ms, secs } => {
                r.backoff_ms = backoff_ms;
                let first =
                    r.waiting.as_ref().map(|w| w.reason.as_str()) != Some("CrashLoopBackOff");
                r.waiting = Some(Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: format!(
                        "back-off {secs}s restarting failed container={} pod={pod_ref}",
                        c.name
                    ),
                });
                if first {
                    self.event(
                        "Warning",
                        "BackOff",
                        Some(&c.name),
                        format!(
                            "Back-off restarting failed container {} in pod {pod_ref}",
                            c.name
                        ),
                    );
                }
            }
            RestartStep::Go { backoff_ms } => {
                r.backoff_ms = backoff_ms;
                self.start(c, true).await;
            }
        }
    }
}
