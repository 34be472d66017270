//! What containerd writes to `start`'s stdin and reads from its stdout, which differs by
//! version:
//!
//! - containerd 1.6 to 2.2 write the task's runtime options as a protobuf `Any` (or nothing)
//!   and read the shim's address as plain text (`unix:///run/containerd/s/…`), which they take
//!   for a version 2 shim (`containerd.task.v2.Task`);
//! - containerd 2.3 and later write `BootstrapParams` (instance id, namespace, containerd's
//!   version and addresses, the runtime options as an extension) and read `BootstrapResult`
//!   (protobuf): a shim answering version 3 is spoken to as `containerd.task.v3.Task`. 2.4 still
//!   reads a plain address, as version 2.
//!
//! The two stdin forms are both protobuf messages whose first fields are strings, so the
//! bootstrap form is recognised by what only it carries: this task's id and containerd's
//! version. The answer matches the question: 1.6 would take a `BootstrapResult` for an address.

use super::options::is_runtime_options;
use containerd_shim_protos::bootstrap_api::{BootstrapParams, BootstrapResult};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use std::io::Read;

/// The Task API version the shim answers to the bootstrap protocol.
const TASK_API_VERSION: i32 = 3;
/// Bound of what `start` reads from containerd: a few hundred bytes of options and addresses.
const MAX_INPUT: u64 = 1 << 20;

/// What containerd told `start`.
#[derive(Debug, Default, PartialEq)]
pub struct StartInput {
    /// Whether containerd speaks the bootstrap protocol (2.3+), and so expects its answer.
    pub bootstrap: bool,
    /// The runtime options of the task being started, if any.
    pub options: Option<Any>,
}

impl StartInput {
    /// Reads containerd's input for task `id` from `stdin` (nothing from a terminal: a person
    /// running `start` by hand has no options to give).
    pub fn read(stdin: impl Read, is_terminal: bool, id: &str) -> std::io::Result<StartInput> {
        if is_terminal {
            return Ok(StartInput::default());
        }
        let mut bytes = Vec::new();
        stdin.take(MAX_INPUT).read_to_end(&mut bytes)?;
        Ok(StartInput::parse(&bytes, id))
    }

    fn parse(bytes: &[u8], id: &str) -> StartInput {
        if bytes.is_empty() {
            return StartInput::default();
        }
        if let Ok(params) = BootstrapParams::parse_from_bytes(bytes) {
            if params.instance_id == id && !params.containerd_version.is_empty() {
                let options = params
                    .extensions
                    .into_iter()
                    .filter_map(|e| e.value.into_option())
                    .find(is_runtime_options);
                return StartInput {
                    bootstrap: true,
                    options,
                };
            }
        }
        // An `Any` of another type is the Create's to refuse, with its type named.
        let options = Any::parse_from_bytes(bytes)
            .ok()
            .filter(|any| !any.type_url.is_empty());
        StartInput {
            bootstrap: false,
            options,
        }
    }

    /// What `start` prints for a shim serving on `address` (`unix://…`).
    pub fn answer(&self, address: &str) -> Result<Vec<u8>, String> {
        if !self.bootstrap {
            return Ok(address.as_bytes().to_vec());
        }
        let mut result = BootstrapResult::new();
        result.version = TASK_API_VERSION;
        result.address = address.to_string();
        result.protocol = "ttrpc".into();
        result
            .write_to_bytes()
            .map_err(|e| format!("encode the bootstrap result: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containerd::options::RUNC_OPTIONS;
    use containerd_shim_protos::bootstrap_api::Extension;
    use containerd_shim_protos::protobuf::MessageField;

    fn runc_any() -> Any {
        let mut any = Any::new();
        any.type_url = RUNC_OPTIONS.into();
        any.value = vec![(9 << 3), 1]; // SystemdCgroup = true
        any
    }

    #[test]
    fn containerd_2_4_bootstraps_and_gets_a_version_3_answer() {
        let mut params = BootstrapParams::new();
        params.instance_id = "pod1".into();
        params.namespace = "k8s.io".into();
        params.containerd_version = "v2.4.2".into();
        params.containerd_ttrpc_address = "/run/containerd/containerd.sock.ttrpc".into();
        let mut ext = Extension::new();
        ext.value = MessageField::some(runc_any());
        params.extensions.push(ext);
        let bytes = params.write_to_bytes().unwrap();
        let input = StartInput::read(&bytes[..], false, "pod1").unwrap();
        assert!(input.bootstrap);
        assert_eq!(input.options, Some(runc_any()));
        let answer = input.answer("unix:///run/containerd/s/abc").unwrap();
        let result = BootstrapResult::parse_from_bytes(&answer).unwrap();
        assert_eq!(result.version, 3);
        assert_eq!(result.address, "unix:///run/containerd/s/abc");
        assert_eq!(result.protocol, "ttrpc");
    }

    #[test]
    fn containerd_1_6_sends_the_options_alone_and_gets_a_plain_address() {
        let bytes = runc_any().write_to_bytes().unwrap();
        let input = StartInput::read(&bytes[..], false, "pod1").unwrap();
        assert_eq!(
            input,
            StartInput {
                bootstrap: false,
                options: Some(runc_any())
            }
        );
        assert_eq!(
            input.answer("unix:///run/containerd/s/abc").unwrap(),
            b"unix:///run/containerd/s/abc"
        );
        // No options: nothing on stdin (or a terminal, by hand).
        assert_eq!(
            StartInput::read(&b""[..], false, "pod1").unwrap(),
            StartInput::default()
        );
        assert_eq!(
            StartInput::read(&b"junk"[..], true, "pod1").unwrap(),
            StartInput::default()
        );
    }

    #[test]
    fn an_any_is_not_taken_for_bootstrap_params() {
        // An Any's type URL and value are fields 1 and 2, as BootstrapParams' instance id and
        // namespace: only a matching id and a containerd version make it the latter.
        let mut any = runc_any();
        any.type_url = "pod1".into();
        let bytes = any.write_to_bytes().unwrap();
        let input = StartInput::read(&bytes[..], false, "pod1").unwrap();
        assert!(!input.bootstrap);
        assert_eq!(input.options.map(|a| a.type_url), Some("pod1".into()));
    }
}
