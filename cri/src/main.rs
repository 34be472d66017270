//! The `peapod` command: the daemon (`serve`) and its command-line tools.

mod cli;

use anyhow::Context;
use clap::{Parser, Subcommand};
use peapod::config::{Config, DEFAULT_CONFIG_PATH, DEFAULT_TOML};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "peapod", version, about = "A Kubernetes CRI container runtime")]
struct Cli {
    /// The daemon's CRI socket, for the client verbs (default $PEAPOD_SOCKET or /run/peapod/peapod.sock).
    #[arg(long, global = true)]
    endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: serve CRI v1 on a unix socket.
    Serve(ServeArgs),
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Run a pod sandbox from a PodSandboxConfig JSON file (as `crictl runp`).
    Runp {
        file: PathBuf,
        #[arg(long, default_value = "")]
        runtime_handler: String,
    },
    /// List pod sandboxes.
    Pods,
    /// Show a pod sandbox's status and details.
    Inspectp { id: String },
    /// Stop a pod sandbox.
    Stopp { id: String },
    /// Remove a pod sandbox.
    Rmp { id: String },
    /// Images: pull, ls, rm, inspect, import (through the daemon's CRI ImageService).
    Image {
        #[command(subcommand)]
        command: cli::image::ImageCommand,
    },
    /// Create or update pods from Pod manifests (YAML or JSON), as `kubectl apply -f`.
    Apply(cli::kube::apply::ApplyArgs),
    /// List pods or show some, as `kubectl get pods`.
    Get(cli::kube::get::GetArgs),
    /// Show a pod in detail with its events, as `kubectl describe pod`.
    Describe(cli::kube::describe_verb::DescribeArgs),
    /// Wait for a pod condition or for its deletion, as `kubectl wait`.
    Wait(cli::kube::wait::WaitArgs),
    /// Print a container's log, as `kubectl logs`.
    Logs(cli::kube::logs::LogsArgs),
    /// Run a command in a container of a pod, as `kubectl exec`.
    Exec(cli::kube::exec::ExecArgs),
    /// Delete pods (gracefully), as `kubectl delete`.
    Delete(cli::kube::delete::DeleteArgs),
}

impl Command {
    /// The kubectl-shaped verbs, which print errors kubectl's way and set the exit status.
    fn into_kube(self) -> Result<cli::kube::Verb, Box<Command>> {
        use cli::kube::Verb;
        Ok(match self {
            Command::Apply(a) => Verb::Apply(a),
            Command::Get(a) => Verb::Get(a),
            Command::Describe(a) => Verb::Describe(a),
            Command::Wait(a) => Verb::Wait(a),
            Command::Logs(a) => Verb::Logs(a),
            Command::Exec(a) => Verb::Exec(a),
            Command::Delete(a) => Verb::Delete(a),
            other => return Err(Box::new(other)),
        })
    }
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the full default configuration, with a comment per key.
    Default,
    /// Print the configuration the daemon would use (file and flags merged).
    Show(ServeArgs),
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
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
    fn config(&self) -> anyhow::Result<Config> {
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

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file (nohup, the tests, a service manager) stays
    // plain text that grep and parsers read.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    init_logging(&cfg.log_level);
    let socket = cfg.socket.clone();
    tracing::info!(version = env!("CARGO_PKG_VERSION"), root = %cfg.root.display(), state = %cfg.state.display(), "peapod starting");
    let rt = peapod::daemon::Daemon::new(cfg)
        .await
        .context("initialise the runtime")?;
    let shutdown = async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Pods keep running: their shims are not the daemon's children.
        tracing::info!("signal received; stopping the CRI server, leaving pods running");
    };
    let served = peapod::server::serve(rt.clone(), &socket, shutdown).await;
    rt.nri.shutdown().await;
    served
}

async fn run_client(command: Command, endpoint: Option<&str>) -> anyhow::Result<()> {
    let mut c = cli::connect(endpoint).await?;
    match command {
        Command::Runp {
            file,
            runtime_handler,
        } => cli::pods::runp(&mut c, &file, &runtime_handler).await,
        Command::Pods => cli::pods::pods(&mut c).await,
        Command::Inspectp { id } => cli::pods::inspectp(&mut c, &id).await,
        Command::Stopp { id } => cli::pods::stopp(&mut c, &id).await,
        Command::Rmp { id } => cli::pods::rmp(&mut c, &id).await,
        Command::Image { command } => cli::image::run(&mut c, command).await,
        _ => unreachable!("handled in main"),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            print!("{DEFAULT_TOML}");
            Ok(())
        }
        Command::Config {
            command: ConfigCommand::Show(args),
        } => {
            let cfg = args.config()?;
            print!(
                "{}",
                toml::to_string_pretty(&cfg).context("encode configuration")?
            );
            Ok(())
        }
        Command::Serve(args) => {
            // Before any file is made: everything the daemon creates (records, bundles, layers,
            // upper directories, sockets) is the owner's alone unless it sets a mode itself —
            // the few files containers must read (hosts, resolv.conf, the pause rootfs, layer
            // roots) do.
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("build the async runtime")?;
            runtime.block_on(serve(args))
        }
        command => {
            let client = match command.into_kube() {
                Ok(verb) => {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .context("build the async runtime")?;
                    let endpoint = cli::endpoint(cli.endpoint.as_deref());
                    let code = runtime.block_on(cli::kube::run(verb, &endpoint));
                    // Not a drop: it would wait for tokio's blocking stdin reader (exec -i),
                    // which only returns on input. exit() still flushes stdout.
                    runtime.shutdown_background();
                    std::process::exit(code);
                }
                Err(other) => *other,
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("build the async runtime")?;
            runtime.block_on(run_client(client, cli.endpoint.as_deref()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn kube(args: &[&str]) -> cli::kube::Verb {
        let parsed = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match parsed.command.into_kube() {
            Ok(v) => v,
            Err(_) => panic!("{args:?} is not a kubectl-shaped verb"),
        }
    }

    #[test]
    fn kubectl_forms_parse() {
        use cli::kube::Verb;
        match kube(&[
            "peapod",
            "delete",
            "pod",
            "a",
            "b",
            "--wait=false",
            "--grace-period",
            "0",
        ]) {
            Verb::Delete(d) => {
                assert_eq!(d.names, ["a", "b"]);
                assert!(!d.wait);
                assert_eq!(d.grace_period, 0);
            }
            _ => panic!("not delete"),
        }
        match kube(&["peapod", "delete", "-f", "x.yaml"]) {
            Verb::Delete(d) => assert!(d.wait && d.resource.is_none() && d.files == ["x.yaml"]),
            _ => panic!("not delete"),
        }
        match kube(&[
            "peapod", "exec", "-it", "war", "-c", "web", "--", "sh", "-c", "ls -l",
        ]) {
            Verb::Exec(e) => {
                assert!(e.stdin && e.tty);
                assert_eq!(e.container.as_deref(), Some("web"));
                assert_eq!(e.command, ["sh", "-c", "ls -l"]);
            }
            _ => panic!("not exec"),
        }
        match kube(&["peapod", "get", "po", "war", "-o", "wide", "-n", "prod"]) {
            Verb::Get(g) => {
                assert_eq!(
                    (g.resource.as_str(), g.ns.namespace.as_str()),
                    ("po", "prod")
                );
                assert_eq!(g.output.as_deref(), Some("wide"));
            }
            _ => panic!("not get"),
        }
        match kube(&[
            "peapod",
            "wait",
            "pod/war",
            "--for=condition=Ready=false",
            "--timeout",
            "1m",
        ]) {
            Verb::Wait(w) => assert_eq!(
                (w.for_.as_str(), w.timeout.as_str()),
                ("condition=Ready=false", "1m")
            ),
            _ => panic!("not wait"),
        }
        match kube(&[
            "peapod", "logs", "war", "-c", "web", "-p", "--tail", "5", "-f",
        ]) {
            Verb::Logs(l) => assert!(l.previous && l.follow && l.tail == 5),
            _ => panic!("not logs"),
        }
        match kube(&["peapod", "apply", "-f", "a.yaml", "-f", "-"]) {
            Verb::Apply(a) => assert_eq!(a.files, ["a.yaml", "-"]),
            _ => panic!("not apply"),
        }
    }
}
