//! ListImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo.

use crate::error::{Error, Result};
use crate::runtime::Runtime;
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
fn matches(rt: &Runtime, img: &Image, filter: Option<&cri::ImageFilter>) -> bool {
    let Some(want) = filter
        .and_then(|f| f.image.as_ref())
        .map(|s| s.image.as_str())
        .filter(|s| !s.is_empty())
    else {
        return true;
    };
    rt.images
        .resolve(want)
        .is_some_and(|found| found.id == img.id)
}

#[tracing::instrument(name = "ListImages", skip_all)]
pub async fn list(
    rt: &Arc<Runtime>,
    req: cri::ListImagesRequest,
) -> Result<cri::ListImagesResponse> {
    let images = rt
        .images
        .list()
        .iter()
        .filter(|img| matches(rt, img, req.filter.as_ref()))
        .map(to_cri)
        .collect();
    Ok(cri::ListImagesResponse { images })
}

#[tracing::instrument(name = "ImageStatus", skip_all)]
pub async fn status(
    rt: &Arc<Runtime>,
    req: cri::ImageStatusRequest,
) -> Result<cri::ImageStatusResponse> {
    let reference = require_image(req.image.as_ref())?;
    // A missing image is not an error: the response carries no image.
    let Some(img) = rt.images.resolve(reference) else {
        return Ok(cri::ImageStatusResponse::default());
    };
    let info = if req.verbose {
        let v = serde_json::json!({
            "id": img.id,
            "repoTags": img.repo_tags,
            "repoDigests": img.repo_digests,
            "size": img.size,
            "pinned": img.pinned,
            "config": img.config,
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

#[tracing::instrument(name = "PullImage", skip_all, fields(image))]
pub async fn pull(rt: &Arc<Runtime>, req: cri::PullImageRequest) -> Result<cri::PullImageResponse> {
    let reference = require_image(req.image.as_ref())?.to_string();
    tracing::Span::current().record("image", reference.as_str());
    let creds = credentials(req.auth);
    let img = rt.images.pull(&reference, creds.as_ref()).await?;
    tracing::info!(id = %img.id, "pulled");
    // The kubelet then names the image by this reference in CreateContainer; the id is
    // unambiguous (a repo digest may belong to another repository of the same image), and it
    // is what containerd returns.
    Ok(cri::PullImageResponse { image_ref: img.id })
}

#[tracing::instrument(name = "RemoveImage", skip_all)]
pub async fn remove(
    rt: &Arc<Runtime>,
    req: cri::RemoveImageRequest,
) -> Result<cri::RemoveImageResponse> {
    let reference = require_image(req.image.as_ref())?;
    rt.images.remove(reference).await?;
    Ok(cri::RemoveImageResponse {})
}

fn usage(u: &peapod_image::FsUsage) -> cri::FilesystemUsage {
    cri::FilesystemUsage {
        timestamp: peapod_shim::timefmt::now_ns(),
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

#[tracing::instrument(name = "ImageFsInfo", skip_all)]
pub async fn fs_info(
    rt: &Arc<Runtime>,
    _req: cri::ImageFsInfoRequest,
) -> Result<cri::ImageFsInfoResponse> {
    let store = rt.images.clone();
    let info = tokio::task::spawn_blocking(move || store.fs_info())
        .await
        .map_err(|e| Error::Internal(format!("image fs info: {e}")))?;
    Ok(cri::ImageFsInfoResponse {
        image_filesystems: vec![usage(&info.image)],
        container_filesystems: vec![usage(&info.container)],
    })
}
