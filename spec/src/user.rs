//! Which user a container runs as: the CRI security context first, then the image's `User`.
//!
//! Resolving names needs the image's `/etc/passwd` and `/etc/group`, which only the daemon can
//! read (safely, inside the rootfs). So the daemon asks [`user_to_resolve`] what to look up,
//! reads the two files, and either resolves by itself or hands their text to
//! [`resolve_user`], and passes the [`ResolvedUser`] to `container_spec`.

use crate::error::{Result, SpecError};
use crate::ImageConfig;
use peapod_proto::v1::{ContainerConfig, SupplementalGroupsPolicy};
use serde::{Deserialize, Serialize};

/// A user or group named either by number or by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserId {
    Id(u32),
    Name(String),
}

/// What the daemon must look up in the image before building the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRequest {
    /// The user. `Id(uid)` without `group`: the primary gid is the passwd entry's gid for
    /// that uid, or 0 when there is no entry (not an error). `Name`: must exist in
    /// `/etc/passwd` (else the request is invalid); uid and primary gid come from it.
    pub user: UserId,
    /// An explicit primary group. `Name` must exist in `/etc/group`.
    pub group: Option<UserId>,
    /// Whose memberships in the image's `/etc/group` become supplementary groups
    /// (`SupplementalGroupsPolicy` Merge). `Id(uid)` is first mapped to its passwd name (no
    /// entry: no groups); groups named like the user itself are not counted. `None` under
    /// the Strict policy.
    pub groups_of: Option<UserId>,
    /// Where the user came from, for error messages (a CRI field or the image config).
    pub source: String,
}

/// The result of resolving a [`UserRequest`] against the image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// The gids of the groups `groups_of` is a member of in the image's `/etc/group`
    /// (without the primary gid and without the CRI supplemental groups: `container_spec`
    /// adds those).
    pub additional_gids: Vec<u32>,
}

const SC: &str = "config.linux.security_context";
const IMAGE_USER: &str = "image config User";

/// runc refuses ids above `i32::MAX`; so do containerd and we.
const MAX_ID: i64 = i32::MAX as i64;

fn id_in_range(v: i64, what: &str) -> Result<u32> {
    if (0..=MAX_ID).contains(&v) {
        Ok(v as u32)
    } else {
        Err(SpecError::invalid(format!(
            "{what}: {v} is out of range (0..={MAX_ID})"
        )))
    }
}

/// One side of a `user[:group]` string: a number is an id, anything else a name.
fn part(s: &str, what: &str) -> Result<UserId> {
    if s.is_empty() {
        return Err(SpecError::invalid(format!("{what}: empty user or group")));
    }
    let numeric = s.strip_prefix(['+', '-']).unwrap_or(s);
    if !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()) {
        let v: i64 = s
            .parse()
            .map_err(|_| SpecError::invalid(format!("{what}: {s:?} is out of range")))?;
        return Ok(UserId::Id(id_in_range(v, what)?));
    }
    Ok(UserId::Name(s.to_string()))
}

/// Parses an OCI image `User` (`user`, `uid`, `user:group`, `uid:gid`, `uid:group`, `user:gid`).
pub fn parse_user_spec(spec: &str) -> Result<(UserId, Option<UserId>)> {
    let what = format!("{IMAGE_USER} {spec:?}");
    let mut it = spec.split(':');
    let user = part(it.next().unwrap_or(""), &what)?;
    let group = it.next().map(|g| part(g, &what)).transpose()?;
    if it.next().is_some() {
        return Err(SpecError::invalid(format!("{what}: too many ':'")));
    }
    Ok((user, group))
}

/// Decides, containerd's way, which user and groups the container's process gets:
///
/// * `run_as_username` (a numeric one is a uid), else `run_as_user`, plus `run_as_group` as
///   the primary group; `run_as_group` without either is refused, as the CRI demands;
/// * else the image's `User` (`user[:group]`);
/// * else root (`0:0`, no lookup).
///
/// Supplementary groups from the image follow `supplemental_groups_policy`: Merge (the
/// default) looks up the memberships of that same user (root when none is set); Strict
/// takes none from the image.
pub fn user_to_resolve(config: &ContainerConfig, image: &ImageConfig) -> Result<UserRequest> {
    let sc = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    if sc.run_as_group.is_some() && sc.run_as_user.is_none() && sc.run_as_username.is_empty() {
        return Err(SpecError::invalid(format!(
            "{SC}.run_as_group requires {SC}.run_as_user or {SC}.run_as_username"
        )));
    }
    let cri_user = if !sc.run_as_username.is_empty() {
        let what = format!("{SC}.run_as_username");
        if sc.run_as_username.contains(':') {
            return Err(SpecError::invalid(format!(
                "{what}: {:?} is not a user name",
                sc.run_as_username
            )));
        }
        Some((part(&sc.run_as_username, &what)?, what))
    } else if let Some(uid) = &sc.run_as_user {
        let what = format!("{SC}.run_as_user");
        Some((UserId::Id(id_in_range(uid.value, &what)?), what))
    } else {
        None
    };
    let (user, group, source) = match cri_user {
        Some((user, source)) => {
            let group = sc
                .run_as_group
                .as_ref()
                .map(|g| id_in_range(g.value, &format!("{SC}.run_as_group")).map(UserId::Id))
                .transpose()?;
            (user, group, source)
        }
        None if !image.user.is_empty() => {
            let (user, group) = parse_user_spec(&image.user)?;
            (user, group, IMAGE_USER.to_string())
        }
        None => (
            UserId::Id(0),
            Some(UserId::Id(0)),
            "default user".to_string(),
        ),
    };
    let policy =
        SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy).map_err(|_| {
            SpecError::invalid(format!(
                "{SC}.supplemental_groups_policy: unknown policy {}",
                sc.supplemental_groups_policy
            ))
        })?;
    let groups_of = match policy {
        SupplementalGroupsPolicy::Merge => Some(user.clone()),
        SupplementalGroupsPolicy::Strict => None,
    };
    Ok(UserRequest {
        user,
        group,
        groups_of,
        source,
    })
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

fn passwd_entries(text: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    text.lines().filter_map(|line| {
        if line.trim_start().starts_with('#') {
            return None;
        }
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 || f[0].is_empty() {
            return None;
        }
        Some(PasswdEntry {
            name: f[0],
            uid: f[2].trim().parse().ok()?,
            gid: f[3].trim().parse().ok()?,
        })
    })
}

fn group_entries(text: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    text.lines().filter_map(|line| {
        if line.trim_start().starts_with('#') {
            return None;
        }
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 3 || f[0].is_empty() {
            return None;
        }
        Some(GroupEntry {
            name: f[0],
            gid: f[2].trim().parse().ok()?,
            members: f
                .get(3)
                .map(|m| {
                    m.split(',')
                        .map(str::trim)
                        .filter(|m| !m.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    })
}

/// Resolves a [`UserRequest`] against the text of the image's `/etc/passwd` and `/etc/group`
/// (`None`: the file does not exist). Names that must exist but do not are invalid
/// arguments naming the request's source.
pub fn resolve_user(
    req: &UserRequest,
    passwd: Option<&str>,
    group: Option<&str>,
) -> Result<ResolvedUser> {
    let passwd = passwd.unwrap_or("");
    let groups = group.unwrap_or("");
    let (uid, passwd_gid) = match &req.user {
        UserId::Id(uid) => (
            *uid,
            passwd_entries(passwd)
                .find(|e| e.uid == *uid)
                .map(|e| e.gid)
                .unwrap_or(0),
        ),
        UserId::Name(name) => {
            let e = passwd_entries(passwd)
                .find(|e| e.name == name)
                .ok_or_else(|| {
                    SpecError::invalid(format!(
                        "{}: user {name:?} not found in the image's /etc/passwd",
                        req.source
                    ))
                })?;
            (e.uid, e.gid)
        }
    };
    let gid = match &req.group {
        None => passwd_gid,
        Some(UserId::Id(gid)) => *gid,
        Some(UserId::Name(name)) => {
            group_entries(groups)
                .find(|g| g.name == name)
                .ok_or_else(|| {
                    SpecError::invalid(format!(
                        "{}: group {name:?} not found in the image's /etc/group",
                        req.source
                    ))
                })?
                .gid
        }
    };
    let member = match &req.groups_of {
        None => None,
        Some(UserId::Name(n)) => Some(n.as_str()),
        Some(UserId::Id(u)) => passwd_entries(passwd).find(|e| e.uid == *u).map(|e| e.name),
    };
    let mut additional_gids = Vec::new();
    if let Some(member) = member {
        for g in group_entries(groups) {
            if g.name != member && g.members.contains(&member) && !additional_gids.contains(&g.gid)
            {
                additional_gids.push(g.gid);
            }
        }
    }
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids,
    })
}

/// The process's final supplementary groups, as containerd computes them: the primary gid,
/// the image memberships (unless the Strict policy), and the CRI `supplemental_groups`,
/// deduplicated and sorted.
pub(crate) fn additional_gids(
    user: &ResolvedUser,
    supplemental: &[i64],
    strict: bool,
) -> Result<Vec<u32>> {
    let mut gids = vec![user.gid];
    if !strict {
        gids.extend(&user.additional_gids);
    }
    for g in supplemental {
        gids.push(u32::try_from(*g).map_err(|_| {
            SpecError::invalid(format!("{SC}.supplemental_groups: {g} is out of range"))
        })?);
    }
    gids.sort_unstable();
    gids.dedup();
    Ok(gids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::{Int64Value, LinuxContainerConfig, LinuxContainerSecurityContext};

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        # a comment\n\
        daemon:x:1:1::/:/sbin/nologin\n\
        www:x:33:33:www:/var/www:/bin/sh\n\
        broken line\n\
        app:x:1000:1001::/home/app:/bin/sh\n";
    const GROUP: &str = "root:x:0:root\n\
        wheel:x:10:root,app\n\
        www:x:33:www\n\
        app:x:1001:app\n\
        video:x:44: app , www\n\
        staff:x:50:\n";

    fn config(sc: LinuxContainerSecurityContext) -> ContainerConfig {
        ContainerConfig {
            linux: Some(LinuxContainerConfig {
                security_context: Some(sc),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn image_user(u: &str) -> ImageConfig {
        ImageConfig {
            user: u.into(),
            ..Default::default()
        }
    }

    fn v(x: i64) -> Option<Int64Value> {
        Some(Int64Value { value: x })
    }

    fn resolve(cfg: &ContainerConfig, image: &ImageConfig) -> Result<ResolvedUser> {
        let req = user_to_resolve(cfg, image)?;
        resolve_user(&req, Some(PASSWD), Some(GROUP))
    }

    fn ru(uid: u32, gid: u32, extra: &[u32]) -> ResolvedUser {
        ResolvedUser {
            uid,
            gid,
            additional_gids: extra.to_vec(),
        }
    }

    #[test]
    fn user_table() {
        let none = LinuxContainerSecurityContext::default;
        let cases: Vec<(&str, LinuxContainerSecurityContext, &str, ResolvedUser)> = vec![
            ("nothing: root", none(), "", ru(0, 0, &[10])),
            (
                "run_as_user with passwd entry takes its gid",
                LinuxContainerSecurityContext {
                    run_as_user: v(1000),
                    ..none()
                },
                "",
                ru(1000, 1001, &[10, 44]),
            ),
            (
                "run_as_user without entry: gid 0, no groups",
                LinuxContainerSecurityContext {
                    run_as_user: v(4242),
                    ..none()
                },
                "",
                ru(4242, 0, &[]),
            ),
            (
                "run_as_user + run_as_group",
                LinuxContainerSecurityContext {
                    run_as_user: v(1000),
                    run_as_group: v(7),
                    ..none()
                },
                "",
                ru(1000, 7, &[10, 44]),
            ),
            (
                "run_as_username",
                LinuxContainerSecurityContext {
                    run_as_username: "www".into(),
                    ..none()
                },
                "",
                ru(33, 33, &[44]),
            ),
            (
                "numeric run_as_username is a uid",
                LinuxContainerSecurityContext {
                    run_as_username: "1000".into(),
                    ..none()
                },
                "",
                ru(1000, 1001, &[10, 44]),
            ),
            (
                "run_as_username wins over run_as_user",
                LinuxContainerSecurityContext {
                    run_as_username: "www".into(),
                    run_as_user: v(1000),
                    ..none()
                },
                "",
                ru(33, 33, &[44]),
            ),
            (
                "run_as_username + run_as_group",
                LinuxContainerSecurityContext {
                    run_as_username: "app".into(),
                    run_as_group: v(50),
                    ..none()
                },
                "",
                ru(1000, 50, &[10, 44]),
            ),
            (
                "CRI user overrides the image user",
                LinuxContainerSecurityContext {
                    run_as_user: v(33),
                    ..none()
                },
                "app",
                ru(33, 33, &[44]),
            ),
            ("image user name", none(), "app", ru(1000, 1001, &[10, 44])),
            ("image uid", none(), "33", ru(33, 33, &[44])),
            (
                "image uid:gid, no lookup of gid",
                none(),
                "33:50",
                ru(33, 50, &[44]),
            ),
            (
                "image name:group",
                none(),
                "app:staff",
                ru(1000, 50, &[10, 44]),
            ),
            ("image uid:group", none(), "4242:video", ru(4242, 44, &[])),
            ("image name:gid", none(), "www:0", ru(33, 0, &[44])),
            (
                "Strict policy: no image groups",
                LinuxContainerSecurityContext {
                    run_as_user: v(1000),
                    supplemental_groups_policy: SupplementalGroupsPolicy::Strict as i32,
                    ..none()
                },
                "",
                ru(1000, 1001, &[]),
            ),
        ];
        for (name, sc, image, want) in cases {
            let got =
                resolve(&config(sc), &image_user(image)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn requests_say_what_to_look_up() {
        let req = user_to_resolve(&ContainerConfig::default(), &ImageConfig::default()).unwrap();
        assert_eq!(req.user, UserId::Id(0));
        assert_eq!(req.group, Some(UserId::Id(0)));
        assert_eq!(req.groups_of, Some(UserId::Id(0)));
        let req = user_to_resolve(&ContainerConfig::default(), &image_user("app:staff")).unwrap();
        assert_eq!(req.user, UserId::Name("app".into()));
        assert_eq!(req.group, Some(UserId::Name("staff".into())));
        assert_eq!(req.groups_of, Some(UserId::Name("app".into())));
    }

    #[test]
    fn run_as_group_without_user_is_refused() {
        let sc = LinuxContainerSecurityContext {
            run_as_group: v(5),
            ..Default::default()
        };
        let e = user_to_resolve(&config(sc), &image_user("app")).unwrap_err();
        assert!(
            matches!(&e, SpecError::InvalidArgument(m)
            if m.contains("config.linux.security_context.run_as_group requires")),
            "{e}"
        );
    }

    #[test]
    fn missing_names_and_bad_values_are_refused() {
        let sc = LinuxContainerSecurityContext {
            run_as_username: "ghost".into(),
            ..Default::default()
        };
        let e = resolve(&config(sc), &ImageConfig::default()).unwrap_err();
        assert!(
            matches!(&e, SpecError::InvalidArgument(m)
            if m.contains("run_as_username") && m.contains("ghost")),
            "{e}"
        );
        let e = resolve(&ContainerConfig::default(), &image_user("app:nogroup")).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("nogroup")));
        for bad in ["a:b:c", ":5", "-1", "99999999999"] {
            assert!(
                resolve(&ContainerConfig::default(), &image_user(bad)).is_err(),
                "{bad}"
            );
        }
        let sc = LinuxContainerSecurityContext {
            run_as_user: v(-3),
            ..Default::default()
        };
        assert!(user_to_resolve(&config(sc), &ImageConfig::default()).is_err());
        let sc = LinuxContainerSecurityContext {
            run_as_user: v(1),
            supplemental_groups_policy: 7,
            ..Default::default()
        };
        assert!(user_to_resolve(&config(sc), &ImageConfig::default()).is_err());
    }

    #[test]
    fn no_passwd_file() {
        let req = user_to_resolve(&ContainerConfig::default(), &image_user("1000")).unwrap();
        assert_eq!(resolve_user(&req, None, None).unwrap(), ru(1000, 0, &[]));
        let req = user_to_resolve(&ContainerConfig::default(), &image_user("app")).unwrap();
        assert!(resolve_user(&req, None, None).is_err());
    }

    #[test]
    fn final_gids_merge_sort_and_dedup() {
        let u = ru(1000, 1001, &[44, 10]);
        assert_eq!(
            additional_gids(&u, &[5, 44], false).unwrap(),
            vec![5, 10, 44, 1001]
        );
        assert_eq!(additional_gids(&u, &[5], true).unwrap(), vec![5, 1001]);
        assert_eq!(
            additional_gids(&ru(0, 0, &[]), &[], false).unwrap(),
            vec![0]
        );
        assert!(additional_gids(&u, &[-1], false).is_err());
    }
}
