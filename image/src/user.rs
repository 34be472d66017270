//! The user of an image as CRI ImageStatus reports it. Resolving users against an image's
//! /etc/passwd and /etc/group is `peapod_spec::user` (the daemon reads those files from the
//! container's root filesystem with `peapod_host::rootfs`).

/// `uid`/`username` for CRI ImageStatus from the config's `User`, as
/// containerd reports them: a numeric user (`1000`, `1000:1000`) gives the uid,
/// a name (`nobody`, `nobody:nogroup`) the username; empty gives neither
/// (kubelet then treats the image as running as root).
pub fn image_user(config_user: &str) -> (Option<i64>, String) {
    let user = config_user.split(':').next().unwrap_or("");
    if user.is_empty() {
        return (None, String::new());
    }
    match user.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_user_table() {
        assert_eq!(image_user(""), (None, String::new()));
        assert_eq!(image_user("0"), (Some(0), String::new()));
        assert_eq!(image_user("1000"), (Some(1000), String::new()));
        assert_eq!(image_user("1000:1000"), (Some(1000), String::new()));
        assert_eq!(image_user("nobody"), (None, "nobody".into()));
        assert_eq!(image_user("nobody:nogroup"), (None, "nobody".into()));
    }
}
