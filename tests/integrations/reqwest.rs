//! Feature `reqwest`, against a real HTTP server on 127.0.0.1.
//! Run with `cargo test -p backstop --features reqwest --test integrations reqwest::`.

use std::time::Duration;

use backstop::reqwest::{Error, response_verdict, within_attempt};
use backstop::{Classify, Verdict, retry};

use tokio::net::TcpListener;

use crate::support;
use support::serve;

#[retry(attempts = 5, base = 1ms, deadline = 5s, idempotent, when_ok = response_verdict)]
async fn place_order(client: &reqwest::Client, url: &str) -> Result<reqwest::Response, Error> {
    within_attempt(client.post(url)).send().await
}

#[tokio::test]
async fn a_503_then_a_429_with_retry_after_then_success() {
    let (url, keys) = serve(vec![(503, ""), (429, "retry-after: 0\r\n"), (200, "")]).await;
    let client = reqwest::Client::new();
    let response = place_order(&client, &url).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_one_key(&keys.lock().unwrap(), 3);
}

/// The `Idempotency-Key`s of a call's `requests`: one key, a UUID, sent
/// with each, never doubled.
pub(crate) fn assert_one_key(keys: &[Option<String>], requests: usize) {
    assert_eq!(keys.len(), requests, "{keys:?}");
    let first = keys[0].clone().expect("an idempotency key was sent");
    assert_eq!(first.len(), 36);
    assert!(
        keys.iter().all(|k| k.as_deref() == Some(first.as_str())),
        "one key for the call, never doubled: {keys:?}"
    );
}

#[tokio::test]
async fn a_client_error_status_is_returned_at_once() {
    let (url, keys) = serve(vec![(404, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn reqwest_errors_are_classified() {
    // Nothing listens here: connecting fails, nothing was sent.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let refused = reqwest::get(&url).await.unwrap_err();
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
    // A server that never answers: the request may have been served.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let timed_out = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_millis(50))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        timed_out.classify(),
        Verdict::RetryIfIdempotent,
        "{timed_out:?}"
    );
    // A request that cannot be built.
    let bad = reqwest::Client::new()
        .get("not a url")
        .send()
        .await
        .unwrap_err();
    assert_eq!(bad.classify(), Verdict::Stop);
    // Through a boxed error's source chain too.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(refused);
    assert_eq!(boxed.classify(), Verdict::Refused);
    drop(silent);
}

#[tokio::test]
async fn the_attempt_deadline_becomes_the_request_timeout() {
    #[retry(attempts = 1, deadline = 100ms)]
    async fn hangs(url: &str) -> Result<reqwest::Response, Error> {
        within_attempt(reqwest::Client::new().get(url)).send().await
    }
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let error = hangs(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn two_503s_then_success_is_three_requests() {
    let (url, keys) = serve(vec![(503, ""), (503, ""), (200, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_400_is_exactly_one_request() {
    let (url, keys) = serve(vec![(400, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 5, retry_after_max = 10s, when_ok = response_verdict)]
async fn throttled(url: &str) -> Result<reqwest::Response, Error> {
    within_attempt(reqwest::Client::new().get(url)).send().await
}

#[tokio::test]
async fn a_retry_after_above_the_max_returns_the_429_at_once() {
    let (url, keys) = serve(vec![(429, "retry-after: 3600\r\n"), (200, "")]).await;
    let response = throttled(&url).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 3, base = 1ms, when_ok = response_verdict)]
async fn post_once(url: &str) -> Result<reqwest::Response, Error> {
    // A shorter timeout than the time left, of the request's own.
    within_attempt(
        reqwest::Client::new()
            .post(url)
            .timeout(Duration::from_millis(50)),
    )
    .send()
    .await
}

#[retry(attempts = 3, base = 1ms, idempotent, when_ok = response_verdict)]
async fn post_idempotent(url: &str) -> Result<reqwest::Response, Error> {
    // A shorter timeout than the time left, of the request's own.
    within_attempt(
        reqwest::Client::new()
            .post(url)
            .timeout(Duration::from_millis(50)),
    )
    .send()
    .await
}

// (Paused: its 50 ms timeouts cannot fire before the server, on the same
// runtime, has read the request, however busy the machine.)
#[tokio::test(start_paused = true)]
async fn a_post_that_times_out_is_retried_only_when_idempotent() {
    let (url, keys) = serve(vec![(0, "")]).await;
    let error = post_once(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(
        keys.lock().unwrap().len(),
        1,
        "the work may have been done: not repeated"
    );

    let (url, keys) = serve(vec![(0, ""), (0, ""), (200, "")]).await;
    let response = post_idempotent(&url).await.unwrap();
    assert_eq!(response.status(), 200);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert!(
        keys[0].is_some() && keys.iter().all(|k| *k == keys[0]),
        "{keys:?}"
    );
}

#[retry(attempts = 1, deadline = 5s)]
async fn with_own_key_and_timeout(url: &str) -> Result<reqwest::Response, Error> {
    let request = reqwest::Client::new()
        .post(url)
        .header("idempotency-key", "mine")
        .timeout(Duration::from_millis(50));
    within_attempt(request).send().await
}

#[tokio::test]
async fn within_attempt_keeps_a_key_and_a_shorter_timeout_already_set() {
    let (url, keys) = serve(vec![(0, "")]).await;
    let started = std::time::Instant::now();
    let error = with_own_key_and_timeout(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the 50 ms timeout was kept"
    );
    assert_eq!(
        *keys.lock().unwrap(),
        [Some("mine".to_owned())],
        "one key, the caller's"
    );
}

#[retry(attempts = 1, deadline = 5s, attempt_timeout = 300ms)]
async fn with_a_long_timeout_of_its_own(url: &str) -> Result<reqwest::Response, Error> {
    let request = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(30));
    within_attempt(request).send().await
}

/// Under an `attempt_timeout`, a timeout of the request's own shrinks to
/// the attempt's time left, as it does to the deadline's: a body read
/// after the function returned, from a server that stalls midway, fails
/// then, not 30 s later.
#[tokio::test]
async fn a_timeout_of_the_requests_own_shrinks_to_the_attempts_time_left() {
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", server.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = server.accept().await.unwrap();
        let mut request = [0; 1024];
        let _ = socket.read(&mut request).await;
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabcde";
        socket.write_all(head).await.unwrap();
        std::future::pending::<()>().await;
    });
    let started = std::time::Instant::now();
    let response = with_a_long_timeout_of_its_own(&url).await.unwrap();
    let error = response.bytes().await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// Under an `attempt_timeout`, a server that never answers is cut off by
/// the loop, which says which limit ran out, not by the request's own
/// timeout shrunk to the same instant (which came first was a race).
#[tokio::test(start_paused = true)]
async fn a_request_under_an_attempt_timeout_is_cut_off_by_the_loop() {
    let (url, _) = serve(vec![(0, "")]).await;
    let error = with_a_long_timeout_of_its_own(&url).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("its `attempt_timeout` of 300ms ran out"),
        "{error:?}"
    );
}

// ---- first-hour defects -------------------------------------------------

#[retry(attempts = 3, base = 1ms, when_ok = response_verdict)]
async fn post_not_idempotent(url: &str) -> Result<reqwest::Response, Error> {
    within_attempt(reqwest::Client::new().post(url))
        .send()
        .await
}

#[tokio::test]
async fn a_post_answered_500_502_or_504_is_sent_once() {
    for status in [500, 502, 504] {
        let (url, keys) = serve(vec![(status, ""), (200, ""), (200, "")]).await;
        let response = post_not_idempotent(&url).await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(
            keys.lock().unwrap().len(),
            1,
            "{status}: the work may have been done"
        );
    }
}

#[tokio::test]
async fn a_client_timeout_is_never_lengthened_by_within_attempt() {
    #[retry(attempts = 1)]
    async fn get(client: &reqwest::Client, url: &str) -> Result<reqwest::Response, Error> {
        within_attempt(client.get(url)).send().await
    }
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(3), get(&client, &url))
        .await
        .expect("the client's 100 ms timeout, not the 30 s deadline")
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[retry(attempts = 3, base = 1ms, idempotent)]
async fn get_text(url: &str) -> Result<String, Error> {
    let response = within_attempt(reqwest::Client::new().get(url))
        .send()
        .await?;
    Ok(response.text().await?)
}

#[tokio::test]
async fn a_body_cut_off_midway_is_retried_when_idempotent() {
    let (url, keys) = serve(vec![(1, ""), (200, "")]).await;
    let text = get_text(&url).await.unwrap();
    assert_eq!(text, "");
    assert_eq!(keys.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_body_cut_off_midway_is_ambiguous_and_a_whole_one_that_does_not_parse_is_final() {
    let (url, _) = serve(vec![(1, ""), (200, "")]).await;
    let client = reqwest::Client::new();
    let cut = client
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap_err();
    assert_eq!(cut.classify(), Verdict::RetryIfIdempotent, "{cut:?}");
    let garbage = client
        .get(&url)
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap_err();
    assert_eq!(garbage.classify(), Verdict::Stop, "{garbage:?}");
}

#[tokio::test]
async fn a_streamed_body_keeps_the_request_key_and_its_shorter_timeout() {
    #[retry(attempts = 1, deadline = 5s)]
    async fn upload(url: &str) -> Result<reqwest::Response, Error> {
        let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("part")];
        let request = reqwest::Client::new()
            .post(url)
            .header("idempotency-key", "mine")
            .timeout(Duration::from_millis(50))
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )));
        within_attempt(request).send().await
    }
    let (url, keys) = serve(vec![(0, "")]).await;
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(3), upload(&url))
        .await
        .expect("the request's own 50 ms timeout, not the 5 s deadline")
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        *keys.lock().unwrap(),
        [Some("mine".to_owned())],
        "one key, the caller's"
    );
}

#[retry(attempts = 3, base = 1ms, idempotent, when_ok = response_verdict)]
async fn get_idempotent(url: &str) -> Result<reqwest::Response, Error> {
    within_attempt(reqwest::Client::new().get(url)).send().await
}

#[tokio::test]
async fn an_idempotent_call_retries_a_500_502_or_504() {
    let (url, keys) = serve(vec![(500, ""), (502, ""), (200, "")]).await;
    assert_eq!(get_idempotent(&url).await.unwrap().status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
    let (url, keys) = serve(vec![(504, "retry-after: 0\r\n"), (200, "")]).await;
    assert_eq!(get_idempotent(&url).await.unwrap().status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 2);
}

static ORDERS: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(2, Duration::from_secs(60));

/// Whether `error`'s source is a `T`.
fn holds<T: std::error::Error + 'static>(error: &Error) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<T>())
        .is_some()
}

#[retry(attempts = 2, base = 1ms, breaker = ORDERS, attempt_timeout = 50ms, idempotent, when_ok = response_verdict)]
async fn behind_a_breaker(url: &str) -> Result<reqwest::Response, Error> {
    within_attempt(reqwest::Client::new().get(url)).send().await
}

#[tokio::test]
async fn the_error_type_takes_the_breaker_and_the_attempt_timeout() {
    let (url, keys) = serve(vec![(0, ""), (0, "")]).await;
    let error = behind_a_breaker(&url).await.unwrap_err();
    assert!(matches!(error, Error::Elapsed(_)), "{error:?}");
    assert!(error.is_timeout());
    assert!(holds::<backstop::Elapsed>(&error), "{error:?}");
    assert_eq!(
        error.to_string(),
        "attempt timed out: its `attempt_timeout` of 50ms ran out"
    );
    assert_eq!(keys.lock().unwrap().len(), 2);
    // Two retryable failures opened the breaker: rejected without a request.
    let error = behind_a_breaker(&url).await.unwrap_err();
    assert!(matches!(error, Error::CircuitOpen(_)), "{error:?}");
    assert_eq!(error.classify(), Verdict::Stop);
    assert!(holds::<backstop::CircuitOpen>(&error), "{error:?}");
    assert_eq!(error.to_string(), backstop::CircuitOpen::new().to_string());
    assert_eq!(keys.lock().unwrap().len(), 2);
}

#[retry(attempts = 3, base = 1ms, retry_after_max = 1s)]
async fn get_or_status_error(url: &str) -> Result<reqwest::Response, Error> {
    let response = within_attempt(reqwest::Client::new().get(url))
        .send()
        .await?;
    backstop::reqwest::error_for_status(response)
}

#[tokio::test]
async fn error_statuses_as_errors_keep_their_retry_after() {
    let (url, keys) = serve(vec![(429, "retry-after: 0\r\n"), (503, ""), (200, "")]).await;
    assert_eq!(get_or_status_error(&url).await.unwrap().status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
    // Not idempotent: a 500 is returned, once.
    let (url, keys) = serve(vec![(500, ""), (200, "")]).await;
    let error = get_or_status_error(&url).await.unwrap_err();
    assert_eq!(
        error.status(),
        Some(http::StatusCode::INTERNAL_SERVER_ERROR)
    );
    assert_eq!(
        error.to_string(),
        "server answered 500 Internal Server Error"
    );
    assert!(std::error::Error::source(&error).is_none());
    assert_eq!(keys.lock().unwrap().len(), 1);
    // Boxed, it is classified through the source chain.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(error);
    assert_eq!(boxed.classify(), Verdict::RetryIfIdempotent);
}

#[retry(attempts = 3, base = 1ms, deadline = 50ms)]
async fn late(url: &str) -> Result<reqwest::Response, Error> {
    // The attempt's own work runs past the deadline before it sends.
    tokio::time::sleep(Duration::from_millis(80)).await;
    within_attempt(reqwest::Client::new().post(url))
        .send()
        .await
}

/// The server's one answer goes to the next request: a marker, which it
/// must have seen first (nothing was sent before it).
async fn nothing_was_sent_before(url: &str, keys: &std::sync::Mutex<Vec<Option<String>>>) {
    let marker = reqwest::Client::new()
        .get(url)
        .header("idempotency-key", "marker");
    assert_eq!(marker.send().await.unwrap().status(), 200);
    assert_eq!(
        *keys.lock().unwrap(),
        vec![Some("marker".to_owned())],
        "nothing was sent before"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_with_no_time_left_is_not_sent() {
    let (url, keys) = serve(vec![(200, "")]).await;
    let error = late(&url).await.unwrap_err();
    assert!(matches!(error, Error::Elapsed(_)), "{error:?}");
    nothing_was_sent_before(&url, &keys).await;
}

#[tokio::test]
async fn a_transparent_wrapper_of_the_error_is_classified_through_it() {
    use backstop::classify::by_source_chain;
    use support::Transparent;
    // A port nothing listens on: a refused connection, never sent.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let request = reqwest::Client::new().get(format!("http://127.0.0.1:{port}/"));
    let refused = Error::from(request.send().await.unwrap_err());
    let verdict = refused.classify();
    assert_ne!(verdict, Verdict::Stop);
    let wrapped = Transparent(refused);
    assert_eq!(by_source_chain(&wrapped), verdict);
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(wrapped);
    assert_eq!(boxed.classify(), verdict);
    // The loop's own: a timed-out attempt, ambiguous.
    let timed_out = Transparent(Error::from(backstop::Elapsed::new()));
    assert_eq!(by_source_chain(&timed_out), Verdict::RetryIfIdempotent);
}

#[tokio::test]
async fn a_request_outside_a_call_with_its_scopes_time_gone_is_not_sent() {
    let (url, keys) = serve(vec![(200, "")]).await;
    // A handler whose time is all gone before it sends (a scope of none:
    // its deadline is its first poll).
    let scoped = backstop::scope::deadline(Duration::ZERO, async {
        within_attempt(reqwest::Client::new().get(&url))
            .send()
            .await
    });
    let error = scoped.await.unwrap().unwrap_err();
    assert!(matches!(error, Error::Elapsed(_)), "{error:?}");
    nothing_was_sent_before(&url, &keys).await;
}
