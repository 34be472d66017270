//! The container's command line, environment and stop signal.

use crate::error::{Result, SpecError};
use crate::ImageConfig;
use oci_spec::runtime::{Process, Spec};
use peapod_proto::v1::{ContainerConfig, Signal};

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
///
/// `KeyValue.value` is `bytes` since cri-api 1.33, but the OCI `process.env` is a list of JSON
/// strings, which cannot carry bytes that are not UTF-8: such a value is refused, naming the
/// variable, rather than mangled (the kubelet only sends the strings of the Pod's env).
pub(crate) fn process_env(
    config: &ContainerConfig,
    image: &ImageConfig,
    hostname: &str,
) -> Result<Vec<String>> {
    let mut env = vec![DEFAULT_PATH_ENV.to_string()];
    if config.tty {
        env.push("TERM=xterm".to_string());
    }
    if !hostname.is_empty() {
        merge_env(&mut env, &[format!("HOSTNAME={hostname}")]);
    }
    merge_env(&mut env, &image.env);
    let from_config = config
        .envs
        .iter()
        .enumerate()
        .map(|(i, kv)| match std::str::from_utf8(&kv.value) {
            Ok(value) => Ok(format!("{}={value}", kv.key)),
            Err(e) => Err(SpecError::invalid(format!(
                "config.envs[{i}] ({:?}): the value is not UTF-8 (invalid byte at {})",
                kv.key,
                e.valid_up_to()
            ))),
        })
        .collect::<Result<Vec<String>>>()?;
    merge_env(&mut env, &from_config);
    Ok(env)
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

/// A container's stop signal: the number StopContainer sends first, and the CRI `Signal`
/// ContainerStatus reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal {
    pub number: i32,
    pub cri: Signal,
}

/// The number of a CRI `Signal` (None for `SIGNAL_RUNTIME_DEFAULT`): its name, as
/// `SIGNAL_SIGRTMINPLUS3` or `SIGNAL_SIGRTMAXMINUS1` spell it, read as a signal name.
pub fn signal_number(signal: Signal) -> Option<i32> {
    let name = signal.as_str_name().strip_prefix("SIGNAL_")?;
    parse_signal(&name.replacen("PLUS", "+", 1).replacen("MINUS", "-", 1))
}

/// The CRI `Signal` of a signal number: the first of the enum's names for it (SIGABRT, not
/// SIGIOT; SIGCHLD, not SIGCLD; SIGIO, not SIGPOLL). None for a number it has no name for.
pub fn cri_signal(number: i32) -> Option<Signal> {
    (1..=Signal::Sigrtmax as i32)
        .filter_map(|v| Signal::try_from(v).ok())
        .find(|s| signal_number(*s) == Some(number))
}

/// The CRI `Signal` an image's `StopSignal` names: by its name when the enum has that name
/// (an image's `SIGIOT` stays SIGIOT), else by its number.
fn cri_signal_named(text: &str, number: i32) -> Signal {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let spelled = format!(
        "SIGNAL_SIG{}",
        name.replacen('+', "PLUS", 1).replacen('-', "MINUS", 1)
    );
    Signal::from_str_name(&spelled)
        .filter(|s| signal_number(*s) == Some(number))
        .or_else(|| cri_signal(number))
        .unwrap_or(Signal::RuntimeDefault)
}

/// The signal StopContainer (and so the kubelet's kill and StopPodSandbox) sends first:
/// `config.stop_signal` (the Pod's `lifecycle.stopSignal`, the kubelet's ContainerStopSignals
/// feature), else the image's `StopSignal`, else SIGTERM — the order KEP-4960 sets.
pub fn stop_signal(config: &ContainerConfig, image: &ImageConfig) -> Result<StopSignal> {
    let asked = Signal::try_from(config.stop_signal).map_err(|_| {
        SpecError::invalid(format!(
            "config.stop_signal: unknown signal {}",
            config.stop_signal
        ))
    })?;
    if asked != Signal::RuntimeDefault {
        let number = signal_number(asked).ok_or_else(|| {
            SpecError::invalid(format!(
                "config.stop_signal: {} has no signal number here",
                asked.as_str_name()
            ))
        })?;
        return Ok(StopSignal { number, cri: asked });
    }
    if image.stop_signal.trim().is_empty() {
        return Ok(StopSignal {
            number: 15,
            cri: Signal::Sigterm,
        });
    }
    let number = parse_signal(&image.stop_signal).ok_or_else(|| {
        SpecError::invalid(format!(
            "image config StopSignal: unknown signal {:?}",
            image.stop_signal
        ))
    })?;
    Ok(StopSignal {
        number,
        cri: cri_signal_named(&image.stop_signal, number),
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
            process_env(&cfg, &img, "pod-a").unwrap(),
            s(&[
                "PATH=/image/bin",
                "HOSTNAME=image",
                "LANG=en_US.UTF-8",
                "EXTRA=a=b",
                "EMPTY="
            ])
        );
        cfg.tty = true;
        let env = process_env(&cfg, &ImageConfig::default(), "pod-a").unwrap();
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
        let env = process_env(&ContainerConfig::default(), &ImageConfig::default(), "").unwrap();
        assert_eq!(env, s(&[DEFAULT_PATH_ENV]));
    }

    #[test]
    fn env_values_must_be_utf8() {
        let cfg = ContainerConfig {
            envs: vec![
                KeyValue {
                    key: "OK".into(),
                    value: "caf\u{e9}".into(),
                },
                KeyValue {
                    key: "RAW".into(),
                    value: vec![b'a', 0xff, b'b'],
                },
            ],
            ..Default::default()
        };
        let err = process_env(&cfg, &ImageConfig::default(), "").unwrap_err();
        assert!(matches!(err, SpecError::InvalidArgument(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("config.envs[1]") && msg.contains("RAW"),
            "{msg}"
        );
        let good = ContainerConfig {
            envs: cfg.envs[..1].to_vec(),
            ..Default::default()
        };
        let env = process_env(&good, &ImageConfig::default(), "").unwrap();
        assert_eq!(env.last().map(String::as_str), Some("OK=caf\u{e9}"));
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
            let got = stop_signal(&ContainerConfig::default(), &img);
            assert_eq!(got.as_ref().ok().map(|s| s.number), want, "{input:?}");
            if let Ok(s) = got {
                // What ContainerStatus reports names the same signal.
                assert_eq!(signal_number(s.cri), Some(s.number), "{input:?}");
            }
        }
        let img = ImageConfig {
            stop_signal: "SIGRTMIN+2147483647".into(),
            ..Default::default()
        };
        let err = stop_signal(&ContainerConfig::default(), &img)
            .unwrap_err()
            .to_string();
        assert!(err.contains("StopSignal"), "{err}");
    }

    #[test]
    fn every_cri_signal_has_its_linux_number() {
        assert_eq!(signal_number(Signal::RuntimeDefault), None);
        let numbers: Vec<(Signal, i32)> = (1..=65)
            .map(|v| {
                let s = Signal::try_from(v).unwrap();
                (s, signal_number(s).unwrap_or_else(|| panic!("{s:?}")))
            })
            .collect();
        for (s, n) in [
            (Signal::Sigabrt, 6),
            (Signal::Sigiot, 6),
            (Signal::Sigchld, 17),
            (Signal::Sigcld, 17),
            (Signal::Sigpoll, 29),
            (Signal::Sigkill, 9),
            (Signal::Sigterm, 15),
            (Signal::Sigusr1, 10),
            (Signal::Sigrtmin, 34),
            (Signal::Sigrtminplus1, 35),
            (Signal::Sigrtminplus15, 49),
            (Signal::Sigrtmaxminus14, 50),
            (Signal::Sigrtmaxminus1, 63),
            (Signal::Sigrtmax, 64),
        ] {
            assert!(numbers.contains(&(s, n)), "{s:?} should be {n}");
        }
        // Every number 1..=64 but 32 and 33 (glibc's own real-time signals) has a name.
        for n in (1..=64).filter(|n| *n != 32 && *n != 33) {
            let s = cri_signal(n).unwrap_or_else(|| panic!("no Signal for {n}"));
            assert_eq!(signal_number(s), Some(n));
        }
        assert_eq!(cri_signal(6), Some(Signal::Sigabrt));
        assert_eq!(cri_signal(17), Some(Signal::Sigchld));
        assert_eq!(cri_signal(29), Some(Signal::Sigio));
        assert_eq!(cri_signal(32), None);
    }

    #[test]
    fn stop_signal_order_config_then_image_then_sigterm() {
        let image = |s: &str| ImageConfig {
            stop_signal: s.into(),
            ..Default::default()
        };
        let config = |s: Signal| ContainerConfig {
            stop_signal: s as i32,
            ..Default::default()
        };
        let want = |number, cri| StopSignal { number, cri };
        // Neither: SIGTERM, reported as SIGTERM (not RUNTIME_DEFAULT, which would tell the
        // kubelet the runtime does not know the feature).
        assert_eq!(
            stop_signal(&ContainerConfig::default(), &image("")).unwrap(),
            want(15, Signal::Sigterm)
        );
        // The image's, by the name it gives.
        assert_eq!(
            stop_signal(&ContainerConfig::default(), &image("SIGQUIT")).unwrap(),
            want(3, Signal::Sigquit)
        );
        assert_eq!(
            stop_signal(&ContainerConfig::default(), &image("iot")).unwrap(),
            want(6, Signal::Sigiot)
        );
        assert_eq!(
            stop_signal(&ContainerConfig::default(), &image("SIGRTMIN+3")).unwrap(),
            want(37, Signal::Sigrtminplus3)
        );
        assert_eq!(
            stop_signal(&ContainerConfig::default(), &image("10")).unwrap(),
            want(10, Signal::Sigusr1)
        );
        // The config's wins over the image's, even over one that is not a signal.
        assert_eq!(
            stop_signal(&config(Signal::Sigusr2), &image("SIGQUIT")).unwrap(),
            want(12, Signal::Sigusr2)
        );
        assert_eq!(
            stop_signal(&config(Signal::Sigint), &image("SIGNOPE")).unwrap(),
            want(2, Signal::Sigint)
        );
        assert_eq!(
            stop_signal(&config(Signal::Sigrtmaxminus2), &image("")).unwrap(),
            want(62, Signal::Sigrtmaxminus2)
        );
        // A number the enum does not have.
        let bad = ContainerConfig {
            stop_signal: 66,
            ..Default::default()
        };
        let err = stop_signal(&bad, &image("")).unwrap_err();
        assert!(matches!(err, SpecError::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("config.stop_signal"), "{err}");
    }
}
