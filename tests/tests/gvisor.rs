//! A sandboxed runtime handler, end to end: gVisor's runsc (built from gVisor's Go module by
//! `scripts/runsc`, which `scripts/setup` runs) as `[runtime.handlers.gvisor]`, with a flag of
//! its own (`args`, as containerd's per-runtime options). A pod that asks for it is one gVisor
//! sandbox: its pause is runsc's sandbox container (the `sandbox` container-type annotation)
//! and its containers join it, so they run on gVisor's kernel, not the host's; logs, exec,
//! stats, the pod's network (served from inside the sandbox to the host over the pod's IP), a restart
//! of the daemon, stop and removal work, and nothing is left: no runsc state, no process, no
//! mount, no veth, no masquerade rule.

use e2e::pods::{busybox, exec_sync_in, sh, Images};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The ids `runsc --root ROOT list --quiet` prints.
fn runsc_list(runsc: &Path, root: &Path) -> Vec<String> {
    if !root.exists() {
        return Vec::new();
    }
    let out = std::process::Command::new(runsc)
        .arg("--root")
        .arg(root)
        .args(["list", "--quiet"])
        .output()
        .expect("runsc list");
    assert!(
        out.status.success(),
        "runsc list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// An HTTP GET of `/` from `ip:port`, retried for `limit` (the server starts after its log
/// line); the whole response.
fn http_get(ip: &str, port: u16, limit: Duration) -> String {
    let since = Instant::now();
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let addr = format!("{ip}:{port}")
                .parse()
                .map_err(std::io::Error::other)?;
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        })();
        match attempt {
            Ok(body) if !body.is_empty() => return body,
            other if since.elapsed() > limit => panic!("GET http://{ip}:{port}/: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn text(out: &cri::ExecSyncResponse) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_the_gvisor_handler_is_one_gvisor_sandbox() {
    let runsc = e2e::registry_clients::built_by("runsc", "runsc");
    let mut d = TestDaemon::start_with(
        "gvisor",
        e2e::daemon::DaemonOptions {
            extra_config: format!(
                "[runtime.handlers.gvisor]\npath = \"{}\"\nargs = [\"--platform=systrap\"]\n",
                runsc.display()
            ),
            // The e2e default with ipMasq on, as the built-in network has it: its rules are
            // what runsc's taking of the pod's address made outlive the pod.
            conflist: Some(
                r#"{"cniVersion":"1.0.0","name":"e2e-{bridge}","plugins":[
                {"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":true,
                 "ipam":{"type":"host-local","ranges":[[{"subnet":"{subnet}"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"{dir}/ipam"}}]}"#
                    .to_string(),
            ),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("busybox:gvisor", &busybox());
    d.pull(&image).await;
    let root = d.state.join("runtimes/gvisor");

    let pod = d
        .run_pod_on("sandboxed", "gvisor", |_| {})
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", d.log()));
    // The pause is runsc's sandbox, under the handler's root.
    assert_eq!(
        runsc_list(&runsc, &root),
        vec![pod.id.clone()],
        "{}",
        d.log()
    );

    // A container that cannot start (its command is not in the image): the error, and
    // nothing of it left in the sandbox once removed.
    let broken = d
        .create(
            &pod,
            e2e::pods::container("broken", &image, &["/no/such/program"], &[]),
        )
        .await
        .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", d.log()));
    if d.start_container(&broken).await.is_ok() {
        // runsc may report the failed exec as the init's exit rather than start's error.
        let status = d.wait_exited(&broken, Duration::from_secs(30)).await;
        assert_ne!(status.exit_code, 0, "a missing program ran: {status:?}");
    }
    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: broken.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("RemoveContainer: {e}\n{}", d.log()));
    assert_eq!(
        runsc_list(&runsc, &root),
        vec![pod.id.clone()],
        "{}",
        d.log()
    );

    // gVisor's kernel: its dmesg (which a runc container may not read) is gVisor's own.
    let app = d
        .run_container(
            &pod,
            sh(
                "web",
                &image,
                "dmesg | head -1; mkdir -p /tmp/www; echo hello-from-gvisor > /tmp/www/index.html; \
                 echo serving; exec httpd -f -p 8080 -h /tmp/www",
            ),
        )
        .await;
    let lines = d.wait_log(&app, "serving", Duration::from_secs(60)).await;
    let log = e2e::pods::stdout_text(&lines);
    assert!(log.contains("Starting gVisor"), "{log}");
    let mut listed = runsc_list(&runsc, &root);
    listed.sort();
    let mut want = vec![pod.id.clone(), app.clone()];
    want.sort();
    assert_eq!(listed, want, "the container joined the pod's sandbox");

    // Exec runs inside the sandbox too: gVisor's kernel release, not the host's.
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let out = exec_sync_in(&mut d, &app, &["uname", "-r"]).await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_ne!(
        text(&out),
        host_release.trim(),
        "exec ran on the host's kernel"
    );
    let out = exec_sync_in(&mut d, &app, &["cat", "/tmp/www/index.html"]).await;
    assert_eq!(text(&out), "hello-from-gvisor");

    // Stats: the sandbox's cgroup (where runsc placed it), which the container's pid names.
    let stats = d.container_stats(&app).await;
    let cpu = stats
        .cpu
        .as_ref()
        .and_then(|c| c.usage_core_nano_seconds.as_ref());
    let memory = stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes.as_ref());
    assert!(
        cpu.is_some_and(|c| c.value > 0) && memory.is_some_and(|m| m.value > 0),
        "{stats:?}"
    );

    // The pod's network: gVisor's network stack on the pod's interface, reached from the host.
    let ip = d
        .pod_status(&pod.id)
        .await
        .network
        .map(|n| n.ip)
        .expect("the pod's IP");
    let response = http_get(&ip, 8080, Duration::from_secs(30));
    assert!(response.contains("hello-from-gvisor"), "{response}");

    // A restart of the daemon changes nothing for the sandbox.
    d.restart().await;
    let out = exec_sync_in(&mut d, &app, &["cat", "/tmp/www/index.html"]).await;
    assert_eq!(text(&out), "hello-from-gvisor", "{}", d.log());

    // The bridge plugin's masquerade rules of the pod (by its id): there now, gone with it,
    // although runsc took the pod's address off its interface (peapod gives it back for DEL).
    let nat_rules = || {
        let out = std::process::Command::new("iptables-save")
            .args(["-t", "nat"])
            .output()
            .expect("iptables-save");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&pod.id))
            .count()
    };
    assert!(nat_rules() > 0, "the bridge network masquerades the pod");

    d.stop_container(&app, 10).await;
    let st = d.container_status(&app).await;
    assert_eq!(
        st.state,
        cri::ContainerState::ContainerExited as i32,
        "{st:?}"
    );
    d.remove_pod(&pod).await;
    assert_eq!(runsc_list(&runsc, &root), Vec::<String>::new());
    assert_eq!(nat_rules(), 0, "masquerade rules outlived the pod");
    let runsc_left = host::processes_with(&root.display().to_string());
    assert!(
        runsc_left.is_empty(),
        "runsc processes left: {runsc_left:?}"
    );
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
