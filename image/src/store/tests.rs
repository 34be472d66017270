use super::*;
use crate::digest;

async fn store() -> (tempfile::TempDir, Arc<Store>) {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&tmp.path().join("root"), RegistryConfig::default())
        .await
        .unwrap();
    (tmp, s)
}

fn files(marker: &str) -> Vec<(String, Vec<u8>, u32)> {
    vec![
        (
            "etc/passwd".into(),
            b"root:x:0:0::/root:/bin/sh\nu:x:1000:100::/home/u:/bin/sh\n".to_vec(),
            0o644,
        ),
        (
            "etc/group".into(),
            b"root:x:0:\nusers:x:100:\nextra:x:7:u\n".to_vec(),
            0o644,
        ),
        ("marker".into(), marker.as_bytes().to_vec(), 0o600),
    ]
}

/// The daemon calls these from tonic handlers, which need Send futures.
#[allow(dead_code)]
fn futures_are_send(s: Arc<Store>, p: &Path) {
    fn send<T: Send>(_: T) {}
    send(s.pull("x", None));
    send(s.import(p));
    send(s.remove("x"));
    send(s.untag("x"));
    send(s.add_local_image("x", &[], ImageConfig::default()));
    send(s.create_rootfs("x", "c", p, false));
    send(s.remove_rootfs("c", p));
    send(s.config_json("x"));
    send(Store::open(p, RegistryConfig::default()));
    fn sync<T: Send + Sync>(_: &T) {}
    sync(&s);
}

#[tokio::test]
async fn resolve_by_everything() {
    let (_t, s) = store().await;
    let a = s
        .add_local_image("busybox:a", &files("a"), ImageConfig::default())
        .await
        .unwrap();
    let b = s
        .add_local_image("example.com/x/y:1", &files("b"), ImageConfig::default())
        .await
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(a.repo_tags, vec!["docker.io/library/busybox:a"]);
    let id_of = |r: &str| s.resolve(r).map(|i| i.id);
    assert_eq!(id_of("busybox:a").as_deref(), Some(a.id.as_str()));
    assert_eq!(
        id_of("docker.io/library/busybox:a").as_deref(),
        Some(a.id.as_str())
    );
    assert_eq!(id_of(&a.id).as_deref(), Some(a.id.as_str()));
    assert_eq!(id_of(hex_of(&a.id)).as_deref(), Some(a.id.as_str()));
    assert_eq!(id_of(&hex_of(&b.id)[..12]).as_deref(), Some(b.id.as_str()));
    assert_eq!(
        id_of(&format!("sha256:{}", &hex_of(&b.id)[..8])).as_deref(),
        Some(b.id.as_str())
    );
    assert_eq!(id_of("example.com/x/y:1").as_deref(), Some(b.id.as_str()));
    assert_eq!(id_of("busybox"), None, "no :latest tag");
    assert_eq!(id_of(""), None);
    assert_eq!(id_of("sha256:"), None, "empty prefix is ambiguous");
    // A repo digest resolves too.
    let d = digest::sha256_digest(b"manifest");
    s.inner()
        .images
        .get_mut(&a.id)
        .unwrap()
        .repo_digests
        .push(format!("docker.io/library/busybox@{d}"));
    assert_eq!(
        id_of(&format!("busybox@{d}")).as_deref(),
        Some(a.id.as_str())
    );
    // An ambiguous prefix resolves to nothing: find the longest common prefix.
    let (ha, hb) = (hex_of(&a.id), hex_of(&b.id));
    let common = ha
        .chars()
        .zip(hb.chars())
        .take_while(|(x, y)| x == y)
        .count();
    if common > 0 {
        assert_eq!(id_of(&ha[..common]), None);
    }
}

#[tokio::test]
async fn tags_move_and_remove_semantics() {
    let (_t, s) = store().await;
    let a = s
        .add_local_image("img:v1", &files("a"), ImageConfig::default())
        .await
        .unwrap();
    let a2 = s
        .add_local_image("img:latest", &files("a"), ImageConfig::default())
        .await
        .unwrap();
    assert_eq!(a.id, a2.id, "same content, same id");
    assert_eq!(s.resolve(&a.id).unwrap().repo_tags.len(), 2);
    // the tag moves to another image
    let b = s
        .add_local_image("img:v1", &files("b"), ImageConfig::default())
        .await
        .unwrap();
    assert_eq!(
        s.resolve(&a.id).unwrap().repo_tags,
        vec!["docker.io/library/img:latest"]
    );
    assert_eq!(s.resolve("img:v1").unwrap().id, b.id);
    // untag removes one name; the image goes with its last one
    s.add_local_image("img:v2", &files("b"), ImageConfig::default())
        .await
        .unwrap();
    s.untag("img:v1").await.unwrap();
    assert!(s.resolve(&b.id).is_some());
    s.untag("img:v2").await.unwrap();
    assert!(s.resolve(&b.id).is_none());
    // remove by tag removes the whole image, all tags
    s.add_local_image("img:other", &files("a"), ImageConfig::default())
        .await
        .unwrap();
    s.remove("img:latest").await.unwrap();
    assert!(s.resolve(&a.id).is_none());
    assert!(s.resolve("img:other").is_none());
    s.remove("img:latest").await.unwrap();
    s.remove("nothing-here").await.unwrap();
    assert!(s.list().is_empty());
    assert!(
        s.inner().layers.is_empty(),
        "unreferenced layers are collected"
    );
}

#[tokio::test]
async fn state_survives_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let id = {
        let s = Store::open(&root, RegistryConfig::default()).await.unwrap();
        assert!(
            Store::open(&root, RegistryConfig::default()).await.is_err(),
            "second opener is refused"
        );
        let cfg = ImageConfig {
            user: "u".into(),
            env: vec!["A=1".into()],
            cmd: vec!["sh".into()],
            ..Default::default()
        };
        let img = s
            .add_local_image("pause:3.10", &files("p"), cfg)
            .await
            .unwrap();
        s.set_pinned("pause:3.10", true).await.unwrap();
        img.id
    };
    let s = Store::open(&root, RegistryConfig::default()).await.unwrap();
    let img = s.resolve("pause:3.10").unwrap();
    assert_eq!(img.id, id);
    assert!(img.pinned);
    assert_eq!(img.config.user, "u");
    assert_eq!(img.config.cmd, vec!["sh"]);
    let info = s.fs_info();
    assert!(info.image.used_bytes > 0 && info.image.inodes_used > 0);
    let cfg: serde_json::Value =
        serde_json::from_slice(&s.config_json("pause:3.10").await.unwrap()).unwrap();
    assert_eq!(cfg["config"]["User"], "u");
    assert_eq!(s.layers(&id).unwrap().len(), 1);
}
