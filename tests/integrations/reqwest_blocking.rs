//! Feature `reqwest-blocking`: `#[retry]` on synchronous functions calling
//! reqwest's blocking client, against a real HTTP server on 127.0.0.1.
//! Run with `cargo test -p backstop --features reqwest-blocking --test integrations reqwest_blocking::`.

use std::time::{Duration, Instant};

use backstop::reqwest::Error;
use backstop::reqwest::blocking::{error_for_status, response_verdict, within_attempt};
use backstop::{Classify, Verdict, retry};

use crate::support::serve;

/// The scripted server runs on a runtime of its own; the blocking client
/// is called from the test's thread, outside any runtime, as a
/// synchronous program calls it.
fn server(script: Vec<(u16, &'static str)>) -> (tokio::runtime::Runtime, String, Keys) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (url, keys) = runtime.block_on(serve(script));
    (runtime, url, keys)
}

type Keys = std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>;

#[retry(attempts = 4, base = 1ms, deadline = 5s, idempotent, when_ok = response_verdict)]
fn place_order(
    client: &reqwest::blocking::Client,
    url: &str,
) -> Result<reqwest::blocking::Response, Error> {
    within_attempt(client.post(url)).send()
}

#[test]
fn a_blocking_call_is_retried_through_503_and_429_with_one_key() {
    let (_server, url, keys) = server(vec![(503, ""), (429, "retry-after: 0\r\n"), (200, "")]);
    let response = place_order(&reqwest::blocking::Client::new(), &url).unwrap();
    assert_eq!(response.status(), 200);
    super::reqwest::assert_one_key(&keys.lock().unwrap(), 3);
}

#[retry(attempts = 3, base = 1ms, when_ok = response_verdict)]
fn post_once(url: &str) -> Result<reqwest::blocking::Response, Error> {
    within_attempt(reqwest::blocking::Client::new().post(url)).send()
}

#[test]
fn a_500_to_a_blocking_post_is_not_repeated() {
    let (_server, url, keys) = server(vec![(500, ""), (200, "")]);
    let response = post_once(&url).unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 3, base = 1ms, deadline = 5s, retry_after_max = 500ms)]
fn checked(url: &str) -> Result<reqwest::blocking::Response, Error> {
    error_for_status(within_attempt(reqwest::blocking::Client::new().get(url)).send()?)
}

#[test]
fn a_blocking_error_status_keeps_its_retry_after_for_the_loop() {
    // A server asking for a second, above the loop's `retry_after_max`:
    // taken at its word, the call gives up at once. (reqwest's own
    // `error_for_status` drops the `Retry-After`: the call would be
    // retried after the policy's 1 ms.)
    let (_server, url, keys) = server(vec![(503, "retry-after: 1\r\n"), (200, "")]);
    let error = checked(&url).unwrap_err();
    assert_eq!(error.status(), Some(http::StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(
        error.classify(),
        Verdict::RetryAfter(Duration::from_secs(1))
    );
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 1, deadline = 100ms)]
fn hangs(url: &str) -> Result<reqwest::blocking::Response, Error> {
    let request = reqwest::blocking::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5));
    within_attempt(request).send()
}

#[test]
fn a_blocking_requests_own_timeout_shrinks_to_the_time_left() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let started = Instant::now();
    let error = hangs(&url).unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_blocking_request_outside_a_call_is_sent_as_it_is() {
    let (_server, url, keys) = server(vec![(200, "")]);
    let response = within_attempt(reqwest::blocking::Client::new().post(&url))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        keys.lock().unwrap().clone(),
        vec![None],
        "no key outside a call"
    );
}

/// A server that reads the head of each request and a little of its body,
/// then closes the connection: an upload broken off midway.
fn closes_mid_body() -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    use std::io::{BufRead, BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/upload", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = std::sync::Arc::clone(&accepted);
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(socket) = socket else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut reader = BufReader::new(socket);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let mut some = [0u8; 1024];
            let _ = reader.read_exact(&mut some);
        }
    });
    (url, accepted)
}

#[retry(attempts = 3, base = 1ms, deadline = 10s, idempotent)]
fn upload(url: &str) -> Result<reqwest::blocking::Response, Error> {
    use std::io::Read;
    const LEN: u64 = 16 << 20;
    let body = reqwest::blocking::Body::sized(std::io::repeat(7).take(LEN), LEN);
    within_attempt(reqwest::blocking::Client::new().put(url).body(body)).send()
}

#[test]
fn an_idempotent_upload_from_a_reader_broken_off_midway_is_retried() {
    // The blocking client reports it as a body error that has lost its
    // cause (its channel to the connection closed), not as a reset.
    let (url, accepted) = closes_mid_body();
    let error = upload(&url).unwrap_err();
    assert_eq!(error.classify(), Verdict::RetryIfIdempotent, "{error:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[retry(attempts = 3, base = 1ms, deadline = 50ms)]
fn late(
    url: &str,
    vt: &backstop::testing::VirtualTime,
) -> Result<reqwest::blocking::Response, Error> {
    // The attempt's own work runs past the deadline before it sends.
    vt.advance(Duration::from_millis(80));
    within_attempt(
        reqwest::blocking::Client::new()
            .post(url)
            .timeout(Duration::from_secs(5)),
    )
    .send()
}

#[test]
fn a_request_with_no_time_left_is_not_sent() {
    let (_server, url, keys) = server(vec![(200, "")]);
    let vt = backstop::testing::VirtualTime::start();
    let error = late(&url, &vt).unwrap_err();
    assert!(matches!(error, Error::Elapsed(_)), "{error:?}");
    assert!(error.is_timeout());
    // The server's one answer goes to the next request: the first it saw.
    let marker = reqwest::blocking::Client::new()
        .get(&url)
        .header("idempotency-key", "marker");
    assert_eq!(marker.send().unwrap().status(), 200);
    assert_eq!(
        *keys.lock().unwrap(),
        vec![Some("marker".to_owned())],
        "nothing was sent before"
    );
}

#[retry(attempts = 2, base = 1ms, deadline = 5s, idempotent, when_ok = response_verdict)]
fn keyed(url: &str) -> Result<reqwest::blocking::Response, Error> {
    let request = reqwest::blocking::Client::new()
        .post(url)
        .header("idempotency-key", "mine");
    within_attempt(request).send()
}

#[test]
fn a_key_the_blocking_request_has_is_kept() {
    let (_server, url, keys) = server(vec![(503, ""), (200, "")]);
    assert_eq!(keyed(&url).unwrap().status(), 200);
    assert_eq!(*keys.lock().unwrap(), vec![Some("mine".to_owned()); 2]);
}

#[test]
fn a_blocking_request_outside_a_call_keeps_its_scopes_deadline() {
    // A handler bounding its work to 200 ms: the request's own timeout (5 s)
    // shrinks to the scope's time left.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let started = Instant::now();
    let error = backstop::scope::deadline_sync(Duration::from_millis(200), || {
        let request = reqwest::blocking::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(5));
        within_attempt(request).send()
    })
    .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
