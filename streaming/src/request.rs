//! What a streaming URL stands for, and the shape checks the CRI asks for.

/// An exec session (CRI `ExecRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// Container to run in.
    pub container_id: String,
    /// Command and arguments.
    pub cmd: Vec<String>,
    /// Allocate a terminal.
    pub tty: bool,
    /// Stream stdin.
    pub stdin: bool,
    /// Stream stdout.
    pub stdout: bool,
    /// Stream stderr (never with `tty`).
    pub stderr: bool,
}

/// An attach session (CRI `AttachRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachRequest {
    /// Container to attach to.
    pub container_id: String,
    /// The container has a terminal.
    pub tty: bool,
    /// Stream stdin.
    pub stdin: bool,
    /// Stream stdout.
    pub stdout: bool,
    /// Stream stderr (never with `tty`).
    pub stderr: bool,
}

/// A port-forward session (CRI `PortForwardRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortForwardRequest {
    /// Pod sandbox whose network namespace the ports are in.
    pub sandbox_id: String,
    /// Ports the client may forward; empty allows any (kubectl's requests, relayed by the
    /// kubelet, carry none, since the ports travel in the stream headers).
    pub ports: Vec<i32>,
}

/// A request whose shape the CRI forbids; `field` is the CRI field to name in the
/// `InvalidArgument` status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct ValidationError {
    /// CRI field name (`container_id`, `stderr`, `port`, ...).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        field,
        message: message.into(),
    }
}

fn validate_streams(
    container_id: &str,
    tty: bool,
    stdin: bool,
    stdout: bool,
    stderr: bool,
) -> Result<(), ValidationError> {
    if container_id.is_empty() {
        return Err(invalid("container_id", "missing required container_id"));
    }
    if tty && stderr {
        // A terminal multiplexes stderr into stdout; the CRI refuses asking for both.
        return Err(invalid("stderr", "tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(invalid(
            "stdout",
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    Ok(())
}

/// Checks an exec request's shape: a container, a command, at least one stream, and no
/// stderr with a tty.
pub fn validate_exec(req: &ExecRequest) -> Result<(), ValidationError> {
    validate_streams(
        &req.container_id,
        req.tty,
        req.stdin,
        req.stdout,
        req.stderr,
    )?;
    if req.cmd.is_empty() {
        return Err(invalid("cmd", "missing required cmd"));
    }
    Ok(())
}

/// Checks an attach request's shape: a container, at least one stream, no stderr with a tty.
pub fn validate_attach(req: &AttachRequest) -> Result<(), ValidationError> {
    validate_streams(
        &req.container_id,
        req.tty,
        req.stdin,
        req.stdout,
        req.stderr,
    )
}

/// Checks a port-forward request's shape: a sandbox, and ports in 1..=65535.
pub fn validate_port_forward(req: &PortForwardRequest) -> Result<(), ValidationError> {
    if req.sandbox_id.is_empty() {
        return Err(invalid("pod_sandbox_id", "missing required pod_sandbox_id"));
    }
    if let Some(p) = req.ports.iter().find(|p| !(1..=65535).contains(*p)) {
        return Err(invalid("port", format!("port {p} is not in 1-65535")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> ExecRequest {
        ExecRequest {
            container_id: "c1".into(),
            cmd: vec!["sh".into()],
            stdout: true,
            ..Default::default()
        }
    }

    #[test]
    fn exec_shapes() {
        assert!(validate_exec(&exec()).is_ok());
        let e = validate_exec(&ExecRequest {
            tty: true,
            stderr: true,
            ..exec()
        })
        .unwrap_err();
        assert_eq!(e.field, "stderr");
        let e = validate_exec(&ExecRequest {
            stdout: false,
            ..exec()
        })
        .unwrap_err();
        assert!(e.message.contains("one of stdin, stdout, or stderr"));
        assert_eq!(
            validate_exec(&ExecRequest {
                container_id: String::new(),
                ..exec()
            })
            .unwrap_err()
            .field,
            "container_id"
        );
        assert_eq!(
            validate_exec(&ExecRequest {
                cmd: vec![],
                ..exec()
            })
            .unwrap_err()
            .field,
            "cmd"
        );
    }

    #[test]
    fn attach_and_port_forward_shapes() {
        let a = AttachRequest {
            container_id: "c".into(),
            stdin: true,
            ..Default::default()
        };
        assert!(validate_attach(&a).is_ok());
        assert!(validate_attach(&AttachRequest {
            stdin: false,
            ..a.clone()
        })
        .is_err());
        let p = PortForwardRequest {
            sandbox_id: "s".into(),
            ports: vec![80, 443],
        };
        assert!(validate_port_forward(&p).is_ok());
        let e = validate_port_forward(&PortForwardRequest {
            ports: vec![0],
            ..p.clone()
        })
        .unwrap_err();
        assert_eq!(e.field, "port");
        assert!(validate_port_forward(&PortForwardRequest {
            ports: vec![70000],
            ..p.clone()
        })
        .is_err());
        assert_eq!(
            validate_port_forward(&PortForwardRequest::default())
                .unwrap_err()
                .to_string(),
            "invalid pod_sandbox_id: missing required pod_sandbox_id"
        );
    }
}
