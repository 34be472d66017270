//! Starting a container's next attempt: the image per imagePullPolicy (with pull back-off),
//! CreateContainer/StartContainer, postStart, and the back-off of failed starts.

use super::teardown::run_hook;
use super::*;
use crate::termination;

impl Supervisor {
    /// Makes the image available per imagePullPolicy; None while it is not.
    pub(super) async fn ensure_image(&mut self, c: &Container) -> Option<()> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| "IfNotPresent".into());
        let present = self.cri.image_id(&image).await.ok().flatten();
        let pull = match policy.as_str() {
            "Always" => true,
            "Never" => {
                if present.is_none() {
                    let msg = format!(
                        "Container image {image:?} is not present with pull policy of Never"
                    );
                    self.rec.container(&c.name).waiting = Some(Waiting {
                        reason: "ErrImageNeverPull".into(),
                        message: msg.clone(),
                    });
                    self.event("Warning", "ErrImageNeverPull", Some(&c.name), msg);
                    return None;
                }
                false
            }
            _ => present.is_none(),
        };
        if !pull {
            self.event(
                "Normal",
                "Pulled",
                Some(&c.name),
                format!("Container image {image:?} already present on machine"),
            );
            return Some(());
        }
        let now = now_ms();
        if now < self.rec.container(&c.name).not_before_ms {
            let r = self.rec.container(&c.name);
            let first = r.waiting.as_ref().map(|w| w.reason.as_str()) != Some("ImagePullBackOff");
            r.waiting = Some(Waiting {
                reason: "ImagePullBackOff".into(),
                message: format!("Back-off pulling image {image:?}"),
            });
            if first {
                self.event(
                    "Normal",
                    "BackOff",
                    Some(&c.name),
                    format!("Back-off pulling image {image:?}"),
                );
            }
            return None;
        }
        self.event(
            "Normal",
            "Pulling",
            Some(&c.name),
            format!("Pulling image {image:?}"),
        );
        self.publish();
        let t0 = Instant::now();
        match self.cri.pull_image(&image, self.sandbox_config()).await {
            Ok(_) => {
                let secs = t0.elapsed().as_secs_f64();
                self.rec.container(&c.name).pull_failures = 0;
                self.event(
                    "Normal",
                    "Pulled",
                    Some(&c.name),
                    format!("Successfully pulled image {image:?} in {secs:.3}s ({secs:.3}s including waiting)"),
                );
                Some(())
            }
            Err(e) => {
                let base = self.settings.backoff_base.as_millis() as i64;
                let max = self.settings.max_backoff().as_millis() as i64;
                let r = self.rec.container(&c.name);
                r.pull_failures += 1;
                let delay = (base << (r.pull_failures - 1).min(10)).min(max);
                r.not_before_ms = now_ms() + delay;
                r.waiting = Some(Waiting {
                    reason: "ErrImagePull".into(),
                    message: e.message().to_string(),
                });
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Failed to pull image {image:?}: {}", e.message()),
                );
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    "Error: ErrImagePull".into(),
                );
                None
            }
        }
    }

    /// Creates and starts the container's next attempt.
    pub(super) async fn start(&mut self, c: &Container, is_restart: bool) {
        // After a failed create or start, the next try waits out its back-off.
        if self.rec.container(&c.name).start_failures > 0
            && now_ms() < self.rec.container(&c.name).not_before_ms
        {
            return;
        }
        if self.ensure_image(c).await.is_none() {
            return;
        }
        let Some(sandbox_id) = self.rec.sandbox_id.clone() else {
            return;
        };
        let current = self.rec.container(&c.name).restart_count;
        let had_attempt = self.rec.container(&c.name).id.is_some();
        let attempt = if is_restart && had_attempt {
            current + 1
        } else {
            current
        };
        let empty = BTreeMap::new();
        let term_log = c
            .termination_message_path
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|_| termination::host_file(&self.pod_dir(), &c.name, attempt.max(0) as u32))
            .filter(|f| match termination::prepare(f) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(file = %f.display(), error = %e, "termination message file");
                    false
                }
            });
        let config = cri_config::container_config(
            &self.rec,
            c,
            &self.settings,
            &ContainerInputs {
                attempt: attempt.max(0) as u32,
                volumes: self.volumes.as_ref().unwrap_or(&empty),
                pod_ip: &self.rec.pod_ip,
                termination_log: term_log.as_deref(),
            },
        );
        let id = match self
            .cri
            .create_container(&sandbox_id, config, self.sandbox_config())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                self.start_failed(&c.name, "CreateContainerError", e.message());
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Error: {}", e.message()),
                );
                return;
            }
        };
        // Exactly one previous attempt is kept, for `logs --previous`.
        let stale = {
            let r = self.rec.container(&c.name);
            let stale = if had_attempt {
                r.previous_id.take()
            } else {
                None
            };
            if had_attempt {
                // An attempt that never ran leaves the last real exit in place.
                if let Some(t) = current_termination(r) {
                    r.last_terminated = Some(t);
                }
                r.previous_id = r.id.take();
            }
            r.restart_count = attempt;
            r.id = Some(id.clone());
            r.observed = Some(Observed {
                state: RunState::Created,
                started_at_ns: 0,
                finished_at_ns: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
            });
            r.waiting = None;
            r.killing = false;
            r.started = c.startup_probe.is_none();
            r.ready = c.readiness_probe.is_none();
            stale
        };
        self.save();
        if let Some(old) = stale {
            if let Err(e) = self.cri.remove_container(&old).await {
                tracing::warn!(container = %old, error = %e, "removing an old attempt failed");
            }
        }
        self.event(
            "Normal",
            "Created",
            Some(&c.name),
            format!("Created container: {}", c.name),
        );
        match self.cri.start_container(&id).await {
            Ok(()) => {
                self.rec.container(&c.name).start_failures = 0;
                self.event(
                    "Normal",
                    "Started",
                    Some(&c.name),
                    format!("Started container {}", c.name),
                );
                if let Ok(s) = self.cri.container_status(&id).await {
                    self.record_status(&c.name, &s);
                }
                if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
                    // As the kubelet: a failed postStart hook kills the container.
                    if let Err(msg) =
                        run_hook(self.cri.as_ref(), &h, c, &id, &self.rec.pod_ip).await
                    {
                        self.event(
                            "Warning",
                            "FailedPostStartHook",
                            Some(&c.name),
                            format!("PostStartHook failed: {msg}"),
                        );
                        self.event(
                            "Normal",
                            "Killing",
                            Some(&c.name),
                            format!("FailedPostStartHook: stopping container {}", c.name),
                        );
                        let grace = self
                            .rec
                            .spec()
                            .termination_grace_period_seconds
                            .unwrap_or(30);
                        if let Err(e) = self.cri.stop_container(&id, grace).await {
                            tracing::warn!(container = %id, error = %e, "StopContainer after a failed postStart hook");
                        }
                        self.publish();
                        return;
                    }
                }
                self.start_probes(c, &id);
            }
            Err(e) => {
                self.start_failed(&c.name, "RunContainerError", e.message());
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Error: {}", e.message()),
                );
            }
        }
        self.publish();
    }

    /// Shows the failure and backs off the next try like a crash.
    pub(super) fn start_failed(&mut self, name: &str, reason: &str, message: &str) {
        let base = self.settings.backoff_base.as_millis() as i64;
        let max = self.settings.max_backoff().as_millis() as i64;
        let r = self.rec.container(name);
        r.start_failures += 1;
        r.not_before_ms = now_ms() + (base << (r.start_failures - 1).min(10)).min(max);
        r.waiting = Some(Waiting {
            reason: reason.into(),
            message: message.into(),
        });
    }
}
