//! Users and groups of an image: the `User` field of its config, and the
//! image's own /etc/passwd and /etc/group (what runc's `GetExecUser` does,
//! done before the container exists so the OCI spec can carry numeric ids).

use crate::Error;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupEntry {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

pub(crate) fn parse_passwd(s: &str) -> Vec<PasswdEntry> {
    s.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 4 {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].trim().parse().ok()?,
                gid: f[3].trim().parse().ok()?,
            })
        })
        .collect()
}

pub(crate) fn parse_group(s: &str) -> Vec<GroupEntry> {
    s.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 3 {
                return None;
            }
            Some(GroupEntry {
                name: f[0].to_string(),
                gid: f[2].trim().parse().ok()?,
                members: f
                    .get(3)
                    .map(|m| {
                        m.split(',')
                            .map(str::trim)
                            .filter(|x| !x.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Resolves `user[:group]` against the image's passwd/group contents.
///
/// - empty user: uid 0 (gid from root's passwd line, else 0);
/// - numeric user: that uid; gid from its passwd line if any, else 0;
/// - a name: must be in passwd (NotFound otherwise);
/// - a group (numeric or a name that must be in /etc/group) overrides the gid;
/// - additional gids: the groups in /etc/group listing the user's name as a
///   member, other than the primary gid, in file order.
pub(crate) fn resolve_user(
    spec: &str,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<(u32, u32, Vec<u32>), Error> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entry = if user.is_empty() {
        passwd
            .iter()
            .find(|p| p.uid == 0)
            .cloned()
            .or(Some(PasswdEntry {
                name: "root".into(),
                uid: 0,
                gid: 0,
            }))
    } else if let Ok(uid) = user.parse::<u32>() {
        passwd
            .iter()
            .find(|p| p.uid == uid)
            .cloned()
            .or(Some(PasswdEntry {
                name: String::new(),
                uid,
                gid: 0,
            }))
    } else {
        Some(
            passwd
                .iter()
                .find(|p| p.name == user)
                .cloned()
                .ok_or_else(|| {
                    Error::NotFound(format!("user {user:?} is not in the image's /etc/passwd"))
                })?,
        )
    };
    let entry = entry.unwrap_or(PasswdEntry {
        name: String::new(),
        uid: 0,
        gid: 0,
    });
    let gid = match group {
        None | Some("") => entry.gid,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => groups
                .iter()
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| {
                    Error::NotFound(format!("group {g:?} is not in the image's /etc/group"))
                })?,
        },
    };
    let mut extra = Vec::new();
    if !entry.name.is_empty() {
        for g in groups {
            if g.gid != gid && g.members.iter().any(|m| m == &entry.name) && !extra.contains(&g.gid)
            {
                extra.push(g.gid);
            }
        }
    }
    Ok((entry.uid, gid, extra))
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

    #[test]
    fn resolve_users() {
        let passwd = parse_passwd(
            "root:x:0:0:root:/root:/bin/sh\n# comment\nwww:x:33:33::/var/www:/bin/sh\nbroken:x\nalice:x:1000:1000::/home/alice:/bin/sh\n",
        );
        let groups = parse_group("root:x:0:\nwww:x:33:\nalice:x:1000:\naudio:x:29:alice,bob\nvideo:x:44:bob, alice\nstaff:x:50:\n");
        assert_eq!(passwd.len(), 3);
        assert_eq!(resolve_user("", &passwd, &groups).unwrap(), (0, 0, vec![]));
        assert_eq!(
            resolve_user("www", &passwd, &groups).unwrap(),
            (33, 33, vec![])
        );
        assert_eq!(
            resolve_user("alice", &passwd, &groups).unwrap(),
            (1000, 1000, vec![29, 44])
        );
        assert_eq!(
            resolve_user("1000", &passwd, &groups).unwrap(),
            (1000, 1000, vec![29, 44])
        );
        assert_eq!(
            resolve_user("alice:staff", &passwd, &groups).unwrap(),
            (1000, 50, vec![29, 44])
        );
        assert_eq!(
            resolve_user("alice:29", &passwd, &groups).unwrap(),
            (1000, 29, vec![44])
        );
        assert_eq!(
            resolve_user("4242", &passwd, &groups).unwrap(),
            (4242, 0, vec![])
        );
        assert_eq!(
            resolve_user("4242:7", &passwd, &groups).unwrap(),
            (4242, 7, vec![])
        );
        assert!(matches!(
            resolve_user("nobody", &passwd, &groups),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            resolve_user("alice:nogroup", &passwd, &groups),
            Err(Error::NotFound(_))
        ));
        assert_eq!(resolve_user("0", &[], &[]).unwrap(), (0, 0, vec![]));
    }
}
