//! Adoption after a daemon restart, completion of finished pods, and graceful deletion
//! (preStop, StopContainer with the grace period, removal of everything the pod had).

use super::*;
use peapod_host::sync::LockUnpoisoned;

impl Supervisor {
    /// After a daemon restart: find the pod's sandbox and containers by their labels, take the
    /// newest attempt of each container as current, and restart probes.
    pub(super) async fn adopt(&mut self) {
        let uid = self.rec.uid().to_string();
        if let Ok(sbs) = self.cri.list_pod_sandboxes(uid_selector(&uid)).await {
            let ready = sbs
                .iter()
                .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32);
            match (&self.rec.sandbox_id, ready) {
                (None, Some(s)) => self.rec.sandbox_id = Some(s.id.clone()),
                (Some(id), _) if !sbs.iter().any(|s| &s.id == id) => {
                    tracing::warn!(sandbox = %id, "the pod's sandbox is gone; it will be made again");
                    self.rec.sandbox_id = None;
                }
                _ => {}
            }
        }
        if let Ok(cs) = self.cri.list_containers(uid_selector(&uid)).await {
            let mut by_name: BTreeMap<String, Vec<&cri::Container>> = BTreeMap::new();
            for c in &cs {
                if let Some(n) = c.labels.get(LABEL_CONTAINER_NAME) {
                    by_name.entry(n.clone()).or_default().push(c);
                }
            }
            // Containers the runtime no longer has (a reboot, a wiped state directory) are
            // run again as their next attempt, as in a re-created sandbox.
            let gone: Vec<String> = self
                .rec
                .containers
                .iter()
                .filter(|(n, r)| r.id.is_some() && !by_name.contains_key(*n))
                .map(|(n, _)| n.clone())
                .collect();
            for name in gone {
                tracing::warn!(container = %name, "the runtime lost this container; it will run again");
                let r = self.rec.container(&name);
                if let Some(t) = current_termination(r) {
                    r.last_terminated = Some(t);
                }
                r.id = None;
                r.previous_id = None;
                r.observed = None;
                r.restart_count += 1;
            }
            for (name, mut list) in by_name {
                list.sort_by_key(|c| {
                    (
                        c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                        c.created_at,
                    )
                });
                let newest = list.last().map(|c| c.id.clone());
                let r = self.rec.container(&name);
                if r.id != newest {
                    tracing::info!(container = %name, ?newest, "adopting the newest attempt");
                    if let Some(n) = list.last() {
                        r.restart_count = r
                            .restart_count
                            .max(n.metadata.as_ref().map(|m| m.attempt as i32).unwrap_or(0));
                    }
                    r.previous_id = list.iter().rev().nth(1).map(|c| c.id.clone());
                    r.id = newest;
                    // The record's state was the old attempt's; observe() reads the new one.
                    r.observed = None;
                }
            }
        }
        if let Some(id) = &self.rec.sandbox_id {
            if self.rec.pod_ip.is_empty() {
                self.rec.pod_ip = self.cri.pod_sandbox_ip(id).await.unwrap_or_default();
            }
        }
        self.observe().await;
        let all: Vec<Container> = {
            let spec = self.rec.spec();
            spec.init_containers
                .iter()
                .flatten()
                .chain(spec.containers.iter())
                .cloned()
                .collect()
        };
        for c in all {
            let Some(r) = self.rec.containers.get(&c.name).cloned() else {
                continue;
            };
            let running = r.observed.as_ref().map(|o| o.state) == Some(RunState::Running);
            match (running, r.killing, r.id.as_ref()) {
                (true, false, Some(id)) => {
                    // Readiness is proven again by the probe, as after a kubelet restart.
                    if c.readiness_probe.is_some() {
                        self.rec.container(&c.name).ready = false;
                    }
                    self.start_probes(&c, id);
                }
                // The previous daemon was killing it when it died: finish the kill.
                (true, true, Some(id)) => {
                    let grace = self
                        .rec
                        .spec()
                        .termination_grace_period_seconds
                        .unwrap_or(30);
                    let cri = self.cri.clone();
                    let id = id.clone();
                    tokio::spawn(async move {
                        if let Err(e) = cri.stop_container(&id, grace).await {
                            tracing::warn!(container = %id, error = %e, "StopContainer of an adopted kill");
                        }
                    });
                }
                _ => {}
            }
        }
        tracing::info!(pod = %self.rec.name(), "pod re-adopted");
        self.save();
    }

    /// The pod finished: stop what still runs (sidecars) and the sandbox, keep the records.
    pub(super) async fn finish(&mut self) {
        if self.rec.sandbox_stopped {
            return;
        }
        self.stop_probes();
        let grace = self
            .rec
            .spec()
            .termination_grace_period_seconds
            .unwrap_or(30);
        let running: Vec<(String, String)> = self
            .rec
            .containers
            .iter()
            .filter(|(_, r)| r.observed.as_ref().map(|o| o.state) == Some(RunState::Running))
            .filter_map(|(n, r)| r.id.clone().map(|id| (n.clone(), id)))
            .collect();
        for (name, id) in running {
            self.event(
                "Normal",
                "Killing",
                Some(&name),
                format!("Stopping container {name}"),
            );
            let _ = self.cri.stop_container(&id, grace).await;
        }
        if let Some(sb) = self.rec.sandbox_id.clone() {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "StopPodSandbox of a finished pod");
                return;
            }
        }
        self.rec.sandbox_stopped = true;
        self.observe().await;
    }

    /// Graceful deletion: preStop hooks, StopContainer with the grace period, then every CRI
    /// object, the pod cgroup, the volumes and the record are removed.
    pub(super) async fn terminate(&mut self, grace_seconds: Option<i64>) {
        let grace = grace_seconds.filter(|g| *g >= 0).unwrap_or_else(|| {
            self.rec
                .spec()
                .termination_grace_period_seconds
                .unwrap_or(30)
        });
        self.rec.deleting = Some(grace);
        self.rec.pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        self.rec.pod.metadata.deletion_grace_period_seconds = Some(grace);
        self.save();
        {
            let mut v = self.view.lock_unpoisoned();
            v.pod.metadata.deletion_timestamp = self.rec.pod.metadata.deletion_timestamp.clone();
            v.pod.metadata.deletion_grace_period_seconds = Some(grace);
        }
        self.stop_probes();
        if self.rec.rejection.is_none() {
            self.observe().await;
            // App containers stop together; then sidecars one by one, last started first, so
            // they outlive what they serve (the kubelet's order).
            let spec = self.rec.spec().clone();
            let apps: Vec<Container> = spec.containers.clone();
            let mut sidecars: Vec<Container> = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| is_restartable_init(c))
                .cloned()
                .collect();
            sidecars.reverse();
            let mut stops = tokio::task::JoinSet::new();
            for c in apps {
                if let Some(stop) = self.stop_running(c, grace) {
                    stops.spawn(stop);
                }
            }
            while stops.join_next().await.is_some() {}
            for c in sidecars {
                if let Some(stop) = self.stop_running(c, grace) {
                    stop.await;
                }
            }
            self.remove_everything().await;
        }
        if let Err(e) = self.store.remove(self.rec.namespace(), self.rec.name()) {
            tracing::error!(error = %e, "removing the pod record");
        }
        tracing::info!(pod = %self.rec.name(), "pod deleted");
    }

    /// preStop then StopContainer for `c` if its current attempt runs.
    pub(super) fn stop_running(
        &mut self,
        c: Container,
        grace: i64,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let r = self.rec.containers.get(&c.name)?;
        let id = r.id.clone()?;
        if r.observed.as_ref().map(|o| o.state) != Some(RunState::Running) {
            return None;
        }
        self.event(
            "Normal",
            "Killing",
            Some(&c.name),
            format!("Stopping container {}", c.name),
        );
        let cri = self.cri.clone();
        let pod_ip = self.rec.pod_ip.clone();
        Some(async move {
            let t0 = Instant::now();
            if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()) {
                let hook = tokio::time::timeout(
                    Duration::from_secs(grace.max(1) as u64),
                    run_hook(cri.as_ref(), &h, &c, &id, &pod_ip),
                );
                if let Ok(Err(e)) = hook.await {
                    tracing::warn!(container = %c.name, error = %e, "preStop hook failed");
                }
            }
            // What the hook used comes off the grace period, as in the kubelet (minimum 2 s).
            let left = (grace - t0.elapsed().as_secs() as i64).max(2);
            if let Err(e) = cri.stop_container(&id, left).await {
                tracing::warn!(container = %id, error = %e, "StopContainer");
            }
        })
    }

    pub(super) async fn remove_everything(&mut self) {
        let uid = self.rec.uid().to_string();
        // By label too: an object made just before a crash may be missing from the record.
        let mut containers: Vec<String> = self
            .rec
            .containers
            .values()
            .flat_map(|r| [r.id.clone(), r.previous_id.clone()])
            .flatten()
            .collect();
        if let Ok(cs) = self.cri.list_containers(uid_selector(&uid)).await {
            containers.extend(cs.into_iter().map(|c| c.id));
        }
        containers.sort();
        containers.dedup();
        let mut sandboxes: Vec<String> = self.rec.sandbox_id.iter().cloned().collect();
        if let Ok(sbs) = self.cri.list_pod_sandboxes(uid_selector(&uid)).await {
            sandboxes.extend(sbs.into_iter().map(|s| s.id));
        }
        sandboxes.sort();
        sandboxes.dedup();
        for sb in &sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "StopPodSandbox");
            }
        }
        for id in &containers {
            if let Err(e) = self.cri.remove_container(id).await {
                tracing::warn!(container = %id, error = %e, "RemoveContainer");
            }
        }
        for sb in &sandboxes {
            if let Err(e) = self.cri.remove_pod_sandbox(sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "RemovePodSandbox");
            }
        }
        let path = self
            .rec
            .cgroup
            .clone()
            .unwrap_or_else(|| self.cgroup_path());
        let cgroups = self.settings.cgroups.clone();
        let parent = self.settings.cgroup_parent.clone();
        let removed = tokio::task::spawn_blocking(move || cgroups.remove(&path, &parent)).await;
        if let Ok(Err(e)) = removed {
            tracing::warn!(error = %e, "removing the pod cgroup");
        }
        if let Err(e) = volumes::tear_down(&self.pod_dir()) {
            tracing::warn!(error = %e, "removing the pod's volumes and logs");
        }
    }
}

/// Runs a lifecycle hook (exec or httpGet; sleep waits).
pub(super) async fn run_hook(
    cri: &dyn CriApi,
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
        return Ok(());
    }
    let probe = k8s_openapi::api::core::v1::Probe {
        exec: h.exec.clone(),
        http_get: h.http_get.clone(),
        tcp_socket: h.tcp_socket.clone(),
        // The hook's own deadline is the grace period, enforced by the caller.
        timeout_seconds: Some(3600),
        ..Default::default()
    };
    probe::run_once(cri, &probe, c, id, pod_ip).await
}
