//! RFC 3339 timestamps with nanoseconds, without a calendar crate.
//!
//! CRI log lines start with the time in the layout Go writes as
//! `2006-01-02T15:04:05.000000000Z07:00` (always nine fractional digits, UTC `Z`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Formats nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ`.
pub fn rfc3339_nano(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day) (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_nano(0), "1970-01-01T00:00:00.000000000Z");
        // The example line in the CRI's constants.go.
        assert_eq!(
            rfc3339_nano(1_475_713_029_669_794_202),
            "2016-10-06T00:17:09.669794202Z"
        );
        // A leap day.
        assert_eq!(
            rfc3339_nano(1_709_164_800_000_000_001),
            "2024-02-29T00:00:00.000000001Z"
        );
    }
}
