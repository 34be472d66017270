//! Probe workers per container and what their reports do: Unhealthy events, readiness,
//! startup gating, and kills on liveness/startup failure.

use super::*;

impl Supervisor {
    pub(super) fn spawn_probe(&mut self, c: &Container, id: &str, kind: ProbeKind) {
        let probe = match kind {
            ProbeKind::Startup => c.startup_probe.clone(),
            ProbeKind::Liveness => c.liveness_probe.clone(),
            ProbeKind::Readiness => c.readiness_probe.clone(),
        };
        let Some(probe) = probe else {
            return;
        };
        let task = tokio::spawn(probe::worker(
            self.cri.clone(),
            kind,
            probe,
            c.clone(),
            id.to_string(),
            self.rec.pod_ip.clone(),
            self.probe_tx.clone(),
        ));
        if let Some(old) = self.probes.insert((c.name.clone(), kind_key(kind)), task) {
            old.abort();
        }
    }

    pub(super) fn start_probes(&mut self, c: &Container, id: &str) {
        self.stop_container_probes(&c.name);
        let started = self.rec.containers.get(&c.name).is_some_and(|r| r.started);
        if c.startup_probe.is_some() && !started {
            self.spawn_probe(c, id, ProbeKind::Startup);
        } else {
            self.spawn_probe(c, id, ProbeKind::Liveness);
            self.spawn_probe(c, id, ProbeKind::Readiness);
        }
    }

    pub(super) fn stop_container_probes(&mut self, name: &str) {
        self.probes.retain(|(n, _), t| {
            if n == name {
                t.abort();
                false
            } else {
                true
            }
        });
    }

    pub(super) fn stop_probes(&mut self) {
        for (_, t) in self.probes.drain() {
            t.abort();
        }
    }

    pub(super) fn container_spec(&self, name: &str) -> Option<Container> {
        let spec = self.rec.spec();
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .find(|c| c.name == name)
            .cloned()
    }

    pub(super) async fn on_probe(&mut self, r: ProbeReport) {
        let current = self
            .rec
            .containers
            .get(&r.container)
            .and_then(|c| c.id.clone());
        if current.as_deref() != Some(r.container_id.as_str()) {
            return; // a report about a previous attempt
        }
        let Some(c) = self.container_spec(&r.container) else {
            return;
        };
        match (r.kind, r.event) {
            (kind, ProbeEvent::Failed(msg)) => {
                self.event(
                    "Warning",
                    "Unhealthy",
                    Some(&c.name),
                    format!("{} probe failed: {msg}", kind.label()),
                );
            }
            (ProbeKind::Startup, ProbeEvent::Result(true)) => {
                self.rec.container(&c.name).started = true;
                self.spawn_probe(&c, &r.container_id, ProbeKind::Liveness);
                self.spawn_probe(&c, &r.container_id, ProbeKind::Readiness);
            }
            (ProbeKind::Readiness, ProbeEvent::Result(ok)) => {
                self.rec.container(&c.name).ready = ok
            }
            (ProbeKind::Liveness, ProbeEvent::Result(true)) => {}
            (kind @ (ProbeKind::Startup | ProbeKind::Liveness), ProbeEvent::Result(false)) => {
                let lower = kind.label().to_lowercase();
                self.event(
                    "Normal",
                    "Killing",
                    Some(&c.name),
                    format!(
                        "Container {} failed {lower} probe, will be restarted",
                        c.name
                    ),
                );
                self.rec.container(&c.name).killing = true;
                self.rec.container(&c.name).ready = false;
                self.stop_container_probes(&c.name);
                let grace = kind_grace(&c, kind, self.rec.spec().termination_grace_period_seconds);
                // Stopping takes up to the grace period; the loop keeps serving meanwhile.
                let cri = self.cri.clone();
                let id = r.container_id.clone();
                tokio::spawn(async move {
                    if let Err(e) = cri.stop_container(&id, grace).await {
                        tracing::warn!(container = %id, error = %e, "StopContainer after a probe failure");
                    }
                });
            }
        }
    }
}

/// The grace period of a probe-triggered kill: the probe's own, else the pod's.
pub(super) fn kind_grace(c: &Container, kind: ProbeKind, pod_grace: Option<i64>) -> i64 {
    let probe = match kind {
        ProbeKind::Startup => c.startup_probe.as_ref(),
        ProbeKind::Liveness => c.liveness_probe.as_ref(),
        ProbeKind::Readiness => None,
    };
    probe
        .and_then(|p| p.termination_grace_period_seconds)
        .or(pod_grace)
        .unwrap_or(30)
}
