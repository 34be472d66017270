//! Kubernetes resource quantities ("250m", "1.5", "64Mi", "1e3") as exact integers: CPU in
//! millicores and memory in bytes, both rounded up as the API server's `MilliValue`/`Value` do.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)]
pub struct QuantityError;

/// A parsed quantity: `digits × 10^pow10 × 2^pow2`, with its sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    digits: u128,
    pow10: i32,
    pow2: u32,
}

fn parse(text: &str) -> Result<Parsed, QuantityError> {
    let s = text.trim();
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(QuantityError);
    }
    let mut digits: u128 = 0;
    let mut pow10: i32 = 0;
    let mut after_dot = false;
    for c in number.chars() {
        if c == '.' {
            after_dot = true;
            continue;
        }
        // Far more digits than any real quantity: refuse rather than overflow.
        digits = digits
            .checked_mul(10)
            .and_then(|d| d.checked_add(u128::from(c as u8 - b'0')))
            .ok_or(QuantityError)?;
        if after_dot {
            pow10 -= 1;
        }
    }
    let (add10, pow2) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| QuantityError)?;
            if !(-30..=30).contains(&e) {
                return Err(QuantityError);
            }
            (e, 0)
        }
        _ => return Err(QuantityError),
    };
    Ok(Parsed {
        negative,
        digits,
        pow10: pow10 + add10,
        pow2,
    })
}

/// `value × 10^extra10`, rounded up (away from zero), saturating at i64::MAX.
fn scaled(p: Parsed, extra10: i32) -> i64 {
    let mut v: u128 = p.digits;
    let mut remainder = false;
    for _ in 0..p.pow2 {
        v = v.saturating_mul(2);
    }
    let e = p.pow10 + extra10;
    if e >= 0 {
        for _ in 0..e {
            v = v.saturating_mul(10);
        }
    } else {
        for _ in 0..(-e) {
            if !v.is_multiple_of(10) {
                remainder = true;
            }
            v /= 10;
        }
        if remainder {
            v += 1;
        }
    }
    let v = i64::try_from(v).unwrap_or(i64::MAX);
    if p.negative {
        -v
    } else {
        v
    }
}

/// Checks the syntax only.
pub fn validate(text: &str) -> Result<(), QuantityError> {
    parse(text).map(|_| ())
}

/// Whether the quantity is negative (invalid for requests and limits).
pub fn is_negative(text: &str) -> bool {
    parse(text)
        .map(|p| p.negative && p.digits != 0)
        .unwrap_or(false)
}

/// Millicores ("250m" → 250, "2" → 2000), rounded up.
pub fn milli_value(text: &str) -> Result<i64, QuantityError> {
    parse(text).map(|p| scaled(p, 3))
}

/// Whole units, e.g. bytes ("64Mi" → 67108864), rounded up.
pub fn value(text: &str) -> Result<i64, QuantityError> {
    parse(text).map(|p| scaled(p, 0))
}

/// Millicores as a canonical quantity string ("1500m", "2").
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Bytes as a canonical quantity string ("64Mi", "1Gi", "1000").
pub fn format_bytes(bytes: i64) -> String {
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        let unit = 1i64 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_in_millicores() {
        for (q, m) in [
            ("250m", 250),
            ("1", 1000),
            ("0.5", 500),
            ("1.5", 1500),
            ("2", 2000),
            ("100u", 1),
            ("1e3", 1_000_000),
            ("0", 0),
            ("0.0001", 1),
            ("1k", 1_000_000),
        ] {
            assert_eq!(milli_value(q), Ok(m), "{q}");
        }
    }

    #[test]
    fn memory_in_bytes() {
        for (q, b) in [
            ("64Mi", 64 << 20),
            ("1Gi", 1 << 30),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 123 << 20),
            ("1.5Gi", 3 << 29),
            ("1k", 1000),
            ("1Ki", 1024),
            ("500m", 1),
        ] {
            assert_eq!(value(q), Ok(b), "{q}");
        }
    }

    #[test]
    fn bad_quantities_are_refused() {
        for q in [
            "", "abc", "1.2.3", "12x", "1KiB", "Mi", ".", "1e", "--1", "1e99",
        ] {
            assert_eq!(validate(q), Err(QuantityError), "{q}");
        }
        assert!(is_negative("-1"));
        assert!(!is_negative("0"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_milli(1500), "1500m");
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_bytes(64 << 20), "64Mi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
