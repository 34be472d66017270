//! The daemon with its crash points armed, for the fault tests only: `peapod-failpoints serve
//! --config FILE` is `peapod serve --config FILE` after reading `PEAPOD_FAILPOINTS`
//! (`name=exit;name=sleep(ms)`, see cri/src/failpoint.rs). The `peapod` binary users run
//! never reads that variable.

use anyhow::Context;
use peapod_daemon::config::Config;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match args.as_slice() {
        [serve, flag, path] if serve == "serve" && flag == "--config" => path.clone(),
        _ => anyhow::bail!("usage: peapod-failpoints serve --config FILE"),
    };
    let cfg = Config::load(config.as_ref(), true).context("load the configuration")?;
    cfg.validate()?;
    let spec = std::env::var("PEAPOD_FAILPOINTS").unwrap_or_default();
    peapod_daemon::failpoint::install(peapod_daemon::failpoint::parse(&spec));
    peapod_daemon::serve::run(cfg)
}
