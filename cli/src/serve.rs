//! `peapod serve` and `peapod config show`: the daemon's flags laid over its TOML file. The
//! run itself (umask, runtime, logging, signals) is `peapod_daemon::serve::run`, which the
//! fault tests' daemon `peapod-failpoints` runs too.

use peapod_daemon::config::{Config, DEFAULT_CONFIG_PATH};
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
pub struct ServeArgs {
    /// Configuration file (TOML).
    #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    /// Persistent state directory.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Runtime state directory (sockets, netns pins, bundles).
    #[arg(long)]
    state: Option<PathBuf>,
    /// The CRI socket.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// CNI configuration directory.
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// CNI plugin directories (repeatable).
    #[arg(long)]
    cni_bin_dir: Vec<PathBuf>,
    /// The OCI runtime CLI.
    #[arg(long)]
    runtime: Option<String>,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long)]
    log_level: Option<String>,
}

impl ServeArgs {
    pub fn config(&self) -> anyhow::Result<Config> {
        let named = self.config.as_os_str() != DEFAULT_CONFIG_PATH;
        let mut cfg = Config::load(&self.config, named)?;
        if let Some(v) = &self.root {
            cfg.root = v.clone();
        }
        if let Some(v) = &self.state {
            cfg.state = v.clone();
        }
        match &self.socket {
            Some(v) => cfg.socket = v.clone(),
            // A --state without --socket keeps the socket inside it, so that two daemons
            // with different state directories never fight over one socket.
            None if self.state.is_some() => cfg.socket = cfg.state.join("peapod.sock"),
            None => {}
        }
        if let Some(v) = &self.cni_conf_dir {
            cfg.cni.conf_dir = v.clone();
        }
        if !self.cni_bin_dir.is_empty() {
            cfg.cni.bin_dirs = self.cni_bin_dir.clone();
        }
        if let Some(v) = &self.runtime {
            cfg.runtime.path = v.clone();
        }
        if let Some(v) = &self.log_level {
            cfg.log_level = v.clone();
        }
        cfg.validate()?;
        Ok(cfg)
    }
}
