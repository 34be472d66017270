//! AppArmor at start: whether containers' profiles apply on this host, decided once. Where
//! the kernel enforces AppArmor (and `[apparmor] enabled`), peapod's default profile
//! ([`peapod_spec::DEFAULT_APPARMOR_PROFILE`], what RuntimeDefault means) is made sure to be
//! loaded before the daemon serves, as containerd and CRI-O load theirs: a daemon that cannot
//! load it refuses to start with the reason, since otherwise every ordinary container would
//! fail in the runtime's init ("unable to apply apparmor profile").
//!
//! The profile is loaded again only when the kernel does not have it or its text changed
//! (an upgrade): the text last loaded is kept in `<state>/apparmor/<name>`; the state
//! directory, like the kernel's policy, does not survive a reboot.

use crate::config::AppArmorConfig;
use peapod_host::apparmor;
use peapod_spec::DEFAULT_APPARMOR_PROFILE;
use std::path::Path;

/// Why the default profile could not be made ready.
#[derive(Debug, thiserror::Error)]
#[error("AppArmor is enabled in this kernel but peapod's default profile {profile:?} could not be loaded: {reason} (install apparmor_parser, Debian's package apparmor, or set [apparmor] enabled = false)")]
pub struct LoadError {
    pub profile: &'static str,
    pub reason: String,
}

/// Whether AppArmor profiles apply to containers here: false where the kernel has no AppArmor
/// or the configuration turns it off; true once the default profile is loaded.
pub fn prepare(cfg: &AppArmorConfig, state: &Path) -> Result<bool, LoadError> {
    if !cfg.enabled {
        if apparmor::kernel_enabled() {
            tracing::info!("AppArmor: off by configuration ([apparmor] enabled = false)");
        }
        return Ok(false);
    }
    if !apparmor::kernel_enabled() {
        tracing::debug!("AppArmor: not enabled in this kernel");
        return Ok(false);
    }
    let name = DEFAULT_APPARMOR_PROFILE;
    let fail = |reason: String| LoadError {
        profile: name,
        reason,
    };
    let text = apparmor::default_profile(name, Path::new(apparmor::POLICY_DIR));
    let record = state.join("apparmor").join(name);
    let loaded = apparmor::is_loaded(name)
        .map_err(|e| fail(format!("read {}: {e}", apparmor::PROFILES_FILE)))?;
    if loaded && std::fs::read_to_string(&record).is_ok_and(|t| t == text) {
        tracing::info!(profile = name, "AppArmor: default profile already loaded");
        return Ok(true);
    }
    let parser = apparmor::find_parser()
        .ok_or_else(|| fail("apparmor_parser not found on PATH, /usr/sbin or /sbin".into()))?;
    let started = std::time::Instant::now();
    apparmor::load(&parser, &text).map_err(|e| fail(e.to_string()))?;
    // Only a record: a failure to keep it costs a load at the next start, nothing more.
    if let Err(e) = record
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            peapod_host::fs::write_atomic(
                &record,
                text.as_bytes(),
                peapod_host::fs::Durability::AtomicOnly,
            )
        })
    {
        tracing::warn!(path = %record.display(), error = %e, "AppArmor: cannot record the loaded profile");
    }
    tracing::info!(
        profile = name,
        ms = started.elapsed().as_millis() as u64,
        "AppArmor: default profile loaded"
    );
    Ok(true)
}
