//! Small path and list helpers.

/// Lexically cleans a slash-separated path the way Go's `filepath.Clean` does (which is what
/// containerd compares mount destinations with): no repeated or trailing slashes, no `.`,
/// `..` resolved against the preceding element (and dropped at the root).
pub(crate) fn clean_path(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// Appends `item` unless it is already there (keeps first-seen order).
pub(crate) fn push_unique<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::clean_path;

    #[test]
    fn clean_path_matches_go() {
        for (input, want) in [
            ("/", "/"),
            ("", "."),
            ("/etc/hosts", "/etc/hosts"),
            ("/etc//hosts/", "/etc/hosts"),
            ("/etc/./hosts", "/etc/hosts"),
            ("/etc/../hosts", "/hosts"),
            ("/../../x", "/x"),
            ("a/../..", ".."),
            ("a/b/", "a/b"),
        ] {
            assert_eq!(clean_path(input), want, "clean({input:?})");
        }
    }
}
