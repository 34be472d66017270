//! The helpers' command line, `peapod-shim nsexec`, in one place: the shim builds it
//! ([`Helper::command`]) and the helper parses it ([`main`]). The shim's program is the
//! helper too, so the native paths need no second binary beside it.
//!
//! ```text
//! peapod-shim nsexec --pause --bundle DIR --pid-file FILE [--cgroup-driver systemd]
//! peapod-shim nsexec --create --bundle DIR --pid-file FILE [--cgroup-driver systemd]
//!     (fd 3: start pipe, fd 4: stderr)
//! peapod-shim nsexec --resident --bundle DIR --init-pid PID  (stdin: the shim's socket)
//! ```
//!
//! `--cgroup-driver systemd`: the spec's `cgroupsPath` is `slice:prefix:name`, a scope for
//! systemd to make (the shim's own driver, as runc gets `--systemd-cgroup`). A resident
//! helper joins the cgroup its container's init is in, whatever made it.
//!
//! - `--pause` starts a pod's pause ([`crate::pause`]) and `--create` creates an app container
//!   ([`crate::create`]); each writes the process's pid and leaves ([`crate::started`]);
//! - `--resident` joins a running container once and forks every exec the shim sends it over
//!   a socket ([`crate::resident`], [`crate::wire`]).
//!
//! A failure is told as runc's would be (its wording, in an error), so the shim handles both
//! alike; what a helper does not do is refused before anything starts, by the same checks the
//! shim made when it chose the helper (`pause::unsupported`, `create::unsupported`,
//! `resident::unsupported`).

use crate::cgroups::Driver;
use crate::program::Program;
use std::path::PathBuf;
use std::process::Command;

/// One run of a helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Helper {
    Pause {
        bundle: PathBuf,
        pid_file: PathBuf,
        driver: Driver,
    },
    Create {
        bundle: PathBuf,
        pid_file: PathBuf,
        driver: Driver,
    },
    Resident {
        bundle: PathBuf,
        init_pid: i32,
    },
}

impl Helper {
    /// `program` (the shim's own, `peapod-shim`) run as this helper; its stdio and descriptors
    /// are the caller's to give.
    pub fn command(&self, program: &Program) -> Command {
        let mut cmd = program.command();
        cmd.arg("nsexec");
        match self {
            Helper::Pause {
                bundle,
                pid_file,
                driver,
            }
            | Helper::Create {
                bundle,
                pid_file,
                driver,
            } => {
                let flag = match self {
                    Helper::Pause { .. } => "--pause",
                    _ => "--create",
                };
                cmd.args([flag, "--bundle"])
                    .arg(bundle)
                    .arg("--pid-file")
                    .arg(pid_file);
                if *driver == Driver::Systemd {
                    cmd.args(["--cgroup-driver", "systemd"]);
                }
            }
            Helper::Resident { bundle, init_pid } => {
                cmd.args(["--resident", "--bundle"])
                    .arg(bundle)
                    .args(["--init-pid", &init_pid.to_string()]);
            }
        }
        cmd
    }

    /// Parses the arguments after `nsexec`; `None` when they are not one helper's.
    pub fn parse(args: impl Iterator<Item = String>) -> Option<Helper> {
        let (mut bundle, mut init_pid, mut pid_file) = (None, None, None);
        let mut driver = None;
        let mut which = None;
        let mut args = args;
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--resident" | "--pause" | "--create" if which.is_none() => {
                    which = Some(flag);
                    continue;
                }
                "--resident" | "--pause" | "--create" => return None,
                _ => {}
            }
            let value = args.next()?;
            match flag.as_str() {
                "--bundle" => bundle = Some(PathBuf::from(value)),
                "--init-pid" => init_pid = Some(value.parse::<i32>().ok()?),
                "--pid-file" => pid_file = Some(PathBuf::from(value)),
                "--cgroup-driver" => {
                    driver = Some(match value.as_str() {
                        "systemd" => Driver::Systemd,
                        "cgroupfs" => Driver::Cgroupfs,
                        _ => return None,
                    })
                }
                _ => return None,
            }
        }
        match (which?.as_str(), bundle?, init_pid, pid_file) {
            ("--resident", bundle, Some(init_pid), None) if driver.is_none() => {
                Some(Helper::Resident { bundle, init_pid })
            }
            ("--pause", bundle, None, Some(pid_file)) => Some(Helper::Pause {
                bundle,
                pid_file,
                driver: driver.unwrap_or_default(),
            }),
            ("--create", bundle, None, Some(pid_file)) => Some(Helper::Create {
                bundle,
                pid_file,
                driver: driver.unwrap_or_default(),
            }),
            _ => None,
        }
    }
}

/// The helper's entry point (`peapod-shim nsexec ARGS`); returns its exit status.
pub fn main(args: impl Iterator<Item = String>) -> i32 {
    match Helper::parse(args) {
        Some(Helper::Resident { bundle, init_pid }) => crate::resident::main(&bundle, init_pid),
        Some(Helper::Pause {
            bundle,
            pid_file,
            driver,
        }) => crate::pause::main(&bundle, &pid_file, driver),
        Some(Helper::Create {
            bundle,
            pid_file,
            driver,
        }) => crate::create::main(&bundle, &pid_file, driver),
        None => usage(),
    }
}

fn usage() -> i32 {
    eprintln!("usage: peapod-shim nsexec --resident --bundle DIR --init-pid PID (stdin: the shim's socket)\n       peapod-shim nsexec --pause --bundle DIR --pid-file FILE [--cgroup-driver systemd]\n       peapod-shim nsexec --create --bundle DIR --pid-file FILE [--cgroup-driver systemd] (fd 3: start pipe, fd 4: stderr)");
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_shim_builds_the_helper_parses() {
        let helpers = [
            Helper::Pause {
                bundle: "/b".into(),
                pid_file: "/b/init.pid".into(),
                driver: Driver::Cgroupfs,
            },
            Helper::Create {
                bundle: "/b".into(),
                pid_file: "/b/init.pid".into(),
                driver: Driver::Systemd,
            },
            Helper::Resident {
                bundle: "/b".into(),
                init_pid: 42,
            },
        ];
        for h in helpers {
            let cmd = h.command(&Program::plain("/usr/bin/peapod-shim".into()));
            let args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            assert_eq!(args[0], "nsexec");
            assert_eq!(Helper::parse(args.into_iter().skip(1)), Some(h));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let parse = |a: &[&str]| Helper::parse(a.iter().map(|s| s.to_string()));
        assert_eq!(parse(&["--pause", "--bundle", "/b"]), None);
        assert_eq!(
            parse(&["--pause", "--create", "--bundle", "/b", "--pid-file", "/p"]),
            None
        );
        assert_eq!(
            parse(&["--resident", "--bundle", "/b", "--init-pid", "x"]),
            None
        );
        assert_eq!(parse(&["--resident", "--bundle", "/b", "--init-pid"]), None);
        assert_eq!(
            parse(&[
                "--resident",
                "--bundle",
                "/b",
                "--init-pid",
                "1",
                "--cgroup-driver",
                "systemd"
            ]),
            None
        );
        assert_eq!(
            parse(&[
                "--pause",
                "--bundle",
                "/b",
                "--pid-file",
                "/p",
                "--cgroup-driver",
                "x"
            ]),
            None
        );
        assert_eq!(
            parse(&["--pause", "--bundle", "/b", "--pid-file", "/p", "--x", "y"]),
            None
        );
    }
}
