//! The JSON documents of OCI images and their Docker schema-2 twins: index /
//! manifest list, manifest, image config. Deliberately lenient on fields we do
//! not use (serde ignores unknown fields) and strict on the ones we do.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The empty descriptor's media type: an artifact's config with nothing to say.
pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// Annotation containerd writes with the full image name in OCI layouts.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
/// Standard OCI annotation: the tag (or, from some tools, the full name).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Largest manifest / index / config document we accept (the registry spec
/// suggests 4 MiB for manifests; configs with big histories get more room).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// A manifest, an index, or a Docker manifest list: `manifests` or `layers` tells which.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AnyManifest {
    #[serde(rename = "schemaVersion", default)]
    pub schema_version: i64,
    #[serde(rename = "mediaType", default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// An artifact's type (image-spec 1.1), when the manifest is one.
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<Descriptor>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Vec<Descriptor>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

impl AnyManifest {
    pub fn is_index(&self, content_type: Option<&str>) -> bool {
        match content_type.or(self.media_type.as_deref()) {
            Some(OCI_INDEX) | Some(DOCKER_LIST) => true,
            Some(OCI_MANIFEST) | Some(DOCKER_MANIFEST) => false,
            // Untyped documents: the shape decides.
            _ => self.manifests.is_some() && self.config.is_none(),
        }
    }
}

/// The image configuration blob (OCI image config / Docker container image v1).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ConfigFile {
    /// `architecture`, `os` and `variant`, at the top level of the blob.
    #[serde(flatten)]
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<RuntimeConfig>,
    #[serde(default)]
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RootFs {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

/// The `config` member of the image config: what a container runs by default.
/// Docker writes `null` for empty lists and maps, hence the Options.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RuntimeConfig {
    #[serde(rename = "User", default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(rename = "Env", default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    #[serde(
        rename = "Entrypoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(
        rename = "WorkingDir",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub working_dir: Option<String>,
    #[serde(
        rename = "StopSignal",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_signal: Option<String>,
    #[serde(rename = "Labels", default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<HashMap<String, String>>,
    #[serde(
        rename = "ExposedPorts",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(rename = "Volumes", default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
}

/// The platform this process runs on, in OCI terms.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    };
    let variant = match architecture {
        "arm" => Some("v7".to_string()),
        _ => None,
    };
    Platform {
        architecture: architecture.to_string(),
        os: "linux".to_string(),
        variant,
    }
}

/// Picks the manifest for `want` from an index, as containerd's default
/// platform matcher does: same os and architecture; for a variant, an exact
/// match is preferred, then an entry without a variant (arm64 "v8" is the
/// default variant). Attestation manifests (`unknown/unknown`) never match.
/// Entries without a platform are taken only when nothing matches (as
/// containerd does, an unannotated manifest is assumed to fit).
pub fn select_platform<'a>(manifests: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    let norm_variant = |p: &Platform| -> Option<String> {
        match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", Some("v8")) | (_, Some("")) | (_, None) => None,
            (_, Some(v)) => Some(v.to_string()),
        }
    };
    let want_variant = norm_variant(want);
    let candidates = manifests.iter().filter(|d| {
        matches!(
            d.media_type.as_str(),
            OCI_MANIFEST | DOCKER_MANIFEST | OCI_INDEX | DOCKER_LIST | ""
        )
    });
    let mut fallback = None;
    let mut untyped = None;
    for d in candidates {
        let Some(p) = &d.platform else {
            untyped = untyped.or(Some(d));
            continue;
        };
        if p.os != want.os || p.architecture != want.architecture {
            continue;
        }
        let v = norm_variant(p);
        if v == want_variant {
            return Some(d);
        }
        if v.is_none() && fallback.is_none() {
            fallback = Some(d);
        }
    }
    fallback.or(untyped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, os: &str, variant: Option<&str>, digest: &str) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: digest.into(),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: os.into(),
                variant: variant.map(Into::into),
            }),
            annotations: None,
            urls: None,
        }
    }

    #[test]
    fn platform_selection() {
        let list = vec![
            desc("unknown", "unknown", None, "att"),
            desc("arm", "linux", Some("v6"), "armv6"),
            desc("arm", "linux", Some("v7"), "armv7"),
            desc("arm64", "linux", Some("v8"), "arm64"),
            desc("amd64", "windows", None, "win"),
            desc("amd64", "linux", None, "amd64"),
        ];
        let pick = |arch: &str, variant: Option<&str>| {
            select_platform(
                &list,
                &Platform {
                    architecture: arch.into(),
                    os: "linux".into(),
                    variant: variant.map(Into::into),
                },
            )
            .map(|d| d.digest.clone())
        };
        assert_eq!(pick("amd64", None).as_deref(), Some("amd64"));
        assert_eq!(pick("arm64", None).as_deref(), Some("arm64"));
        assert_eq!(pick("arm", Some("v7")).as_deref(), Some("armv7"));
        assert_eq!(pick("s390x", None), None);
        let mut no_platform = list.clone();
        no_platform.push(Descriptor {
            platform: None,
            ..desc("x", "x", None, "untyped")
        });
        assert_eq!(
            select_platform(
                &no_platform,
                &Platform {
                    architecture: "s390x".into(),
                    os: "linux".into(),
                    variant: None
                }
            )
            .map(|d| d.digest.as_str()),
            Some("untyped")
        );
        assert_eq!(
            select_platform(
                &no_platform,
                &Platform {
                    architecture: "amd64".into(),
                    os: "linux".into(),
                    variant: None
                }
            )
            .map(|d| d.digest.as_str()),
            Some("amd64")
        );
        assert!(
            select_platform(&list, &host_platform()).is_some() || !cfg!(target_arch = "x86_64")
        );
    }

    #[test]
    fn docker_config_nulls_parse() {
        let cfg: ConfigFile = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","config":{"Env":null,"Cmd":["sh"],"Labels":null,"User":""},
               "rootfs":{"type":"layers","diff_ids":["sha256:aa"]},"history":[{"created_by":"x"}]}"#,
        )
        .unwrap();
        let c = cfg.config.unwrap();
        assert_eq!(c.cmd.unwrap(), vec!["sh"]);
        assert!(c.env.is_none());
        assert_eq!(cfg.rootfs.diff_ids.len(), 1);
    }
}
