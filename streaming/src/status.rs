//! The `metav1.Status` object that remotecommand v4+ writes on the error stream.
//!
//! Field names and omission rules follow the Go struct's JSON tags, so that client-go's
//! decoder (which kubectl and crictl use) reads the exit code back: `reason` is
//! `NonZeroExitCode` and `details.causes[].reason` is `ExitCode` with the code as `message`.

use serde::{Deserialize, Serialize};

/// `metav1.StatusSuccess`.
pub const STATUS_SUCCESS: &str = "Success";
/// `metav1.StatusFailure`.
pub const STATUS_FAILURE: &str = "Failure";
/// `remotecommand.NonZeroExitCodeReason`.
pub const REASON_NON_ZERO_EXIT_CODE: &str = "NonZeroExitCode";
/// `remotecommand.ExitCodeCauseType`.
pub const CAUSE_EXIT_CODE: &str = "ExitCode";
/// `metav1.StatusReasonInternalError`.
pub const REASON_INTERNAL_ERROR: &str = "InternalError";

/// `metav1.ListMeta`, always empty here (Go serialises the empty struct as `{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListMeta {}

/// `metav1.Status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// `kind`, set when the object carries its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `apiVersion`.
    #[serde(
        default,
        rename = "apiVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,
    /// Always `{}`.
    #[serde(default)]
    pub metadata: ListMeta,
    /// `Success` or `Failure`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Extra data, here the exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// HTTP-like code (500 for internal errors).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// `metav1.StatusDetails` (the fields remotecommand uses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    /// Causes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    /// The cause type (Go field `Type`, JSON `reason`).
    #[serde(default, rename = "reason", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Description; the exit code for `ExitCode`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Field path, unused here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    /// A successful end.
    pub fn success() -> Self {
        Status {
            status: STATUS_SUCCESS.into(),
            ..Default::default()
        }
    }

    /// The command ran and exited with `code` (non-zero).
    pub fn exit_code(code: i32) -> Self {
        Status {
            status: STATUS_FAILURE.into(),
            message: format!("command terminated with non-zero exit code: exit status {code}"),
            reason: REASON_NON_ZERO_EXIT_CODE.into(),
            details: Some(StatusDetails {
                causes: vec![StatusCause {
                    kind: CAUSE_EXIT_CODE.into(),
                    message: code.to_string(),
                    field: String::new(),
                }],
            }),
            ..Default::default()
        }
    }

    /// The session failed for another reason (`apierrors.NewInternalError`).
    pub fn internal_error(message: &str) -> Self {
        Status {
            status: STATUS_FAILURE.into(),
            message: format!("Internal error occurred: {message}"),
            reason: REASON_INTERNAL_ERROR.into(),
            details: Some(StatusDetails {
                causes: vec![StatusCause {
                    message: message.to_string(),
                    ..Default::default()
                }],
            }),
            code: 500,
            ..Default::default()
        }
    }

    /// Whether this reports success.
    pub fn is_success(&self) -> bool {
        self.status == STATUS_SUCCESS
    }

    /// The exit code this status carries, as client-go's v4 decoder extracts it.
    pub fn exit_code_of(&self) -> Option<i32> {
        if self.status != STATUS_FAILURE || self.reason != REASON_NON_ZERO_EXIT_CODE {
            return None;
        }
        self.details
            .as_ref()?
            .causes
            .iter()
            .find(|c| c.kind == CAUSE_EXIT_CODE)
            .and_then(|c| c.message.parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_what_the_kubelet_writes() {
        assert_eq!(
            serde_json::to_string(&Status::success()).unwrap(),
            r#"{"metadata":{},"status":"Success"}"#
        );
    }

    #[test]
    fn exit_code_round_trips_through_the_go_shape() {
        let json = serde_json::to_value(Status::exit_code(42)).unwrap();
        assert_eq!(json["status"], "Failure");
        assert_eq!(json["reason"], "NonZeroExitCode");
        assert_eq!(json["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(json["details"]["causes"][0]["message"], "42");
        let back: Status = serde_json::from_value(json).unwrap();
        assert_eq!(back.exit_code_of(), Some(42));
        assert_eq!(Status::success().exit_code_of(), None);
        assert_eq!(Status::internal_error("boom").exit_code_of(), None);
    }

    #[test]
    fn decodes_a_kubelet_status() {
        let s: Status = serde_json::from_str(
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
        )
        .unwrap();
        assert_eq!(s.exit_code_of(), Some(3));
    }
}
