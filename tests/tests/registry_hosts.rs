//! Registry host configuration as containerd's certs.d (`[registry] config_path`), end to end
//! through the CRI: a real `docker-registry` serving TLS on loopback with a CA of the test's
//! own (made with openssl here), one that also requires a client certificate, and a plain
//! mirror with only the pull capability, used for content before the upstream. Bad files are
//! refused naming the file and the field, and a refused pull stores nothing.

use e2e::pods::{busybox, Images};
use e2e::TestDaemon;
use peapod_image::testsupport::{Registry, RegistryTls};
use peapod_proto::v1 as cri;
use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::Code;

/// A CA, a server certificate for 127.0.0.1 and two client certificates, made by openssl.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn make() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("peapod-pki-")
            .tempdir()
            .unwrap();
        let p = dir.path();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(p)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=peapod-test-ca",
            ],
        ]
        .concat());
        std::fs::write(
            p.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(p.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (name, ext, cn) in [
            ("server", "server.ext", "127.0.0.1"),
            ("client", "client.ext", "peapod-node"),
            ("other", "client.ext", "other-node"),
        ] {
            run(&[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={cn}"),
                ],
            ]
            .concat());
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                ext,
            ]);
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server(&self, require_client: bool) -> RegistryTls {
        RegistryTls {
            certificate: self.path("server.crt"),
            key: self.path("server.key"),
            client_ca: require_client.then(|| self.path("ca.crt")),
        }
    }
}

fn host_dir(d: &TestDaemon, registry: &Registry) -> PathBuf {
    let dir = d.dir.join("certs.d").join(registry.addr());
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_hosts(dir: &Path, text: &str) {
    std::fs::write(dir.join("hosts.toml"), text).unwrap();
}

async fn start(name: &str) -> TestDaemon {
    TestDaemon::start_with(
        name,
        e2e::daemon::DaemonOptions {
            extra_config: "[registry]\nconfig_path = \"{dir}/certs.d\"\n".into(),
            ..Default::default()
        },
    )
    .await
}

async fn image_count(d: &mut TestDaemon) -> usize {
    d.cri
        .image
        .list_images(cri::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_registry_with_its_own_ca_pulls_only_with_the_ca_configured() {
    let pki = Pki::make();
    let images = Images::start();
    let name = "busybox:tls";
    images.push(name, &busybox());
    let tls = Registry::tls_twin(&images.registry, &pki.server(false)).unwrap();
    let reference = tls.reference(name);
    let mut d = start("reg-tls").await;
    let before = d.stored_content();
    let dir = host_dir(&d, &tls);

    // HTTPS without the CA: the server's certificate is not trusted.
    write_hosts(&dir, &format!("server = \"https://{}\"\n", tls.addr()));
    let e = d.try_pull(&reference).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("certificate"), "{}", e.message());
    assert_eq!(image_count(&mut d).await, 0);
    assert_eq!(
        d.stored_content(),
        before,
        "a refused pull stored something"
    );

    // A CA that is not one: the file and the field are named, nothing changes.
    std::fs::write(dir.join("junk.crt"), "not a certificate\n").unwrap();
    write_hosts(
        &dir,
        &format!("server = \"https://{}\"\nca = \"junk.crt\"\n", tls.addr()),
    );
    let e = d.try_pull(&reference).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    for part in [
        dir.join("hosts.toml").display().to_string(),
        "ca:".into(),
        "junk.crt".into(),
    ] {
        assert!(e.message().contains(&part), "{part} in {}", e.message());
    }
    // A file that does not parse.
    write_hosts(&dir, "server = [\n");
    let e = d.try_pull(&reference).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("hosts.toml") && e.message().contains("not TOML"),
        "{}",
        e.message()
    );
    assert_eq!(d.stored_content(), before);

    // With the CA (a relative path: the host directory's), the pull works over TLS.
    std::fs::copy(pki.path("ca.crt"), dir.join("ca.crt")).unwrap();
    write_hosts(
        &dir,
        &format!("server = \"https://{}\"\nca = \"ca.crt\"\n", tls.addr()),
    );
    d.try_pull(&reference)
        .await
        .unwrap_or_else(|e| panic!("pull with the CA: {e}\n{}", d.log()));
    assert!(
        tls.requests()
            .iter()
            .any(|r| r.path.contains("/manifests/") && r.status == 200),
        "the TLS registry served the manifest: {}",
        tls.log()
    );
    assert_eq!(image_count(&mut d).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_requires_a_client_certificate() {
    let pki = Pki::make();
    let images = Images::start();
    let name = "busybox:mtls";
    images.push(name, &busybox());
    let mtls = Registry::tls_twin(&images.registry, &pki.server(true)).unwrap();
    let reference = mtls.reference(name);
    let mut d = start("reg-mtls").await;
    let before = d.stored_content();
    let dir = host_dir(&d, &mtls);
    let ca = pki.path("ca.crt").display().to_string();

    // The CA alone: the registry drops the connection (TLS 1.3 checks for the certificate
    // after the handshake: a broken pipe), and the error points at hosts.toml's `client`.
    write_hosts(
        &dir,
        &format!("server = \"https://{}\"\nca = \"{ca}\"\n", mtls.addr()),
    );
    let e = d.try_pull(&reference).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("client certificate") && e.message().contains("hosts.toml"),
        "a clear error: {}",
        e.message()
    );
    assert_eq!(d.stored_content(), before);

    // A key that belongs to another certificate: refused naming the field, before any request.
    let (cert, other_key) = (pki.path("client.crt"), pki.path("other.key"));
    write_hosts(
        &dir,
        &format!(
            "server = \"https://{}\"\nca = \"{ca}\"\nclient = [[\"{}\", \"{}\"]]\n",
            mtls.addr(),
            cert.display(),
            other_key.display()
        ),
    );
    let e = d.try_pull(&reference).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("client:") && e.message().contains("other.key"),
        "{}",
        e.message()
    );

    // Certificate and key in one file (client = "both.pem"): the pull works.
    let mut both = std::fs::read(&cert).unwrap();
    both.extend(std::fs::read(pki.path("client.key")).unwrap());
    std::fs::write(dir.join("both.pem"), both).unwrap();
    write_hosts(
        &dir,
        &format!(
            "server = \"https://{}\"\nca = \"{ca}\"\nclient = \"both.pem\"\n",
            mtls.addr()
        ),
    );
    d.try_pull(&reference)
        .await
        .unwrap_or_else(|e| panic!("pull with the client certificate: {e}\n{}", d.log()));
    assert_eq!(image_count(&mut d).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_only_mirror_serves_content_before_the_upstream() {
    let pki = Pki::make();
    let upstream = Images::start();
    let name = "busybox:mirrored";
    upstream.push(name, &busybox());
    let mirror = Images::start();
    mirror.push(name, &busybox());
    let tls = Registry::tls_twin(&upstream.registry, &pki.server(false)).unwrap();
    let reference = tls.reference(name);
    let mut d = start("reg-mirror").await;
    let dir = host_dir(&d, &tls);
    write_hosts(
        &dir,
        &format!(
            "server = \"https://{}\"\nca = \"{}\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\"]\n  [host.\"http://{}\".header]\n    x-peapod-test = \"mirror\"\n",
            tls.addr(),
            pki.path("ca.crt").display(),
            mirror.registry.addr(),
            mirror.registry.addr()
        ),
    );
    d.try_pull(&reference)
        .await
        .unwrap_or_else(|e| panic!("pull: {e}\n{}", d.log()));

    // The tag was resolved by the upstream (the mirror may not resolve); every blob came from
    // the mirror, asked with containerd's ?ns= for the upstream's namespace. (The mirror's log
    // also holds the test's own push of the image, a PUT.)
    let up = tls.requests();
    assert!(
        up.iter()
            .any(|r| r.path.contains("/manifests/mirrored") && r.status == 200),
        "upstream resolved the tag: {up:?}"
    );
    assert!(
        !up.iter().any(|r| r.path.contains("/blobs/")),
        "no blob from the upstream: {up:?}"
    );
    let m = mirror.registry.requests();
    assert!(
        !m.iter()
            .any(|r| r.method != "PUT" && r.path.contains("/manifests/mirrored")),
        "the mirror was not asked for the tag: {m:?}"
    );
    let blobs: Vec<_> = m
        .iter()
        .filter(|r| r.path.contains("/blobs/sha256:") && r.status == 200)
        .collect();
    assert!(!blobs.is_empty(), "the mirror served the blobs: {m:?}");
    assert!(
        blobs
            .iter()
            .all(|r| r.path.contains(&format!("ns={}", tls.addr()))),
        "{blobs:?}"
    );
    assert_eq!(image_count(&mut d).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_host_directory_stops_the_daemon_at_start() {
    let mut d = start("reg-badstart").await;
    let dir = d.dir.join("certs.d").join("registry.example");
    std::fs::create_dir_all(&dir).unwrap();
    write_hosts(
        &dir,
        "[host.\"https://m.example\"]\ncapabilities = [\"fetch\"]\n",
    );
    d.stop_daemon();
    let out = Command::new(e2e::daemon::bin_dir().join("peapod"))
        .args(["serve", "--config"])
        .arg(d.config_path())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the daemon started with a bad hosts.toml"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&dir.join("hosts.toml").display().to_string())
            && err
                .contains("host.\"https://m.example\".capabilities: unknown capability \"fetch\""),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(d.restart().await);
}
