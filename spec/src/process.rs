//! The container's command line, environment and stop signal.

use crate::error::{Result, SpecError};
use crate::ImageConfig;
use oci_spec::runtime::{Process, Spec};
use peapod_proto::v1::ContainerConfig;

/// The `PATH` every container starts with (the image's `PATH`, if any, replaces it in place).
pub const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The process arguments, merged with the image the way containerd (after Docker) does:
///
/// | config.command | config.args | result                                  |
/// |----------------|-------------|-----------------------------------------|
/// | empty          | empty       | image Entrypoint + image Cmd            |
/// | empty          | set         | image Entrypoint + args                 |
/// | set            | empty       | command (the image's Cmd is ignored)    |
/// | set            | set         | command + args                          |
///
/// An image Entrypoint of exactly `[""]` counts as none. Nothing at all to run is an
/// invalid argument.
pub fn process_args(config: &ContainerConfig, image: &ImageConfig) -> Result<Vec<String>> {
    let mut command = config.command.clone();
    let mut args = config.args.clone();
    if command.is_empty() {
        if args.is_empty() {
            args = image.cmd.clone();
        }
        if !(image.entrypoint.len() == 1 && image.entrypoint[0].is_empty()) {
            command = image.entrypoint.clone();
        }
    }
    if command.is_empty() && args.is_empty() {
        return Err(SpecError::invalid(
            "config.command and config.args are empty and the image has no Entrypoint or Cmd: \
             no command specified",
        ));
    }
    command.extend(args);
    Ok(command)
}

/// Applies `overrides` to `env` as containerd's `WithEnv` does: `KEY=value` replaces an
/// existing `KEY` in place or is appended; a bare `KEY` (no `=`) removes it.
pub(crate) fn merge_env(env: &mut Vec<String>, overrides: &[String]) {
    fn key(e: &str) -> &str {
        e.split_once('=').map(|(k, _)| k).unwrap_or(e)
    }
    for o in overrides {
        match o.split_once('=') {
            Some((k, _)) => match env.iter_mut().find(|e| key(e) == k) {
                Some(slot) => *slot = o.clone(),
                None => env.push(o.clone()),
            },
            None => env.retain(|e| key(e) != o.as_str()),
        }
    }
}

/// The process environment: the default `PATH`, `TERM=xterm` with a tty, `HOSTNAME` (the
/// pod's hostname, when known), then the image's `Env`, then the config's `envs`, each
/// layer replacing same-named variables of the ones before.
pub(crate) fn process_env(
    config: &ContainerConfig,
    image: &ImageConfig,
    hostname: &str,
) -> Vec<String> {
    let mut env = vec![DEFAULT_PATH_ENV.to_string()];
    if config.tty {
        env.push("TERM=xterm".to_string());
    }
    if !hostname.is_empty() {
        merge_env(&mut env, &[format!("HOSTNAME={hostname}")]);
    }
    merge_env(&mut env, &image.env);
    let from_config: Vec<String> = config
        .envs
        .iter()
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect();
    merge_env(&mut env, &from_config);
    env
}

/// The working directory: the config's, else the image's, else `/`.
pub(crate) fn process_cwd(config: &ContainerConfig, image: &ImageConfig) -> String {
    if !config.working_dir.is_empty() {
        config.working_dir.clone()
    } else if !image.working_dir.is_empty() {
        image.working_dir.clone()
    } else {
        "/".to_string()
    }
}

/// Signal numbers by name (without `SIG`), as Linux numbers them on x86 and arm.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];
const SIGRTMIN: i32 = 34;
const SIGRTMAX: i32 = 64;

/// Parses a signal as images write `StopSignal`: `SIGTERM`, `TERM`, `term`, `15`,
/// `SIGRTMIN+3`, `RTMAX-1`.
pub fn parse_signal(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (1..=SIGRTMAX).contains(&n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(&(_, n)) = SIGNALS.iter().find(|(n, _)| *n == name) {
        return Some(n);
    }
    let rt = |base: i32, rest: &str| -> Option<i32> {
        let n = match rest {
            "" => base,
            // Checked: the offset comes from an image config, and `SIGRTMIN+2147483647`
            // must be an unknown signal, not an overflow.
            r if r.starts_with('+') => base.checked_add(r[1..].parse::<i32>().ok()?)?,
            r if r.starts_with('-') => base.checked_sub(r[1..].parse::<i32>().ok()?)?,
            _ => return None,
        };
        (SIGRTMIN..=SIGRTMAX).contains(&n).then_some(n)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt(SIGRTMIN, rest);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt(SIGRTMAX, rest);
    }
    None
}

/// The signal StopContainer sends first: the image's `StopSignal`, SIGTERM when it has none.
pub fn stop_signal(image: &ImageConfig) -> Result<i32> {
    if image.stop_signal.trim().is_empty() {
        return Ok(15);
    }
    parse_signal(&image.stop_signal).ok_or_else(|| {
        SpecError::invalid(format!(
            "image config StopSignal: unknown signal {:?}",
            image.stop_signal
        ))
    })
}

/// The process of an exec (ExecSync, Exec) in a container created from `base`: the
/// container's own process (user, groups, env, cwd, capabilities, no_new_privileges,
/// apparmor/selinux labels) with `cmd` as its arguments and a terminal when `tty` (which
/// also sets `TERM=xterm`, as containerd does).
pub fn exec_process(base: &Spec, cmd: &[String], tty: bool) -> Result<Process> {
    if cmd.is_empty() || cmd[0].is_empty() {
        return Err(SpecError::invalid("cmd: no command to execute"));
    }
    let mut process = base
        .process()
        .clone()
        .ok_or_else(|| SpecError::internal("the container's runtime spec", "it has no process"))?;
    process.set_args(Some(cmd.to_vec()));
    process.set_command_line(None);
    process.set_terminal(Some(tty));
    process.set_console_size(None);
    if tty {
        let mut env = process.env().clone().unwrap_or_default();
        merge_env(&mut env, &["TERM=xterm".to_string()]);
        process.set_env(Some(env));
    }
    Ok(process)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::KeyValue;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn image(entrypoint: &[&str], cmd: &[&str]) -> ImageConfig {
        ImageConfig {
            entrypoint: s(entrypoint),
            cmd: s(cmd),
            ..Default::default()
        }
    }

    fn config(command: &[&str], args: &[&str]) -> ContainerConfig {
        ContainerConfig {
            command: s(command),
            args: s(args),
            ..Default::default()
        }
    }

    /// name, command, args, image entrypoint, image cmd, expected args
    type ArgsCase<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
    );

    #[test]
    fn args_table() {
        let cases: &[ArgsCase] = &[
            // name, command, args, entrypoint, cmd, want
            (
                "image only",
                &[],
                &[],
                &["/ep", "-x"],
                &["c1", "c2"],
                &["/ep", "-x", "c1", "c2"],
            ),
            (
                "image cmd only",
                &[],
                &[],
                &[],
                &["/bin/sh", "-c", "true"],
                &["/bin/sh", "-c", "true"],
            ),
            ("image entrypoint only", &[], &[], &["/ep"], &[], &["/ep"]),
            (
                "args replace cmd",
                &[],
                &["a1"],
                &["/ep"],
                &["c1"],
                &["/ep", "a1"],
            ),
            (
                "args without entrypoint",
                &[],
                &["/bin/true"],
                &[],
                &["c1"],
                &["/bin/true"],
            ),
            (
                "command replaces entrypoint and drops cmd",
                &["/cmd"],
                &[],
                &["/ep"],
                &["c1"],
                &["/cmd"],
            ),
            (
                "command and args",
                &["/cmd"],
                &["a1", "a2"],
                &["/ep"],
                &["c1"],
                &["/cmd", "a1", "a2"],
            ),
            (
                "empty-string entrypoint is none",
                &[],
                &[],
                &[""],
                &["/bin/sh"],
                &["/bin/sh"],
            ),
            (
                "empty-string entrypoint with args",
                &[],
                &["x"],
                &[""],
                &["c"],
                &["x"],
            ),
            (
                "command with no image",
                &["/bin/true"],
                &[],
                &[],
                &[],
                &["/bin/true"],
            ),
        ];
        for (name, command, args, ep, cmd, want) in cases {
            let got = process_args(&config(command, args), &image(ep, cmd))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, s(want), "{name}");
        }
    }

    #[test]
    fn nothing_to_run_is_invalid() {
        let e = process_args(&config(&[], &[]), &image(&[], &[])).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("config.command")));
        assert!(process_args(&config(&[], &[]), &image(&[""], &[])).is_err());
    }

    #[test]
    fn env_layers() {
        let img = ImageConfig {
            env: s(&["PATH=/image/bin", "LANG=C", "HOSTNAME=image", "GONE"]),
            ..Default::default()
        };
        let mut cfg = ContainerConfig {
            envs: vec![
                KeyValue {
                    key: "LANG".into(),
                    value: "en_US.UTF-8".into(),
                },
                KeyValue {
                    key: "EXTRA".into(),
                    value: "a=b".into(),
                },
                KeyValue {
                    key: "EMPTY".into(),
                    value: "".into(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            process_env(&cfg, &img, "pod-a"),
            s(&[
                "PATH=/image/bin",
                "HOSTNAME=image",
                "LANG=en_US.UTF-8",
                "EXTRA=a=b",
                "EMPTY="
            ])
        );
        cfg.tty = true;
        let env = process_env(&cfg, &ImageConfig::default(), "pod-a");
        assert_eq!(
            env,
            s(&[
                DEFAULT_PATH_ENV,
                "TERM=xterm",
                "HOSTNAME=pod-a",
                "LANG=en_US.UTF-8",
                "EXTRA=a=b",
                "EMPTY="
            ])
        );
        let env = process_env(&ContainerConfig::default(), &ImageConfig::default(), "");
        assert_eq!(env, s(&[DEFAULT_PATH_ENV]));
    }

    #[test]
    fn bare_keys_unset() {
        let mut env = s(&["A=1", "B=2", "C=3"]);
        merge_env(&mut env, &s(&["B", "D=4", "A=9", "Z"]));
        assert_eq!(env, s(&["A=9", "C=3", "D=4"]));
    }

    #[test]
    fn working_dir() {
        let img = ImageConfig {
            working_dir: "/img".into(),
            ..Default::default()
        };
        let mut cfg = ContainerConfig::default();
        assert_eq!(process_cwd(&cfg, &ImageConfig::default()), "/");
        assert_eq!(process_cwd(&cfg, &img), "/img");
        cfg.working_dir = "/cfg".into();
        assert_eq!(process_cwd(&cfg, &img), "/cfg");
    }

    #[test]
    fn signals() {
        for (input, want) in [
            ("", Some(15)),
            ("SIGTERM", Some(15)),
            ("TERM", Some(15)),
            ("sigquit", Some(3)),
            ("15", Some(15)),
            ("9", Some(9)),
            ("SIGUSR1", Some(10)),
            ("SIGWINCH", Some(28)),
            ("SIGRTMIN+3", Some(37)),
            ("RTMAX-1", Some(63)),
            ("SIGRTMIN", Some(34)),
            ("SIGNOPE", None),
            ("0", None),
            ("65", None),
            ("SIGRTMAX+1", None),
            // Hostile offsets from an image config: no overflow (a panic in debug builds, a
            // wrapped number in release), just an unknown signal.
            ("SIGRTMIN+2147483647", None),
            ("SIGRTMAX-2147483648", None),
            ("RTMAX--2147483648", None),
            ("SIGRTMIN+-2147483648", None),
            ("SIGRTMIN+99999999999", None),
        ] {
            let img = ImageConfig {
                stop_signal: input.into(),
                ..Default::default()
            };
            assert_eq!(stop_signal(&img).ok(), want, "{input:?}");
        }
        let img = ImageConfig {
            stop_signal: "SIGRTMIN+2147483647".into(),
            ..Default::default()
        };
        let err = stop_signal(&img).unwrap_err().to_string();
        assert!(err.contains("StopSignal"), "{err}");
    }
}
