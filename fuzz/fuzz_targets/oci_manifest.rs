//! OCI and Docker manifests, indexes and image configs as a registry or an archive sends
//! them: parsed (or refused) as a pull does, the platform chosen, the config's user read.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_image::manifest::{self, AnyManifest, ConfigFile};

fuzz_target!(|data: &[u8]| {
    if data.len() as u64 > manifest::MAX_MANIFEST_BYTES {
        return;
    }
    if let Ok(m) = serde_json::from_slice::<AnyManifest>(data) {
        for ct in [None, Some(manifest::OCI_INDEX), Some(manifest::DOCKER_MANIFEST)] {
            let _ = m.is_index(ct);
        }
        if let Some(list) = &m.manifests {
            let _ = manifest::select_platform(list, &manifest::host_platform());
        }
        for d in m.layers.iter().flatten().chain(m.config.iter()) {
            let _ = peapod_image::validate_digest(&d.digest);
        }
    }
    if let Ok(c) = serde_json::from_slice::<ConfigFile>(data) {
        if let Some(user) = c.config.as_ref().and_then(|rc| rc.user.as_deref()) {
            let _ = peapod_image::image_user(user);
        }
    }
});
