//! Sigstore signatures as cosign stores them in the registry, next to the image: the tag
//! `sha256-<hex>.sig` of the image's repository names a manifest whose layers are
//! simple-signing payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each with
//! its signature, base64 DER ECDSA, in the `dev.cosignproject.cosign/signature` annotation.
//!
//! A signature is accepted when one of the policy's keys verifies it over the payload's exact
//! bytes, the payload says it is a cosign container image signature of the digest being
//! pulled, and its claimed identity stands for the reference being pulled. One accepted
//! signature is enough (cosign and containers/image agree); when none is, the error says why
//! the last one failed.

use super::identity::SignedIdentity;
use super::pubkey::PublicKey;
use crate::manifest::AnyManifest;
use crate::reference::Reference;
use crate::registry::Session;
use crate::{Error, ErrorKind};
use base64::Engine as _;

pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Bounds on what a registry can make a pull read for signatures.
const MAX_SIGNATURES: usize = 16;
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// The cosign tag that holds the signatures of `digest`.
pub(crate) fn signature_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1) + ".sig"
}

#[derive(serde::Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(serde::Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(serde::Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// Why a pull is refused: Err(reason). Registry errors other than "no signature" stay errors.
pub(crate) async fn verify(
    session: &Session,
    pulled: &Reference,
    digest: &str,
    keys: &[PublicKey],
    identity: &SignedIdentity,
) -> Result<Result<(), String>, Error> {
    let tag = signature_tag(digest);
    let (body, _, ep) = match session.manifest(&tag).await {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(Err(format!(
                "no sigstore signature: {}:{tag} does not exist",
                pulled.name()
            )))
        }
        Err(e) => return Err(e),
    };
    let m: AnyManifest = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Err(format!(
                "the signature manifest {tag} does not parse: {e}"
            )))
        }
    };
    let layers = m.layers.unwrap_or_default();
    if layers.is_empty() {
        return Ok(Err(format!(
            "the signature manifest {tag} has no signatures"
        )));
    }
    let mut why = String::new();
    for (i, l) in layers.iter().take(MAX_SIGNATURES).enumerate() {
        let Some(sig_b64) = l
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            why = format!("signature {i} of {tag} has no {SIGNATURE_ANNOTATION} annotation");
            continue;
        };
        let Ok(sig) = base64::engine::general_purpose::STANDARD.decode(sig_b64.trim()) else {
            why = format!("signature {i} of {tag} is not base64");
            continue;
        };
        if l.size < 0 || l.size as u64 > MAX_PAYLOAD_BYTES {
            why = format!("signature {i} of {tag}: a payload of {} bytes", l.size);
            continue;
        }
        crate::reference::validate_digest(&l.digest).map_err(Error::InvalidImage)?;
        let payload = session.small_blob(&l.digest, ep, MAX_PAYLOAD_BYTES).await?;
        match check_one(&payload, &sig, keys, pulled, digest, identity) {
            Ok(()) => {
                tracing::info!(reference = %pulled, %digest, signature = %tag, "sigstore signature verified");
                return Ok(Ok(()));
            }
            Err(e) => why = format!("signature {i} of {tag}: {e}"),
        }
    }
    Ok(Err(why))
}

/// One signature: the key, then what the signed payload says.
fn check_one(
    payload: &[u8],
    sig: &[u8],
    keys: &[PublicKey],
    pulled: &Reference,
    digest: &str,
    identity: &SignedIdentity,
) -> Result<(), String> {
    if !keys.iter().any(|k| k.verify(payload, sig)) {
        return Err("not signed by a key the policy trusts".into());
    }
    // Only signed bytes are read from here on.
    let p: Payload = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed payload does not parse: {e}"))?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(format!(
            "the signed payload is a {:?}, not a {PAYLOAD_TYPE:?}",
            p.critical.kind
        ));
    }
    if p.critical.image.docker_manifest_digest != digest {
        return Err(format!(
            "it signs the manifest {}, but the registry serves {digest} (changed after signing?)",
            p.critical.image.docker_manifest_digest
        ));
    }
    identity.check(pulled, &p.critical.identity.docker_reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_tags_are_cosigns() {
        assert_eq!(signature_tag("sha256:abc"), "sha256-abc.sig");
    }

    #[test]
    fn payload_checks_refuse_unsigned_bytes_first() {
        let key = PublicKey::from_pem(
            b"-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEd2JdiuKynPoHtoU4wVYS8NWBEI+W\nlpu1EvUL19hjvfI7LmxkCrDmXBj+bzkvyIQGJq+Gq46Zb0cWJYcNwED75w==\n-----END PUBLIC KEY-----\n",
        )
        .unwrap();
        let r = Reference::parse("reg:5000/app:v1").unwrap();
        let e = check_one(
            b"{}",
            b"",
            &[key],
            &r,
            "sha256:x",
            &SignedIdentity::MatchRepository,
        )
        .unwrap_err();
        assert!(e.contains("not signed by a key"), "{e}");
    }
}
