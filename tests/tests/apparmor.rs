//! AppArmor end to end, on a host whose kernel enforces it (the Debian guest: `scripts/vm
//! test`; this machine's kernel has none, so these are `#[ignore]`d in the host's run and
//! fail, not skip, where AppArmor is missing): the daemon loads its default profile at start,
//! RuntimeDefault (and no choice at all, the kubelet's default) confines a container with it,
//! Unconfined does not, a Localhost profile applies, and one that is not loaded is refused at
//! create with the field named.

use e2e::pods::{busybox, read_log, sh, stdout_text, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(120);
const GUEST: &str = "needs a kernel with AppArmor: runs in the guest (scripts/vm test)";

fn require_apparmor() {
    assert!(
        peapod_host::apparmor::kernel_enabled(),
        "this test needs a kernel that enforces AppArmor ({GUEST})"
    );
}

/// Mounts a tmpfs with CAP_SYS_ADMIN granted: what only the profile (`deny mount`) refuses.
const PROBE: &str = "cat /proc/self/attr/current; mkdir -p /probe; if mount -t tmpfs probe /probe 2>/dev/null; then echo mounted; else echo refused; fi";

fn with_apparmor(
    mut c: cri::ContainerConfig,
    profile: Option<cri::SecurityProfile>,
) -> cri::ContainerConfig {
    let linux = c.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    sc.apparmor = profile;
    sc.capabilities = Some(cri::Capability {
        add_capabilities: vec!["SYS_ADMIN".into()],
        ..Default::default()
    });
    c
}

fn profile(kind: cri::security_profile::ProfileType, name: &str) -> Option<cri::SecurityProfile> {
    Some(cri::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref: name.into(),
    })
}

async fn output_of(d: &mut TestDaemon, id: &str) -> (i32, String) {
    let st = d.wait_exited(id, WAIT).await;
    (
        st.exit_code,
        stdout_text(&read_log(Path::new(&st.log_path))),
    )
}

fn apparmor_parser(args: &[&str], stdin: &str) {
    let parser = peapod_host::apparmor::find_parser().expect("apparmor_parser");
    let mut child = Command::new(parser)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn apparmor_parser");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "apparmor_parser {args:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with AppArmor: runs in the guest (scripts/vm test)"]
async fn the_default_profile_confines_and_unconfined_does_not() {
    require_apparmor();
    let mut d = TestDaemon::start("apparmor-default").await;
    assert!(
        peapod_host::apparmor::is_loaded("peapod-default").unwrap(),
        "the daemon loaded its profile at start\n{}",
        d.log()
    );
    let images = Images::start();
    let image = images.push("busybox:aa", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("apparmor-pod").await;
    use cri::security_profile::ProfileType;

    // No choice at all is the kubelet's default: RuntimeDefault.
    let unset = d
        .run_container(&pod, with_apparmor(sh("unset", &image, PROBE), None))
        .await;
    let default = d
        .run_container(
            &pod,
            with_apparmor(
                sh("default", &image, PROBE),
                profile(ProfileType::RuntimeDefault, ""),
            ),
        )
        .await;
    let unconfined = d
        .run_container(
            &pod,
            with_apparmor(
                sh("unconfined", &image, PROBE),
                profile(ProfileType::Unconfined, ""),
            ),
        )
        .await;
    let confined = (0, "peapod-default (enforce)\nrefused\n".to_string());
    assert_eq!(output_of(&mut d, &unset).await, confined);
    assert_eq!(output_of(&mut d, &default).await, confined);
    assert_eq!(
        output_of(&mut d, &unconfined).await,
        (0, "unconfined\nmounted\n".to_string())
    );
    // What ContainerStatus reports: the profile in the runtime spec it ran with.
    let info = d.container_info(&default).await;
    assert_eq!(
        info["runtimeSpec"]["process"]["apparmorProfile"], "peapod-default",
        "{info}"
    );
    let info = d.container_info(&unconfined).await;
    assert!(info["runtimeSpec"]["process"]
        .get("apparmorProfile")
        .is_none());

    // An exec into a confined container is confined too.
    let running = d
        .run_container(&pod, sh("running", &image, "sleep 3600"))
        .await;
    let out = e2e::pods::exec_sync_in(&mut d, &running, &["cat", "/proc/self/attr/current"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "peapod-default (enforce)\n"
    );

    // A restart finds the profile loaded and the same: nothing to load again.
    d.stop_daemon();
    assert!(d.restart().await);
    assert!(
        d.log().contains("AppArmor: default profile already loaded"),
        "{}",
        d.log()
    );
    d.remove_pod(&pod).await;
}

const DENY_WRITE: &str = "#include <tunables/global>\nprofile peapod-e2e-deny-write flags=(attach_disconnected) {\n  #include <abstractions/base>\n  file,\n  deny /** w,\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with AppArmor: runs in the guest (scripts/vm test)"]
async fn a_localhost_profile_applies_and_an_unloaded_one_is_refused() {
    require_apparmor();
    apparmor_parser(&["--replace", "--skip-cache"], DENY_WRITE);
    let mut d = TestDaemon::start("apparmor-localhost").await;
    let images = Images::start();
    let image = images.push("busybox:aa", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("apparmor-local").await;
    use cri::security_profile::ProfileType;

    let script = "cat /proc/self/attr/current; touch /tmp/x && echo wrote || echo denied";
    let local = d
        .run_container(
            &pod,
            with_apparmor(
                sh("local", &image, script),
                profile(ProfileType::Localhost, "localhost/peapod-e2e-deny-write"),
            ),
        )
        .await;
    assert_eq!(
        output_of(&mut d, &local).await,
        (0, "peapod-e2e-deny-write (enforce)\ndenied\n".to_string())
    );

    // Not loaded: refused at create, naming the field, and nothing is left of it.
    let before = d.containers_of(&pod).await.len();
    let err = d
        .create(
            &pod,
            with_apparmor(
                sh("missing", &image, "true"),
                profile(ProfileType::Localhost, "localhost/peapod-e2e-not-loaded"),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains("config.linux.security_context.apparmor: profile \"peapod-e2e-not-loaded\" is not loaded"),
        "{err:?}"
    );
    assert_eq!(d.containers_of(&pod).await.len(), before);
    // The deprecated string field says the same.
    let mut old = sh("old-field", &image, "true");
    #[allow(deprecated)]
    {
        old.linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
            .apparmor_profile = "localhost/peapod-e2e-not-loaded".into();
    }
    let err = d.create(&pod, old).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    d.remove_pod(&pod).await;
    apparmor_parser(&["--remove"], DENY_WRITE);
}
