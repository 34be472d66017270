//! Named crash points in the lifecycle, for tests that kill the daemon at each step.
//!
//! They are armed only by a program that calls [`install`] before serving: the test daemon
//! `peapod-failpoints` (tests/src/bin), which reads `PEAPOD_FAILPOINTS="name=action;..."`.
//! The `peapod` binary users run never calls it, so no environment variable can make it exit
//! mid-call: [`hit`] there is one load of an empty cell. An action is `exit` (the process ends
//! at once, as under `kill -9`: no destructors, no cleanup), `sleep(ms)` (the step waits, so
//! that a client's deadline expires in the middle of a call) or `off`.
//!
//! The points (each "after" the side effect it names has happened):
//! `sandbox.run.after-record`, `sandbox.run.after-netns`, `sandbox.run.after-cni-add`,
//! `sandbox.run.after-shim-start`, `sandbox.run.after-pause-start`,
//! `container.create.after-record`, `container.create.after-rootfs`,
//! `container.create.after-runtime-create`, `container.start.after-runtime-start`,
//! `container.stop.after-kill`, `container.remove.after-runtime-delete`,
//! `sandbox.stop.after-cni-del`, `sandbox.remove.after-cni-del`,
//! `sandbox.remove.after-shim-shutdown`.

use std::collections::HashMap;
use std::sync::OnceLock;

/// What an armed point does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Exit,
    Sleep(u64),
}

static ARMED: OnceLock<HashMap<String, Action>> = OnceLock::new();

/// Arms `points` for the life of the process (only the first call counts). Called by the test
/// daemon only.
pub fn install(points: HashMap<String, Action>) {
    if !points.is_empty() {
        tracing::warn!(?points, "failpoints armed");
    }
    let _ = ARMED.set(points);
}

/// Passes the crash point `name`: exits or sleeps if [`install`] armed it.
pub async fn hit(name: &str) {
    let Some(armed) = ARMED.get() else {
        return;
    };
    match armed.get(name) {
        Some(Action::Exit) => {
            tracing::warn!(failpoint = name, "failpoint: exiting at once");
            // SAFETY: _exit ends the process; nothing after it runs, which is the point.
            unsafe { libc::_exit(137) }
        }
        Some(Action::Sleep(ms)) => {
            tracing::warn!(failpoint = name, ms, "failpoint: sleeping");
            tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
        }
        None => {}
    }
}

/// `name=exit;name=sleep(ms)`; malformed entries are ignored (with a warning).
pub fn parse(spec: &str) -> HashMap<String, Action> {
    let mut out = HashMap::new();
    for item in spec.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((name, action)) = item.split_once('=') else {
            tracing::warn!(item, "failpoint without an action");
            continue;
        };
        let action = match action.trim() {
            "exit" => Some(Action::Exit),
            "off" => None,
            a => a
                .strip_prefix("sleep(")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|ms| ms.parse().ok())
                .map(Action::Sleep),
        };
        match action {
            Some(a) => {
                out.insert(name.trim().to_string(), a);
            }
            None => tracing::warn!(item, "failpoint action not understood (exit, sleep(ms))"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exit_and_sleep_and_skips_the_rest() {
        let p = parse("a.b=exit; c=sleep(250);d=bogus;e;f=off");
        assert_eq!(p.get("a.b"), Some(&Action::Exit));
        assert_eq!(p.get("c"), Some(&Action::Sleep(250)));
        assert_eq!(p.len(), 2, "{p:?}");
    }

    #[tokio::test]
    async fn nothing_happens_without_install() {
        // This test binary never installs: an armed-looking environment changes nothing.
        std::env::set_var("PEAPOD_FAILPOINTS", "x=exit");
        hit("x").await;
    }
}
