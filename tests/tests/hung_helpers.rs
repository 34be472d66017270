//! Hung helpers: a pod's shim that stops answering (SIGSTOP), an OCI runtime that hangs
//! (SIGSTOP of itself), a CNI plugin that never exits. Every call that meets one ends with an
//! error naming it, the daemon answers everything else meanwhile, other pods are unaffected,
//! and after SIGCONT (or the helper's kill) everything converges with nothing left behind.

use e2e::host::write_script;
use e2e::pods::{busybox, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};

fn shim_of(sandbox_id: &str) -> u32 {
    let pids: Vec<u32> = e2e::host::processes_with(sandbox_id)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "peapod-shim")
        })
        .collect();
    assert_eq!(pids.len(), 1, "one shim for {sandbox_id}: {pids:?}");
    pids[0]
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

async fn exec(
    d: &mut TestDaemon,
    id: &str,
    timeout: i64,
) -> Result<cri::ExecSyncResponse, tonic::Status> {
    d.cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.into(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout,
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_shim_times_out_exec_sync_naming_it_and_others_are_unaffected() {
    let mut d = TestDaemon::start("hshim").await;
    let images = Images::start();
    let image = images.push("busybox:hung", &busybox());
    d.pull(&image).await;
    let stuck = d.run_pod("stuck").await;
    let in_stuck = d.run_container(&stuck, sh("a", &image, "sleep 3600")).await;
    let fine = d.run_pod("fine").await;
    let in_fine = d.run_container(&fine, sh("b", &image, "sleep 3600")).await;

    let shim = shim_of(&stuck.id);
    signal(shim, libc::SIGSTOP);
    let started = Instant::now();
    let call = {
        let mut cri = d.cri.clone();
        let id = in_stuck.clone();
        tokio::spawn(async move {
            cri.runtime
                .exec_sync(cri::ExecSyncRequest {
                    container_id: id,
                    cmd: vec!["echo".into(), "hi".into()],
                    timeout: 3,
                })
                .await
        })
    };
    // Meanwhile the daemon answers, and the other pod's shim does too.
    let out = exec(&mut d, &in_fine, 5)
        .await
        .expect("ExecSync in the other pod");
    assert_eq!(out.stdout, b"hi\n");
    d.cri
        .runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("ListContainers");
    let st = d.container_status(&in_stuck).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);

    let err = call
        .await
        .unwrap()
        .expect_err("no answer from a stopped shim");
    let took = started.elapsed();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("shim"), "names the helper: {err:?}");
    assert!(
        took < Duration::from_secs(20),
        "ends at the call's timeout plus a grace, not the client's: {took:?}"
    );
    println!(
        "ExecSync (timeout 3 s) to a stopped shim ended after {took:?}: {}",
        err.message()
    );

    // SIGCONT: the shim answers again and the pod works.
    signal(shim, libc::SIGCONT);
    let out = exec(&mut d, &in_stuck, 10)
        .await
        .expect("ExecSync after SIGCONT");
    assert_eq!(out.stdout, b"hi\n");
    // The command given up on was killed once the shim answered: no process of it is left.
    tokio::time::sleep(Duration::from_secs(1)).await;
    d.remove_pod(&stuck).await;
    d.remove_pod(&fine).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_oci_runtime_fails_the_start_naming_it_and_is_killed() {
    let mut d = TestDaemon::start("hrunc").await;
    let wrapper = d.dir.join("runc-hangs");
    let marker = d.dir.join("hang-on-start");
    let runc = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v runc"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // `runc ... start ID` stops itself (as if SIGSTOPped) while the marker exists.
    write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" start \"*) [ -e {m} ] && kill -STOP $$ ;; esac\nexec {runc} \"$@\"\n",
            m = marker.display(),
            runc = runc.trim()
        ),
    );
    d.stop_daemon();
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(
        d.config_path(),
        config.replace(
            "[cgroup]",
            &format!("[runtime]\npath = \"{}\"\n[cgroup]", wrapper.display()),
        ),
    )
    .unwrap();
    d.restart().await;
    let images = Images::start();
    let image = images.push("busybox:hungrunc", &busybox());
    d.pull(&image).await;
    let other = d.run_pod("other").await;
    let in_other = d.run_container(&other, sh("o", &image, "sleep 3600")).await;
    let pod = d.run_pod("p").await;
    let c = d
        .create(&pod, sh("c", &image, "sleep 3600"))
        .await
        .expect("create");

    std::fs::write(&marker, "").unwrap();
    let started = Instant::now();
    let call = {
        let mut cri = d.cri.clone();
        let c = c.clone();
        tokio::spawn(async move {
            cri.runtime
                .start_container(cri::StartContainerRequest { container_id: c })
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The stopped runtime command (the shim's own command line names the wrapper too).
    let hung: Vec<u32> = e2e::host::processes_with(&wrapper.display().to_string())
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "runc-hangs")
        })
        .collect();
    assert!(!hung.is_empty(), "the runtime hangs");
    // Meanwhile: the other pod and the daemon answer.
    let out = exec(&mut d, &in_other, 5)
        .await
        .expect("ExecSync in the other pod");
    assert_eq!(out.stdout, b"hi\n");
    let err = call
        .await
        .unwrap()
        .expect_err("a hung runtime fails the start");
    println!(
        "StartContainer with a hung runtime ended after {:?}: {}",
        started.elapsed(),
        err.message()
    );
    assert!(
        err.message().contains("did not finish within") && err.message().contains("start"),
        "names the runtime command: {err:?}"
    );
    assert!(
        err.message().contains("runc-hangs"),
        "names the runtime: {err:?}"
    );
    for pid in &hung {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
                || std::fs::read(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .is_empty(),
            "the hung runtime was killed"
        );
    }
    // The container whose start failed is EXITED (as a failed start is in the CRI) and
    // removable; once the runtime works again a new one starts.
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerExited as i32
    );
    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: c.clone(),
        })
        .await
        .expect("RemoveContainer of the failed start");
    std::fs::remove_file(&marker).unwrap();
    let c = d.run_container(&pod, sh("c2", &image, "sleep 3600")).await;
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    d.remove_pod(&pod).await;
    d.remove_pod(&other).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cni_plugin_that_never_exits_fails_the_pod_naming_it_and_leaves_nothing() {
    let bin = tempfile::tempdir().unwrap();
    write_script(
        &bin.path().join("hang"),
        "#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] && exec sleep 3600\nexit 0\n",
    );
    let mut d = TestDaemon::start_with(
        "hcni",
        DaemonOptions {
            extra_cni_bin: Some(bin.path().to_path_buf()),
            conflist: Some(
                r#"{"cniVersion":"1.0.0","name":"e2e-{bridge}","plugins":[
                {"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                 "ipam":{"type":"host-local","ranges":[[{"subnet":"{subnet}"}]],"dataDir":"{dir}/ipam"}},
                {"type":"hang"}]}"#
                    .into(),
            ),
            ..Default::default()
        },
    )
    .await;
    d.stop_daemon();
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(
        d.config_path(),
        config.replace("[cni]\n", "[cni]\nplugin_timeout_seconds = 3\n"),
    )
    .unwrap();
    d.restart().await;

    let mut config = e2e::fixtures::sandbox_config("hungnet", &d.cgroup_parent);
    config.log_directory = d.dir.join("logs").display().to_string();
    let started = Instant::now();
    let call = {
        let mut cri = d.cri.clone();
        tokio::spawn(async move {
            cri.runtime
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.cri
        .runtime
        .version(cri::VersionRequest::default())
        .await
        .expect("the daemon answers meanwhile");
    let err = call
        .await
        .unwrap()
        .expect_err("the hung plugin fails the pod");
    println!(
        "RunPodSandbox with a hung CNI plugin ended after {:?}: {}",
        started.elapsed(),
        err.message()
    );
    assert!(
        err.message().contains("plugin hang") && err.message().contains("did not finish within"),
        "{err:?}"
    );
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(pods.is_empty(), "no half-made pod: {pods:?}");
    assert!(
        e2e::host::processes_with("sleep 3600").iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/environ"))
                .map(|e| !e.contains(&d.state.display().to_string()))
                .unwrap_or(true)
        }),
        "the hung plugin was killed"
    );
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
