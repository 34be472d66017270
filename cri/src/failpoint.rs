//! Named crash points in the lifecycle, for tests that kill the daemon at each step.
//!
//! `PEAPOD_FAILPOINTS="name=action;name=action"` arms them, where an action is `exit` (the
//! process ends at once, as under `kill -9`: no destructors, no cleanup), `sleep(ms)` (the step
//! waits, so that a client's deadline expires in the middle of a call) or `off`. They exist
//! only in builds with the `failpoints` feature *and* debug assertions: the e2e crate turns the
//! feature on for the workspace's debug build it tests; a release build never has them, and
//! without them [`hit`] is an empty inline function.
//!
//! The points (each "after" the side effect it names has happened):
//! `sandbox.run.after-record`, `sandbox.run.after-netns`, `sandbox.run.after-cni-add`,
//! `sandbox.run.after-shim-start`, `sandbox.run.after-pause-start`,
//! `container.create.after-record`, `container.create.after-rootfs`,
//! `container.create.after-runtime-create`, `container.start.after-runtime-start`,
//! `container.stop.after-kill`, `container.remove.after-runtime-delete`,
//! `sandbox.stop.after-cni-del`, `sandbox.remove.after-cni-del`,
//! `sandbox.remove.after-shim-shutdown`.

/// Passes the crash point `name`: exits or sleeps if the environment arms it.
#[cfg(all(feature = "failpoints", debug_assertions))]
pub async fn hit(name: &str) {
    match armed().get(name) {
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

/// Passes the crash point `name` (failpoints are not built in: nothing happens).
#[cfg(not(all(feature = "failpoints", debug_assertions)))]
#[inline(always)]
pub async fn hit(_name: &str) {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(all(feature = "failpoints", debug_assertions)), allow(dead_code))]
enum Action {
    Exit,
    Sleep(u64),
}

#[cfg(all(feature = "failpoints", debug_assertions))]
fn armed() -> &'static std::collections::HashMap<String, Action> {
    static ARMED: std::sync::OnceLock<std::collections::HashMap<String, Action>> =
        std::sync::OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("PEAPOD_FAILPOINTS").unwrap_or_default();
        let armed = parse(&spec);
        if !armed.is_empty() {
            tracing::warn!(?armed, "failpoints armed");
        }
        armed
    })
}

/// `name=exit;name=sleep(ms)`; malformed entries are ignored (with a warning).
#[cfg_attr(not(all(feature = "failpoints", debug_assertions)), allow(dead_code))]
fn parse(spec: &str) -> std::collections::HashMap<String, Action> {
    let mut out = std::collections::HashMap::new();
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
}
