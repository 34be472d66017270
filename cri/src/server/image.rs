//! ListImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo.

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn unimplemented<T>(rpc: &str) -> Result<T> {
    Err(Error::Unimplemented(format!(
        "{rpc}: the image service is not implemented yet"
    )))
}

pub async fn list(
    _rt: &Arc<Runtime>,
    _req: cri::ListImagesRequest,
) -> Result<cri::ListImagesResponse> {
    unimplemented("ListImages")
}

pub async fn status(
    _rt: &Arc<Runtime>,
    _req: cri::ImageStatusRequest,
) -> Result<cri::ImageStatusResponse> {
    unimplemented("ImageStatus")
}

pub async fn pull(
    _rt: &Arc<Runtime>,
    _req: cri::PullImageRequest,
) -> Result<cri::PullImageResponse> {
    unimplemented("PullImage")
}

pub async fn remove(
    _rt: &Arc<Runtime>,
    _req: cri::RemoveImageRequest,
) -> Result<cri::RemoveImageResponse> {
    unimplemented("RemoveImage")
}

pub async fn fs_info(
    _rt: &Arc<Runtime>,
    _req: cri::ImageFsInfoRequest,
) -> Result<cri::ImageFsInfoResponse> {
    unimplemented("ImageFsInfo")
}
