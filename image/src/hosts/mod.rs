//! Registry host configuration as containerd's `config_path` has it: a directory (say
//! `/etc/peapod/certs.d`) with one directory per registry host, `<host>` or `<host>_<port>_`
//! for `host:port` (or `_default` for every host without one of its own), holding a
//! `hosts.toml` in containerd's format (see `file.rs`) or, without one, Docker's certificate
//! files (`*.crt` CAs, `*.cert` client certificates with their `*.key`).
//!
//! The directory is read at every pull, as containerd reads it (a change needs no restart),
//! and checked whole at start ([`check_all`]), so a daemon with a file that does not parse or
//! a certificate that does not load refuses to start, naming the file and the field.
//!
//! Modules: `file` (one hosts.toml), `tls` (CA, client certificate and key, skip_verify into
//! an HTTP client, built once per distinct set of files' contents).

mod file;
mod tls;

pub(crate) use tls::Clients;

use crate::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What one host may be used for (containerd's `capabilities`; push is accepted and ignored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Fetch content by digest: blobs, and manifests named by digest.
    pub pull: bool,
    /// Turn a tag into a digest: manifests named by tag.
    pub resolve: bool,
}

impl Capabilities {
    pub const ALL: Capabilities = Capabilities {
        pull: true,
        resolve: true,
    };
}

/// The TLS side of one host: files as written (paths made absolute), read when the host's
/// client is built.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TlsFiles {
    pub ca: Vec<PathBuf>,
    /// (certificate, key); a key of None is in the certificate's file.
    pub client: Vec<(PathBuf, Option<PathBuf>)>,
    pub skip_verify: Option<bool>,
    pub dial_timeout: Option<Duration>,
}

impl TlsFiles {
    /// Whether anything asks for a client of its own.
    pub fn is_empty(&self) -> bool {
        self.ca.is_empty()
            && self.client.is_empty()
            && self.skip_verify.is_none()
            && self.dial_timeout.is_none()
    }

    /// Whether TLS was configured for the host: containerd then speaks HTTPS to it even where
    /// it would otherwise speak plain HTTP.
    pub fn configures_tls(&self) -> bool {
        !self.ca.is_empty() || !self.client.is_empty() || self.skip_verify.is_some()
    }
}

/// One host of a host directory: a `[host."URL"]` table, or the server (the last one).
#[derive(Debug, Clone, Default)]
pub(crate) struct HostEntry {
    /// None for a server the file does not name: the reference's registry, with the scheme
    /// the rest of the configuration gives it.
    pub scheme: Option<String>,
    pub host: Option<String>,
    /// The API root's path: `/v2`, `/prefix/v2`, or what `override_path` kept.
    pub path: String,
    pub override_path: bool,
    /// None: every capability (containerd's default).
    pub capabilities: Option<Capabilities>,
    pub tls: TlsFiles,
    /// Sent with every request to this host.
    pub headers: Vec<(String, String)>,
    /// The file's top level rather than a `[host]` table.
    pub server: bool,
    /// Where it came from, for errors and logs: the hosts.toml (or the directory of
    /// certificate files) and the table (`host."URL"`; empty for the server).
    pub file: PathBuf,
    pub field: String,
}

/// The host directory of `host` under `root`: `<host>_<port>_`, `<host:port>`, then
/// `_default`, the first that exists (containerd's order).
pub(crate) fn find_dir(root: &Path, host: &str) -> Result<Option<PathBuf>, Error> {
    let mut candidates = Vec::with_capacity(3);
    if let Some((h, port)) = host.rsplit_once(':').filter(|(h, _)| !h.is_empty()) {
        candidates.push(root.join(format!("{h}_{port}_")));
    }
    candidates.push(root.join(host));
    candidates.push(root.join("_default"));
    for c in candidates {
        match std::fs::metadata(&c) {
            Ok(m) if m.is_dir() => return Ok(Some(c)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("reading {}", c.display()), e)),
        }
    }
    Ok(None)
}

/// The hosts configured for registry `host`, or None when `root` has no directory for it.
pub(crate) fn load(root: &Path, host: &str) -> Result<Option<Vec<HostEntry>>, Error> {
    match find_dir(root, host)? {
        Some(dir) => load_dir(&dir).map(Some),
        None => Ok(None),
    }
}

fn load_dir(dir: &Path) -> Result<Vec<HostEntry>, Error> {
    let file = dir.join("hosts.toml");
    match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => file::parse(&file, dir, &text),
        Ok(_) => cert_files(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => cert_files(dir),
        Err(e) => Err(Error::HostsConfig {
            file,
            field: String::new(),
            message: format!("cannot be read: {e}"),
        }),
    }
}

/// Docker's layout, which containerd falls back to: `*.crt` are CAs, `*.cert` client
/// certificates whose key is the `.key` of the same name (else inside the `.cert`).
fn cert_files(dir: &Path) -> Result<Vec<HostEntry>, Error> {
    let rd =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut names: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .collect();
    names.sort();
    let mut entry = HostEntry {
        server: true,
        file: dir.to_path_buf(),
        ..Default::default()
    };
    for p in names {
        match p.extension().and_then(|x| x.to_str()) {
            Some("crt") => entry.tls.ca.push(p),
            Some("cert") => {
                let key = p.with_extension("key");
                let key = key.exists().then_some(key);
                entry.tls.client.push((p, key));
            }
            _ => {}
        }
    }
    Ok(vec![entry])
}

/// Checks every host directory under `root` (their hosts.toml parsed, their certificates and
/// keys loaded into clients), so that start-up refuses what a pull would. Returns how many
/// there are. A missing `root` is none.
pub fn check_all(root: &Path, idle_timeout: Duration) -> Result<usize, Error> {
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(format!("reading {}", root.display()), e)),
    };
    let clients = Clients::new(idle_timeout);
    let mut n = 0;
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for entry in load_dir(&e.path())? {
            clients.for_entry(&entry)?;
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_found_as_containerd_finds_them() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert_eq!(find_dir(r, "reg.example:5000").unwrap(), None);
        std::fs::create_dir(r.join("_default")).unwrap();
        assert_eq!(
            find_dir(r, "reg.example:5000").unwrap(),
            Some(r.join("_default"))
        );
        std::fs::create_dir(r.join("reg.example:5000")).unwrap();
        assert_eq!(
            find_dir(r, "reg.example:5000").unwrap(),
            Some(r.join("reg.example:5000"))
        );
        std::fs::create_dir(r.join("reg.example_5000_")).unwrap();
        assert_eq!(
            find_dir(r, "reg.example:5000").unwrap(),
            Some(r.join("reg.example_5000_"))
        );
        assert_eq!(find_dir(r, "other").unwrap(), Some(r.join("_default")));
    }

    #[test]
    fn docker_certificate_files_without_hosts_toml() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("reg.example");
        std::fs::create_dir(&d).unwrap();
        for f in [
            "ca.crt",
            "client.cert",
            "client.key",
            "lone.cert",
            "notes.txt",
        ] {
            std::fs::write(d.join(f), "x").unwrap();
        }
        let hosts = load(root.path(), "reg.example").unwrap().unwrap();
        assert_eq!(hosts.len(), 1);
        assert!(hosts[0].server && hosts[0].host.is_none());
        assert_eq!(hosts[0].tls.ca, vec![d.join("ca.crt")]);
        assert_eq!(
            hosts[0].tls.client,
            vec![
                (d.join("client.cert"), Some(d.join("client.key"))),
                (d.join("lone.cert"), None)
            ]
        );
    }

    #[test]
    fn check_all_names_the_bad_file() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(
            check_all(&root.path().join("missing"), Duration::from_secs(5)).unwrap(),
            0
        );
        let d = root.path().join("reg.example");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("hosts.toml"), "server = \"https://reg.example\"\n").unwrap();
        assert_eq!(check_all(root.path(), Duration::from_secs(5)).unwrap(), 1);
        std::fs::write(d.join("hosts.toml"), "ca = \"nope.crt\"\n").unwrap();
        let e = check_all(root.path(), Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&d.join("nope.crt").display().to_string()), "{e}");
        assert!(e.contains("ca"), "{e}");
    }
}
