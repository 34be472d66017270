//! CheckpointContainer: CRIU's dump of a running container, which goes on running (the
//! kubelet's `/checkpoint` is forensic), and the archive of it at the client's location in
//! CRI-O's layout (`crate::checkpoint`).
//!
//! The dump is the shim's (`runc checkpoint --leave-running`); only containers runc created
//! have the state it needs, so with `runtime.create = "native"` (the default) the shim
//! answers FailedPrecondition naming the key to change. Everything is made in a work
//! directory under the container's root directory, removed however the call ends; the
//! archive appears at `location` whole, or not at all.

use super::ContainerService;
use crate::checkpoint::{archive, layout, rootfs_diff, ConfigDump};
use crate::error::{Error, Result};
use crate::shim::Dump;
use crate::store::container::{Container, ContainerRecord, ContainerState};
use peapod_host::timefmt;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The dump's limit when the request has none (CRI: 0 means the runtime's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A CheckpointContainer request, after the gRPC layer took it apart.
pub struct CheckpointContainer {
    pub container_id: String,
    pub location: String,
    /// Seconds; 0: [`DEFAULT_TIMEOUT`].
    pub timeout: i64,
}

/// The archive's path: absolute, not a directory, in a directory that exists.
fn location(location: &str) -> Result<PathBuf> {
    if location.is_empty() {
        return Err(Error::invalid(
            "location is required (the path of the checkpoint archive to write)",
        ));
    }
    let path = PathBuf::from(location);
    let bad = |why: &str| Err(Error::invalid(format!("location {location:?} {why}")));
    if !path.is_absolute() {
        return bad("must be an absolute path");
    }
    if path.file_name().is_none() || path.is_dir() {
        return bad("must name a file, not a directory");
    }
    match path.parent() {
        Some(dir) if dir.is_dir() => Ok(path),
        _ => bad("is in a directory that does not exist"),
    }
}

fn timeout(seconds: i64) -> Result<Duration> {
    match seconds {
        0 => Ok(DEFAULT_TIMEOUT),
        s if s > 0 => Ok(Duration::from_secs(s as u64)),
        s => Err(Error::invalid(format!(
            "timeout {s} must not be negative (0: the runtime's default)"
        ))),
    }
}

/// A directory removed when dropped: the call's work directory.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = peapod_host::fs::remove_dir_all_if_exists(&self.0);
    }
}

impl ContainerService {
    /// CheckpointContainer. Bad input and containers that cannot be checkpointed change
    /// nothing; a failed dump leaves the container running and no archive.
    pub async fn checkpoint_container(self: &Arc<Self>, req: CheckpointContainer) -> Result<()> {
        let location = location(&req.location)?;
        let timeout = timeout(req.timeout)?;
        let c = self.containers.read().resolve(&req.container_id)?;
        let rt = self.clone();
        crate::detached::run_to_completion(async move {
            rt.checkpoint_resolved(c, &location, timeout).await
        })
        .await
    }

    async fn checkpoint_resolved(
        &self,
        c: Arc<Container>,
        location: &Path,
        timeout: Duration,
    ) -> Result<()> {
        // Not stopped, removed or checkpointed meanwhile.
        let _op = c.op.lock().await;
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return Err(super::not_running(&rec, "checkpoint it"));
        }
        self.criu_usable()?;
        let shim = self.shims.get(&rec.sandbox_id).await?;
        let work = WorkDir(
            self.paths
                .container_root_dir(&rec.id)
                .join(format!("checkpoint-{}", timefmt::now_ns())),
        );
        let staging = work.0.join("archive");
        let images = staging.join(layout::CHECKPOINT_DIR);
        let criu_work = work.0.join("criu");
        for dir in [&images, &criu_work] {
            std::fs::create_dir_all(dir).map_err(|e| Error::path("create", dir, e))?;
        }
        let started = std::time::Instant::now();
        let dump = Dump {
            images: &images,
            work: &criu_work,
            timeout,
        };
        shim.checkpoint(&rec.id, &dump).await?;
        let dumped = started.elapsed();
        let upper = self.images.upper_dir(&rec.id);
        crate::blocking::off_runtime(|| {
            stage_metadata(&rec, &staging, &criu_work, upper.as_deref())?;
            archive::write(location, &staging)
                .map_err(|e| Error::path("write the checkpoint archive", location, e))
        })?;
        tracing::info!(
            dump_ms = dumped.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            location = %location.display(),
            "container checkpointed"
        );
        Ok(())
    }

    /// Whether CRIU works here (asked once, off the async workers: `criu check` takes a
    /// while); FailedPrecondition with its reason if not.
    pub(super) fn criu_usable(&self) -> Result<()> {
        let criu = self.criu.clone();
        crate::blocking::off_runtime(|| criu.usable()).map_err(Error::failed_precondition)
    }
}

/// Everything of the archive but CRIU's images, written into `staging`.
fn stage_metadata(
    rec: &ContainerRecord,
    staging: &Path,
    criu_work: &Path,
    upper: Option<&Path>,
) -> Result<()> {
    let write = |name: &str, bytes: &[u8]| {
        let path = staging.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::path("write", &path, e))
    };
    let config_dump = ConfigDump {
        id: rec.id.clone(),
        name: crate::store::container::config_name(&rec.config).to_string(),
        rootfs_image: rec.image_name.clone(),
        rootfs_image_ref: rec.image_id.clone(),
        rootfs_image_name: rec.image_name.clone(),
        runtime: "runc".into(),
        created_time: timefmt::rfc3339_nano(rec.created_at_ns),
        checkpointed_time: timefmt::rfc3339_nano(timefmt::now_ns()),
        restored_time: layout::ZERO_TIME.into(),
        restored: false,
    };
    write(layout::CONFIG_DUMP, &to_json(&config_dump)?)?;
    write(layout::CONTAINER_CONFIG, &to_json(&rec.config)?)?;
    let spec_path = rec.bundle.join("config.json");
    let spec = std::fs::read(&spec_path).map_err(|e| Error::path("read", &spec_path, e))?;
    write(layout::SPEC_DUMP, &spec)?;
    let log = criu_work.join(layout::DUMP_LOG);
    if let Ok(bytes) = std::fs::read(&log) {
        write(layout::DUMP_LOG, &bytes)?;
    }
    if let Some(upper) = upper {
        let tar = staging.join(layout::ROOTFS_DIFF);
        let deleted = rootfs_diff::collect(upper, &mount_points(&spec), &tar)
            .map_err(|e| Error::path("collect the root filesystem's changes from", upper, e))?;
        write(layout::DELETED_FILES, &to_json(&deleted)?)?;
    }
    Ok(())
}

/// The spec's mount destinations, relative (`etc/hosts`): what the runtime made in the upper
/// directory as mount points is not the container's writing.
fn mount_points(spec: &[u8]) -> HashSet<PathBuf> {
    let spec: serde_json::Value = serde_json::from_slice(spec).unwrap_or_default();
    spec["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["destination"].as_str())
        .map(|d| PathBuf::from(d.trim_start_matches('/')))
        .collect()
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value)
        .map_err(|e| Error::internal(format!("serialising checkpoint metadata: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_must_be_an_absolute_file_path_in_an_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "",
            "relative.tar",
            "/nonexistent-peapod-dir/x.tar",
            dir.path().to_str().unwrap(),
        ] {
            let err = location(bad).unwrap_err();
            assert_eq!(err.code(), crate::error::Code::InvalidArgument);
            assert!(err.to_string().contains("location"), "{err}");
        }
        let ok = dir.path().join("c.tar");
        assert_eq!(location(ok.to_str().unwrap()).unwrap(), ok);
    }

    #[test]
    fn timeouts_default_and_refuse_negatives() {
        assert_eq!(timeout(0).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout(7).unwrap(), Duration::from_secs(7));
        assert!(timeout(-1).unwrap_err().to_string().contains("timeout"));
    }

    #[test]
    fn mount_points_are_relative_destinations() {
        let spec = br#"{"mounts":[{"destination":"/etc/hosts"},{"destination":"/proc"}]}"#;
        let points = mount_points(spec);
        assert!(points.contains(Path::new("etc/hosts")) && points.contains(Path::new("proc")));
        assert!(mount_points(b"garbage").is_empty());
    }
}
