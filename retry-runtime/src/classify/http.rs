//! HTTP (feature `http`): which status codes are worth a retry, and when
//! the server asked to be called again.
//!
//! ```
//! # extern crate backstop_runtime as backstop;
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

/// Which statuses a retry can fix, and which it may repeat work for:
///
/// - 408, 425, 429 and 503 are [`Verdict::Retry`]: the server did not
///   process the request (it timed out waiting for it, refused early data,
///   throttled it, or is unavailable), so sending it again is safe;
/// - 500, 502 and 504 are [`Verdict::RetryIfIdempotent`]: the server (or
///   one behind a proxy) may have done the work before failing, and a 504
///   is a timeout seen through a proxy. Repeating a `POST` on them could
///   do it twice: they are retried only for calls declared `idempotent`;
/// - every other status is [`Verdict::Stop`]: other 4xx are the request's
///   fault, and 501 or 505 and above will not change on a retry.
///
/// [`verdict`] also reads a `Retry-After` header that came with a 408,
/// 425, 429 or 503, as [`Verdict::RetryAfter`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use http::StatusCode;
/// use backstop::{Classify, Verdict};
/// assert_eq!(StatusCode::TOO_MANY_REQUESTS.classify(), Verdict::Retry);
/// assert_eq!(StatusCode::GATEWAY_TIMEOUT.classify(), Verdict::RetryIfIdempotent);
/// assert_eq!(StatusCode::BAD_REQUEST.classify(), Verdict::Stop);
/// ```
impl Classify for ::http::StatusCode {
    fn classify(&self) -> Verdict {
        match self.as_u16() {
            408 | 425 | 429 | 503 => Verdict::Retry,
            500 | 502 | 504 => Verdict::RetryIfIdempotent,
            _ => Verdict::Stop,
        }
    }
}

/// The verdict on a response with this status and these headers: the
/// status's [`Classify`] verdict, and [`Verdict::RetryAfter`] for a status
/// the server did not process (408, 425, 429, 503) that came with a valid
/// `Retry-After`. A `Retry-After` on a 500, 502 or 504 does not make it
/// retryable for a call that is not `idempotent`: the work may have been
/// done.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use http::{header::RETRY_AFTER, HeaderMap, StatusCode};
/// use backstop::{http::verdict, Verdict};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, "2".parse().unwrap());
/// assert_eq!(verdict(StatusCode::SERVICE_UNAVAILABLE, &headers), Verdict::RetryAfter(Duration::from_secs(2)));
/// assert_eq!(verdict(StatusCode::BAD_GATEWAY, &headers), Verdict::RetryIfIdempotent);
/// assert_eq!(verdict(StatusCode::OK, &headers), Verdict::Stop);
/// ```
pub fn verdict(status: ::http::StatusCode, headers: &::http::HeaderMap) -> Verdict {
    match status.classify() {
        Verdict::Retry => {
            retry_after(headers, SystemTime::now()).map_or(Verdict::Retry, Verdict::RetryAfter)
        }
        other => other,
    }
}

/// Header names made once (a name given as a string is parsed at every
/// lookup).
pub(crate) const GRPC_STATUS: ::http::HeaderName = ::http::HeaderName::from_static("grpc-status");
pub(crate) const GRPC_RETRY_PUSHBACK_MS: ::http::HeaderName =
    ::http::HeaderName::from_static("grpc-retry-pushback-ms");
/// The gRPC deadline header.
#[cfg(feature = "tower")]
pub(crate) const GRPC_TIMEOUT: ::http::HeaderName = ::http::HeaderName::from_static("grpc-timeout");

/// A response judged by its status and `Retry-After`, as [`verdict`]
/// does: what a layer over an HTTP client retries (`when_ok`). A gRPC
/// error answered at once comes "trailers-only", its `grpc-status` in the
/// headers of an HTTP 200: it is judged by that code, as [`grpc_verdict`]
/// does (an unreadable code is [`Verdict::Stop`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// let unavailable = http::Response::builder().status(503).body(()).unwrap();
/// assert_eq!(unavailable.classify(), Verdict::Retry);
/// let created = http::Response::builder().status(201).body(()).unwrap();
/// assert_eq!(created.classify(), Verdict::Stop);
/// let trailers_only = http::Response::builder().header("grpc-status", "14").body(()).unwrap();
/// assert_eq!(trailers_only.classify(), Verdict::Retry); // UNAVAILABLE
/// ```
impl<B> Classify for ::http::Response<B> {
    fn classify(&self) -> Verdict {
        // A gRPC error answered at once comes "trailers-only": its status
        // in the headers of an HTTP 200.
        match self.headers().get(&GRPC_STATUS) {
            Some(code) => code
                .to_str()
                .ok()
                .and_then(|code| code.parse::<i32>().ok())
                .map_or(Verdict::Stop, |code| grpc_verdict(code, self.headers())),
            None => verdict(self.status(), self.headers()),
        }
    }
}

/// The verdict on a gRPC status code, with the server's pushback
/// (`grpc-retry-pushback-ms`, gRFC A6) from `metadata`:
///
/// - `UNAVAILABLE` (14) is [`Verdict::Retry`]: the service did not take
///   the call, which can be sent again after a backoff (Google AIP-194's
///   one retryable code);
/// - `DEADLINE_EXCEEDED` (4) is [`Verdict::RetryIfIdempotent`]: the work
///   may have been done;
/// - `RESOURCE_EXHAUSTED` (8) is retried only when the server pushed back
///   with a delay (gRFC A6): a quota does not come back on its own, but a
///   server that says when it will take the call again is believed
///   (AIP-194 would not retry it at all);
/// - every other code is [`Verdict::Stop`] (`ABORTED` included: AIP-194
///   retries it at a higher level, the whole transaction, not the call);
///   `OK` is not an error, and is not retried.
///
/// A pushback of zero or more milliseconds makes `UNAVAILABLE` and
/// `RESOURCE_EXHAUSTED` [`Verdict::RetryAfter`] (`DEADLINE_EXCEEDED` stays
/// ambiguous: its pushback's delay is not read); a negative or malformed
/// one (not a signed 32-bit integer) on any of the three means "do not
/// retry" (gRFC A6), [`Verdict::StopOverloaded`]: the call is returned,
/// and the token budget counts it as a failure, as A6's throttling does
/// (the server is overloaded, not answering).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use http::HeaderMap;
/// use backstop::{http::grpc_verdict, Verdict};
/// let none = HeaderMap::new();
/// assert_eq!(grpc_verdict(14, &none), Verdict::Retry);
/// assert_eq!(grpc_verdict(4, &none), Verdict::RetryIfIdempotent);
/// assert_eq!(grpc_verdict(8, &none), Verdict::Stop);
/// let mut pushback = HeaderMap::new();
/// pushback.insert("grpc-retry-pushback-ms", "250".parse().unwrap());
/// assert_eq!(grpc_verdict(8, &pushback), Verdict::RetryAfter(Duration::from_millis(250)));
/// pushback.insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
/// assert_eq!(grpc_verdict(14, &pushback), Verdict::StopOverloaded);
/// ```
pub fn grpc_verdict(code: i32, metadata: &::http::HeaderMap) -> Verdict {
    const DEADLINE_EXCEEDED: i32 = 4;
    const RESOURCE_EXHAUSTED: i32 = 8;
    const UNAVAILABLE: i32 = 14;
    let pushback = metadata.get(&GRPC_RETRY_PUSHBACK_MS).map(|value| {
        value
            .to_str()
            .ok()
            // A signed 32-bit integer (gRFC A6): any other value is
            // malformed, and means "do not retry".
            .and_then(|ms| ms.trim().parse::<i32>().ok())
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis)
    });
    match (code, pushback) {
        // The server said not to retry: it is overloaded (a failure for
        // the token budget, as gRFC A6 counts it).
        (DEADLINE_EXCEEDED | RESOURCE_EXHAUSTED | UNAVAILABLE, Some(None)) => {
            Verdict::StopOverloaded
        }
        (RESOURCE_EXHAUSTED | UNAVAILABLE, Some(Some(after))) => Verdict::RetryAfter(after),
        (UNAVAILABLE, None) => Verdict::Retry,
        (DEADLINE_EXCEEDED, _) => Verdict::RetryIfIdempotent,
        _ => Verdict::Stop,
    }
}

/// Whether a request may be sent twice without doing its work twice: its
/// method is idempotent by RFC 9110 §9.2.2 (`GET`, `HEAD`, `OPTIONS`,
/// `TRACE`, `PUT`, `DELETE`), or it carries an `Idempotency-Key`, with
/// which the server can tell a repeat from a new request.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::http::is_idempotent;
/// let get = http::Request::get("/users/7").body(()).unwrap();
/// assert!(is_idempotent(&get));
/// let post = http::Request::post("/orders").body(()).unwrap();
/// assert!(!is_idempotent(&post));
/// let keyed = http::Request::post("/orders").header("idempotency-key", "k-1").body(()).unwrap();
/// assert!(is_idempotent(&keyed));
/// ```
pub fn is_idempotent<B>(request: &::http::Request<B>) -> bool {
    is_idempotent_parts(request.method(), request.headers())
}

/// The destination a request goes to, hashed: the key of the protection
/// a layer or middleware keeps per destination ([`Destination`]).
///
/// [`Destination`]: crate::limit::Destination
#[cfg(feature = "tower")]
pub(crate) fn destination(scheme: Option<&str>, host: &str, port: Option<u16>) -> u64 {
    // Named for `tracing` and `metrics` (once per destination).
    crate::limit::Destination::unnamed(scheme.unwrap_or(""), host, port).named()
}

/// [`destination`] of a URI's `scheme` and `authority` (which `parsed`
/// splits into host and port): as this thread last found it for the same
/// text, if it is among the few it keeps, else found (and kept) now. A
/// client sends to few destinations, and parsing, hashing and naming each
/// request's cost more than the rest of a layer's work on a success.
#[cfg(feature = "tower")]
pub(crate) fn recent_destination(
    scheme: Option<&str>,
    authority: &str,
    parsed: impl FnOnce() -> u64,
) -> u64 {
    use std::cell::RefCell;

    /// How many destinations a thread keeps, and the longest `scheme`
    /// and `authority` kept (longer ones are found every time).
    const KEPT: usize = 4;
    const LONGEST: usize = 62;

    /// A destination found: its scheme's length, then scheme and
    /// authority, and its hash.
    #[derive(Clone, Copy)]
    struct Found {
        scheme: u8,
        len: u8,
        text: [u8; LONGEST],
        hash: u64,
    }

    impl Found {
        fn is(&self, scheme: &[u8], authority: &[u8]) -> bool {
            let text = &self.text[..usize::from(self.len)];
            usize::from(self.scheme) == scheme.len()
                && text.len() == scheme.len() + authority.len()
                && &text[..scheme.len()] == scheme
                && &text[scheme.len()..] == authority
        }
    }

    thread_local! {
        /// The destinations kept, and the place of the next to keep.
        static FOUND: RefCell<([Option<Found>; KEPT], usize)> =
            const { RefCell::new(([None; KEPT], 0)) };
    }

    let scheme = scheme.unwrap_or("").as_bytes();
    let authority = authority.as_bytes();
    let len = scheme.len() + authority.len();
    if len > LONGEST {
        return parsed();
    }
    let kept = FOUND.with_borrow(|(recent, _)| {
        recent
            .iter()
            .flatten()
            .find(|kept| kept.is(scheme, authority))
            .map(|kept| kept.hash)
    });
    if let Some(hash) = kept {
        return hash;
    }
    let hash = parsed();
    let mut text = [0u8; LONGEST];
    text[..scheme.len()].copy_from_slice(scheme);
    text[scheme.len()..len].copy_from_slice(authority);
    let found = Found {
        // (Both within `LONGEST`.)
        scheme: u8::try_from(scheme.len()).unwrap_or(u8::MAX),
        len: u8::try_from(len).unwrap_or(u8::MAX),
        text,
        hash,
    };
    FOUND.with_borrow_mut(|(recent, next)| {
        recent[*next] = Some(found);
        *next = (*next + 1) % KEPT;
    });
    hash
}

/// [`is_idempotent`] of a request's method and headers.
pub(crate) fn is_idempotent_parts(method: &::http::Method, headers: &::http::HeaderMap) -> bool {
    use ::http::Method;
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || headers.contains_key(IDEMPOTENCY_KEY)
}

/// How many attempts a call took, in the extensions of the response that
/// a retry layer (`tower::RetryLayer::http`) or middleware
/// (`reqwest::RetryMiddleware`) returns: `1` when the first
/// attempt answered.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::http::Attempts;
/// let mut response = http::Response::new(());
/// response.extensions_mut().insert(Attempts(2));
/// assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attempts(pub u32);

/// The `Idempotency-Key` request header (IETF draft
/// `httpapi-idempotency-key-header`), lowercase as HTTP/2 sends it.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::http::{IDEMPOTENCY_KEY, is_idempotent};
/// use backstop::scope::IdempotencyKey;
///
/// // One key per payment, made once and sent with every attempt of it.
/// let key = IdempotencyKey::random();
/// let mut request = http::Request::post("/payments").body(()).unwrap();
/// assert!(!is_idempotent(&request), "a POST");
/// request.headers_mut().insert(IDEMPOTENCY_KEY, key.to_string().parse().unwrap());
/// assert!(is_idempotent(&request), "a POST the server deduplicates by its key");
/// ```
pub const IDEMPOTENCY_KEY: ::http::HeaderName = ::http::HeaderName::from_static("idempotency-key");

/// How long the server asked to wait, from its `Retry-After` header (RFC
/// 9110 §10.2.3): delta-seconds, or an HTTP-date in any of the three formats
/// recipients must accept (IMF-fixdate, RFC 850, asctime), measured from
/// `now`; a date already past means now, and more seconds than a `u64`
/// holds the longest wait (`u64::MAX` seconds: past any `retry_after_max`
/// short of `Duration::MAX`, so the call gives up). `None` without the header, or for a value that
/// is neither (empty, negative, fractional, not a date): a malformed
/// header never panics and is never taken as zero.
///
/// ```
/// # extern crate backstop_runtime as backstop;
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
        // Digits only, so the one error is overflow: more seconds than a
        // `u64` holds is as long a wait as can be (RFC 9111 §1.2.2 reads
        // an overflowing delta-seconds as the greatest it can hold), past
        // any `retry_after_max`, as a smaller huge value is.
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A `grpc-timeout` header's value (gRPC over HTTP/2: at most eight
/// digits and a unit, `H M S m u n`).
#[cfg(feature = "tower")]
pub(crate) fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(amount.saturating_mul(3600)),
        'M' => Duration::from_secs(amount.saturating_mul(60)),
        'S' => Duration::from_secs(amount),
        'm' => Duration::from_millis(amount),
        'u' => Duration::from_micros(amount),
        'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// `timeout` as a `grpc-timeout` value, in the finest unit that holds it
/// in eight digits, rounded down (a zero up, to `1n`: the value is
/// positive): the server never waits past it.
#[cfg(feature = "tower")]
pub(crate) fn format_grpc_timeout(timeout: Duration) -> String {
    const UNITS: [(char, u128); 6] = [
        ('n', 1),
        ('u', 1_000),
        ('m', 1_000_000),
        ('S', 1_000_000_000),
        ('M', 60_000_000_000),
        ('H', 3_600_000_000_000),
    ];
    // (At least one: gRPC's `TimeoutValue` is positive, and a server may
    // ignore a `0n`.)
    let nanos = timeout.as_nanos().max(1);
    for (unit, per) in UNITS {
        let amount = nanos / per;
        if amount < 100_000_000 {
            return format!("{amount}{unit}");
        }
    }
    "99999999H".to_owned()
}

// A status, in the events of a `#[retry]` function whose `when_ok`
// judged it a failure.
impl crate::run::observe::ShowsStatus for ::http::StatusCode {
    fn shown_status(&self) -> Option<u16> {
        Some(self.as_u16())
    }
}

// Its `grpc-status`, if its headers hold one (a gRPC error answered at
// once, "trailers-only"), else its HTTP status.
impl<B> crate::run::observe::ShowsStatus for ::http::Response<B> {
    fn shown_status(&self) -> Option<u16> {
        match self.headers().get(&GRPC_STATUS) {
            Some(code) => code.to_str().ok().and_then(|code| code.parse().ok()),
            None => Some(self.status().as_u16()),
        }
    }
}

#[cfg(all(test, feature = "tower"))]
mod tests {
    use super::*;

    /// gRFC A6: the pushback is a signed 32-bit integer; a value that is
    /// not one is malformed, and means "do not retry".
    #[test]
    fn a_pushback_beyond_32_bits_means_do_not_retry() {
        let pushback = |ms: &str| {
            let mut metadata = ::http::HeaderMap::new();
            metadata.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
            metadata
        };
        for code in [4, 8, 14] {
            assert_eq!(
                grpc_verdict(code, &pushback("2147483648")),
                Verdict::StopOverloaded,
                "{code}"
            );
            assert_eq!(
                grpc_verdict(code, &pushback("-2147483649")),
                Verdict::StopOverloaded,
                "{code}"
            );
        }
        assert_eq!(
            grpc_verdict(14, &pushback("2147483647")),
            Verdict::RetryAfter(Duration::from_millis(2_147_483_647))
        );
    }

    #[test]
    fn grpc_timeouts_round_trip_rounded_down_to_their_unit() {
        assert_eq!(format_grpc_timeout(Duration::from_millis(1500)), "1500000u");
        assert_eq!(format_grpc_timeout(Duration::from_secs(30)), "30000000u");
        assert_eq!(
            format_grpc_timeout(Duration::from_secs(86_400 * 365)),
            "31536000S"
        );
        assert_eq!(format_grpc_timeout(Duration::MAX), "99999999H");
        // No time left: a positive value (gRPC's `TimeoutValue`), the
        // least there is, not an invalid `0n` a server may ignore.
        assert_eq!(format_grpc_timeout(Duration::ZERO), "1n");
        // Eight digits at most: a hundred million nanoseconds is in
        // microseconds.
        assert_eq!(
            format_grpc_timeout(Duration::from_nanos(99_999_999)),
            "99999999n"
        );
        assert_eq!(format_grpc_timeout(Duration::from_millis(100)), "100000u");
        for (value, duration) in [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("5S", Duration::from_secs(5)),
            ("7m", Duration::from_millis(7)),
            ("11u", Duration::from_micros(11)),
            ("13n", Duration::from_nanos(13)),
        ] {
            assert_eq!(parse_grpc_timeout(value), Some(duration), "{value}");
        }
        for value in ["1500000u", "30000m", "5S", "2H", "7n"] {
            let parsed = parse_grpc_timeout(value).unwrap();
            assert_eq!(
                parse_grpc_timeout(&format_grpc_timeout(parsed)),
                Some(parsed)
            );
        }
        for bad in ["", "S", "123456789S", "5x", "-5S", "5 S", "5é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    /// `recent_destination` of an `http://` authority, counting the parses
    /// in `parses`.
    fn recent(authority: &str, parses: &mut u32) -> u64 {
        recent_destination(Some("http"), authority, || {
            *parses += 1;
            let (host, port) = authority.rsplit_once(':').unwrap_or((authority, ""));
            destination(Some("http"), host, port.parse().ok())
        })
    }

    #[test]
    fn a_destination_found_again_on_a_thread_is_not_parsed_again() {
        let mut parses = 0;
        let first = recent("a.internal:8080", &mut parses);
        assert_eq!(recent("a.internal:8080", &mut parses), first);
        assert_eq!(parses, 1);
        // Told apart from another scheme, or another authority, however
        // alike.
        let https = recent_destination(Some("https"), "a.internal:8080", || 7);
        assert_eq!(https, 7);
        assert_ne!(recent("a.internal:8081", &mut parses), first);
        assert_ne!(recent("a.internal:808", &mut parses), first);
        assert_eq!(parses, 3);
        // The same destination spelled otherwise is parsed, to the same.
        assert_eq!(recent("A.internal:8080", &mut parses), first);
        assert_eq!(parses, 4);
    }

    #[test]
    fn as_many_destinations_as_a_thread_keeps_are_each_parsed_once() {
        let mut parses = 0;
        let hosts: Vec<String> = (0..4).map(|i| format!("kept-{i}:80")).collect();
        for _ in 0..3 {
            for host in &hosts {
                recent(host, &mut parses);
            }
        }
        assert_eq!(parses, 4);
        // The longest text kept, scheme and authority: kept too.
        let longest = format!("{}:80", "y".repeat(62 - "http".len() - ":80".len()));
        let before = parses;
        recent(&longest, &mut parses);
        recent(&longest, &mut parses);
        assert_eq!(parses, before + 1);
    }

    #[test]
    fn more_destinations_than_a_thread_keeps_are_each_found_right() {
        let mut parses = 0;
        let hosts: Vec<String> = (0..9).map(|i| format!("host-{i}:80")).collect();
        let hashes: Vec<u64> = hosts.iter().map(|h| recent(h, &mut parses)).collect();
        for _ in 0..3 {
            for (host, hash) in hosts.iter().zip(&hashes) {
                assert_eq!(recent(host, &mut parses), *hash, "{host}");
            }
        }
        assert_eq!(
            hashes
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len(),
            9
        );
        // An authority too long to keep is parsed every time, rightly.
        let long = format!("{}.internal:80", "x".repeat(70));
        let before = parses;
        let hash = recent(&long, &mut parses);
        assert_eq!(recent(&long, &mut parses), hash);
        assert_eq!(parses, before + 2);
    }
}
