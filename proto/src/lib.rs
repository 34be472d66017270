//! The CRI v1 API (package `runtime.v1`), generated at build time from the vendored
//! `proto/api.proto`. See `proto/README.md` for the cri-api version it came from.
//! Also peapod's own pod-supervisor API (`peapod.pods.v1`, `proto/pods.proto`) that the
//! `peapod apply/get/describe/wait/delete` verbs use.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod runtime {
    pub mod v1 {
        tonic::include_proto!("runtime.v1");

        include!(concat!(env!("OUT_DIR"), "/redacted.rs"));

        // The list answers are written by hand; build.rs points prost at them.
        pub mod list_answers;
        pub use list_answers::{
            ListContainersResponse, ListPodSandboxResponse, StreamContainersResponse,
            StreamPodSandboxesResponse,
        };

        /// The fields api.proto marks `[debug_redact = true]` print as `[REDACTED]` when set
        /// (and as `""` when empty, so a log still shows whether one was given): a PullImage
        /// request or its auth must never put a password or token in a log line.
        impl std::fmt::Debug for AuthConfig {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                fn redact(s: &str) -> &str {
                    if s.is_empty() {
                        ""
                    } else {
                        "[REDACTED]"
                    }
                }
                f.debug_struct("AuthConfig")
                    .field("username", &self.username)
                    .field("password", &redact(&self.password))
                    .field("auth", &redact(&self.auth))
                    .field("server_address", &self.server_address)
                    .field("identity_token", &redact(&self.identity_token))
                    .field("registry_token", &redact(&self.registry_token))
                    .finish()
            }
        }
    }
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod peapod {
    pub mod pods {
        pub mod v1 {
            tonic::include_proto!("peapod.pods.v1");
        }
    }
}

pub use peapod::pods::v1 as pods;
pub use runtime::v1;

/// serde for a `bytes` field that holds text (`KeyValue.value`, an environment value): a JSON
/// string when it is UTF-8, as it was when the field was a `string`, else an array of bytes;
/// either is read back.
pub mod bytes_as_text {
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(value) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.collect_seq(value),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
                Ok(v.as_bytes().to_vec())
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<u8>, E> {
                Ok(Vec::new())
            }
        }
        d.deserialize_any(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::v1::{AuthConfig, ImageSpec, PullImageRequest, REDACTED_FIELDS};

    fn secret_auth() -> AuthConfig {
        AuthConfig {
            username: "alice".into(),
            password: "secret-password".into(),
            auth: "secret-auth".into(),
            server_address: "registry.example".into(),
            identity_token: "secret-identity-token".into(),
            registry_token: "secret-registry-token".into(),
        }
    }

    #[test]
    fn redacted_fields_are_the_auth_secrets() {
        let mut fields: Vec<_> = REDACTED_FIELDS.to_vec();
        fields.sort();
        assert_eq!(
            fields,
            [
                ("AuthConfig", "auth"),
                ("AuthConfig", "identity_token"),
                ("AuthConfig", "password"),
                ("AuthConfig", "registry_token"),
            ]
        );
    }

    #[test]
    fn debug_never_shows_redacted_fields() {
        let req = PullImageRequest {
            image: Some(ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            auth: Some(secret_auth()),
            sandbox_config: None,
        };
        for text in [format!("{req:?}"), format!("{req:#?}")] {
            assert!(!text.contains("secret"), "{text}");
            assert!(
                text.contains("alice") && text.contains("registry.example"),
                "{text}"
            );
            assert_eq!(
                text.matches("[REDACTED]").count(),
                REDACTED_FIELDS.len(),
                "{text}"
            );
        }
        let empty = format!("{:?}", AuthConfig::default());
        assert!(!empty.contains("[REDACTED]"), "{empty}");
    }

    #[test]
    fn env_values_stay_json_strings() {
        use super::v1::KeyValue;
        let kv = KeyValue {
            key: "A".into(),
            value: b"x y".to_vec(),
        };
        let json = serde_json::to_string(&kv).expect("serialise");
        assert_eq!(json, r#"{"key":"A","value":"x y"}"#);
        // What records written before the field became bytes hold.
        let old: KeyValue = serde_json::from_str(r#"{"key":"A","value":"x y"}"#).expect("read");
        assert_eq!(old, kv);
        let missing: KeyValue = serde_json::from_str(r#"{"key":"A"}"#).expect("read");
        assert!(missing.value.is_empty());
        // Bytes that are not UTF-8 survive a round trip as an array.
        let raw = KeyValue {
            key: "B".into(),
            value: vec![0xff, b'a'],
        };
        let json = serde_json::to_string(&raw).expect("serialise");
        assert_eq!(json, r#"{"key":"B","value":[255,97]}"#);
        assert_eq!(serde_json::from_str::<KeyValue>(&json).expect("read"), raw);
    }

    #[test]
    fn serde_never_writes_redacted_fields() {
        let json = serde_json::to_string(&secret_auth()).expect("serialise");
        assert!(!json.contains("secret"), "{json}");
        assert!(json.contains("alice"), "{json}");
    }
}
