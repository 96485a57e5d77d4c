//! Feature `reqwest-middleware`: `RetryMiddleware` in a reqwest-middleware
//! client, against a real HTTP server on 127.0.0.1 (the scenarios of
//! tests/integrations/reqwest.rs).
//! Run with `cargo test -p backstop --features reqwest-middleware --test integrations reqwest_middleware::`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::http::Attempts;
use backstop::limit::{CircuitBreaker, TokenBudget};
use backstop::reqwest::RetryMiddleware;
use backstop::{GiveUp, GiveUpEvent, Policy, retry};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

use crate::support;
use support::serve;

/// Retrying at once: the loopback tests take milliseconds.
fn quick() -> Policy {
    Policy::new()
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(2))
}

#[test]
fn a_middleware_debugs_as_its_layer() {
    let middleware = RetryMiddleware::new(&quick());
    let text = format!("{middleware:?}");
    assert!(
        text.starts_with("RetryMiddleware { layer: RetryLayer"),
        "{text}"
    );
}

fn client(middleware: impl reqwest_middleware::Middleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build()
}

#[tokio::test]
async fn two_503s_then_success_is_three_requests_and_the_response_says_so() {
    let (url, keys) = serve(vec![(503, ""), (503, ""), (200, "")]).await;
    let response = client(RetryMiddleware::new(&quick()))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
    assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(3)));
}

#[tokio::test]
async fn a_429_with_retry_after_is_honoured() {
    let (url, keys) = serve(vec![(429, "retry-after: 0\r\n"), (200, "")]).await;
    let response = client(RetryMiddleware::new(&quick()))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 2);

    // One the deadline cannot wait for gives up at once, with the 429.
    let (url, keys) = serve(vec![(429, "retry-after: 60\r\n"), (200, "")]).await;
    let policy = quick().deadline(Some(Duration::from_secs(5)));
    let started = std::time::Instant::now();
    let response = client(RetryMiddleware::new(&policy))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(keys.lock().unwrap().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_400_is_exactly_one_request() {
    let (url, keys) = serve(vec![(400, "")]).await;
    let response = client(RetryMiddleware::new(&quick()))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_post_answered_500_502_or_504_is_sent_once_a_put_again() {
    for status in [500, 502, 504] {
        // A client each: six failures in a row on one would empty its
        // token budget, as they should.
        let client = client(RetryMiddleware::new(&quick()));
        let (url, keys) = serve(vec![(status, ""), (200, "")]).await;
        let response = client.post(&url).body("{}").send().await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(
            keys.lock().unwrap().len(),
            1,
            "{status}: the work may have been done"
        );

        let (url, keys) = serve(vec![(status, ""), (200, "")]).await;
        let response = client.put(&url).body("{}").send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            keys.lock().unwrap().len(),
            2,
            "{status}: a PUT is idempotent"
        );
    }
}

// (Paused: its timeouts cannot fire before the server, on the same
// runtime, has read the request, however busy the machine.)
#[tokio::test(start_paused = true)]
async fn a_post_that_times_out_is_retried_only_with_an_idempotency_key() {
    // (The `Client`'s 100 ms timeout holds under a 5 s deadline: a request
    // timeout set from the time left would replace it.)
    let policy = quick().deadline(Some(Duration::from_secs(5)));
    let timeout = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let plain = ClientBuilder::new(timeout.clone())
        .with(RetryMiddleware::new(&policy))
        .build();
    let (url, keys) = serve(vec![(0, ""), (200, "")]).await;
    let error = plain.post(&url).body("{}").send().await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(*keys.lock().unwrap(), [None], "not repeated, no key added");

    // The caller's own key makes it safe to repeat.
    let (url, keys) = serve(vec![(0, ""), (200, "")]).await;
    let response = plain
        .post(&url)
        .header("idempotency-key", "order-7")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        *keys.lock().unwrap(),
        [Some("order-7".to_owned()), Some("order-7".to_owned())]
    );

    // Or the middleware adds one, the same on every attempt.
    let keyed = ClientBuilder::new(timeout)
        .with(RetryMiddleware::new(&policy).add_idempotency_key())
        .build();
    let (url, keys) = serve(vec![(0, ""), (0, ""), (200, "")]).await;
    let response = keyed.post(&url).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert!(keys[0].as_ref().is_some_and(|k| k.len() == 36), "{keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[tokio::test]
async fn the_time_left_becomes_each_attempts_timeout() {
    let (url, keys) = serve(vec![(0, ""), (0, "")]).await;
    let policy = quick()
        .deadline(Some(Duration::from_millis(150)))
        .attempts(5);
    let started = std::time::Instant::now();
    let error = client(RetryMiddleware::new(&policy))
        .get(&url)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, reqwest_middleware::Error::Middleware(e) if e.is::<backstop::Elapsed>()),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "attempt cut off at its deadline (the call's, or one it runs within: an enclosing call's or attempt's, a scope's, a served request's)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        keys.lock().unwrap().len(),
        1,
        "no time left for another attempt"
    );
}

/// A call whose time is all gone before it starts (a handler passing on a
/// deadline already spent) sends nothing, hedged or not, as
/// `within_attempt` does: its attempt could only be cut off, and the
/// server would do work nobody waits for. It is turned away before its
/// first attempt, as by an open breaker: no breaker, budget or hook hears
/// of a failure.
#[tokio::test]
async fn a_request_with_no_time_left_is_not_sent() {
    static BREAKER: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(30));
    static BUDGET: TokenBudget = TokenBudget::standard();
    let (url, keys) = serve(vec![(200, ""); 20]).await;
    let plain = client(RetryMiddleware::new(&quick()));
    // (The connection is made, as a busy client's would be.)
    let marker = plain.get(&url).header("idempotency-key", "marker");
    assert_eq!(marker.send().await.unwrap().status(), 200);
    for _ in 0..20 {
        // (Ended by the middleware, or by the scope's own cut-off: they
        // come at once.)
        let spent = backstop::scope::deadline(Duration::ZERO, plain.get(&url).send()).await;
        if let Ok(Ok(response)) = spent {
            panic!("sent and answered: {}", response.status());
        }
    }
    // A deadline of the call's own, spent.
    let spent = quick()
        .deadline(Some(Duration::from_nanos(1)))
        .token_budget(&BUDGET);
    let told = Arc::new(Mutex::new(Vec::new()));
    for hedged in [false, true] {
        let told = told.clone();
        let retry = backstop::Retry::new(&spent).breaker(&BREAKER).on_give_up(
            move |event: &GiveUpEvent<'_, reqwest::Response, _>| {
                told.lock()
                    .unwrap()
                    .push((event.reason(), event.attempts()));
            },
        );
        let retry = if hedged {
            retry.hedge(backstop::hedge::Hedge::after(Duration::from_millis(50)))
        } else {
            retry
        };
        let spent = client(RetryMiddleware::new(retry));
        for _ in 0..3 {
            let error = spent.get(&url).send().await.unwrap_err();
            assert_eq!(
                error.to_string(),
                "attempt cut off at its deadline (the call's, or one it runs within: an enclosing call's or attempt's, a scope's, a served request's)"
            );
        }
    }
    assert_eq!(
        *keys.lock().unwrap(),
        vec![Some("marker".to_owned())],
        "nothing was sent after the marker"
    );
    assert_eq!(BREAKER.state(), backstop::limit::BreakerState::Closed);
    assert!((BUDGET.tokens() - 10.0).abs() < 1e-9, "{}", BUDGET.tokens());
    assert_eq!(*told.lock().unwrap(), [(GiveUp::Deadline, 0); 6]);
}

#[tokio::test]
async fn a_streamed_body_is_sent_once_and_reported() {
    let (url, keys) = serve(vec![(503, ""), (200, "")]).await;
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let told = reasons.clone();
    let middleware = RetryMiddleware::new(backstop::Retry::new(&quick()).on_give_up(
        move |e: &GiveUpEvent<'_, reqwest::Response, reqwest_middleware::Error>| {
            told.lock().unwrap().push(e.reason());
        },
    ));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build();
    let chunks: Vec<Result<&'static [u8], std::io::Error>> = vec![Ok(b"{\"sku\""), Ok(b": 7}")];
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = client.put(&url).body(body).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(keys.lock().unwrap().len(), 1);
    assert_eq!(*reasons.lock().unwrap(), [GiveUp::NotReplayable]);
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_a_post() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let attempts = Arc::new(Mutex::new(0));
    let seen = attempts.clone();
    let middleware = RetryMiddleware::new(backstop::Retry::new(&quick()).on_retry(
        move |_: &backstop::RetryEvent<'_, _, _>| {
            *seen.lock().unwrap() += 1;
        },
    ));
    let error = client(middleware).post(&url).send().await.unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(*attempts.lock().unwrap(), 2, "nothing was sent: retried");
}

static ORDERS: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));

#[tokio::test]
async fn an_open_breaker_turns_calls_away_as_a_middleware_error() {
    let (url, keys) = serve(vec![(503, ""), (503, ""), (200, "")]).await;
    let client = client(RetryMiddleware::new(
        backstop::Retry::new(&quick()).breaker(&ORDERS),
    ));
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 503, "opened after two failures");
    let error = client.get(&url).send().await.unwrap_err();
    assert!(error.is_middleware(), "{error:?}");
    assert!(format!("{error}").contains("circuit"), "{error}");
    assert_eq!(keys.lock().unwrap().len(), 2, "rejected without sending");
}

/// A key given to the middleware's `Retry` is every request's, in place
/// of the request's host: its breaker kept per key is the key's.
#[tokio::test]
async fn a_key_given_to_the_retry_is_the_key_of_every_request() {
    use backstop::limit::{BreakerState, Keyed};
    static PER_TENANT: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(1, Duration::from_secs(30)));
    let (url, _) = serve(vec![(503, "")]).await;
    let client = client(RetryMiddleware::new(
        backstop::Retry::new(&quick().attempts(1))
            .key(&"tenant-3")
            .breaker(&PER_TENANT),
    ));
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let now = std::time::Instant::now();
    assert_eq!(PER_TENANT.get("tenant-3").state_at(now), BreakerState::Open);
}

static SHARED: TokenBudget = TokenBudget::standard();

// (Unreachable: a refused connection would hold once the budget refuses.)
#[retry(budget = SHARED, base = 1ms, attempts = 5)]
async fn shares_the_token_budget(calls: &Mutex<u32>) -> Result<(), std::io::Error> {
    *calls.lock().unwrap() += 1;
    Err(std::io::ErrorKind::HostUnreachable.into())
}

#[tokio::test]
async fn a_token_budget_is_shared_with_retry_functions() {
    let (url, _) = serve((0..20).map(|_| (503, "")).collect()).await;
    let client = client(RetryMiddleware::new(
        backstop::Retry::new(&quick().attempts(10)).budget(&SHARED),
    ));
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let calls = Mutex::new(0);
    shares_the_token_budget(&calls).await.unwrap_err();
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "the middleware drained the shared throttle"
    );
}

#[tokio::test]
async fn a_request_timeout_longer_than_the_time_left_shrinks_and_reports_a_timeout() {
    let (url, keys) = serve(vec![(0, ""), (0, "")]).await;
    let policy = quick().deadline(Some(Duration::from_millis(150)));
    let error = client(RetryMiddleware::new(&policy))
        .get(&url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_err();
    assert!(
        error.is_timeout(),
        "reqwest's own timeout, shrunk: {error:?}"
    );
    assert_eq!(keys.lock().unwrap().len(), 1);
}

// (Paused, as above.)
#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_applies_from_the_policy_or_the_retry() {
    let within_5s = quick().deadline(Some(Duration::from_secs(5)));
    let by_policy = within_5s.attempt_timeout(Some(Duration::from_millis(100)));
    cut_off_twice_then_answered(RetryMiddleware::new(&by_policy)).await;
    let by_retry = backstop::Retry::new(&within_5s).attempt_timeout(Duration::from_millis(100));
    cut_off_twice_then_answered(RetryMiddleware::new(by_retry)).await;
}

/// Two attempts the server never answers, each cut off by `middleware`'s
/// attempt timeout, then a third answered.
async fn cut_off_twice_then_answered(middleware: impl reqwest_middleware::Middleware) {
    let (url, keys) = serve(vec![(0, ""), (0, ""), (200, "")]).await;
    let started = tokio::time::Instant::now();
    let response = client(middleware).get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_added_key_goes_only_on_requests_not_idempotent_by_their_method() {
    let (url, keys) = serve(vec![(503, ""), (200, "")]).await;
    let middleware = RetryMiddleware::new(
        backstop::Retry::new(&quick())
            .when(|e: &reqwest_middleware::Error| e.is_connect() || e.is_timeout())
            .on_retry(|e| assert_eq!(e.attempt(), 1)),
    )
    .add_idempotency_key();
    let response = client(middleware).get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(*keys.lock().unwrap(), [None, None], "a GET needs no key");
}

/// Stands in for the network: the first request hangs for a minute, the
/// others answer 200 at once; it counts them.
struct SlowFirst(std::sync::atomic::AtomicU32);

/// Which request answered, as a middleware below the retries tells it.
#[derive(Clone, Debug, PartialEq)]
struct Answered(u32);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for SlowFirst {
    async fn handle(
        &self,
        _: reqwest::Request,
        extensions: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == 0 {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        // What the attempt that answered leaves to the caller.
        extensions.insert(Answered(n));
        let body = format!("answer {n}");
        Ok(http::Response::builder()
            .status(200)
            .body(body)
            .unwrap()
            .into())
    }
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_request_slow_to_answer_is_hedged_and_a_post_is_not() {
    // (No deadline: the POST below waits a minute for its answer.)
    let policy = quick().deadline(None);
    let hedged = backstop::Retry::new(&policy)
        .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50)));
    let network = Arc::new(SlowFirst(std::sync::atomic::AtomicU32::new(0)));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(hedged))
        .with_arc(network.clone())
        .build();
    let started = tokio::time::Instant::now();
    let response = client.get("http://users.internal/7").send().await.unwrap();
    assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
    assert_eq!(
        response.text().await.unwrap(),
        "answer 1",
        "the hedge answered"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(50));

    // A POST may do its work twice: never hedged, it waits for its answer.
    network.0.store(0, std::sync::atomic::Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let response = client
        .post("http://users.internal/")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "answer 0");
    assert_eq!(started.elapsed(), Duration::from_secs(60));

    // Nor a PUT whose body is streamed: it cannot be sent twice.
    network.0.store(0, std::sync::atomic::Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let chunks: Vec<Result<&'static [u8], std::io::Error>> = vec![Ok(b"{}")];
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = client
        .put("http://users.internal/7")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "answer 0");
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

/// Stands in for a network that never answers.
struct Hangs;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Hangs {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedged_call_that_never_answers_gives_up_at_its_deadline() {
    let policy = quick().deadline(Some(Duration::from_secs(1)));
    let hedged = backstop::Retry::new(&policy)
        .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50)));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(hedged))
        .with(Hangs)
        .build();
    let started = tokio::time::Instant::now();
    let error = client
        .get("http://users.internal/7")
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, reqwest_middleware::Error::Middleware(e) if e.is::<backstop::Elapsed>()),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "attempt cut off at its deadline (the call's, or one it runs within: an enclosing call's or attempt's, a scope's, a served request's)"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

/// A port with nothing listening: every connection is refused.
async fn refusing_url() -> String {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    url
}

/// Of 20 calls to a new host whose first request of each call is answered
/// 503 and its retry 200, how many `client` gets a 200 for.
async fn rescued_of_twenty(client: &ClientWithMiddleware) -> usize {
    let (healthy, _) = serve((0..20).flat_map(|_| [(503, ""), (200, "")]).collect()).await;
    let mut rescued = 0;
    for _ in 0..20 {
        if client.get(&healthy).send().await.unwrap().status() == 200 {
            rescued += 1;
        }
    }
    rescued
}

// In paused time: once its token budget refuses, a call to the host that
// is down holds (its connections are refused) until the budget has refused
// for its ride-out, 10 s.
#[tokio::test(start_paused = true)]
async fn a_host_that_is_down_drains_its_own_token_budget_and_no_other_hosts() {
    // The healthy host alone, through a client of its own.
    let alone = rescued_of_twenty(&client(RetryMiddleware::new(&quick()))).await;
    assert!(alone >= 10, "{alone}: half of the calls at least");
    // Behind one client with a host that is down.
    let client = client(RetryMiddleware::new(&quick()));
    let down = refusing_url().await;
    for _ in 0..30 {
        let error = client.get(&down).send().await.unwrap_err();
        assert!(error.is_connect(), "{error:?}");
    }
    let beside = rescued_of_twenty(&client).await;
    assert_eq!(
        beside, alone,
        "the healthy host kept the retries it has alone"
    );
    // And the host that is down has none left, through any client.
    let attempts = Arc::new(Mutex::new(0));
    let counted = attempts.clone();
    let counting = client_counting(move || *counted.lock().unwrap() += 1);
    let _ = counting.get(&down).send().await.unwrap_err();
    assert_eq!(
        *attempts.lock().unwrap(),
        0,
        "no retry for the host that is down"
    );
}

/// A client whose middleware calls `on_retry` at each retry.
fn client_counting(on_retry: impl Fn() + Send + Sync + 'static) -> ClientWithMiddleware {
    client(RetryMiddleware::new(
        backstop::Retry::new(&quick())
            .on_retry(move |_: &backstop::RetryEvent<'_, _, _>| on_retry()),
    ))
}

static PER_HOST: backstop::limit::Keyed<CircuitBreaker> =
    backstop::limit::Keyed::new(CircuitBreaker::new(2, Duration::from_secs(30)));

#[tokio::test]
async fn a_breaker_kept_per_key_opens_for_the_host_that_is_down_only() {
    let client = client(RetryMiddleware::new(
        backstop::Retry::new(&quick()).breaker(&PER_HOST),
    ));
    let down = refusing_url().await;
    let _ = client.get(&down).send().await.unwrap_err();
    let rejected = client.get(&down).send().await.unwrap_err();
    assert!(format!("{rejected}").contains("circuit"), "{rejected}");
    let (healthy, _) = serve(vec![(200, "")]).await;
    let response = client.get(&healthy).send().await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "the healthy host's breaker is closed"
    );
    // An operator reaches each destination's breaker by its destination.
    let state = |url: &str| {
        let port = reqwest::Url::parse(url).unwrap().port();
        PER_HOST
            .peek(&backstop::limit::Destination::new(
                "http",
                "127.0.0.1",
                port,
            ))
            .map(CircuitBreaker::state)
    };
    assert_eq!(state(&down), Some(backstop::limit::BreakerState::Open));
    assert_eq!(state(&healthy), Some(backstop::limit::BreakerState::Closed));
}

/// Through the middleware, and an error of its own for any answer but a
/// 200, which it would retry.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn around_the_middleware(
    client: &ClientWithMiddleware,
    url: &str,
) -> Result<(), std::io::Error> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(std::io::Error::other)?;
    if response.status() == 200 {
        Ok(())
    } else {
        Err(std::io::ErrorKind::ConnectionRefused.into())
    }
}

#[tokio::test]
async fn a_call_around_the_middleware_does_not_retry_a_server_failure_answered_after_its_retries() {
    // The middleware retries the 503, then returns the 507 (a failure of
    // the server's that no retry fixes): it gave up after retrying, and
    // the call around it does not retry on top (2 requests, not 2 × 3).
    let (url, keys) = serve([(503, ""), (507, "")].repeat(3)).await;
    let client = client(RetryMiddleware::new(&quick().no_budget()));
    let error = around_the_middleware(&client, &url).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(keys.lock().unwrap().len(), 2, "one layer retries");
    // A 404 after the retry is an answer about the request: the call
    // around may act on it, and retries.
    let (url, keys) = serve([(503, ""), (404, "")].repeat(3)).await;
    let _ = around_the_middleware(&client, &url).await.unwrap_err();
    assert_eq!(keys.lock().unwrap().len(), 6);
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[retry(attempts = 3, base = 1ms, attempt_timeout = 150ms, idempotent, budget = none)]
async fn boxed_through_the_middleware(
    client: &ClientWithMiddleware,
    url: &str,
) -> Result<u16, BoxError> {
    Ok(client.get(url).send().await?.status().as_u16())
}

/// A middleware's error boxed (or in an `anyhow::Error`) is judged as it
/// is unboxed: its `source()` is its inner error's, past what it holds
/// itself (a timed-out attempt, reqwest's error), which a walk of the
/// chain would miss. A `#[retry]` function around a middleware client
/// returning a boxed error retries it.
#[tokio::test(start_paused = true)]
async fn a_middleware_error_boxed_is_judged_as_it_is_unboxed() {
    use backstop::{CircuitOpen, Classify, Elapsed, Verdict};
    let errors = [
        (
            reqwest_middleware::Error::from(Elapsed::new()),
            Verdict::RetryIfIdempotent,
        ),
        (
            reqwest_middleware::Error::from(CircuitOpen::new()),
            Verdict::Stop,
        ),
    ];
    for (error, verdict) in errors {
        assert_eq!(error.classify(), verdict);
        let text = error.to_string();
        let boxed = BoxError::from(error);
        assert_eq!(boxed.classify(), verdict, "{text}");
        #[cfg(feature = "anyhow")]
        {
            let error = *boxed.downcast::<reqwest_middleware::Error>().unwrap();
            assert_eq!(anyhow::Error::from(error).classify(), verdict, "{text}");
        }
    }
    // Its own timeout, reqwest's error through the middleware.
    let (url, _) = serve(vec![(0, "")]).await;
    let plain = ClientBuilder::new(reqwest::Client::new()).build();
    let request = plain.get(&url).timeout(Duration::from_millis(50));
    let error = request.send().await.unwrap_err();
    assert!(
        matches!(error, reqwest_middleware::Error::Reqwest(_)),
        "{error:?}"
    );
    assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
    assert_eq!(BoxError::from(error).classify(), Verdict::RetryIfIdempotent);
    // Each attempt of a function around a middleware client with no
    // attempt timeout of its own, cut off by the function's.
    let (url, seen) = serve(vec![(0, ""); 3]).await;
    let client = client(RetryMiddleware::new(&quick().attempts(1)));
    let error = boxed_through_the_middleware(&client, &url)
        .await
        .unwrap_err();
    assert_eq!(error.classify(), Verdict::RetryIfIdempotent, "{error}");
    assert_eq!(seen.lock().unwrap().len(), 3, "retried around the client");
}
