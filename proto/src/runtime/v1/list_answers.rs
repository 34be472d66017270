//! The four list answers (ListPodSandbox, ListContainers, StreamPodSandboxes,
//! StreamContainers) as api.proto defines them, with a second way for a server to give their
//! items: already encoded.
//!
//! Why: the kubelet lists every pod and every container each second on every node (the PLEG
//! relist), and at a thousand pods building and encoding a thousand messages was most of each
//! call, while a pod's message only changes when the pod does. The daemon keeps each item's
//! encoding beside its record and answers with the bytes it kept. On the wire nothing
//! changes: `repeated PodSandbox items = 1` is a run of field-1 length-delimited entries,
//! each an encoded `PodSandbox`, however it was made; a client decodes them into the message
//! field as always (`encoded` is never filled by decoding).
//!
//! `build.rs` points prost at these types (`extern_path`), so the generated services and
//! clients use them in place of the ones it would generate.

use super::{Container, PodSandbox};
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{bytes, message, skip_field, DecodeContext, WireType};
use prost::DecodeError;

/// A list answer whose field 1 is `repeated $item`: the decoded items, and the items a
/// server gives already encoded (sent after them).
macro_rules! list_answer {
    ($(#[$doc:meta])* $name:ident { $field:ident: $item:ty }) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct $name {
            pub $field: Vec<$item>,
            /// Items already encoded, each the bytes of one message of the field, sent after
            /// the decoded ones. Only a server fills it; decoding never does.
            #[serde(skip)]
            pub encoded: Vec<Bytes>,
        }

        impl $name {
            /// The answer as a client decodes it off the wire: every item in the message
            /// field, the encoded ones after the others. For callers of a service in the same
            /// process (tests).
            pub fn received(&self) -> Result<$name, DecodeError> {
                <$name as prost::Message>::decode(prost::Message::encode_to_vec(self).as_slice())
            }
        }

        impl prost::Message for $name {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                for item in &self.$field {
                    message::encode(1, item, buf);
                }
                for item in &self.encoded {
                    bytes::encode(1, item, buf);
                }
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                match tag {
                    1 => message::merge_repeated(wire_type, &mut self.$field, buf, ctx)
                        .map_err(|mut e| {
                            e.push(stringify!($name), stringify!($field));
                            e
                        }),
                    _ => skip_field(wire_type, tag, buf, ctx),
                }
            }

            fn encoded_len(&self) -> usize {
                message::encoded_len_repeated(1, &self.$field)
                    + bytes::encoded_len_repeated(1, &self.encoded)
            }

            fn clear(&mut self) {
                self.$field.clear();
                self.encoded.clear();
            }
        }

        // By hand: the encoded items as a count and size, not a dump of their bytes.
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field(stringify!($field), &self.$field)
                    .field("encoded_items", &self.encoded.len())
                    .field("encoded_bytes", &self.encoded.iter().map(Bytes::len).sum::<usize>())
                    .finish()
            }
        }
    };
}

list_answer! {
    /// ListPodSandboxResponse: `repeated PodSandbox items = 1`.
    ListPodSandboxResponse { items: PodSandbox }
}
list_answer! {
    /// ListContainersResponse: `repeated Container containers = 1`.
    ListContainersResponse { containers: Container }
}
list_answer! {
    /// StreamPodSandboxesResponse: `repeated PodSandbox pod_sandboxes = 1`.
    StreamPodSandboxesResponse { pod_sandboxes: PodSandbox }
}
list_answer! {
    /// StreamContainersResponse: `repeated Container containers = 1`.
    StreamContainersResponse { containers: Container }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::v1::PodSandboxMetadata;
    use prost::Message;
    use std::collections::HashMap;

    fn pod(n: u32) -> PodSandbox {
        PodSandbox {
            id: format!("{n:064x}"),
            metadata: Some(PodSandboxMetadata {
                name: format!("pod-{n}"),
                uid: format!("uid-{n}"),
                namespace: "default".into(),
                attempt: n,
            }),
            state: 1,
            created_at: 1_700_000_000_000_000_000 + i64::from(n),
            labels: HashMap::from([("app".into(), format!("a{n}"))]),
            annotations: HashMap::from([("k".into(), "v".repeat(n as usize))]),
            runtime_handler: "runc".into(),
        }
    }

    #[test]
    fn encoded_items_decode_as_the_messages_they_were() {
        let pods: Vec<PodSandbox> = (0..5).map(pod).collect();
        // Two given as messages, three already encoded: one answer of five, in that order.
        let answer = ListPodSandboxResponse {
            items: pods[..2].to_vec(),
            encoded: pods[2..]
                .iter()
                .map(|p| Bytes::from(p.encode_to_vec()))
                .collect(),
        };
        let wire = answer.encode_to_vec();
        assert_eq!(wire.len(), answer.encoded_len());
        let decoded = ListPodSandboxResponse::decode(wire.as_slice()).expect("decode");
        assert_eq!(decoded.items, pods);
        assert!(decoded.encoded.is_empty());
        assert_eq!(answer.received().expect("decode"), decoded);
        // The same bytes as the answer made of messages alone.
        let plain = ListPodSandboxResponse {
            items: pods,
            encoded: Vec::new(),
        };
        assert_eq!(plain.encode_to_vec(), wire);
    }

    #[test]
    fn the_wire_is_the_generated_messages() {
        // A message of the same shape as api.proto's (field 1, repeated Container), made by
        // prost's derive: both ways read each other's bytes.
        #[derive(Clone, PartialEq, prost::Message)]
        struct Generated {
            #[prost(message, repeated, tag = "1")]
            containers: Vec<Container>,
            #[prost(string, tag = "2")]
            unknown_later_field: String,
        }
        let containers: Vec<Container> = (0..3)
            .map(|n| Container {
                id: format!("c{n}"),
                pod_sandbox_id: format!("p{n}"),
                state: 2,
                ..Default::default()
            })
            .collect();
        let ours = ListContainersResponse {
            containers: Vec::new(),
            encoded: containers
                .iter()
                .map(|c| Bytes::from(c.encode_to_vec()))
                .collect(),
        };
        let theirs = Generated::decode(ours.encode_to_vec().as_slice()).expect("decode");
        assert_eq!(theirs.containers, containers);
        // A field this side does not know is skipped, as generated code skips it.
        let newer = Generated {
            containers: containers.clone(),
            unknown_later_field: "x".into(),
        };
        let back =
            ListContainersResponse::decode(newer.encode_to_vec().as_slice()).expect("decode");
        assert_eq!(back.containers, containers);
    }

    #[test]
    fn a_torn_item_is_an_error_naming_the_field() {
        let mut wire = ListPodSandboxResponse {
            items: vec![pod(1)],
            encoded: Vec::new(),
        }
        .encode_to_vec();
        wire.truncate(wire.len() - 3);
        let e = ListPodSandboxResponse::decode(wire.as_slice()).expect_err("torn");
        assert!(
            e.to_string().contains("ListPodSandboxResponse.items"),
            "{e}"
        );
    }

    #[test]
    fn debug_counts_encoded_items() {
        let answer = StreamContainersResponse {
            containers: Vec::new(),
            encoded: vec![Bytes::from_static(b"\x0a\x01x")],
        };
        let text = format!("{answer:?}");
        assert!(
            text.contains("encoded_items: 1") && text.contains("encoded_bytes: 3"),
            "{text}"
        );
    }
}
