//! `signedIdentity`: which references a signature's claimed identity (its payload's
//! `critical.identity.docker-reference`) may stand for, as containers-policy.json(5) defines
//! the types. cosign writes the bare repository (`registry/repo`, no tag), which the default
//! `matchRepoDigestOrExact` accepts only for pulls by digest: policies for cosign signatures
//! say `matchRepository`, as CRI-O's documentation does.

use crate::reference::Reference;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignedIdentity {
    /// A pull by tag needs the same `repo:tag` in the signature; by digest, the same repo.
    MatchRepoDigestOrExact,
    /// The same repository, whatever the tag.
    MatchRepository,
    /// The same reference, tag or digest.
    MatchExact,
    /// The signature names exactly this reference, whatever was pulled.
    ExactReference(String),
    /// The signature names this repository, whatever was pulled.
    ExactRepository(String),
}

/// A reference as written, normalised, and whether it had neither tag nor digest
/// ([`Reference::parse`] fills in `latest`, which identities must not).
struct Written {
    r: Reference,
    name_only: bool,
}

fn written(s: &str) -> Result<Written, String> {
    let last = s.rsplit('/').next().unwrap_or(s);
    let name_only = !s.contains('@') && !last.contains(':');
    let r = Reference::parse(s).map_err(|e| e.to_string())?;
    Ok(Written { r, name_only })
}

/// `name:tag` or `name@digest` (the tag when both).
fn exact(r: &Reference) -> String {
    match (&r.tag, &r.digest) {
        (Some(t), _) => format!("{}:{t}", r.name()),
        (None, Some(d)) => format!("{}@{d}", r.name()),
        (None, None) => r.name(),
    }
}

impl SignedIdentity {
    pub fn parse(v: &Value) -> Result<SignedIdentity, String> {
        let Value::Object(o) = v else {
            return Err("must be an object with a \"type\"".into());
        };
        let ty = o.get("type").and_then(Value::as_str).unwrap_or_default();
        let field = |k: &str| -> Result<String, String> {
            o.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("{ty} needs {k:?}"))
        };
        let only = |allowed: &[&str]| match o.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(format!("{k}: unknown key for {ty}")),
            None => Ok(()),
        };
        let id = match ty {
            "matchRepoDigestOrExact" => SignedIdentity::MatchRepoDigestOrExact,
            "matchRepository" => SignedIdentity::MatchRepository,
            "matchExact" => SignedIdentity::MatchExact,
            "exactReference" => {
                only(&["type", "dockerReference"])?;
                let r = field("dockerReference")?;
                let w = written(&r).map_err(|e| format!("dockerReference: {e}"))?;
                if w.name_only {
                    return Err(format!("dockerReference {r:?} needs a tag or a digest"));
                }
                return Ok(SignedIdentity::ExactReference(exact(&w.r)));
            }
            "exactRepository" => {
                only(&["type", "dockerRepository"])?;
                let r = field("dockerRepository")?;
                let w = written(&r).map_err(|e| format!("dockerRepository: {e}"))?;
                if !w.name_only {
                    return Err(format!(
                        "dockerRepository {r:?} must be a repository, without tag or digest"
                    ));
                }
                return Ok(SignedIdentity::ExactRepository(w.r.name()));
            }
            "remapIdentity" => {
                return Err("remapIdentity is not supported yet".into());
            }
            "" => return Err("type: missing".into()),
            other => return Err(format!("unknown type {other:?}")),
        };
        only(&["type"])?;
        Ok(id)
    }

    /// Whether a signature claiming `claimed` stands for `pulled`; Err says why not.
    pub fn check(&self, pulled: &Reference, claimed: &str) -> Result<(), String> {
        let sig = written(claimed).map_err(|e| {
            format!("the signature's docker-reference {claimed:?} does not parse: {e}")
        })?;
        let ok = match self {
            SignedIdentity::MatchRepository => sig.r.name() == pulled.name(),
            SignedIdentity::ExactRepository(repo) => sig.r.name() == *repo,
            SignedIdentity::ExactReference(r) => !sig.name_only && exact(&sig.r) == *r,
            SignedIdentity::MatchExact => !sig.name_only && exact(&sig.r) == exact(pulled),
            SignedIdentity::MatchRepoDigestOrExact => {
                !sig.name_only
                    && if pulled.tag.is_some() {
                        exact(&sig.r) == exact(pulled)
                    } else {
                        sig.r.name() == pulled.name()
                    }
            }
        };
        if ok {
            return Ok(());
        }
        let hint = if sig.name_only
            && !matches!(
                self,
                SignedIdentity::MatchRepository | SignedIdentity::ExactRepository(_)
            ) {
            " (it names a repository only, as cosign writes it: use signedIdentity matchRepository)"
        } else {
            ""
        };
        Err(format!(
            "the signature is for {claimed:?}, not {:?} (signedIdentity {}){hint}",
            exact(pulled),
            self.type_name()
        ))
    }

    /// The `type` as policy.json spells it, for errors.
    fn type_name(&self) -> &'static str {
        match self {
            SignedIdentity::MatchRepoDigestOrExact => "matchRepoDigestOrExact",
            SignedIdentity::MatchRepository => "matchRepository",
            SignedIdentity::MatchExact => "matchExact",
            SignedIdentity::ExactReference(_) => "exactReference",
            SignedIdentity::ExactRepository(_) => "exactRepository",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(s: &str) -> Reference {
        Reference::parse(s).unwrap()
    }

    #[test]
    fn identities_as_containers_policy_defines_them() {
        let d = "sha256:".to_string() + &"a".repeat(64);
        let repo = SignedIdentity::MatchRepository;
        assert!(repo.check(&r("reg:5000/app:v1"), "reg:5000/app").is_ok());
        assert!(repo.check(&r("reg:5000/app:v1"), "reg:5000/app:v2").is_ok());
        assert!(repo.check(&r("reg:5000/other:v1"), "reg:5000/app").is_err());
        assert!(repo
            .check(&r("busybox"), "index.docker.io/library/busybox")
            .is_ok());

        let def = SignedIdentity::MatchRepoDigestOrExact;
        assert!(def.check(&r("reg:5000/app:v1"), "reg:5000/app:v1").is_ok());
        assert!(def.check(&r("reg:5000/app:v1"), "reg:5000/app:v2").is_err());
        let e = def
            .check(&r("reg:5000/app:v1"), "reg:5000/app")
            .unwrap_err();
        assert!(e.contains("matchRepository"), "{e}");
        assert!(def
            .check(&r(&format!("reg:5000/app@{d}")), "reg:5000/app:v9")
            .is_ok());

        let ex = SignedIdentity::MatchExact;
        assert!(ex.check(&r("reg:5000/app:v1"), "reg:5000/app:v1").is_ok());
        assert!(ex
            .check(&r(&format!("reg:5000/app@{d}")), "reg:5000/app:v1")
            .is_err());

        let er = SignedIdentity::parse(
            &json!({"type": "exactReference", "dockerReference": "reg:5000/app:v1"}),
        )
        .unwrap();
        assert!(er
            .check(&r("reg:5000/elsewhere:x"), "reg:5000/app:v1")
            .is_ok());
        assert!(er.check(&r("reg:5000/app:v1"), "reg:5000/app").is_err());
        let erepo = SignedIdentity::parse(
            &json!({"type": "exactRepository", "dockerRepository": "reg:5000/app"}),
        )
        .unwrap();
        assert!(erepo.check(&r("mirror:1/copy:v1"), "reg:5000/app").is_ok());
    }

    #[test]
    fn bad_identities_are_refused() {
        for (v, want) in [
            (
                json!({"type": "remapIdentity", "prefix": "a", "signedPrefix": "b"}),
                "not supported",
            ),
            (
                json!({"type": "exactReference", "dockerReference": "reg/app"}),
                "needs a tag",
            ),
            (
                json!({"type": "exactRepository", "dockerRepository": "reg/app:v1"}),
                "without tag",
            ),
            (
                json!({"type": "matchRepository", "extra": 1}),
                "extra: unknown key",
            ),
            (json!({"type": "nope"}), "unknown type"),
            (json!("matchRepository"), "must be an object"),
        ] {
            let e = SignedIdentity::parse(&v).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
