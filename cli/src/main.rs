//! The `peapod` command, one binary: `peapod serve` runs the daemon (`peapod-daemon`); every
//! other verb is a client of its socket and nothing more.
//!
//! Modules, one line each:
//! - `serve`: `serve` and `config` — the daemon's flags over its TOML file (the run itself is
//!   `peapod_daemon::serve::run`);
//! - `connect`: which socket the client verbs use, and connecting to it;
//! - `sandbox`: the crictl-shaped pod sandbox verbs (`runp`, `pods`, `inspectp`, `stopp`, `rmp`);
//! - `image`: the image verbs (`image pull|ls|rm|inspect|import`);
//! - `kube/`: the kubectl-shaped verbs over the daemon's Pods service, and their printers.

mod connect;
mod image;
mod kube;
mod sandbox;
mod serve;

use anyhow::Context;
use clap::{Parser, Subcommand};
use peapod_daemon::config::{default_toml, portable_toml};
use serve::ServeArgs;
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
        command: image::ImageCommand,
    },
    /// Create or update pods from Pod manifests (YAML or JSON), as `kubectl apply -f`.
    Apply(kube::apply::ApplyArgs),
    /// List pods or show some, as `kubectl get pods`.
    Get(kube::get::GetArgs),
    /// Show a pod in detail with its events, as `kubectl describe pod`.
    Describe(kube::describe_verb::DescribeArgs),
    /// Wait for a pod condition or for its deletion, as `kubectl wait`.
    Wait(kube::wait::WaitArgs),
    /// Print a container's log, as `kubectl logs`.
    Logs(kube::logs::LogsArgs),
    /// Run a command in a container of a pod, as `kubectl exec`.
    Exec(kube::exec::ExecArgs),
    /// Delete pods (gracefully), as `kubectl delete`.
    Delete(kube::delete::DeleteArgs),
}

impl Command {
    /// The kubectl-shaped verbs, which print errors kubectl's way and set the exit status.
    fn into_kube(self) -> Result<kube::Verb, Box<Command>> {
        use kube::Verb;
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
    Default {
        /// Leave the cgroup driver unset (commented out), so that the daemon picks this
        /// host's where it runs: for a file made here and installed elsewhere (the Debian
        /// package's /etc/peapod/config.toml).
        #[arg(long)]
        portable: bool,
    },
    /// Print the configuration the daemon would use (file and flags merged).
    Show(ServeArgs),
}

async fn run_client(command: Command, endpoint: Option<&str>) -> anyhow::Result<()> {
    let mut c = connect::connect(endpoint).await?;
    match command {
        Command::Runp {
            file,
            runtime_handler,
        } => sandbox::runp(&mut c, &file, &runtime_handler).await,
        Command::Pods => sandbox::pods(&mut c).await,
        Command::Inspectp { id } => sandbox::inspectp(&mut c, &id).await,
        Command::Stopp { id } => sandbox::stopp(&mut c, &id).await,
        Command::Rmp { id } => sandbox::rmp(&mut c, &id).await,
        Command::Image { command } => image::run(&mut c, command).await,
        _ => unreachable!("handled in main"),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Default { portable },
        } => {
            print!(
                "{}",
                if portable {
                    portable_toml()
                } else {
                    default_toml()
                }
            );
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
        Command::Serve(args) => peapod_daemon::serve::run(args.config()?),
        command => {
            let client = match command.into_kube() {
                Ok(verb) => {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .context("build the async runtime")?;
                    let endpoint = connect::endpoint(cli.endpoint.as_deref());
                    let code = runtime.block_on(kube::run(verb, &endpoint));
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

    fn kube(args: &[&str]) -> kube::Verb {
        let parsed = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match parsed.command.into_kube() {
            Ok(v) => v,
            Err(_) => panic!("{args:?} is not a kubectl-shaped verb"),
        }
    }

    #[test]
    fn kubectl_forms_parse() {
        use kube::Verb;
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
