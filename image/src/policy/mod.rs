//! Which images a pull may store: CRI-O's signature policy, containers-policy.json(5), for the
//! `docker` transport. The requirements of the most specific scope that matches the reference
//! apply, all of them: `insecureAcceptAnything`, `reject`, `sigstoreSigned` (a cosign signature
//! in the registry, verified with a public key; see `sigstore`).
//!
//! The policy is checked before a pull stores anything: `reject` before the first request,
//! signatures right after the top-level manifest is resolved and before any config or layer
//! is fetched. The file is read at every pull (as CRI-O reads it) and when the store opens, so
//! that a policy that does not load stops the daemon at start, naming the file and the field.
//!
//! Modules: `file` (policy.json), `identity` (signedIdentity), `pubkey` (the key and its
//! signatures), `sigstore` (cosign's signatures in the registry).

mod file;
mod identity;
mod pubkey;
mod sigstore;

use crate::reference::Reference;
use crate::registry::Session;
use crate::Error;
use identity::SignedIdentity;
use pubkey::PublicKey;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub(crate) enum Requirement {
    AcceptAnything,
    Reject,
    SigstoreSigned {
        keys: Vec<PublicKey>,
        identity: SignedIdentity,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Policy {
    file: PathBuf,
    default: Vec<Requirement>,
    /// `transports.docker`: scope -> requirements.
    docker: BTreeMap<String, Vec<Requirement>>,
}

/// What a pull must do before it stores anything.
pub(crate) struct Decision<'a> {
    policy: &'a Policy,
    scope: String,
    requirements: &'a [Requirement],
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, Error> {
        let text = std::fs::read(path).map_err(|e| Error::PolicyConfig {
            file: path.to_path_buf(),
            field: String::new(),
            message: format!("cannot be read: {e}"),
        })?;
        file::parse(path, &text)
    }

    /// The requirements for `r`: of its most specific scope in `transports.docker` (the
    /// reference itself, its repository, each namespace above it, its host, `*.domain`
    /// wildcards of the host), else of the transport's `""`, else `default`.
    pub fn decide(&self, r: &Reference) -> Decision<'_> {
        for scope in scopes(r) {
            if let Some(reqs) = self.docker.get(&scope) {
                return Decision {
                    policy: self,
                    scope,
                    requirements: reqs,
                };
            }
        }
        match self.docker.get("") {
            Some(reqs) => Decision {
                policy: self,
                scope: "transports.docker \"\"".into(),
                requirements: reqs,
            },
            None => Decision {
                policy: self,
                scope: "default".into(),
                requirements: &self.default,
            },
        }
    }
}

/// The docker transport's scopes for `r`, most specific first (containers/image's
/// `PolicyConfigurationNamespaces`).
fn scopes(r: &Reference) -> Vec<String> {
    let mut out = Vec::new();
    match (&r.tag, &r.digest) {
        (Some(t), _) => out.push(format!("{}:{t}", r.name())),
        (None, Some(d)) => out.push(format!("{}@{d}", r.name())),
        (None, None) => {}
    }
    let mut name = r.name();
    loop {
        out.push(name.clone());
        match name.rsplit_once('/') {
            Some((parent, _)) => name = parent.to_string(),
            None => break,
        }
    }
    // `*.example.com` matches hosts below example.com (not with a port).
    if !r.domain.contains(':') {
        let mut host = r.domain.as_str();
        while let Some((_, rest)) = host.split_once('.') {
            out.push(format!("*.{rest}"));
            host = rest;
        }
    }
    out
}

impl Decision<'_> {
    fn denied(&self, r: &Reference, reason: String) -> Error {
        Error::PolicyDenied {
            file: self.policy.file.clone(),
            scope: self.scope.clone(),
            reference: r.to_string(),
            reason,
        }
    }

    /// Before any request: a `reject` ends the pull here.
    pub fn check_early(&self, r: &Reference) -> Result<(), Error> {
        if self
            .requirements
            .iter()
            .any(|q| matches!(q, Requirement::Reject))
        {
            return Err(self.denied(r, "the policy rejects this scope".into()));
        }
        Ok(())
    }

    /// Once the top-level manifest's digest is known, before anything else is fetched: every
    /// `sigstoreSigned` requirement must find a signature of `digest` it accepts.
    pub async fn check_signed(
        &self,
        session: &Session,
        r: &Reference,
        digest: &str,
    ) -> Result<(), Error> {
        for q in self.requirements {
            if let Requirement::SigstoreSigned { keys, identity } = q {
                if let Err(why) = sigstore::verify(session, r, digest, keys, identity).await? {
                    return Err(self.denied(r, why));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> Policy {
        file::parse(Path::new("/etc/p.json"), json.as_bytes()).unwrap()
    }

    #[test]
    fn scopes_most_specific_first() {
        let r = Reference::parse("reg.a.example.com:5000/team/app:v1").unwrap();
        assert_eq!(
            scopes(&r),
            [
                "reg.a.example.com:5000/team/app:v1",
                "reg.a.example.com:5000/team/app",
                "reg.a.example.com:5000/team",
                "reg.a.example.com:5000"
            ]
        );
        let r = Reference::parse("quay.example.com/app").unwrap();
        assert_eq!(
            scopes(&r),
            [
                "quay.example.com/app:latest",
                "quay.example.com/app",
                "quay.example.com",
                "*.example.com",
                "*.com"
            ]
        );
    }

    #[test]
    fn the_most_specific_scope_decides() {
        let p = policy(
            r#"{"default": [{"type": "reject"}],
                "transports": {"docker": {
                    "reg:5000/open": [{"type": "insecureAcceptAnything"}],
                    "reg:5000": [{"type": "reject"}],
                    "*.example.com": [{"type": "insecureAcceptAnything"}]
                }, "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]}}}"#,
        );
        let ok = |s: &str| {
            let r = Reference::parse(s).unwrap();
            p.decide(&r).check_early(&r).is_ok()
        };
        assert!(ok("reg:5000/open:v1"));
        // A namespace scope covers the repositories below it.
        assert!(ok("reg:5000/open/sub:v1"));
        assert!(!ok("reg:5000/closed:v1"));
        assert!(ok("a.example.com/x"));
        assert!(!ok("busybox"));
        let r = Reference::parse("reg:5000/closed:v1").unwrap();
        let e = p.decide(&r).check_early(&r).unwrap_err().to_string();
        assert!(
            e.contains("/etc/p.json") && e.contains("(scope reg:5000)"),
            "{e}"
        );
    }

    #[test]
    fn bad_policies_name_the_field() {
        let key = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(key.path(), "not a key").unwrap();
        for (json, want) in [
            ("{", "not JSON"),
            ("{}", "default: is required"),
            (r#"{"default": []}"#, "default: an empty list"),
            (
                r#"{"default": [{"type": "accept"}]}"#,
                "default[0].type: unknown requirement \"accept\"",
            ),
            (
                r#"{"default": [{"type": "signedBy", "keyType": "GPGKeys"}]}"#,
                "signedBy (GPG",
            ),
            (
                r#"{"default": [{"type": "reject"}], "transports": {"docker": {"r": [{"type": "sigstoreSigned"}]}}}"#,
                "transports.docker.\"r\"[0]: a sigstoreSigned requirement needs a public key",
            ),
            (
                r#"{"default": [{"type": "sigstoreSigned", "fulcio": {}}]}"#,
                "default[0].fulcio: keyless",
            ),
            (
                r#"{"default": [{"type": "sigstoreSigned", "keyPath": "rel.pub"}]}"#,
                "default[0].keyPath: \"rel.pub\" must be an absolute path",
            ),
            (
                r#"{"default": [{"type": "sigstoreSigned", "keyData": "!!"}]}"#,
                "default[0].keyData: not base64",
            ),
            (
                r#"{"default": [{"type": "sigstoreSigned", "keyPath": "/a", "keyData": "b"}]}"#,
                "only one of",
            ),
            (
                r#"{"default": [{"type": "sigstoreSigned", "keyData": "YQ==", "signedIdentity": {"type": "remapIdentity"}}]}"#,
                "keyData",
            ),
            (
                r#"{"default": [{"type": "reject", "keyPath": "/x"}]}"#,
                "default[0].keyPath: unknown key",
            ),
            (
                r#"{"default": [{"type": "reject"}], "transport": {}}"#,
                "transport: unknown key",
            ),
        ] {
            let e = file::parse(Path::new("/etc/p.json"), json.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("/etc/p.json") && e.contains(want), "{json}: {e}");
        }
        let json = format!(
            r#"{{"default": [{{"type": "sigstoreSigned", "keyPath": "{}"}}]}}"#,
            key.path().display()
        );
        let e = file::parse(Path::new("/etc/p.json"), json.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("default[0].keyPath") && e.contains("PUBLIC KEY"),
            "{e}"
        );
    }
}
