//! HTTP (feature `http`): which status codes are worth a retry, and when
//! the server asked to be called again.
//!
//! ```
//! # extern crate retry_runtime as backstop;
//! use std::time::{Duration, SystemTime};
//! use http::{header::RETRY_AFTER, HeaderMap, StatusCode};
//! use backstop::{http::retry_after, Classify, Verdict};
//!
//! assert_eq!(StatusCode::SERVICE_UNAVAILABLE.classify(), Verdict::Retry);
//! assert_eq!(StatusCode::NOT_FOUND.classify(), Verdict::Stop);
//!
//! let mut headers = HeaderMap::new();
//! headers.insert(RETRY_AFTER, "120".parse().unwrap());
//! assert_eq!(retry_after(&headers, SystemTime::now()), Some(Duration::from_secs(120)));
//! ```

use std::time::{Duration, SystemTime};

use crate::classify::{Classify, Verdict};

/// DESIGN's HTTP rule: 408, 425, 429, 500, 502, 503 and 504 are worth a
/// retry (the server was busy, restarting or briefly unreachable); every
/// other 4xx is the request's fault, and 501 or 505 and above will not
/// change on a retry: [`Verdict::Stop`]. A 429 or 503 that came with a
/// `Retry-After` header is better classified with [`retry_after`], as
/// [`Verdict::RetryAfter`].
impl Classify for ::http::StatusCode {
    fn classify(&self) -> Verdict {
        match self.as_u16() {
            408 | 425 | 429 | 500 | 502 | 503 | 504 => Verdict::Retry,
            _ => Verdict::Stop,
        }
    }
}

/// How long the server asked to wait, from its `Retry-After` header (RFC
/// 9110 §10.2.3): delta-seconds, or an HTTP-date in any of the three formats
/// recipients must accept (IMF-fixdate, RFC 850, asctime), measured from
/// `now`; a date already past means now. `None` without the header, or for
/// a value that is neither (empty, negative, fractional, too large, not a
/// date): a malformed header never panics and is never taken as zero.
///
/// ```
/// # extern crate retry_runtime as backstop;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use http::{header::RETRY_AFTER, HeaderMap};
/// use backstop::http::retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 60);
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap());
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(60)));
/// headers.insert(RETRY_AFTER, "-1".parse().unwrap());
/// assert_eq!(retry_after(&headers, now), None);
/// ```
pub fn retry_after(headers: &::http::HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers
        .get(::http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is garbage, not "forever".
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}
