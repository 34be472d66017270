//! Bounded retries of registry requests: a registry that is overloaded (429), failing for a
//! moment (500, 502, 503, 504) or that drops the connection gets a few more tries, spaced by
//! its `Retry-After` when it sends one (capped) and by exponential back-off otherwise. The
//! whole pull stays bounded by `registry.pull_timeout_seconds`; a download cut in the middle is
//! resumed where it stopped (`store/download.rs`).

use std::time::Duration;

/// Tries of one request in all (the first and the retries).
pub(crate) const MAX_TRIES: u32 = 5;
/// The first back-off; it doubles per retry.
const FIRST_DELAY: Duration = Duration::from_millis(250);
/// No wait is longer than this, whatever a Retry-After asks.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// Whether a response status says "try again later".
pub(crate) fn retryable_status(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || matches!(status.as_u16(), 500 | 502 | 503 | 504)
}

/// Whether a failed send (no response) may succeed when tried again: a refused, reset or
/// dropped connection, not a timeout (the registry was reached and did not answer: the idle
/// timeout already waited) nor a malformed request.
pub(crate) fn retryable_send(e: &reqwest::Error) -> bool {
    !e.is_timeout() && (e.is_connect() || e.is_request())
}

/// `Retry-After` as seconds (the HTTP-date form is read as the cap: a registry that names a
/// date far off is not waited for longer than [`MAX_DELAY`]).
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    Some(match v.parse::<u64>() {
        Ok(s) => Duration::from_secs(s),
        Err(_) => MAX_DELAY,
    })
}

/// The waits between the tries of one request.
#[derive(Debug)]
pub(crate) struct Backoff {
    tries: u32,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { tries: 1 }
    }

    /// The wait before the next try, or None when the tries are used up; `asked` is the
    /// registry's Retry-After.
    pub(crate) fn next(&mut self, asked: Option<Duration>) -> Option<Duration> {
        if self.tries >= MAX_TRIES {
            return None;
        }
        let exp = FIRST_DELAY * 2u32.pow(self.tries - 1);
        self.tries += 1;
        Some(asked.unwrap_or(exp).min(MAX_DELAY))
    }

    /// Tries made so far.
    pub(crate) fn tries(&self) -> u32 {
        self.tries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_exponentially_honours_retry_after_and_stops() {
        let mut b = Backoff::new();
        assert_eq!(b.next(None), Some(Duration::from_millis(250)));
        assert_eq!(
            b.next(Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(b.next(None), Some(Duration::from_millis(1000)));
        assert_eq!(b.next(Some(Duration::from_secs(3600))), Some(MAX_DELAY));
        assert_eq!(b.next(None), None, "five tries in all");
        assert_eq!(b.tries(), MAX_TRIES);
    }

    #[test]
    fn retry_after_in_seconds_or_a_date() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(MAX_DELAY));
    }

    #[test]
    fn which_statuses_are_retried() {
        for s in [429u16, 500, 502, 503, 504] {
            assert!(
                retryable_status(reqwest::StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
        }
        for s in [400u16, 401, 403, 404, 501] {
            assert!(
                !retryable_status(reqwest::StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
        }
    }
}
