//! Image references, normalised the way containerd (and docker before it) does:
//! `busybox` -> `docker.io/library/busybox:latest`.
//!
//! The grammar is the one of distribution's `reference` package: a domain
//! (`host[.host...][:port]` or `localhost`), then slash-separated lower-case
//! path components, then an optional `:tag` and an optional `@sha256:<hex>`.

use crate::Error;
use std::fmt;

/// The registry that a reference without a domain names.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// The host that actually serves the registry API for [`DEFAULT_DOMAIN`].
pub const DEFAULT_REGISTRY_HOST: &str = "registry-1.docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const MAX_NAME_LEN: usize = 255;
const MAX_TAG_LEN: usize = 128;

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`, ...
    pub domain: String,
    /// The repository inside the registry: `library/busybox`.
    pub path: String,
    /// The tag, if any (`latest` is filled in when neither tag nor digest is given).
    pub tag: Option<String>,
    /// `sha256:<64 hex>`, if the reference pins a digest.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses and normalises `s`. A reference with neither tag nor digest gets
    /// the tag `latest`, as containerd's `ParseDockerRef` does.
    pub fn parse(s: &str) -> Result<Reference, Error> {
        let bad = |reason: &str| Error::InvalidReference {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        if s.is_empty() {
            return Err(bad("empty reference"));
        }
        if s.len() == 64 && is_lower_hex(s) {
            // As docker does: a bare 64-hex string is an image id, never a repository.
            return Err(bad(
                "a 64-character hex string is an image id, not a repository name",
            ));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                validate_digest(d).map_err(|e| bad(&e))?;
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        // The tag separator is the last ':' after the last '/' (a ':' before it is a port).
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let i = last_slash + i;
                (&rest[..i], Some(rest[i + 1..].to_string()))
            }
            None => (rest, None),
        };
        if let Some(t) = &tag {
            if !valid_tag(t) {
                return Err(bad(&format!("invalid tag {t:?}")));
            }
        }
        if name.is_empty() {
            return Err(bad("empty repository name"));
        }
        let (domain, path) = split_domain(name);
        if !valid_domain(&domain) {
            return Err(bad(&format!("invalid registry host {domain:?}")));
        }
        if path.is_empty() || !path.split('/').all(valid_path_component) {
            return Err(bad(
                "repository name must be lower-case letters, digits and separators (. _ __ -) between slashes",
            ));
        }
        if domain.len() + 1 + path.len() > MAX_NAME_LEN {
            return Err(bad("repository name longer than 255 characters"));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_string()),
            (t, _) => t,
        };
        Ok(Reference {
            domain,
            path,
            tag,
            digest,
        })
    }

    /// `docker.io/library/busybox`
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The tagged form `name:tag`, if the reference has a tag.
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{}", self.name(), t))
    }

    /// The repo-digest form `name@sha256:...` for a given manifest digest.
    pub fn with_digest(&self, digest: &str) -> String {
        format!("{}@{}", self.name(), digest)
    }

    /// What to ask the registry's manifest endpoint for: the digest when pinned, else the tag.
    pub fn manifest_ref(&self) -> &str {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d,
            (None, Some(t)) => t,
            (None, None) => "latest",
        }
    }

    /// The host:port that serves the registry API for this reference's domain.
    pub fn registry_host(&self) -> &str {
        if self.domain == DEFAULT_DOMAIN {
            DEFAULT_REGISTRY_HOST
        } else {
            &self.domain
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Normalises a reference as containerd does: `busybox` ->
/// `docker.io/library/busybox:latest`; `quay.io/x/y@sha256:..` stays pinned.
pub fn normalize_reference(r: &str) -> Result<String, Error> {
    Ok(Reference::parse(r)?.to_string())
}

/// distribution's `splitDockerDomain`: the first component is a domain only if
/// it looks like one (has a '.' or ':', is `localhost`, or has upper case).
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN.to_string();
    }
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        path = format!("{OFFICIAL_REPO_PREFIX}{path}");
    }
    (domain, path)
}

fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        // [ipv6]:port
        match rest.split_once(']') {
            Some((ip, tail)) => {
                if ip.is_empty() || !ip.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
                    return false;
                }
                match tail {
                    "" => return true,
                    t => match t.strip_prefix(':') {
                        Some(p) => return !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()),
                        None => return false,
                    },
                }
            }
            None => return false,
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    !host.is_empty()
        && host.split('.').all(|c| {
            !c.is_empty()
                && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        })
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() {
        return false;
    }
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    let mut i = 0;
    loop {
        // one run of [a-z0-9]+
        let start = i;
        while i < b.len() && alnum(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == b.len() {
            return true;
        }
        // a separator: '.', '_', '__' or '-'+
        match b[i] {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if i < b.len() && b[i] == b'_' {
                    i += 1;
                }
            }
            b'-' => {
                while i < b.len() && b[i] == b'-' {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(t: &str) -> bool {
    let w = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut chars = t.chars();
    match chars.next() {
        Some(c) if w(c) => {}
        _ => return false,
    }
    t.len() <= MAX_TAG_LEN && chars.all(|c| w(c) || c == '.' || c == '-')
}

pub(crate) fn is_lower_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Accepts `sha256:<64 lower-case hex>`: the only algorithm this store keys content by.
pub fn validate_digest(d: &str) -> Result<(), String> {
    match d.split_once(':') {
        Some(("sha256", hex)) if hex.len() == 64 && is_lower_hex(hex) => Ok(()),
        Some(("sha256", _)) => Err(format!("invalid sha256 digest {d:?}")),
        Some((alg, _)) => Err(format!("unsupported digest algorithm {alg:?}")),
        None => Err(format!("invalid digest {d:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn normalisation_table() {
        let table: &[(&str, &str)] = &[
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            ("docker.io/busybox", "docker.io/library/busybox:latest"),
            (
                "index.docker.io/busybox",
                "docker.io/library/busybox:latest",
            ),
            ("index.docker.io/foo/bar:x", "docker.io/foo/bar:x"),
            ("foo/bar", "docker.io/foo/bar:latest"),
            ("foo/bar/baz", "docker.io/foo/bar/baz:latest"),
            ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
            ("localhost/foo", "localhost/foo:latest"),
            ("localhost:5000/foo:v1", "localhost:5000/foo:v1"),
            ("127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b:latest"),
            ("quay.io/a_b/c-d.e__f:T.1-x", "quay.io/a_b/c-d.e__f:T.1-x"),
            ("[::1]:5000/foo", "[::1]:5000/foo:latest"),
        ];
        for (input, want) in table {
            assert_eq!(&normalize_reference(input).unwrap(), want, "input {input}");
        }
        let pinned = format!("busybox@{D}");
        assert_eq!(
            normalize_reference(&pinned).unwrap(),
            format!("docker.io/library/busybox@{D}")
        );
        let both = format!("busybox:1@{D}");
        assert_eq!(
            normalize_reference(&both).unwrap(),
            format!("docker.io/library/busybox:1@{D}")
        );
    }

    #[test]
    fn invalid_references() {
        for bad in [
            "",
            "Busybox",
            "docker.io/Library/busybox",
            "busybox:",
            "busybox:-x",
            "busybox@sha256:abc",
            "busybox@md5:0123",
            "foo//bar",
            "foo/bar/",
            "/foo",
            "foo__-bar",
            "a:b:c/d",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "foo bar",
        ] {
            let e = Reference::parse(bad);
            assert!(
                matches!(e, Err(Error::InvalidReference { .. })),
                "{bad:?} gave {e:?}"
            );
        }
        let long_tag = format!("busybox:{}", "a".repeat(129));
        assert!(Reference::parse(&long_tag).is_err());
    }

    #[test]
    fn parts() {
        let r = Reference::parse("busybox").unwrap();
        assert_eq!(r.registry_host(), DEFAULT_REGISTRY_HOST);
        assert_eq!(r.manifest_ref(), "latest");
        assert_eq!(r.name(), "docker.io/library/busybox");
        let r = Reference::parse(&format!("127.0.0.1:5000/x:1@{D}")).unwrap();
        assert_eq!(r.registry_host(), "127.0.0.1:5000");
        assert_eq!(r.manifest_ref(), D);
        assert_eq!(r.tagged().unwrap(), "127.0.0.1:5000/x:1");
        assert_eq!(r.with_digest(D), format!("127.0.0.1:5000/x@{D}"));
    }
}
