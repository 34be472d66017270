//! Test support (cargo feature `testsupport`): build images from Debian's
//! busybox-static without any network, write them as OCI image layouts,
//! `docker save` archives or OCI layout tars, and run Debian's
//! `docker-registry` on loopback to push them to with skopeo.
//!
//! Used by this crate's integration tests and by the e2e crate:
//!
//! ```no_run
//! use peapod_image::testsupport::*;
//! let spec = ImageSpec::busybox()
//!     .cmd(&["sh", "-c", "echo hi"])
//!     .env("FOO=bar")
//!     .user("1000")
//!     .passwd_line("app:x:1000:1000::/home/app:/bin/sh")
//!     .group_line("app:x:1000:");
//! let tmp = tempfile::tempdir().unwrap();
//! // as an archive for `Store::import` / `peapod image import`:
//! oci_archive(&tmp.path().join("img.tar"), "example.com/app:1", &spec).unwrap();
//! // or pushed to a registry of the test's own:
//! let reg = Registry::start().unwrap();
//! let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
//! layout.add_image("v1", &spec).unwrap();
//! reg.push(layout.dir(), "v1", "app:1", PushFormat::Oci).unwrap();
//! // pull reg.reference("app:1") through the store or the CRI
//! ```
//!
//! Everything here panics-free returns io::Result; processes are killed on drop.

use crate::manifest::{self, AnyManifest, ConfigFile, Descriptor, Platform};
use crate::store::ImageConfig;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's busybox-static: a static binary, so it runs in an empty rootfs.
pub const BUSYBOX: &str = "/bin/busybox";

fn other(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

fn sha256(data: &[u8]) -> String {
    crate::digest::sha256_digest(data)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// One entry of a test layer.
#[derive(Debug, Clone)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        data: Vec<u8>,
        mode: u32,
        uid: u64,
        gid: u64,
    },
    Symlink {
        path: String,
        target: String,
    },
    Hardlink {
        path: String,
        target: String,
    },
    /// A named pipe (hostile images put them where readers expect files).
    Fifo {
        path: String,
    },
    /// Writes `.wh.<name>` next to `path`: hides `path` of lower layers.
    Whiteout {
        path: String,
    },
    /// Writes `<dir>/.wh..wh..opq`: hides everything lower layers have in `dir`.
    Opaque {
        dir: String,
    },
}

/// A layer: entries in order, and how its blob is compressed.
#[derive(Debug, Clone)]
pub struct Layer {
    pub entries: Vec<Entry>,
    pub compression: Compression,
}

impl Layer {
    pub fn new(compression: Compression) -> Layer {
        Layer {
            entries: Vec::new(),
            compression,
        }
    }
    pub fn dir(mut self, path: &str, mode: u32) -> Self {
        self.entries.push(Entry::Dir {
            path: path.into(),
            mode,
        });
        self
    }
    pub fn file(mut self, path: &str, data: impl Into<Vec<u8>>, mode: u32) -> Self {
        self.entries.push(Entry::File {
            path: path.into(),
            data: data.into(),
            mode,
            uid: 0,
            gid: 0,
        });
        self
    }
    pub fn file_owned(
        mut self,
        path: &str,
        data: impl Into<Vec<u8>>,
        mode: u32,
        uid: u64,
        gid: u64,
    ) -> Self {
        self.entries.push(Entry::File {
            path: path.into(),
            data: data.into(),
            mode,
            uid,
            gid,
        });
        self
    }
    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        self.entries.push(Entry::Symlink {
            path: path.into(),
            target: target.into(),
        });
        self
    }
    pub fn hardlink(mut self, path: &str, target: &str) -> Self {
        self.entries.push(Entry::Hardlink {
            path: path.into(),
            target: target.into(),
        });
        self
    }
    pub fn fifo(mut self, path: &str) -> Self {
        self.entries.push(Entry::Fifo { path: path.into() });
        self
    }
    pub fn whiteout(mut self, path: &str) -> Self {
        self.entries.push(Entry::Whiteout { path: path.into() });
        self
    }
    pub fn opaque(mut self, dir: &str) -> Self {
        self.entries.push(Entry::Opaque { dir: dir.into() });
        self
    }

    /// The uncompressed tar (deterministic: zero times, fixed order).
    pub fn tar(&self) -> io::Result<Vec<u8>> {
        let mut b = tar::Builder::new(Vec::new());
        let hdr = |kind: tar::EntryType, mode: u32, size: u64, uid: u64, gid: u64| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            h.set_uid(uid);
            h.set_gid(gid);
            h.set_mtime(0);
            h
        };
        for e in &self.entries {
            match e {
                Entry::Dir { path, mode } => {
                    let mut h = hdr(tar::EntryType::Directory, *mode, 0, 0, 0);
                    b.append_data(
                        &mut h,
                        format!("{}/", path.trim_end_matches('/')),
                        io::empty(),
                    )?;
                }
                Entry::File {
                    path,
                    data,
                    mode,
                    uid,
                    gid,
                } => {
                    let mut h = hdr(
                        tar::EntryType::Regular,
                        *mode,
                        data.len() as u64,
                        *uid,
                        *gid,
                    );
                    b.append_data(&mut h, path, &data[..])?;
                }
                Entry::Symlink { path, target } => {
                    let mut h = hdr(tar::EntryType::Symlink, 0o777, 0, 0, 0);
                    b.append_link(&mut h, path, target)?;
                }
                Entry::Hardlink { path, target } => {
                    let mut h = hdr(tar::EntryType::Link, 0o644, 0, 0, 0);
                    b.append_link(&mut h, path, target)?;
                }
                Entry::Fifo { path } => {
                    let mut h = hdr(tar::EntryType::Fifo, 0o644, 0, 0, 0);
                    b.append_data(&mut h, path, io::empty())?;
                }
                Entry::Whiteout { path } => {
                    let p = Path::new(path);
                    let name = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .ok_or_else(|| other("whiteout of root"))?;
                    let wh = match p.parent() {
                        Some(d) if !d.as_os_str().is_empty() => {
                            format!("{}/.wh.{name}", d.display())
                        }
                        _ => format!(".wh.{name}"),
                    };
                    let mut h = hdr(tar::EntryType::Regular, 0o644, 0, 0, 0);
                    b.append_data(&mut h, wh, io::empty())?;
                }
                Entry::Opaque { dir } => {
                    let mut h = hdr(tar::EntryType::Regular, 0o644, 0, 0, 0);
                    b.append_data(
                        &mut h,
                        format!("{}/.wh..wh..opq", dir.trim_end_matches('/')),
                        io::empty(),
                    )?;
                }
            }
        }
        b.into_inner()
    }

    /// (blob, media type, diff_id)
    pub fn blob(&self) -> io::Result<(Vec<u8>, String, String)> {
        let tar = self.tar()?;
        let diff_id = sha256(&tar);
        Ok(match self.compression {
            Compression::None => (tar, manifest::OCI_LAYER_TAR.into(), diff_id),
            Compression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&tar)?;
                (gz.finish()?, manifest::OCI_LAYER_GZIP.into(), diff_id)
            }
            Compression::Zstd => (
                zstd::encode_all(&tar[..], 3)?,
                manifest::OCI_LAYER_ZSTD.into(),
                diff_id,
            ),
        })
    }
}

/// The applets of the installed busybox, each a symlink in /bin.
pub fn busybox_applets() -> io::Result<Vec<String>> {
    let out = Command::new(BUSYBOX).arg("--list").output()?;
    if !out.status.success() {
        return Err(other("busybox --list failed"));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "busybox" && !l.contains('/'))
        .map(String::from)
        .collect())
}

/// A test image: layers plus the config a container runs with.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    pub layers: Vec<Layer>,
    pub config: ImageConfig,
    pub platform: Platform,
    passwd: Vec<String>,
    group: Vec<String>,
    busybox: bool,
}

impl ImageSpec {
    /// An image with no layers yet and an empty config, for the host platform.
    pub fn empty() -> ImageSpec {
        ImageSpec {
            layers: Vec::new(),
            config: ImageConfig::default(),
            platform: manifest::host_platform(),
            passwd: Vec::new(),
            group: Vec::new(),
            busybox: false,
        }
    }

    /// busybox-static in /bin with every applet linked, the usual top-level
    /// directories, root in /etc/passwd and /etc/group, PATH set, Cmd `sh`.
    /// Add users with [`ImageSpec::passwd_line`] / [`ImageSpec::group_line`].
    pub fn busybox() -> ImageSpec {
        let mut s = ImageSpec::empty();
        s.busybox = true;
        s.passwd = vec![
            "root:x:0:0:root:/root:/bin/sh".into(),
            "nobody:x:65534:65534:nobody:/nonexistent:/bin/false".into(),
        ];
        s.group = vec!["root:x:0:".into(), "nogroup:x:65534:".into()];
        s.config.env =
            vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()];
        s.config.cmd = vec!["sh".into()];
        s
    }

    pub fn entrypoint(mut self, args: &[&str]) -> Self {
        self.config.entrypoint = args.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn cmd(mut self, args: &[&str]) -> Self {
        self.config.cmd = args.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn env(mut self, kv: &str) -> Self {
        self.config.env.push(kv.into());
        self
    }
    pub fn workdir(mut self, dir: &str) -> Self {
        self.config.working_dir = dir.into();
        self
    }
    pub fn user(mut self, user: &str) -> Self {
        self.config.user = user.into();
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.config.labels.insert(k.into(), v.into());
        self
    }
    pub fn stop_signal(mut self, s: &str) -> Self {
        self.config.stop_signal = s.into();
        self
    }
    /// Appends a line to /etc/passwd (busybox images only).
    pub fn passwd_line(mut self, line: &str) -> Self {
        self.passwd.push(line.into());
        self
    }
    /// Appends a line to /etc/group (busybox images only).
    pub fn group_line(mut self, line: &str) -> Self {
        self.group.push(line.into());
        self
    }
    /// Adds a layer on top.
    pub fn layer(mut self, l: Layer) -> Self {
        self.layers.push(l);
        self
    }
    pub fn platform(mut self, arch: &str, variant: Option<&str>) -> Self {
        self.platform.architecture = arch.into();
        self.platform.variant = variant.map(Into::into);
        self
    }

    /// The base busybox layer (if any) followed by the added layers.
    pub fn all_layers(&self) -> io::Result<Vec<Layer>> {
        let mut out = Vec::new();
        if self.busybox {
            let bin = std::fs::read(BUSYBOX)?;
            let mut l = Layer::new(Compression::Gzip)
                .dir("bin", 0o755)
                .dir("dev", 0o755)
                .dir("etc", 0o755)
                .dir("proc", 0o555)
                .dir("root", 0o700)
                .dir("sys", 0o555)
                .dir("tmp", 0o1777)
                .dir("usr", 0o755)
                .dir("usr/bin", 0o755)
                .dir("var", 0o755)
                .file("bin/busybox", bin, 0o755);
            for a in busybox_applets()? {
                l = l.symlink(&format!("bin/{a}"), "busybox");
            }
            let mut passwd = self.passwd.join("\n");
            passwd.push('\n');
            let mut group = self.group.join("\n");
            group.push('\n');
            l = l
                .file("etc/passwd", passwd, 0o644)
                .file("etc/group", group, 0o644);
            out.push(l);
        }
        out.extend(self.layers.iter().cloned());
        Ok(out)
    }
}

/// What was written for one image.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub manifest_digest: String,
    /// The image id the store will give it.
    pub config_digest: String,
    pub layer_digests: Vec<String>,
    pub diff_ids: Vec<String>,
}

/// An OCI image layout directory (`oci-layout`, `index.json`, `blobs/sha256`).
pub struct OciLayout {
    dir: PathBuf,
    index: Vec<Descriptor>,
}

impl OciLayout {
    pub fn create(dir: &Path) -> io::Result<OciLayout> {
        std::fs::create_dir_all(dir.join("blobs/sha256"))?;
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        let l = OciLayout {
            dir: dir.to_path_buf(),
            index: Vec::new(),
        };
        l.write_index()?;
        Ok(l)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn put(&self, data: &[u8]) -> io::Result<String> {
        let d = sha256(data);
        std::fs::write(self.dir.join("blobs/sha256").join(&d[7..]), data)?;
        Ok(d)
    }

    fn write_index(&self) -> io::Result<()> {
        let idx = AnyManifest {
            schema_version: 2,
            artifact_type: None,
            media_type: Some(manifest::OCI_INDEX.into()),
            manifests: Some(self.index.clone()),
            ..Default::default()
        };
        std::fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec_pretty(&idx)?,
        )
    }

    /// Writes the image's blobs and manifest; returns the manifest descriptor.
    fn write_image(&self, spec: &ImageSpec) -> io::Result<(Descriptor, BuiltImage)> {
        let mut layer_descs = Vec::new();
        let mut diff_ids = Vec::new();
        for l in spec.all_layers()? {
            let (blob, media_type, diff_id) = l.blob()?;
            let digest = self.put(&blob)?;
            layer_descs.push(Descriptor {
                media_type,
                digest,
                size: blob.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            });
            diff_ids.push(diff_id);
        }
        let cfg = ConfigFile {
            platform: spec.platform.clone(),
            created: Some("1970-01-01T00:00:00Z".into()),
            config: Some(crate::store::runtime_config(&spec.config)),
            rootfs: manifest::RootFs {
                kind: "layers".into(),
                diff_ids: diff_ids.clone(),
            },
        };
        let cfg_bytes = serde_json::to_vec(&cfg)?;
        let cfg_digest = self.put(&cfg_bytes)?;
        let manifest = AnyManifest {
            schema_version: 2,
            artifact_type: None,
            media_type: Some(manifest::OCI_MANIFEST.into()),
            config: Some(Descriptor {
                media_type: manifest::OCI_CONFIG.into(),
                digest: cfg_digest.clone(),
                size: cfg_bytes.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            }),
            layers: Some(layer_descs.clone()),
            ..Default::default()
        };
        let mbytes = serde_json::to_vec(&manifest)?;
        let mdigest = self.put(&mbytes)?;
        Ok((
            Descriptor {
                media_type: manifest::OCI_MANIFEST.into(),
                digest: mdigest.clone(),
                size: mbytes.len() as i64,
                platform: Some(spec.platform.clone()),
                annotations: None,
                urls: None,
            },
            BuiltImage {
                manifest_digest: mdigest,
                config_digest: cfg_digest,
                layer_digests: layer_descs.into_iter().map(|d| d.digest).collect(),
                diff_ids,
            },
        ))
    }

    fn add(&mut self, mut desc: Descriptor, tag: &str, full_name: Option<&str>) -> io::Result<()> {
        let mut ann = BTreeMap::new();
        ann.insert(manifest::ANNOTATION_REF_NAME.to_string(), tag.to_string());
        if let Some(n) = full_name {
            ann.insert(
                manifest::ANNOTATION_CONTAINERD_NAME.to_string(),
                n.to_string(),
            );
        }
        desc.annotations = Some(ann);
        self.index.retain(|d| {
            d.annotations
                .as_ref()
                .and_then(|a| a.get(manifest::ANNOTATION_REF_NAME))
                .map(|t| t != tag)
                .unwrap_or(true)
        });
        self.index.push(desc);
        self.write_index()
    }

    /// Adds an image under `tag` (the layout's `ref.name`, what `oci:DIR:TAG` names).
    pub fn add_image(&mut self, tag: &str, spec: &ImageSpec) -> io::Result<BuiltImage> {
        let (desc, built) = self.write_image(spec)?;
        self.add(desc, tag, None)?;
        Ok(built)
    }

    /// Like [`OciLayout::add_image`], also annotating the full image name (as
    /// containerd's export does), which names the image on import.
    pub fn add_named_image(
        &mut self,
        tag: &str,
        full_name: &str,
        spec: &ImageSpec,
    ) -> io::Result<BuiltImage> {
        let (desc, built) = self.write_image(spec)?;
        self.add(desc, tag, Some(full_name))?;
        Ok(built)
    }

    /// Adds a multi-platform index under `tag`; returns its digest and the images.
    pub fn add_index(
        &mut self,
        tag: &str,
        specs: &[&ImageSpec],
    ) -> io::Result<(String, Vec<BuiltImage>)> {
        let mut manifests = Vec::new();
        let mut built = Vec::new();
        for s in specs {
            let (d, b) = self.write_image(s)?;
            manifests.push(d);
            built.push(b);
        }
        let idx = AnyManifest {
            schema_version: 2,
            artifact_type: None,
            media_type: Some(manifest::OCI_INDEX.into()),
            manifests: Some(manifests),
            ..Default::default()
        };
        let bytes = serde_json::to_vec(&idx)?;
        let digest = self.put(&bytes)?;
        self.add(
            Descriptor {
                media_type: manifest::OCI_INDEX.into(),
                digest: digest.clone(),
                size: bytes.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            },
            tag,
            None,
        )?;
        Ok((digest, built))
    }

    /// Tars the layout up (what `peapod image import` and `Store::import` take).
    pub fn to_tar(&self, out: &Path) -> io::Result<()> {
        let f = std::fs::File::create(out)?;
        let mut b = tar::Builder::new(f);
        b.follow_symlinks(false);
        b.append_dir_all(".", &self.dir)?;
        b.into_inner()?.sync_all()
    }
}

/// Writes an OCI layout tar holding `spec` named `name` (a full reference with
/// a tag), ready for import. Returns what was built.
pub fn oci_archive(out: &Path, name: &str, spec: &ImageSpec) -> io::Result<BuiltImage> {
    let tmp = tempfile::tempdir()?;
    let mut layout = OciLayout::create(tmp.path())?;
    let tag = name
        .rsplit_once(':')
        .map(|(_, t)| t)
        .filter(|t| !t.contains('/'))
        .unwrap_or("latest");
    let built = layout.add_named_image(tag, name, spec)?;
    layout.to_tar(out)?;
    Ok(built)
}

/// Writes a `docker save`-style archive (manifest.json, `<id>.json` configs,
/// `<n>/layer.tar` uncompressed layers, `repositories`) of the given images.
pub fn docker_archive(out: &Path, images: &[(&[&str], &ImageSpec)]) -> io::Result<Vec<BuiltImage>> {
    let f = std::fs::File::create(out)?;
    let mut b = tar::Builder::new(f);
    let mut manifest = Vec::new();
    let mut built = Vec::new();
    let add = |b: &mut tar::Builder<std::fs::File>, name: &str, data: &[u8]| -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_mtime(0);
        b.append_data(&mut h, name, data)
    };
    for (tags, spec) in images {
        let mut layer_paths = Vec::new();
        let mut diff_ids = Vec::new();
        for l in spec.all_layers()? {
            let tar = l.tar()?;
            let diff = sha256(&tar);
            let path = format!("{}/layer.tar", &diff[7..]);
            add(&mut b, &path, &tar)?;
            layer_paths.push(path);
            diff_ids.push(diff);
        }
        let cfg = ConfigFile {
            platform: spec.platform.clone(),
            created: Some("1970-01-01T00:00:00Z".into()),
            config: Some(crate::store::runtime_config(&spec.config)),
            rootfs: manifest::RootFs {
                kind: "layers".into(),
                diff_ids: diff_ids.clone(),
            },
        };
        let cfg_bytes = serde_json::to_vec(&cfg)?;
        let cfg_digest = sha256(&cfg_bytes);
        let cfg_name = format!("{}.json", &cfg_digest[7..]);
        add(&mut b, &cfg_name, &cfg_bytes)?;
        manifest.push(serde_json::json!({
            "Config": cfg_name,
            "RepoTags": tags,
            "Layers": layer_paths,
        }));
        built.push(BuiltImage {
            manifest_digest: String::new(),
            config_digest: cfg_digest,
            layer_digests: diff_ids.clone(),
            diff_ids,
        });
    }
    add(&mut b, "manifest.json", &serde_json::to_vec(&manifest)?)?;
    b.into_inner()?.sync_all()?;
    Ok(built)
}

/// How skopeo writes the pushed image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushFormat {
    /// OCI media types. skopeo keeps gzip and zstd layers as they are but
    /// gzips uncompressed ones, so the manifest digest differs from the
    /// layout's when the image has uncompressed layers: ask
    /// [`Registry::manifest_digest`] for the pushed one.
    Oci,
    /// Docker schema 2 media types (`--format v2s2`, gzip layers).
    DockerV2S2,
}

/// (status, headers with lower-cased names, body)
pub type HttpResponse = (u16, Vec<(String, String)>, Vec<u8>);

/// One line of the registry's access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub status: u16,
}

/// TLS files of a registry: its certificate and key, and the CA its clients' certificates
/// must be signed by (`http.tls.clientcas`: a client without one is refused).
#[derive(Debug, Clone)]
pub struct RegistryTls {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

struct RegistryOptions {
    auth: Option<(String, String)>,
    tls: Option<RegistryTls>,
    storage: Option<PathBuf>,
}

/// Debian's `docker-registry` on 127.0.0.1 with storage of its own; killed
/// (and its directory removed) on drop, including when a test panics.
pub struct Registry {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    auth: Option<(String, String)>,
}

fn free_port() -> io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Registry {
    /// An open registry.
    pub fn start() -> io::Result<Registry> {
        Self::start_inner(None)
    }

    /// A registry behind basic auth (htpasswd, bcrypt) with one user.
    pub fn start_with_auth(user: &str, password: &str) -> io::Result<Registry> {
        Self::start_inner(Some((user.to_string(), password.to_string())))
    }

    /// A registry serving `of`'s storage over TLS (`tls`): images pushed to `of` (plain
    /// HTTP, which the push helpers speak) are pulled from this one.
    pub fn tls_twin(of: &Registry, tls: &RegistryTls) -> io::Result<Registry> {
        Self::start_with(RegistryOptions {
            auth: None,
            tls: Some(tls.clone()),
            storage: Some(of.dir.path().join("storage")),
        })
    }

    fn start_inner(auth: Option<(String, String)>) -> io::Result<Registry> {
        Self::start_with(RegistryOptions {
            auth,
            tls: None,
            storage: None,
        })
    }

    fn start_with(opts: RegistryOptions) -> io::Result<Registry> {
        let RegistryOptions { auth, tls, storage } = opts;
        let mut dir = tempfile::Builder::new()
            .prefix("peapod-registry-")
            .tempdir()?;
        let mut auth_yaml = String::new();
        if let Some((u, p)) = &auth {
            let out = Command::new("htpasswd").args(["-Bbn", u, p]).output()?;
            if !out.status.success() {
                return Err(other(format!(
                    "htpasswd failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            let path = dir.path().join("htpasswd");
            std::fs::write(&path, &out.stdout)?;
            auth_yaml = format!(
                "auth:\n  htpasswd:\n    realm: peapod-test\n    path: {}\n",
                path.display()
            );
        }
        let mut tls_yaml = String::new();
        if let Some(t) = &tls {
            tls_yaml = format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                t.certificate.display(),
                t.key.display()
            );
            if let Some(ca) = &t.client_ca {
                tls_yaml.push_str(&format!("    clientcas:\n      - {}\n", ca.display()));
            }
        }
        // The TLS registry is found ready by its "listening on" line, an info one.
        let level = if tls.is_some() { "info" } else { "warn" };
        let mut last_err = None;
        // A port found free may be taken before the registry binds it: retry.
        for _ in 0..5 {
            let port = free_port()?;
            let storage_dir = storage
                .clone()
                .unwrap_or_else(|| dir.path().join("storage"));
            let config = format!(
                "version: 0.1\nlog:\n  level: {level}\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{tls_yaml}{auth_yaml}",
                storage_dir.display()
            );
            let cfg_path = dir.path().join("config.yml");
            std::fs::write(&cfg_path, config)?;
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join("registry.log"))?;
            let child = Command::new("docker-registry")
                .arg("serve")
                .arg(&cfg_path)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?;
            let mut reg = Registry {
                port,
                dir,
                child: Some(child),
                auth: auth.clone(),
            };
            let ready = if tls.is_some() {
                reg.wait_listening(Duration::from_secs(20))
            } else {
                reg.wait_ready(Duration::from_secs(20))
            };
            match ready {
                Ok(()) => return Ok(reg),
                Err(e) => {
                    last_err = Some(e);
                    reg.stop();
                    dir = std::mem::replace(&mut reg.dir, tempfile::tempdir()?);
                    let _ = std::fs::remove_file(dir.path().join("registry.log"));
                }
            }
        }
        Err(last_err.unwrap_or_else(|| other("registry did not start")))
    }

    /// A TLS registry: ready once it logs that it listens on its port (it exits when the
    /// port is taken, so the line is ours).
    fn wait_listening(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let line = format!("listening on 127.0.0.1:{}", self.port);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(other(format!(
                        "docker-registry exited: {status}: {}",
                        self.log()
                    )));
                }
            }
            if self.log().contains(&line) && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(other("docker-registry (TLS) did not become ready"))
    }

    fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(other(format!(
                        "docker-registry exited: {status}: {}",
                        self.log()
                    )));
                }
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                if s.write_all(b"GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .is_ok()
                {
                    let mut buf = [0u8; 12];
                    // Another test's registry may have won the port race:
                    // only ours logs the probe in our log.
                    if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.") {
                        for _ in 0..40 {
                            if self.log().contains("\"GET /v2/ HTTP/1.0\"") {
                                return Ok(());
                            }
                            std::thread::sleep(Duration::from_millis(25));
                        }
                        return Err(other(format!(
                            "port {} is served by another process",
                            self.port
                        )));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(other("docker-registry did not become ready"))
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT/<name>`
    pub fn reference(&self, name: &str) -> String {
        format!("{}/{name}", self.addr())
    }

    /// The registry's own log (access log lines and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Pushes `oci:<layout>:<tag>` to `<this registry>/<dest>` with skopeo
    /// (all platforms of an index).
    pub fn push(&self, layout: &Path, tag: &str, dest: &str, format: PushFormat) -> io::Result<()> {
        let mut cmd = Command::new("skopeo");
        cmd.args([
            "--insecure-policy",
            "copy",
            "--all",
            "--dest-tls-verify=false",
            "--quiet",
        ]);
        match format {
            PushFormat::Oci => {}
            PushFormat::DockerV2S2 => {
                cmd.args(["--format", "v2s2"]);
            }
        }
        if let Some((u, p)) = &self.auth {
            cmd.arg("--dest-creds").arg(format!("{u}:{p}"));
        }
        cmd.arg(format!("oci:{}:{tag}", layout.display()));
        cmd.arg(format!("docker://{}", self.reference(dest)));
        let out = cmd.stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(other(format!(
                "skopeo copy to {dest} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// One request to the registry API; returns (status, headers with
    /// lower-cased names, body).
    pub fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<HttpResponse> {
        use base64::Engine as _;
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut req = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr(),
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some((u, p)) = &self.auth {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            req.push_str(&format!("Authorization: Basic {token}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes())?;
        s.write_all(body)?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)?;
        let split = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| other("malformed HTTP response"))?;
        let head = String::from_utf8_lossy(&resp[..split]).into_owned();
        let body = resp[split + 4..].to_vec();
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| other("malformed HTTP status line"))?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Ok((status, headers, body))
    }

    /// The digest the registry serves for `repo:reference` (what a pull
    /// records as the repo digest).
    pub fn manifest_digest(&self, repo: &str, reference: &str) -> io::Result<String> {
        let accept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
        let (status, headers, body) = self.http(
            "GET",
            &format!("/v2/{repo}/manifests/{reference}"),
            &[("Accept", accept)],
            b"",
        )?;
        if status != 200 {
            return Err(other(format!("manifest {repo}:{reference}: HTTP {status}")));
        }
        let _ = headers;
        Ok(sha256(&body))
    }

    /// Pushes `tag` of an OCI layout byte for byte over the registry API
    /// (monolithic blob uploads, then manifests): unlike skopeo, nothing is
    /// recompressed, so uncompressed layers stay uncompressed and digests
    /// stay the layout's. Returns the pushed top-level digest.
    pub fn push_exact(&self, layout: &Path, tag: &str, dest: &str) -> io::Result<String> {
        let (repo, dest_tag) = dest
            .rsplit_once(':')
            .ok_or_else(|| other("dest must be repo:tag"))?;
        let index: AnyManifest =
            serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
        let desc = index
            .manifests
            .unwrap_or_default()
            .into_iter()
            .find(|d| {
                d.annotations
                    .as_ref()
                    .and_then(|a| a.get(manifest::ANNOTATION_REF_NAME))
                    .map(String::as_str)
                    == Some(tag)
            })
            .ok_or_else(|| other(format!("no {tag} in the layout")))?;
        self.push_desc(layout, repo, &desc, Some(dest_tag))?;
        Ok(desc.digest)
    }

    fn push_desc(
        &self,
        layout: &Path,
        repo: &str,
        desc: &Descriptor,
        tag: Option<&str>,
    ) -> io::Result<()> {
        let read = |d: &str| std::fs::read(layout.join("blobs/sha256").join(&d[7..]));
        let body = read(&desc.digest)?;
        let m: AnyManifest = serde_json::from_slice(&body)?;
        for child in m.manifests.iter().flatten() {
            self.push_desc(layout, repo, child, None)?;
        }
        for b in m.config.iter().chain(m.layers.iter().flatten()) {
            let data = read(&b.digest)?;
            let (st, hs, _) = self.http("POST", &format!("/v2/{repo}/blobs/uploads/"), &[], b"")?;
            let loc = hs
                .iter()
                .find(|(k, _)| k == "location")
                .map(|(_, v)| v.clone())
                .filter(|_| st == 202)
                .ok_or_else(|| other(format!("upload start: HTTP {st}")))?;
            let path = match loc.find("/v2/") {
                Some(i) => loc[i..].to_string(),
                None => loc,
            };
            let sep = if path.contains('?') { '&' } else { '?' };
            let (st, _, resp) = self.http(
                "PUT",
                &format!("{path}{sep}digest={}", b.digest),
                &[("Content-Type", "application/octet-stream")],
                &data,
            )?;
            if st != 201 {
                return Err(other(format!(
                    "blob upload: HTTP {st}: {}",
                    String::from_utf8_lossy(&resp)
                )));
            }
        }
        let media_type = m
            .media_type
            .clone()
            .unwrap_or_else(|| desc.media_type.clone());
        let reference = tag.unwrap_or(&desc.digest);
        let (st, _, resp) = self.http(
            "PUT",
            &format!("/v2/{repo}/manifests/{reference}"),
            &[("Content-Type", &media_type)],
            &body,
        )?;
        if st != 201 {
            return Err(other(format!(
                "manifest upload: HTTP {st}: {}",
                String::from_utf8_lossy(&resp)
            )));
        }
        Ok(())
    }

    /// Where the registry keeps a blob's bytes (tests corrupt it).
    pub fn blob_data_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2.min(hex.len())])
            .join(hex)
            .join("data")
    }

    /// The requests served so far, from the access log.
    pub fn requests(&self) -> Vec<Request> {
        self.log()
            .lines()
            .filter_map(|l| {
                // 127.0.0.1 - - [date] "GET /v2/x/blobs/sha256:.. HTTP/1.1" 200 123 "" "ua"
                let start = l.find("] \"")? + 3;
                let rest = &l[start..];
                let end = rest.find('"')?;
                let mut req = rest[..end].split(' ');
                let method = req.next()?.to_string();
                let path = req.next()?.to_string();
                let status = rest[end + 1..].split_whitespace().next()?.parse().ok()?;
                Some(Request {
                    method,
                    path,
                    status,
                })
            })
            .collect()
    }

    /// Successful GETs of a blob.
    pub fn blob_fetches(&self, digest: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| {
                r.method == "GET"
                    && r.status == 200
                    && r.path
                        .split('?')
                        .next()
                        .is_some_and(|p| p.ends_with(&format!("/blobs/{digest}")))
            })
            .count()
    }

    /// Kills the registry now (Drop does it too).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
