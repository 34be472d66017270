//! Go's duration strings (`time.ParseDuration`), which Kubernetes tools and containerd's
//! files use: a number and a unit (ns, us, µs, ms, s, m, h), possibly several (`1m30s`).

use std::time::Duration;

/// `s` as a duration, or None when it is not one (a bare number has no unit, so is not).
/// Never panics: a value past what a Duration holds is None.
pub fn parse_go(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total = total.checked_add(Duration::try_from_secs_f64(n * secs).ok()?)?;
        rest = &rest[unit_end..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_go("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go("1h2m"), Some(Duration::from_secs(3720)));
        assert_eq!(parse_go("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "5", "s", "5 s", "-1s", "1d", "99999999999999999999999h"] {
            assert_eq!(parse_go(bad), None, "{bad}");
        }
    }
}
