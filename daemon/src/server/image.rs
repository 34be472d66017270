//! ListImages, StreamImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo.
//!
//! PullImage also imports archives, for machines without a registry: a reference
//! `docker-archive:/abs/path.tar` or `oci-archive:/abs/path.tar` (skopeo's transport names;
//! both accept either format, which is detected from the content: a `docker save` archive or
//! an OCI image-layout tar, optionally gzip- or zstd-compressed) imports every image of the
//! archive with its tags, and answers with the id of the first. `peapod image import` and
//! `crictl pull` use it. The path must be absolute and name a regular file. The daemon runs
//! as root, so whoever can reach the CRI socket can have it read any file as an image
//! archive; they can already run privileged pods, so the socket must stay root-only.

use super::list_stream::{self, ListStream};
use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_image::Image;
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::sync::Arc;

fn require_image(spec: Option<&cri::ImageSpec>) -> Result<&str> {
    spec.map(|s| s.image.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::invalid("image.image is required"))
}

pub fn to_cri(img: &Image) -> cri::Image {
    let (uid, username) = peapod_image::image_user(&img.config.user);
    cri::Image {
        id: img.id.clone(),
        repo_tags: img.repo_tags.clone(),
        repo_digests: img.repo_digests.clone(),
        size: img.size,
        uid: uid.map(|value| cri::Int64Value { value }),
        username,
        spec: Some(cri::ImageSpec {
            image: img.id.clone(),
            ..Default::default()
        }),
        pinned: img.pinned,
    }
}

fn credentials(auth: Option<cri::AuthConfig>) -> Option<peapod_image::Credentials> {
    let a = auth?;
    Some(peapod_image::Credentials {
        username: a.username,
        password: a.password,
        auth: a.auth,
        identity_token: a.identity_token,
        registry_token: a.registry_token,
        server_address: a.server_address,
    })
}

/// Whether an image passes a ListImages filter (by reference, tag, digest or id).
fn matches(daemon: &Daemon, img: &Image, filter: Option<&cri::ImageFilter>) -> bool {
    let Some(want) = filter
        .and_then(|f| f.image.as_ref())
        .map(|s| s.image.as_str())
        .filter(|s| !s.is_empty())
    else {
        return true;
    };
    daemon
        .images
        .resolve(want)
        .is_some_and(|found| found.id == img.id)
}

pub async fn list(
    daemon: &Arc<Daemon>,
    req: cri::ListImagesRequest,
) -> Result<cri::ListImagesResponse> {
    let images = daemon
        .images
        .list()
        .iter()
        .filter(|img| matches(daemon, img, req.filter.as_ref()))
        .map(to_cri)
        .collect();
    Ok(cri::ListImagesResponse { images })
}

/// StreamImages: ListImages' items, streamed (`list_stream`).
pub async fn stream(
    daemon: &Arc<Daemon>,
    req: cri::StreamImagesRequest,
) -> Result<ListStream<cri::StreamImagesResponse>> {
    let items = list(daemon, cri::ListImagesRequest { filter: req.filter })
        .await?
        .images;
    Ok(list_stream::stream(
        items,
        daemon.config.stream_batch_items,
        |images| cri::StreamImagesResponse { images },
    ))
}

pub async fn status(
    daemon: &Arc<Daemon>,
    req: cri::ImageStatusRequest,
) -> Result<cri::ImageStatusResponse> {
    let reference = require_image(req.image.as_ref())?;
    // A missing image is not an error: the response carries no image.
    let Some(img) = daemon.images.resolve(reference) else {
        return Ok(cri::ImageStatusResponse::default());
    };
    let info = if req.verbose {
        // The raw OCI image config too (containerd's "imageSpec"): history, platform, created.
        let spec = daemon
            .images
            .config_json(&img.id)
            .await
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        let v = serde_json::json!({
            "id": img.id,
            "repoTags": img.repo_tags,
            "repoDigests": img.repo_digests,
            "size": img.size,
            "pinned": img.pinned,
            "config": img.config,
            "layers": daemon.images.layers(&img.id).unwrap_or_default(),
            "imageSpec": spec,
        });
        HashMap::from([("info".to_string(), v.to_string())])
    } else {
        HashMap::new()
    };
    Ok(cri::ImageStatusResponse {
        image: Some(to_cri(&img)),
        info,
    })
}

pub async fn pull(
    daemon: &Arc<Daemon>,
    metrics: &peapod_metrics::Metrics,
    req: cri::PullImageRequest,
) -> Result<cri::PullImageResponse> {
    let reference = require_image(req.image.as_ref())?.to_string();
    tracing::Span::current().record("image", reference.as_str());
    if let Some(path) = archive_path(&reference) {
        let id = import(daemon, path).await?;
        return Ok(cri::PullImageResponse { image_ref: id });
    }
    let creds = credentials(req.auth);
    let start = std::time::Instant::now();
    let img = daemon.images.pull(&reference, creds.as_ref()).await?;
    metrics.record_image_pull(img.size, start.elapsed().as_secs_f64());
    tracing::info!(id = %img.id, "pulled");
    // The kubelet then names the image by this reference in CreateContainer; the id is
    // unambiguous (a repo digest may belong to another repository of the same image), and it
    // is what containerd returns.
    Ok(cri::PullImageResponse { image_ref: img.id })
}

/// The transports PullImage takes for local archives (skopeo's names).
const ARCHIVE_TRANSPORTS: [&str; 2] = ["docker-archive:", "oci-archive:"];

/// The archive path of a `docker-archive:PATH` / `oci-archive:PATH` reference. A registry
/// host of that name with a port (`oci-archive:5000/app`) stays a registry reference.
fn archive_path(reference: &str) -> Option<&str> {
    ARCHIVE_TRANSPORTS.iter().find_map(|t| {
        let rest = reference.strip_prefix(t)?;
        (!rest.starts_with(|c: char| c.is_ascii_digit())).then_some(rest)
    })
}

/// Imports every image of the archive at `path`; returns the id of the first.
async fn import(daemon: &Arc<Daemon>, path: &str) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Err(Error::invalid(format!(
            "image.image: archive path {path:?} must be absolute"
        )));
    }
    // Opened here, non-blocking, and checked on the open file: a FIFO or a device named
    // (or swapped in) there can neither hang the import nor be read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::not_found(format!("archive {path}: no such file")).with_cause(e)
            }
            _ => Error::path("open archive", p, e),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| Error::path("stat archive", p, e))?;
    if !meta.is_file() {
        return Err(Error::invalid(format!(
            "image.image: archive {path} is not a regular file"
        )));
    }
    // The store reopens the archive by name (it seeks and reads it more than once): give it
    // the name of this very file.
    let by_fd = format!("/proc/self/fd/{}", file.as_raw_fd());
    tracing::info!(archive = %path, size = meta.len(), "importing image archive");
    let res = daemon.images.import(std::path::Path::new(&by_fd)).await;
    drop(file);
    // The client named the archive, not our descriptor of it.
    let images = res.map_err(|e| {
        Error::from(e).reworded(|m| format!("import {path}: {}", m.replace(&by_fd, path)))
    })?;
    for img in &images {
        tracing::info!(archive = %path, id = %img.id, tags = ?img.repo_tags, "imported image");
    }
    images
        .first()
        .map(|img| img.id.clone())
        .ok_or_else(|| Error::invalid(format!("image.image: archive {path} holds no image")))
}

pub async fn remove(
    daemon: &Arc<Daemon>,
    req: cri::RemoveImageRequest,
) -> Result<cri::RemoveImageResponse> {
    let reference = require_image(req.image.as_ref())?;
    daemon.images.remove(reference).await?;
    Ok(cri::RemoveImageResponse {})
}

fn usage(u: &peapod_image::FsUsage) -> cri::FilesystemUsage {
    cri::FilesystemUsage {
        timestamp: peapod_host::timefmt::now_ns(),
        fs_id: Some(cri::FilesystemIdentifier {
            mountpoint: u.mountpoint.to_string_lossy().into_owned(),
        }),
        used_bytes: Some(cri::UInt64Value {
            value: u.used_bytes,
        }),
        inodes_used: Some(cri::UInt64Value {
            value: u.inodes_used,
        }),
    }
}

pub async fn fs_info(
    daemon: &Arc<Daemon>,
    _req: cri::ImageFsInfoRequest,
) -> Result<cri::ImageFsInfoResponse> {
    let store = daemon.images.clone();
    let info = tokio::task::spawn_blocking(move || store.fs_info())
        .await
        .map_err(|e| Error::internal(format!("image fs info: {e}")))?;
    Ok(cri::ImageFsInfoResponse {
        image_filesystems: vec![usage(&info.image)],
        container_filesystems: vec![usage(&info.container)],
    })
}

#[cfg(test)]
mod tests {
    use super::archive_path;

    #[test]
    fn archive_transports() {
        assert_eq!(archive_path("docker-archive:/a/b.tar"), Some("/a/b.tar"));
        assert_eq!(archive_path("oci-archive:/a:b.tar"), Some("/a:b.tar"));
        assert_eq!(archive_path("oci-archive:rel.tar"), Some("rel.tar"));
        assert_eq!(archive_path("oci-archive:5000/app:1"), None);
        assert_eq!(archive_path("docker.io/library/busybox"), None);
        assert_eq!(archive_path("busybox"), None);
    }
}
