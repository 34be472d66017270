//! CDI names: a spec's `kind` (`vendor/class`), a device's name, and the fully-qualified
//! device name a container asks for (`vendor/class=name`), with the character rules of the
//! CDI specification (and its reference parser, which the kubelet's names follow).

/// A fully-qualified device name split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QualifiedName<'a> {
    pub vendor: &'a str,
    pub class: &'a str,
    pub name: &'a str,
}

/// `vendor/class=name`, each part checked; the error says which part is wrong and why.
pub(crate) fn parse_qualified(device: &str) -> Result<QualifiedName<'_>, String> {
    let Some((kind, name)) = device.split_once('=') else {
        return Err("not a fully-qualified CDI device name (vendor.com/class=name)".into());
    };
    let (vendor, class) = parse_kind(kind)?;
    check_device_name(name)?;
    Ok(QualifiedName {
        vendor,
        class,
        name,
    })
}

/// A spec's `kind`, `vendor/class`, checked and split.
pub(crate) fn parse_kind(kind: &str) -> Result<(&str, &str), String> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(format!("kind {kind:?} is not vendor/class"));
    };
    check_vendor_or_class("vendor", vendor)?;
    check_vendor_or_class("class", class)?;
    Ok((vendor, class))
}

fn alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// Vendor and class: a letter first, an alphanumeric last, and letters, digits, `_`, `-`, `.`
/// between.
fn check_vendor_or_class(what: &str, s: &str) -> Result<(), String> {
    let first_ok = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let last_ok = s.chars().last().is_some_and(alnum);
    let middle_ok = s.chars().all(|c| alnum(c) || matches!(c, '_' | '-' | '.'));
    if s.is_empty() {
        return Err(format!("empty {what}"));
    }
    if !(first_ok && last_ok && middle_ok) {
        return Err(format!(
            "{what} {s:?} must start with a letter, end with a letter or digit, and hold only \
             letters, digits, '_', '-' and '.'"
        ));
    }
    Ok(())
}

/// A device's name: alphanumeric at both ends, and letters, digits, `_`, `-`, `.`, `:` between.
pub(crate) fn check_device_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("empty device name".into());
    }
    let ends_ok = s.chars().next().is_some_and(alnum) && s.chars().last().is_some_and(alnum);
    let middle_ok = s
        .chars()
        .all(|c| alnum(c) || matches!(c, '_' | '-' | '.' | ':'));
    if !(ends_ok && middle_ok) {
        return Err(format!(
            "device name {s:?} must start and end with a letter or digit, and hold only \
             letters, digits, '_', '-', '.' and ':'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        let q = parse_qualified("example.com/resource=CDI-Dev-1").unwrap();
        assert_eq!(
            (q.vendor, q.class, q.name),
            ("example.com", "resource", "CDI-Dev-1")
        );
        let q = parse_qualified("nvidia.com/gpu=0").unwrap();
        assert_eq!(q.name, "0");
        assert!(parse_qualified("vendor.com/x.y_z=a:b.c").is_ok());
        for (bad, why) in [
            ("gpu0", "fully-qualified"),
            ("/dev/nvidia0", "fully-qualified"),
            ("vendor.com=gpu0", "vendor/class"),
            ("vendor.com/gpu=", "empty device name"),
            ("/gpu=0", "empty vendor"),
            ("vendor.com/=0", "empty class"),
            ("1vendor.com/gpu=0", "vendor"),
            ("vendor.com/gpu-=0", "class"),
            ("vendor.com/a/b=0", "class"),
            ("vendor.com/gpu=-0", "device name"),
            ("vendor.com/gpu=a b", "device name"),
            ("vendor.com/gpu=0=1", "device name"),
        ] {
            let err = parse_qualified(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(
            parse_kind("example.com/resource").unwrap(),
            ("example.com", "resource")
        );
        assert!(parse_kind("foo.bar.baz/foo-bar123.B_az").is_ok());
        for bad in ["foo", "vendor.com/foo/", "vendor.com/foo/bar", "v/"] {
            assert!(parse_kind(bad).is_err(), "{bad}");
        }
    }
}
