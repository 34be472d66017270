//! A sigstore public key as cosign writes it (`cosign generate-key-pair`: a PEM "PUBLIC KEY",
//! the DER SubjectPublicKeyInfo of an ECDSA P-256 key), and the check of a signature made
//! with it (DER-encoded ECDSA over SHA-256). ring does the arithmetic: it is already in the
//! daemon, through rustls, so this costs no new crate. Other key types (RSA, Ed25519, other
//! curves) are refused by name where the key is loaded.

use base64::Engine as _;

/// id-ecPublicKey (1.2.840.10045.2.1) and prime256v1 (1.2.840.10045.3.1.7), DER-encoded OIDs.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// An ECDSA P-256 public key: the uncompressed point (65 bytes, 0x04 || x || y).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublicKey {
    point: Vec<u8>,
}

impl PublicKey {
    /// From PEM text holding one "PUBLIC KEY" block.
    pub fn from_pem(pem: &[u8]) -> Result<PublicKey, String> {
        let text = std::str::from_utf8(pem).map_err(|_| "not PEM text".to_string())?;
        let begin = "-----BEGIN PUBLIC KEY-----";
        let end = "-----END PUBLIC KEY-----";
        let start = text
            .find(begin)
            .ok_or_else(|| format!("no {begin:?} block (cosign's public key format)"))?;
        let body = &text[start + begin.len()..];
        let stop = body.find(end).ok_or_else(|| format!("no {end:?}"))?;
        let b64: String = body[..stop].split_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("the PEM block is not base64: {e}"))?;
        Self::from_spki_der(&der)
    }

    /// From a DER SubjectPublicKeyInfo.
    pub fn from_spki_der(der: &[u8]) -> Result<PublicKey, String> {
        let bad = |what: &str| format!("not a SubjectPublicKeyInfo: {what}");
        let (spki, rest) = der::read(der, der::SEQUENCE).ok_or_else(|| bad("outer SEQUENCE"))?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        let (alg, rest) = der::read(spki, der::SEQUENCE).ok_or_else(|| bad("algorithm"))?;
        let (bits, rest) = der::read(rest, der::BIT_STRING).ok_or_else(|| bad("key bits"))?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        let (oid, params) = der::read(alg, der::OID).ok_or_else(|| bad("algorithm OID"))?;
        if oid != OID_EC_PUBLIC_KEY {
            return Err(
                "not an ECDSA key: only ECDSA P-256 keys (cosign's default) are supported".into(),
            );
        }
        let (curve, _) = der::read(params, der::OID).ok_or_else(|| bad("curve OID"))?;
        if curve != OID_P256 {
            return Err("an ECDSA key on another curve than P-256: only P-256 is supported".into());
        }
        // A BIT STRING starts with its count of unused bits: 0 for a point.
        match bits {
            [0, point @ ..] if point.len() == 65 && point[0] == 4 => Ok(PublicKey {
                point: point.to_vec(),
            }),
            _ => Err("the P-256 point is not an uncompressed 65-byte point".into()),
        }
    }

    /// Whether `signature` (DER ECDSA) is this key's over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            &self.point,
        )
        .verify(message, signature)
        .is_ok()
    }
}

/// Just enough DER to walk a SubjectPublicKeyInfo.
mod der {
    pub const SEQUENCE: u8 = 0x30;
    pub const BIT_STRING: u8 = 0x03;
    pub const OID: u8 = 0x06;

    /// The contents of the element of type `tag` at the start of `input`, and what follows.
    pub fn read(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (&t, rest) = input.split_first()?;
        if t != tag {
            return None;
        }
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (first as usize, rest)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 2 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| acc << 8 | *b as usize);
            (len, &rest[n..])
        };
        (rest.len() >= len).then(|| rest.split_at(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A P-256 key pair made with openssl, and a signature of "hello\n" by it
    // (`openssl dgst -sha256 -sign key.pem`).
    const PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEd2JdiuKynPoHtoU4wVYS8NWBEI+W
lpu1EvUL19hjvfI7LmxkCrDmXBj+bzkvyIQGJq+Gq46Zb0cWJYcNwED75w==
-----END PUBLIC KEY-----
";
    const SIG: &str = "MEUCICh8qCecpgE+WJKps+ILOTlgdNsp9IQs2FvlTzvCJLC2AiEAuiUtl2ojuTnSaUjSmPPiLub5dMATNetoASs3vzhH3kU=";

    #[test]
    fn keys_of_other_kinds_are_refused_by_name() {
        // Ed25519: id-Ed25519 1.3.101.112.
        let ed = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let e = PublicKey::from_pem(ed.as_bytes()).unwrap_err();
        assert!(e.contains("not an ECDSA key"), "{e}");
        assert!(PublicKey::from_pem(b"junk")
            .unwrap_err()
            .contains("PUBLIC KEY"));
        assert!(
            PublicKey::from_pem(b"-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n")
                .unwrap_err()
                .contains("base64")
        );
    }

    #[test]
    fn a_p256_key_verifies_its_signature_and_nothing_else() {
        let k = PublicKey::from_pem(PUB.as_bytes()).unwrap();
        assert_eq!(k.point.len(), 65);
        let sig = base64::engine::general_purpose::STANDARD
            .decode(SIG)
            .unwrap();
        assert!(k.verify(b"hello\n", &sig));
        assert!(!k.verify(b"hello!\n", &sig));
        assert!(!k.verify(b"hello\n", b"\x30\x06\x02\x01\x01\x02\x01\x01"));
        assert!(!k.verify(b"hello\n", b""));
    }
}
