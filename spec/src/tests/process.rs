//! The process: arguments, environment, terminal, user and groups, what exec inherits.

use super::*;

#[test]
fn process_table() {
    // (command, args, image entrypoint, image cmd, config workdir, image workdir, tty) -> args, cwd
    type Case<'a> = (
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a str,
    );
    let cases: &[Case] = &[
        (&[], &[], &["/entry"], &["a"], "", "", &["/entry", "a"], "/"),
        (
            &["/bin/echo"],
            &[],
            &["/entry"],
            &["a"],
            "/cfg",
            "/img",
            &["/bin/echo"],
            "/cfg",
        ),
        (
            &[],
            &["b"],
            &["/entry"],
            &["a"],
            "",
            "/img",
            &["/entry", "b"],
            "/img",
        ),
        (&["/x"], &["y"], &[], &[], "", "", &["/x", "y"], "/"),
    ];
    for (command, args, ep, cmd, wd, iwd, want_args, want_cwd) in cases {
        let mut f = Fixture::new();
        f.config.command = command.iter().map(|s| s.to_string()).collect();
        f.config.args = args.iter().map(|s| s.to_string()).collect();
        f.config.working_dir = wd.to_string();
        f.image.entrypoint = ep.iter().map(|s| s.to_string()).collect();
        f.image.cmd = cmd.iter().map(|s| s.to_string()).collect();
        f.image.working_dir = iwd.to_string();
        let s = f.json();
        assert_eq!(strs(&s["process"]["args"]), *want_args);
        assert_eq!(s["process"]["cwd"], *want_cwd);
    }
    let mut f = Fixture::new();
    f.config.args.clear();
    f.image.cmd.clear();
    assert!(f.err().contains("no command"));
}

#[test]
fn tty_and_env_override() {
    let mut f = Fixture::new();
    f.config.tty = true;
    f.config.stdin = true;
    f.image.env = vec!["MODE=image".into(), "TERM=vt100".into()];
    let s = f.json();
    assert_eq!(s["process"]["terminal"], true);
    let env = strs(&s["process"]["env"]);
    assert!(
        env.contains(&"MODE=test".to_string()),
        "config overrides image: {env:?}"
    );
    assert!(env.contains(&"TERM=vt100".to_string()));
    assert!(!env.contains(&"MODE=image".to_string()));
}

#[test]
fn user_and_groups() {
    let mut f = Fixture::new();
    f.sc().supplemental_groups = vec![2000, 10];
    let s = f.json();
    assert_eq!(
        s["process"]["user"]["additionalGids"],
        json!([10, 1000, 2000])
    );
    f.sc().supplemental_groups_policy = peapod_proto::v1::SupplementalGroupsPolicy::Strict as i32;
    let s = f.json();
    assert_eq!(
        s["process"]["user"]["additionalGids"],
        json!([10, 1000, 2000])
    );
    f.sc().supplemental_groups = vec![2000];
    let s = f.json();
    assert_eq!(s["process"]["user"]["additionalGids"], json!([1000, 2000]));
    f.sc().supplemental_groups = vec![-5];
    assert!(f.err().contains("supplemental_groups"));
}

#[test]
fn oom_score_adj_out_of_range() {
    let mut f = Fixture::new();
    f.config
        .linux
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .oom_score_adj = 2000;
    assert!(f.err().contains("oom_score_adj"));
}

#[test]
fn exec_processes_inherit_the_container_process() {
    let mut f = Fixture::new();
    f.sc().no_new_privs = true;
    let spec = f.try_spec().unwrap();
    let p = exec_process(&spec, &["ls".to_string(), "-l".to_string()], true).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["args"], json!(["ls", "-l"]));
    assert_eq!(v["terminal"], true);
    assert_eq!(v["user"]["uid"], 1000);
    assert_eq!(v["cwd"], "/work");
    assert_eq!(v["noNewPrivileges"], true);
    assert!(strs(&v["env"]).contains(&"TERM=xterm".to_string()));
    assert!(strs(&v["env"]).contains(&"MODE=test".to_string()));
    let base = serde_json::to_value(spec.process().as_ref().unwrap()).unwrap();
    assert_eq!(v["capabilities"], base["capabilities"]);
    let p = exec_process(&spec, &["true".to_string()], false).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["terminal"], false);
    assert!(!strs(&v["env"]).contains(&"TERM=xterm".to_string()));
    assert!(exec_process(&spec, &[], false).is_err());
}
