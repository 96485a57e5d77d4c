//! Feature `http`: status codes by the HTTP rule, and `Retry-After`.
//! Run with `cargo test -p backstop --features http --test integrations http::`.

use std::time::{Duration, SystemTime};

use backstop::http::retry_after;
use backstop::{Classify, Verdict};
use http::{HeaderMap, HeaderValue, StatusCode};

#[test]
fn status_codes_follow_the_http_rule() {
    // Not processed: safe to send again.
    for code in [408, 425, 429, 503] {
        assert_eq!(
            StatusCode::from_u16(code).unwrap().classify(),
            Verdict::Retry,
            "{code}"
        );
    }
    // The work may have been done: only for idempotent calls.
    for code in [500, 502, 504] {
        assert_eq!(
            StatusCode::from_u16(code).unwrap().classify(),
            Verdict::RetryIfIdempotent,
            "{code}"
        );
    }
    for code in [
        400, 401, 403, 404, 409, 410, 422, 451, 499, 501, 505, 507, 511, 599, 200, 302,
    ] {
        assert_eq!(
            StatusCode::from_u16(code).unwrap().classify(),
            Verdict::Stop,
            "{code}"
        );
    }
}

fn header(value: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::RETRY_AFTER,
        HeaderValue::from_bytes(value).unwrap(),
    );
    headers
}

/// 1994-11-06T08:49:37Z, the date of RFC 9110's examples.
fn rfc_now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
}

#[test]
fn delta_seconds() {
    assert_eq!(
        retry_after(&header(b"120"), rfc_now()),
        Some(Duration::from_secs(120))
    );
    assert_eq!(retry_after(&header(b"0"), rfc_now()), Some(Duration::ZERO));
    assert_eq!(
        retry_after(&header(b" 7 "), rfc_now()),
        Some(Duration::from_secs(7))
    );
    // More seconds than a `u64` holds is a wait as long as can be (so
    // that it is past any `retry_after_max`, as a smaller huge value is),
    // not a malformed header retried after the backoff.
    assert_eq!(
        retry_after(&header(b"99999999999999999999"), rfc_now()),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(
        retry_after(&header(b"000000000000000000000000000007"), rfc_now()),
        Some(Duration::from_secs(7)),
        "leading zeros are not a large number"
    );
}

#[test]
fn http_dates_in_the_three_formats_recipients_must_accept() {
    let now = rfc_now() - Duration::from_secs(30);
    for date in [
        &b"Sun, 06 Nov 1994 08:49:37 GMT"[..], // IMF-fixdate
        b"Sunday, 06-Nov-94 08:49:37 GMT",     // obsolete RFC 850
        b"Sun Nov  6 08:49:37 1994",           // ANSI C asctime()
    ] {
        assert_eq!(
            retry_after(&header(date), now),
            Some(Duration::from_secs(30)),
            "{}",
            String::from_utf8_lossy(date)
        );
    }
}

#[test]
fn a_date_in_the_past_means_now() {
    let later = rfc_now() + Duration::from_secs(3600);
    assert_eq!(
        retry_after(&header(b"Sun, 06 Nov 1994 08:49:37 GMT"), later),
        Some(Duration::ZERO)
    );
}

#[test]
fn bad_values_are_none_never_a_panic() {
    for value in [
        &b""[..],
        b"   ",
        b"soon",
        b"-1",
        b"+5",
        b"1.5",
        b"Sun, 06 Nov 1994 25:49:37 GMT",
        b"\xff\xfe",
    ] {
        assert_eq!(retry_after(&header(value), rfc_now()), None, "{value:?}");
    }
    assert_eq!(retry_after(&HeaderMap::new(), rfc_now()), None, "no header");
}

#[test]
fn a_hundred_thousand_generated_values_never_panic() {
    let mut rng = backstop::backoff::Rng::seeded(9110);
    let alphabet = b"0123456789 ,:-+GMTSunNov\t\xffaZ";
    let mut parsed = 0;
    for _ in 0..100_000 {
        let len = (rng.next_u64() % 40) as usize;
        let value: Vec<u8> = (0..len)
            .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize])
            .collect();
        if let Ok(value) = HeaderValue::from_bytes(&value) {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, value);
            parsed += usize::from(retry_after(&headers, rfc_now()).is_some());
        }
    }
    // Mostly garbage, but not only: digits-only values parse.
    assert!(parsed > 500, "{parsed}");
}

/// Dates that reach the date parser: valid IMF-fixdates from 1970 to 9999
/// (each must give exactly the time until it, or zero once past), and the
/// same dates mangled by one to three edits (none may panic): 100,000 in
/// all.
#[test]
fn a_hundred_thousand_generated_dates_parse_exactly_or_not_at_all() {
    let mut rng = backstop::backoff::Rng::seeded(7231);
    let alphabet = b"0123456789 ,:-+GMTSunMonDecFeb";
    let (mut valid, mut mangled_parsed) = (0, 0);
    for i in 0..100_000u32 {
        // Seconds since the epoch, up to the end of year 9999.
        let secs = rng.next_u64() % 253_402_300_800;
        let date = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let mut text = httpdate::fmt_http_date(date).into_bytes();
        if i % 3 == 0 {
            let expected = date.duration_since(rfc_now()).unwrap_or(Duration::ZERO);
            assert_eq!(
                retry_after(&header(&text), rfc_now()),
                Some(expected),
                "{}",
                String::from_utf8_lossy(&text)
            );
            valid += 1;
            continue;
        }
        for _ in 0..=rng.next_u64() % 3 {
            let at = (rng.next_u64() % text.len() as u64) as usize;
            let byte = alphabet[(rng.next_u64() % alphabet.len() as u64) as usize];
            match rng.next_u64() % 3 {
                0 => text[at] = byte,
                1 => text.insert(at, byte),
                _ if text.len() > 1 => {
                    text.remove(at);
                }
                _ => {}
            }
        }
        if let Ok(value) = HeaderValue::from_bytes(&text) {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, value);
            mangled_parsed += usize::from(retry_after(&headers, rfc_now()).is_some());
        }
    }
    assert_eq!(valid, 33_334);
    // Some edits leave a valid date (a digit for a digit): those parse.
    assert!(mangled_parsed > 0);
}

#[test]
fn a_retry_after_counts_only_on_statuses_that_were_not_processed() {
    use backstop::http::verdict;
    let after = header(b"3");
    for code in [408, 425, 429, 503] {
        let status = StatusCode::from_u16(code).unwrap();
        assert_eq!(
            verdict(status, &after),
            Verdict::RetryAfter(Duration::from_secs(3)),
            "{code}"
        );
        assert_eq!(verdict(status, &HeaderMap::new()), Verdict::Retry, "{code}");
    }
    // The work may have been done: a Retry-After does not make it safe.
    for code in [500, 502, 504] {
        let status = StatusCode::from_u16(code).unwrap();
        assert_eq!(
            verdict(status, &after),
            Verdict::RetryIfIdempotent,
            "{code}"
        );
    }
    assert_eq!(verdict(StatusCode::NOT_FOUND, &after), Verdict::Stop);
    assert_eq!(
        verdict(StatusCode::SERVICE_UNAVAILABLE, &header(b"soon")),
        Verdict::Retry
    );
}

/// Statuses answered in turn: 503, then `then`.
fn answer(calls: &std::sync::atomic::AtomicU32, then: StatusCode) -> StatusCode {
    let n = calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if n.is_multiple_of(2) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        then
    }
}

#[backstop::retry(
    attempts = 3,
    budget = none,
    when_ok = |s: &StatusCode| if *s == StatusCode::SERVICE_UNAVAILABLE { Verdict::Retry } else { Verdict::Stop },
)]
fn status_with_retries(
    calls: &std::sync::atomic::AtomicU32,
    then: StatusCode,
) -> Result<StatusCode, std::io::Error> {
    Ok(answer(calls, then))
}

/// An error of its own for any status but a 200, which it would retry.
#[backstop::retry(attempts = 3, budget = none)]
fn around_status_with_retries(
    calls: &std::sync::atomic::AtomicU32,
    then: StatusCode,
) -> Result<(), std::io::Error> {
    match status_with_retries(calls, then)? {
        StatusCode::OK => Ok(()),
        _ => Err(std::io::ErrorKind::ConnectionRefused.into()),
    }
}

/// A `#[retry]` function that retried a status (`when_ok`) and then
/// returned a failure of the server's (a 507) gave up after retrying: the
/// call around it does not retry on top (2 answers, not 2 × 3). A 404 is
/// an answer about the request, which the call around may act on.
#[test]
fn a_call_around_a_function_that_returned_a_server_failure_after_retrying_does_not_retry() {
    let _vt = backstop::testing::VirtualTime::start();
    let calls = std::sync::atomic::AtomicU32::new(0);
    let error = around_status_with_retries(&calls, StatusCode::INSUFFICIENT_STORAGE).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    let calls = std::sync::atomic::AtomicU32::new(0);
    let _ = around_status_with_retries(&calls, StatusCode::NOT_FOUND).unwrap_err();
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 6);
}
