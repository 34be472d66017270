//! Signed images (`[registry] signature_policy`, containers-policy.json(5) as CRI-O reads it),
//! end to end through the CRI with images signed by the real cosign in a loopback registry:
//! a signed image pulls; an unsigned one, one copied with its signature to another
//! repository, one whose tag was moved to another manifest after signing, and one signed by
//! another key are refused with a clear error and nothing stored.

use e2e::pods::{busybox, Images};
use e2e::registry_clients;
use e2e::TestDaemon;
use peapod_image::testsupport::{Compression, ImageSpec, Layer};
use peapod_proto::v1 as cri;
use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::Code;

fn cosign(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(registry_clients::bin("cosign"))
        .args(args)
        .current_dir(dir)
        // Empty password for the key; its own HOME, so nothing of the machine's is read or
        // written (no network: keys only, no transparency log).
        .env("COSIGN_PASSWORD", "")
        .env("HOME", dir)
        .env("COSIGN_YES", "true")
        .output()
        .expect("run cosign");
    assert!(
        out.status.success(),
        "cosign {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A key pair made by `cosign generate-key-pair` in a directory of its own.
struct Key {
    dir: tempfile::TempDir,
}

impl Key {
    fn generate() -> Key {
        let dir = tempfile::Builder::new()
            .prefix("peapod-cosign-")
            .tempdir()
            .unwrap();
        cosign(dir.path(), &["generate-key-pair"]);
        Key { dir }
    }

    fn public(&self) -> PathBuf {
        self.dir.path().join("cosign.pub")
    }

    /// Signs `reference@digest` in the registry (signature under the sha256-<hex>.sig tag).
    fn sign(&self, image: &str) {
        cosign(
            self.dir.path(),
            &[
                "sign",
                "--key",
                "cosign.key",
                "--tlog-upload=false",
                "--allow-insecure-registry",
                "--allow-http-registry",
                "-y",
                image,
            ],
        );
    }
}

async fn images(d: &mut TestDaemon) -> Vec<String> {
    d.cri
        .image
        .list_images(cri::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect()
}

/// A small image of its own (one file) so that each repository's digest differs.
fn marked(mark: &str) -> ImageSpec {
    busybox().layer(Layer::new(Compression::Gzip).file("mark", mark, 0o644))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_images_signed_for_their_repository_by_a_trusted_key_pull() {
    let reg = Images::start();
    let addr = reg.registry.addr();
    let trusted = Key::generate();
    let stranger = Key::generate();
    let digest_of = |repo: &str| reg.registry.manifest_digest(repo, "v1").unwrap();

    // signed: signed by the trusted key. unsigned: not at all. stranger: by another key.
    let signed = reg.push("signed:v1", &marked("signed"));
    trusted.sign(&format!("{addr}/signed@{}", digest_of("signed")));
    let unsigned = reg.push("unsigned:v1", &marked("unsigned"));
    let strangers = reg.push("stranger:v1", &marked("stranger"));
    stranger.sign(&format!("{addr}/stranger@{}", digest_of("stranger")));
    // copy: the signed image and its signature, copied by cosign to another repository.
    cosign(
        trusted.dir.path(),
        &[
            "copy",
            "--allow-insecure-registry",
            "--allow-http-registry",
            "-f",
            &signed,
            &format!("{addr}/copy:v1"),
        ],
    );
    let copy = reg.registry.reference("copy:v1");
    // tampered: signed, then the tag moved to another manifest and the signature copied to
    // that manifest's signature tag.
    let tampered = reg.push("tampered:v1", &marked("before"));
    let before = digest_of("tampered");
    trusted.sign(&format!("{addr}/tampered@{before}"));
    reg.push("tampered:v2", &marked("after"));
    let after = reg.registry.manifest_digest("tampered", "v2").unwrap();
    copy_manifest(&reg, "tampered", "v2", "v1");
    assert_eq!(digest_of("tampered"), after);
    assert_ne!(before, after);
    copy_manifest(&reg, "tampered", &sig_tag(&before), &sig_tag(&after));

    let policy = reg_dir_file(
        "policy.json",
        &format!(
            r#"{{"default": [{{"type": "insecureAcceptAnything"}}],
                "transports": {{"docker": {{
                    "{addr}": [{{"type": "sigstoreSigned", "keyPath": "{}",
                                 "signedIdentity": {{"type": "matchRepository"}}}}],
                    "{addr}/closed": [{{"type": "reject"}}]
                }}}}}}"#,
            trusted.public().display()
        ),
    );
    let mut d = TestDaemon::start_with(
        "signed",
        e2e::daemon::DaemonOptions {
            extra_config: format!(
                "[registry]\nsignature_policy = \"{}\"\n",
                policy.1.display()
            ),
            ..Default::default()
        },
    )
    .await;
    let empty = d.stored_content();

    for (reference, code, why) in [
        (
            unsigned.as_str(),
            Code::PermissionDenied,
            "no sigstore signature".to_string(),
        ),
        (
            strangers.as_str(),
            Code::PermissionDenied,
            "not signed by a key the policy trusts".into(),
        ),
        (
            copy.as_str(),
            Code::PermissionDenied,
            format!("the signature is for \"{addr}/signed\", not \"{addr}/copy:v1\""),
        ),
        (
            tampered.as_str(),
            Code::PermissionDenied,
            format!("it signs the manifest {before}, but the registry serves {after}"),
        ),
        (
            &format!("{addr}/closed:v1"),
            Code::PermissionDenied,
            "the policy rejects this scope".into(),
        ),
    ] {
        let e = d.try_pull(reference).await.expect_err(reference);
        assert_eq!(e.code(), code, "{reference}: {e:?}");
        assert!(
            e.message().contains(&why),
            "{reference}: {why:?} in {}",
            e.message()
        );
        assert!(
            e.message().contains(&policy.1.display().to_string()),
            "{}",
            e.message()
        );
        assert!(images(&mut d).await.is_empty(), "{reference} was stored");
        assert_eq!(
            d.stored_content(),
            empty,
            "{reference}: the refused pull stored content"
        );
    }

    d.try_pull(&signed)
        .await
        .unwrap_or_else(|e| panic!("pull of the signed image: {e}\n{}", d.log()));
    assert_eq!(images(&mut d).await, [signed.as_str()]);
    assert!(d.stored_content() > empty);

    // A policy whose key file went away: the pull says which file and field, and pulls nothing.
    std::fs::remove_file(trusted.public()).unwrap();
    let e = d.try_pull(&unsigned).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("keyPath") && e.message().contains("cosign.pub"),
        "{}",
        e.message()
    );
    drop(policy);
}

fn sig_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1) + ".sig"
}

/// Puts the manifest of `repo:from` under `repo:to` as well, byte for byte.
fn copy_manifest(reg: &Images, repo: &str, from: &str, to: &str) {
    let accept = "application/vnd.oci.image.manifest.v1+json";
    let (status, headers, body) = reg
        .registry
        .http(
            "GET",
            &format!("/v2/{repo}/manifests/{from}"),
            &[("Accept", accept)],
            b"",
        )
        .unwrap();
    assert_eq!(status, 200, "GET {repo}:{from}");
    let ct = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| accept.into());
    let (status, _, resp) = reg
        .registry
        .http(
            "PUT",
            &format!("/v2/{repo}/manifests/{to}"),
            &[("Content-Type", &ct)],
            &body,
        )
        .unwrap();
    assert_eq!(
        status,
        201,
        "PUT {repo}:{to}: {}",
        String::from_utf8_lossy(&resp)
    );
}

/// A file in a directory of its own (kept as long as the pair lives).
fn reg_dir_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("peapod-policy-")
        .tempdir()
        .unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}
