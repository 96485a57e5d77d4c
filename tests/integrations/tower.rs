//! Feature `tower`: `RetryLayer` against a real hyper server and client on
//! 127.0.0.1, and against in-process services in tokio's paused time.
//! Run with `cargo test -p backstop --features tower --test integrations tower::`.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::limit::{CircuitBreaker, TokenBudget};
use backstop::tower::{ReplayBody, RetryLayer};
use backstop::{CircuitOpen, GiveUp, GiveUpEvent, Policy, Verdict, context, retry};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::{Layer, ServiceExt, service_fn};

use crate::support;

type BoxError = Box<dyn StdError + Send + Sync>;

/// What the server saw of one request: its method, its body, its
/// trailers, and how its length was said (`content-length`'s value, or
/// "chunked").
#[derive(Clone, Debug)]
struct Seen {
    method: http::Method,
    body: Bytes,
    trailers: Option<http::HeaderMap>,
    length: String,
}

/// A hyper server on loopback answering each request, after reading its
/// whole body, with the next `(status, retry-after)` of `script` (200 once
/// the script is over).
async fn serve(script: Vec<(u16, Option<&'static str>)>) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(script.into_iter()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (log, script) = (log.clone(), script.clone());
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (log, script) = (log.clone(), script.clone());
                async move {
                    let method = request.method().clone();
                    let headers = request.headers();
                    let length = match headers.get(http::header::CONTENT_LENGTH) {
                        Some(length) => length.to_str().unwrap().to_owned(),
                        None => headers
                            .get(http::header::TRANSFER_ENCODING)
                            .map_or("none", |chunked| chunked.to_str().unwrap())
                            .to_owned(),
                    };
                    let body = request.into_body().collect().await.unwrap();
                    let trailers = body.trailers().cloned();
                    let body = body.to_bytes();
                    log.lock().unwrap().push(Seen {
                        method,
                        body,
                        trailers,
                        length,
                    });
                    let (status, after) = script.lock().unwrap().next().unwrap_or((200, None));
                    let mut response = Response::builder().status(status);
                    if let Some(after) = after {
                        response = response.header("retry-after", after);
                    }
                    Ok::<_, Infallible>(response.body(Full::new(Bytes::new())).unwrap())
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// A hyper client for request bodies of type `B`, as the layer sends them.
fn client<B>() -> Client<HttpConnector, ReplayBody<B>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static + Unpin,
    B::Error: Into<BoxError> + Send,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// hyper's client errors: a failed connection sent nothing; any other
/// failure may have come after the request was written.
fn hyper_verdict(error: &hyper_util::client::legacy::Error) -> Verdict {
    if error.is_connect() {
        Verdict::Retry
    } else {
        Verdict::RetryIfIdempotent
    }
}

/// Retrying at once, in real time: the loopback tests take milliseconds.
fn quick() -> Policy {
    Policy::new()
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(2))
}

fn post(addr: SocketAddr, body: &'static str) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}/orders"))
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

#[tokio::test]
async fn a_503_503_200_takes_three_requests_each_with_the_whole_body() {
    let (addr, seen) = serve(vec![(503, None), (503, None)]).await;
    let service =
        RetryLayer::http(backstop::Retry::new(&quick()).when(hyper_verdict)).layer(client());
    let response = service.oneshot(post(addr, "{\"sku\": 7}")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|s| s.method == "POST" && s.body == "{\"sku\": 7}")
    );
}

#[tokio::test]
async fn a_post_answered_502_is_sent_once_a_put_or_a_keyed_post_again() {
    let (addr, seen) = serve(vec![(502, None), (502, None)]).await;
    let service =
        RetryLayer::http(backstop::Retry::new(&quick()).when(hyper_verdict)).layer(client());
    let response = service.clone().oneshot(post(addr, "a")).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a POST may have been done: not repeated"
    );

    let put = Request::put(format!("http://{addr}/orders/7"))
        .body(Full::new(Bytes::from_static(b"b")))
        .unwrap();
    let response = service.clone().oneshot(put).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "a PUT is idempotent: 502, then 200"
    );

    let (addr, seen) = serve(vec![(504, None)]).await;
    let keyed = Request::post(format!("http://{addr}/orders"))
        .header("idempotency-key", "order-7")
        .body(Full::new(Bytes::from_static(b"c")))
        .unwrap();
    let response = service.oneshot(keyed).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.lock().unwrap().len(), 2, "the key makes a repeat safe");
}

#[tokio::test]
async fn a_policy_that_says_idempotent_repeats_a_post() {
    let (addr, seen) = serve(vec![(500, None)]).await;
    let service =
        RetryLayer::http(backstop::Retry::new(&quick().idempotent(true)).when(hyper_verdict))
            .layer(client());
    let response = service.oneshot(post(addr, "a")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// A body of `chunks` chunks of 1 KiB, streamed: its length is not known.
fn stream(
    chunks: usize,
) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>>> {
    let frames = (0..chunks).map(|_| Ok(Frame::data(Bytes::from(vec![b'x'; 1024]))));
    StreamBody::new(futures_util::stream::iter(frames))
}

#[tokio::test]
async fn a_streamed_body_over_the_limit_is_sent_once_and_reported() {
    let (addr, seen) = serve(vec![(503, None), (503, None)]).await;
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let told = reasons.clone();
    let service = RetryLayer::http(
        backstop::Retry::new(&quick())
            .when(hyper_verdict)
            .on_give_up(move |e: &GiveUpEvent<'_, Response<Incoming>, _>| {
                told.lock().unwrap().push(e.reason());
            }),
    )
    .layer(client());
    let upload = Request::put(format!("http://{addr}/files/1"))
        .body(stream(65))
        .unwrap();
    let response = service.clone().oneshot(upload).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "65 KiB is over the 64 KiB kept"
    );
    assert_eq!(
        seen.lock().unwrap()[0].body.len(),
        65 * 1024,
        "sent whole, once"
    );
    assert_eq!(*reasons.lock().unwrap(), [GiveUp::NotReplayable]);

    // Under the limit, a stream of unknown length is kept as it is sent.
    let upload = Request::put(format!("http://{addr}/files/2"))
        .body(stream(64))
        .unwrap();
    let response = service.oneshot(upload).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[2].body.len(),
        64 * 1024,
        "the kept body, sent again whole"
    );
    assert_eq!(seen[1].body, seen[2].body);
}

#[tokio::test]
async fn a_replay_limit_of_zero_keeps_only_empty_bodies() {
    let (addr, seen) = serve(vec![(503, None), (503, None)]).await;
    let service = RetryLayer::http(backstop::Retry::new(&quick()).when(hyper_verdict))
        .replay_limit(0)
        .layer(client());
    let response = service.clone().oneshot(post(addr, "a")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let get = Request::get(format!("http://{addr}/orders"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.oneshot(get).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

/// An in-process service answering each call with the next response of
/// `script` (200 once it is over), counting calls.
#[allow(clippy::type_complexity)]
fn scripted(
    script: Vec<Response<()>>,
) -> (
    impl tower::Service<
        Request<ReplayBody<String>>,
        Response = Response<()>,
        Error = BoxError,
        Future = impl Future<Output = Result<Response<()>, BoxError>> + Send,
    > + Clone
    + Send
    + 'static,
    Arc<AtomicU32>,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let count = calls.clone();
    let script = Arc::new(Mutex::new(script.into_iter()));
    let service = service_fn(move |_: Request<ReplayBody<String>>| {
        count.fetch_add(1, Ordering::Relaxed);
        let next = script.lock().unwrap().next();
        async move { Ok(next.unwrap_or_else(|| Response::new(()))) }
    });
    (service, calls)
}

fn status(code: u16, retry_after: Option<&str>) -> Response<()> {
    let mut response = Response::builder().status(code);
    if let Some(after) = retry_after {
        response = response.header("retry-after", after);
    }
    response.body(()).unwrap()
}

fn get() -> Request<String> {
    Request::get("/users/7").body(String::new()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_honoured() {
    let (inner, calls) = scripted(vec![status(429, Some("3"))]);
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let start = tokio::time::Instant::now();
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited <= Duration::from_millis(3_610),
        "asked 3 s, spread upward by at most 20%: waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_response_kept_through_the_sleep_is_dropped_with_the_call() {
    // The layer keeps a retried response through its sleep (returned if
    // the retry cannot be made). A caller that gives up during the sleep
    // drops the call, and the response with it (its connection, in a real
    // client, released at once).
    let alive = Arc::new(());
    let held = alive.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        let response = Response::builder().status(503).body(held.clone()).unwrap();
        async move { Ok::<_, BoxError>(response) }
    });
    let policy = Policy::new()
        .base(Duration::from_secs(1))
        .jitter(backstop::Jitter::None)
        .no_budget();
    let service = RetryLayer::http(&policy).layer(inner);
    let call = service.clone().oneshot(get());
    let out = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(out.is_err(), "the caller gave up during the sleep");
    // Ours and the service's: the response's is gone.
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(service);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_deadline_gives_up_at_once() {
    let (inner, calls) = scripted(vec![status(503, Some("60"))]);
    let policy = Policy::new().deadline(Some(Duration::from_secs(5)));
    let service = RetryLayer::http(&policy).layer(inner);
    let start = tokio::time::Instant::now();
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn each_attempt_runs_with_the_calls_context() {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let log = keys.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        let log = log.clone();
        async move {
            tokio::task::yield_now().await;
            let cx = context().expect("inside an attempt");
            log.lock()
                .unwrap()
                .push((cx.attempt(), cx.idempotency_key().to_string()));
            let code = if cx.attempt() < 3 { 503 } else { 200 };
            Ok::<_, BoxError>(status(code, None))
        }
    });
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let keys = keys.lock().unwrap();
    assert_eq!(keys.iter().map(|k| k.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(
        keys.iter().all(|k| k.1 == keys[0].1),
        "one key per call: {keys:?}"
    );
}

#[retry(attempts = 3, base = 10ms)]
async fn nested_lookup(calls: &AtomicU32) -> Result<(), std::io::Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[tokio::test(start_paused = true)]
async fn a_nested_retry_call_that_retried_is_not_retried_again_by_the_layer() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        let seen = seen.clone();
        async move { nested_lookup(&seen).await.map(|()| Response::new(())) }
    });
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let error = service.oneshot(get()).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(
        calls.load(Ordering::Relaxed),
        3,
        "3, not 3 × 3: one layer retries"
    );
}

/// Through the layer, and an error of its own for any answer but a 200,
/// which it would retry.
#[retry(attempts = 3, base = 10ms, budget = none)]
async fn around_the_layer<S>(service: &S) -> Result<(), std::io::Error>
where
    S: tower::Service<Request<String>, Response = Response<()>, Error = BoxError> + Clone,
{
    let response = service
        .clone()
        .oneshot(get())
        .await
        .map_err(std::io::Error::other)?;
    if response.status() == StatusCode::OK {
        Ok(())
    } else {
        Err(std::io::ErrorKind::ConnectionRefused.into())
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_around_the_layer_does_not_retry_a_server_failure_answered_after_its_retries() {
    // The layer retries the 503, then returns the 507 (a failure of the
    // server's that no retry fixes): it gave up after retrying, and the
    // call around it does not retry on top (2 requests, not 2 × 3).
    let alternating = |then: u16| -> Vec<_> {
        (0..6)
            .map(|i| status(if i % 2 == 0 { 503 } else { then }, None))
            .collect()
    };
    let (inner, calls) = scripted(alternating(507));
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let error = around_the_layer(&service).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "one layer retries");

    // A 404 after the retry is an answer about the request, which the
    // call around may act on: it retries (3 × 2 requests).
    let (inner, calls) = scripted(alternating(404));
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let _ = around_the_layer(&service).await.unwrap_err();
    assert_eq!(calls.load(Ordering::Relaxed), 6);

    // A 404 at once retried nothing: the call around it may.
    let (inner, calls) = scripted((0..3).map(|_| status(404, None)).collect());
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let _ = around_the_layer(&service).await.unwrap_err();
    assert_eq!(calls.load(Ordering::Relaxed), 3);

    // A 200 after a retry is a success: nothing to give up.
    let (inner, calls) = scripted(vec![status(503, None)]);
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    around_the_layer(&service).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_cuts_off_a_hung_attempt_of_an_idempotent_request() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        let first = seen.fetch_add(1, Ordering::Relaxed) == 0;
        async move {
            if first {
                std::future::pending::<()>().await;
            }
            Ok::<_, BoxError>(Response::new(()))
        }
    });
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new()).attempt_timeout(Duration::from_secs(2)),
    )
    .layer(inner);
    let start = tokio::time::Instant::now();
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert!(start.elapsed() >= Duration::from_secs(2));
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_post_is_not_repeated() {
    let (inner, calls) = scripted(vec![]);
    let slow = tower::ServiceBuilder::new()
        .map_future(|f| async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            f.await
        })
        .service(inner);
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new()).attempt_timeout(Duration::from_secs(1)),
    )
    .layer(slow);
    let post = Request::post("/orders").body(String::from("{}")).unwrap();
    let error = service.oneshot(post).await.unwrap_err();
    assert!(error.is::<backstop::Elapsed>(), "{error}");
    assert_eq!(
        error.to_string(),
        "attempt timed out: its `attempt_timeout` of 1s ran out"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// A request with no time left at all (a deadline already spent, under
/// an attempt timeout that would cut it off at once) is not sent, hedged
/// or not: the server would do work nobody waits for. The call is turned
/// away before its first attempt, as by an open breaker: no breaker,
/// budget, adaptive throttle or hook hears of a failure.
#[tokio::test(start_paused = true)]
async fn a_request_with_no_time_left_is_not_sent() {
    static BREAKER: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(30));
    static BUDGET: TokenBudget = TokenBudget::standard();
    static THROTTLE: backstop::limit::AdaptiveThrottle =
        backstop::limit::AdaptiveThrottle::standard();
    let spent = Policy::new()
        .deadline(Some(Duration::from_nanos(1)))
        .token_budget(&BUDGET);
    let told = Arc::new(Mutex::new(Vec::new()));
    for hedged in [false, true] {
        let (inner, calls) = scripted(vec![]);
        let told = told.clone();
        let retry = backstop::Retry::new(&spent)
            .attempt_timeout(Duration::from_secs(1))
            .breaker(&BREAKER)
            .throttle(&THROTTLE)
            .on_give_up(move |event: &GiveUpEvent<'_, Response<()>, BoxError>| {
                told.lock()
                    .unwrap()
                    .push((event.reason(), event.attempts()));
            });
        let retry = if hedged {
            retry.hedge(backstop::hedge::Hedge::after(Duration::from_millis(50)))
        } else {
            retry
        };
        let service = RetryLayer::http(retry).layer(inner);
        for _ in 0..3 {
            let get = Request::get("/orders").body(String::new()).unwrap();
            let error = service.clone().oneshot(get).await.unwrap_err();
            assert!(error.is::<backstop::Elapsed>(), "{error}");
            assert_eq!(
                error.to_string(),
                "attempt cut off at its deadline (the call's, or one it runs within: an enclosing call's or attempt's, a scope's, a served request's)"
            );
        }
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "hedged: {hedged}: nothing was sent"
        );
    }
    assert_eq!(BREAKER.state(), backstop::limit::BreakerState::Closed);
    assert!((BUDGET.tokens() - 10.0).abs() < 1e-9, "{}", BUDGET.tokens());
    // (Six requests counted and none accepted would shed half the calls.)
    let shed = THROTTLE.rejection_probability();
    assert!(shed <= 0.0, "{shed}");
    assert_eq!(*told.lock().unwrap(), [(GiveUp::Deadline, 0); 6]);
}

/// tower's own middlewares below the layer fail with errors of their own
/// types, known by them: a `timeout`'s `Elapsed` is ambiguous (a request
/// the policy calls idempotent is retried, one it does not is not), and a
/// `load_shed`'s `Overloaded` was never sent (a POST is retried).
#[tokio::test(start_paused = true)]
async fn towers_own_timeout_and_load_shed_below_the_layer_are_known_by_their_type() {
    // A timeout per attempt below the layer of `Clone` requests, over a
    // service whose first call hangs.
    let timed = |policy: Policy| {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let hangs_once = service_fn(move |n: u32| {
            let first = counted.fetch_add(1, Ordering::Relaxed) == 0;
            async move {
                if first {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Infallible>(n)
            }
        });
        let service = tower::ServiceBuilder::new()
            .layer(RetryLayer::new(backstop::Retry::new(&policy)))
            .timeout(Duration::from_millis(50))
            .service(hangs_once);
        (service, calls)
    };
    let (service, calls) = timed(Policy::new().idempotent(true));
    assert_eq!(service.oneshot(7).await.unwrap(), 7);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "retried: idempotent");
    let (service, calls) = timed(Policy::new());
    let error = service.oneshot(7).await.unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "not retried: it may be done"
    );

    // A load shed over one slot, below the HTTP layer: a POST turned away
    // while another call holds the slot was never sent, and is retried
    // until the slot is free (at 100 ms: tried at 1, 61 and 181 ms).
    let sent = Arc::new(AtomicU32::new(0));
    let counted = sent.clone();
    let slow = service_fn(move |_: Request<ReplayBody<String>>| {
        counted.fetch_add(1, Ordering::Relaxed);
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, Infallible>(Response::new(()))
        }
    });
    let policy = Policy::new()
        .base(Duration::from_millis(60))
        .jitter(backstop::Jitter::None);
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(backstop::Retry::new(&policy)))
        .load_shed()
        .concurrency_limit(1)
        .service(slow);
    let holder = tokio::spawn(service.clone().oneshot(get()));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let post = Request::post("/orders").body(String::from("{}")).unwrap();
    let response = service.oneshot(post).await.unwrap();
    assert_eq!(
        response.extensions().get::<backstop::http::Attempts>(),
        Some(&backstop::http::Attempts(3))
    );
    assert_eq!(
        sent.load(Ordering::Relaxed),
        2,
        "the holder's and the POST's last"
    );
    assert!(holder.await.unwrap().is_ok());
}

/// `backstop::scope::deadline` around a call through the layer is the
/// call's deadline: the layer keeps within it and returns the last
/// response; a tower `timeout` above the layer ends the call with its own
/// error instead, the last response dropped.
#[tokio::test(start_paused = true)]
async fn a_scope_deadline_around_the_layer_keeps_the_last_response_a_tower_timeout_does_not() {
    let policy = Policy::new()
        .attempts(20)
        .base(Duration::from_millis(50))
        .jitter(backstop::Jitter::None)
        .no_budget();
    let unavailable = || scripted((0..20).map(|_| status(503, None)).collect());
    // Attempts at 0, 50 and 150 ms; the next would be at 350.
    let (inner, calls) = unavailable();
    let service = RetryLayer::http(&policy).layer(inner);
    let start = tokio::time::Instant::now();
    let response = backstop::scope::deadline(Duration::from_millis(300), service.oneshot(get()))
        .await
        .expect("the layer returned within the deadline")
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert!(start.elapsed() < Duration::from_millis(300));
    let (inner, calls) = unavailable();
    let above = tower::ServiceBuilder::new()
        .timeout(Duration::from_millis(300))
        .layer(RetryLayer::http(&policy))
        .service(inner);
    let error = above.oneshot(get()).await.unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    // (Cut off at 300 ms, asleep before the fourth: the 503 is lost.)
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

/// An attempt still out when the deadline comes is cut off, and its
/// outcome is the call's: the layer's `Elapsed` (with an attempt timeout,
/// cut to the time left), or the scope's (without one), not an earlier
/// attempt's 503. The attempt cut off was sent: the server may have done
/// the work, which an earlier "not processed" would deny.
#[tokio::test(start_paused = true)]
async fn an_attempt_the_deadline_cuts_off_ends_the_call_with_elapsed_not_an_earlier_response() {
    // Each attempt answers 503 after 100 ms: attempts at 0, 150, 350 and
    // 650 ms (50, 100, 200 ms of backoff); the deadline at 700 cuts the
    // fourth off.
    let slow = || {
        let calls = Arc::new(AtomicU32::new(0));
        let count = calls.clone();
        let inner = service_fn(move |_: Request<ReplayBody<String>>| {
            count.fetch_add(1, Ordering::Relaxed);
            async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, BoxError>(status(503, None))
            }
        });
        (inner, calls)
    };
    let policy = Policy::new()
        .attempts(20)
        .base(Duration::from_millis(50))
        .jitter(backstop::Jitter::None)
        .no_budget();
    let (inner, calls) = slow();
    let service = RetryLayer::http(
        backstop::Retry::new(&policy.deadline(Some(Duration::from_millis(700))))
            .attempt_timeout(Duration::from_secs(10)),
    )
    .layer(inner);
    let start = tokio::time::Instant::now();
    let error = service.oneshot(get()).await.unwrap_err();
    assert!(error.is::<backstop::Elapsed>(), "{error}");
    assert_eq!(calls.load(Ordering::Relaxed), 4);
    // (Cut off a little before the deadline: tokio's timer rounds up.)
    let took = start.elapsed();
    assert!(
        Duration::from_millis(690) <= took && took <= Duration::from_millis(700),
        "{took:?}"
    );
    let (inner, calls) = slow();
    let service = RetryLayer::http(&policy).layer(inner);
    let out = backstop::scope::deadline(Duration::from_millis(700), service.oneshot(get())).await;
    let elapsed = out.unwrap_err();
    assert!(elapsed.to_string().contains("scope::deadline"), "{elapsed}");
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}

static SHARED_THROTTLE: TokenBudget = TokenBudget::standard();

#[retry(budget = SHARED_THROTTLE, base = 1ms, attempts = 5)]
async fn shares_the_token_budget(calls: &AtomicU32) -> Result<(), std::io::Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    Err(std::io::ErrorKind::HostUnreachable.into())
}

#[tokio::test(start_paused = true)]
async fn a_token_budget_is_shared_with_retry_functions() {
    // The layer's failures drain the throttle both draw on...
    let (inner, calls) = scripted((0..20).map(|_| status(503, None)).collect());
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new().attempts(10)).budget(&SHARED_THROTTLE),
    )
    .layer(inner);
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        calls.load(Ordering::Relaxed) < 10,
        "the throttle stopped the layer"
    );
    // ...so the function is not retried either.
    let fn_calls = AtomicU32::new(0);
    shares_the_token_budget(&fn_calls).await.unwrap_err();
    assert_eq!(fn_calls.load(Ordering::Relaxed), 1);
}

static SHARED_BREAKER: CircuitBreaker = CircuitBreaker::new(3, Duration::from_secs(30));

#[derive(Debug)]
enum ApiError {
    Down,
    Open,
}

impl From<CircuitOpen> for ApiError {
    fn from(_: CircuitOpen) -> Self {
        ApiError::Open
    }
}

impl backstop::Classify for ApiError {
    fn classify(&self) -> Verdict {
        match self {
            ApiError::Down => Verdict::Retry,
            ApiError::Open => Verdict::Stop,
        }
    }
}

#[retry(breaker = SHARED_BREAKER, base = 1ms, attempts = 3)]
async fn opens_the_breaker() -> Result<(), ApiError> {
    Err(ApiError::Down)
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_by_a_retry_function_turns_the_layer_away() {
    assert!(matches!(opens_the_breaker().await, Err(ApiError::Down)));
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        seen.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, ApiError>(Response::new(())) }
    });
    let service = RetryLayer::http(backstop::Retry::new(&Policy::new()).breaker(&SHARED_BREAKER))
        .layer(inner);
    let outcome = service.oneshot(get()).await;
    assert!(matches!(outcome, Err(ApiError::Open)), "{outcome:?}");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "rejected before it was sent"
    );
}

/// What a [`Counted`] service answers its call number `n` (1-based).
type Answer<R> = std::pin::Pin<Box<dyn Future<Output = Result<R, std::io::Error>> + Send>>;

/// A service of `u32` requests that counts how often it is made ready and
/// called, answering call `n` (1-based) with `answer(n, request)`.
#[derive(Clone)]
struct Counted<F> {
    readied: Arc<AtomicU32>,
    calls: Arc<AtomicU32>,
    answer: F,
}

impl<F> Counted<F> {
    fn new<R>(answer: F) -> Self
    where
        F: Fn(u32, u32) -> Answer<R>,
    {
        Self {
            readied: Arc::default(),
            calls: Arc::default(),
            answer,
        }
    }
}

impl<F, R> tower::Service<u32> for Counted<F>
where
    F: Fn(u32, u32) -> Answer<R>,
{
    type Response = R;
    type Error = std::io::Error;
    type Future = Answer<R>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        self.readied.fetch_add(1, Ordering::Relaxed);
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: u32) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        (self.answer)(n, request)
    }
}

#[tokio::test(start_paused = true)]
async fn each_retry_waits_for_the_service_to_be_ready_again() {
    let inner = Counted::new(|n, request| {
        Box::pin(std::future::ready(if n <= 2 {
            Err(std::io::ErrorKind::ConnectionRefused.into())
        } else {
            Ok(request)
        }))
    });
    let service = RetryLayer::new(&Policy::new()).layer(inner.clone());
    assert_eq!(service.oneshot(7).await.unwrap(), 7);
    assert_eq!(inner.calls.load(Ordering::Relaxed), 3);
    assert_eq!(
        inner.readied.load(Ordering::Relaxed),
        3,
        "once by the caller, once per retry"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_that_is_not_http_is_idempotent_only_if_the_policy_says_so() {
    // A reset after the request was sent: the work may have been done.
    for (idempotent, calls) in [(false, 1), (true, 3)] {
        let inner = Counted::new(|_, _: u32| {
            Box::pin(std::future::ready(Err::<u32, _>(
                std::io::ErrorKind::ConnectionReset.into(),
            )))
        });
        let policy = Policy::new().idempotent(idempotent);
        let service = RetryLayer::new(&policy).layer(inner.clone());
        let error = service.oneshot(7).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            inner.calls.load(Ordering::Relaxed),
            calls,
            "idempotent: {idempotent}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_layer_its_service_and_a_calls_future_say_what_they_are() {
    let policy = Policy::new().attempts(2);
    let layer = RetryLayer::new(backstop::Retry::new(&policy).name("orders"));
    let said = format!("{layer:?}");
    assert!(said.starts_with("RetryLayer { policy: Policy {"), "{said}");
    assert!(
        said.contains("requests: Cloned, name: \"orders\""),
        "{said}"
    );
    let mut service = layer.layer(tower::service_fn(|n: u32| async move {
        Ok::<_, std::io::Error>(n)
    }));
    let said = format!("{service:?}");
    assert!(
        said.starts_with("RetryService { inner: ServiceFn"),
        "{said}"
    );
    assert!(
        said.contains("layer: RetryLayer { policy: Policy {"),
        "{said}"
    );
    let call = tower::Service::call(service.ready().await.unwrap(), 7);
    assert_eq!(format!("{call:?}"), "ResponseFuture { .. }");
    assert_eq!(call.await.unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_layers_own_token_budget_is_shared_by_its_services_and_not_by_other_layers() {
    let policy = Policy::new().base(Duration::from_nanos(1));
    let layer = RetryLayer::new(&policy);
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let failing = service_fn(move |()| {
        seen.fetch_add(1, Ordering::Relaxed);
        async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::HostUnreachable)) }
    });
    for _ in 0..10 {
        let _ = layer.layer(failing.clone()).oneshot(()).await;
    }
    // As for one function: 3 retries (tokens 9, 8, 6 stay above half), then none.
    assert_eq!(attempts.load(Ordering::Relaxed), 10 + 3);
    let other = RetryLayer::new(&policy).layer(failing);
    let _ = other.oneshot(()).await;
    assert_eq!(
        attempts.load(Ordering::Relaxed),
        13 + 3,
        "another layer, a fresh throttle"
    );
}

/// Through the layer, keyed by destination: more hosts down than the
/// breaker table holds do not turn away a healthy host that finds no
/// place either (a breaker shared by the hosts without a place would be
/// opened by the failing ones).
#[tokio::test(start_paused = true)]
async fn a_breaker_table_full_of_hosts_that_are_down_turns_no_healthy_host_away() {
    use backstop::limit::Keyed;
    static PER_HOST: Keyed<CircuitBreaker> =
        Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 4);
    let sent = Arc::new(AtomicU32::new(0));
    let counted = sent.clone();
    let inner = service_fn(move |request: Request<ReplayBody<String>>| {
        counted.fetch_add(1, Ordering::Relaxed);
        let down = request.uri().host().is_some_and(|h| h.starts_with("down-"));
        async move {
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(if down { 503 } else { 200 })
                    .body(())
                    .unwrap(),
            )
        }
    });
    let policy = Policy::new().attempts(1).no_budget();
    let service = RetryLayer::http(backstop::Retry::new(&policy).breaker(&PER_HOST)).layer(inner);
    for host in 0..8 {
        for _ in 0..3 {
            let request = Request::get(format!("http://down-{host}.test/"))
                .body(String::new())
                .unwrap();
            let _ = service.clone().oneshot(request).await;
        }
    }
    assert_eq!(PER_HOST.len(), 4);
    let before = sent.load(Ordering::Relaxed);
    for _ in 0..10 {
        let request = Request::get("http://up.test/").body(String::new()).unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(
        sent.load(Ordering::Relaxed),
        before + 10,
        "never turned away"
    );
}

/// A key given to the `Retry` a layer is made from is the key of every
/// request through it: two layers, one per database, share a breaker
/// table kept per key, and the failing database's breaker opens alone.
/// Through `RetryLayer::http`, the key given replaces the destination's.
#[tokio::test(start_paused = true)]
async fn a_key_given_to_the_retry_is_the_key_of_every_request_through_its_layer() {
    use backstop::limit::{BreakerState, Keyed};
    static PER_DB: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(2, Duration::from_secs(30)));
    static PER_SHARD: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(1, Duration::from_secs(30)));
    let policy = Policy::new().attempts(1);
    let down = service_fn(|()| async {
        Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    });
    let up = service_fn(|()| async { Ok::<(), std::io::Error>(()) });
    let db1 = RetryLayer::new(backstop::Retry::new(&policy).key(&"db-1").breaker(&PER_DB));
    let db2 = RetryLayer::new(backstop::Retry::new(&policy).key(&"db-2").breaker(&PER_DB));
    for _ in 0..3 {
        let _ = db1.layer(down).oneshot(()).await;
    }
    let now = tokio::time::Instant::now().into_std();
    assert_eq!(PER_DB.get("db-1").state_at(now), BreakerState::Open);
    assert_eq!(PER_DB.get("db-2").state_at(now), BreakerState::Closed);
    for _ in 0..3 {
        let out = db2.layer(up).oneshot(()).await;
        assert!(out.is_ok(), "db-2 is not behind db-1's breaker: {out:?}");
    }
    // Through an HTTP layer: the key given, not the request's host.
    let (inner, _) = scripted(vec![status(503, None)]);
    let shard = RetryLayer::http(
        backstop::Retry::new(&policy)
            .key(&"shard-7")
            .breaker(&PER_SHARD),
    );
    let response = shard.layer(inner).oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(PER_SHARD.get("shard-7").state_at(now), BreakerState::Open);
}

/// A key given to the `Retry` of a layer that keeps protection per method
/// is mixed with each request's path, as a destination is: one method's
/// failures open its own breaker of the key's, not another method's.
#[tokio::test(start_paused = true)]
async fn a_key_given_to_a_layer_per_method_is_kept_per_method() {
    use backstop::limit::Keyed;
    static PER_TENANT_METHOD: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(2, Duration::from_secs(30)));
    let policy = Policy::new().attempts(1);
    let inner = service_fn(|request: Request<ReplayBody<String>>| async move {
        let status = if request.uri().path() == "/export" {
            503
        } else {
            200
        };
        Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap())
    });
    let layer = RetryLayer::http(
        backstop::Retry::new(&policy)
            .key(&"tenant-1")
            .breaker(&PER_TENANT_METHOD),
    )
    .per_method();
    let call = |path: &str| {
        let request = Request::get(path).body(String::new()).unwrap();
        layer.layer(inner).oneshot(request)
    };
    for _ in 0..3 {
        let _ = call("/export").await;
    }
    let error = call("/export").await.unwrap_err();
    assert!(error.downcast_ref::<CircuitOpen>().is_some(), "{error}");
    let response = call("/get").await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "another method's breaker"
    );
}

/// Per method, a key given to the layer's `Retry` has a default token
/// budget per path: one method failing leaves the others theirs.
#[tokio::test(start_paused = true)]
async fn a_key_given_to_a_layer_per_method_has_a_default_budget_per_method() {
    let sent = Arc::new(AtomicU32::new(0));
    let count = sent.clone();
    // Every request fails but every second `Get`.
    let inner = service_fn(move |request: Request<ReplayBody<String>>| {
        let n = count.fetch_add(1, Ordering::Relaxed);
        let up = request.uri().path() == "/get" && n % 2 == 1;
        let status = if up { 200 } else { 503 };
        async move { Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap()) }
    });
    let policy = Policy::new().base(Duration::from_nanos(1));
    let layer = RetryLayer::http(backstop::Retry::new(&policy).key(&"tenant-1")).per_method();
    let call = |path: &str| {
        let request = Request::get(path).body(String::new()).unwrap();
        layer.layer(inner.clone()).oneshot(request)
    };
    for _ in 0..10 {
        let _ = call("/export").await;
    }
    sent.store(0, Ordering::Relaxed);
    let response = call("/get").await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "`/get` kept its retries");
}

/// An adaptive throttle kept per key, given to an HTTP layer, is each
/// destination's: the host that refuses is shed, the other is not.
#[tokio::test(start_paused = true)]
async fn a_throttle_kept_per_key_is_the_destinations_through_the_layer() {
    use backstop::limit::{AdaptiveThrottle, Destination, Keyed};
    static PER_HOST: Keyed<AdaptiveThrottle> = Keyed::new(AdaptiveThrottle::standard());
    let inner = service_fn(|request: Request<ReplayBody<String>>| async move {
        let status = if request.uri().host() == Some("down.test") {
            503
        } else {
            200
        };
        Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap())
    });
    let policy = Policy::new().attempts(1);
    let layer = RetryLayer::http(backstop::Retry::new(&policy).throttle(&PER_HOST));
    let call = |uri: &'static str| {
        let request = Request::get(uri).body(String::new()).unwrap();
        layer.layer(inner).oneshot(request)
    };
    let mut shed = 0;
    for _ in 0..40 {
        if call("http://down.test/").await.is_err() {
            shed += 1;
        }
        assert_eq!(
            call("http://up.test/").await.unwrap().status(),
            StatusCode::OK
        );
    }
    assert!(shed >= 10, "the refusing host shed {shed} of 40");
    let now = tokio::time::Instant::now().into_std();
    let p = |host| {
        PER_HOST
            .peek(&Destination::new("http", host, None))
            .map(|throttle| throttle.rejection_probability_at(now))
    };
    assert!(
        p("down.test").is_some_and(|p| p > 0.5),
        "{:?}",
        p("down.test")
    );
    assert_eq!(p("up.test").map(|p| p < 1e-12), Some(true));
}

/// The default token budget of a key given to a layer's `Retry` is the
/// key's at the line building the layer, as a closure's is at its call
/// site: two layers built apart, keyed alike, do not share it.
#[tokio::test(start_paused = true)]
async fn layers_built_apart_with_one_key_have_a_budget_each() {
    let policy = Policy::new().base(Duration::from_nanos(1));
    let down = RetryLayer::http(backstop::Retry::new(&policy).key(&"tenant-9"));
    let (failing, _) = scripted((0..100).map(|_| status(503, None)).collect());
    for _ in 0..10 {
        let _ = down.layer(failing.clone()).oneshot(get()).await;
    }
    let other = RetryLayer::http(backstop::Retry::new(&policy).key(&"tenant-9"));
    let (flaky, calls) = scripted(vec![status(503, None)]);
    let response = other.layer(flaky).oneshot(get()).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "retried on its own budget"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn the_layers_future_is_send_for_a_send_service() {
    fn is_send<T: Send>(_: &T) {}
    let (inner, _) = scripted(vec![]);
    let future = RetryLayer::http(&Policy::new()).layer(inner).oneshot(get());
    is_send(&future);
}

/// The future of a call through the layer stays `Send` where rustc checks
/// it inside an `async` block (a spawned task, an axum handler): the
/// breaker, the adaptive throttle and the attempt timeout of the `Retry` it
/// was made from put no lifetime in its type, nor does `box_error`, the
/// boxing of an error without room for theirs. (With a `&'static` breaker
/// in its type, rustc lost the lifetime and reported "implementation of
/// `BreakerSlot` is not general enough".)
#[tokio::test(start_paused = true)]
async fn a_layers_call_can_be_awaited_in_a_spawned_async_block() {
    use backstop::limit::{AdaptiveThrottle, Keyed};
    static BREAKER: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    static PER_HOST: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(5, Duration::from_secs(30)));
    static THROTTLE: AdaptiveThrottle = AdaptiveThrottle::standard();
    let policy = Policy::new();

    // A breaker, over an error with room for its rejection.
    let (inner, calls) = scripted(vec![status(503, None)]);
    let service = RetryLayer::http(backstop::Retry::new(&policy).breaker(&BREAKER)).layer(inner);
    let answered = tokio::spawn(async move { service.oneshot(get()).await.unwrap().status() });
    assert_eq!(answered.await.unwrap(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::Relaxed), 2);

    // A breaker per host, an adaptive throttle and an attempt timeout, over
    // an error without room for theirs, boxed.
    let inner = service_fn(|_: Request<ReplayBody<String>>| async {
        Ok::<_, std::fmt::Error>(Response::new(()))
    });
    let retry = backstop::Retry::new(&policy)
        .breaker(&PER_HOST)
        .throttle(&THROTTLE)
        .attempt_timeout(Duration::from_secs(1));
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(retry))
        .map_err(backstop::tower::box_error)
        .service(inner);
    let answered = tokio::spawn(async move { service.oneshot(get()).await.is_ok() });
    assert!(answered.await.unwrap());
}

/// A stack with a lifetime in its type (here a classifier given as a
/// closure whose argument names the boxed error) cannot be awaited inside
/// an `async` block as it is (rustc loses the `'static`: "implementation
/// of `FnOnce` is not general enough"); boxed above the layer, it can.
#[tokio::test(start_paused = true)]
async fn a_boxed_stack_with_a_lifetime_in_it_can_be_awaited_in_a_spawned_async_block() {
    let policy = Policy::new();
    let (inner, calls) = scripted(vec![status(503, None)]);
    let retry = backstop::Retry::new(&policy).when(|_: &BoxError| Verdict::Retry);
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(retry))
        .service(inner)
        .boxed_clone();
    let answered = tokio::spawn(async move { service.oneshot(get()).await.unwrap().status() });
    assert_eq!(answered.await.unwrap(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// A server that reads each request, then resets the connection (or,
/// with `reset` false, closes it without an answer: hyper's "connection
/// closed before message completed"): the request was written, and may
/// have been acted on.
async fn read_then_drop(reset: bool) -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU32::new(0));
    let count = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            support::read_head(&mut socket).await;
            count.fetch_add(1, Ordering::Relaxed);
            if reset {
                socket.set_zero_linger().unwrap();
            }
            drop(socket);
        }
    });
    (addr, requests)
}

async fn reset_after_reading() -> (SocketAddr, Arc<AtomicU32>) {
    read_then_drop(true).await
}

/// A POST, then a GET, through `service` to a server that resets each
/// connection after reading the request: the POST is sent once (it may
/// have been acted on), the GET three times. The POST's error.
async fn a_reset_repeats_a_get_not_a_post<S>(service: S) -> S::Error
where
    S: tower::Service<Request<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
    S::Response: std::fmt::Debug,
{
    let (addr, requests) = reset_after_reading().await;
    let error = service.clone().oneshot(post(addr, "{}")).await.unwrap_err();
    assert_eq!(
        requests.load(Ordering::Relaxed),
        1,
        "a POST may have been acted on"
    );
    let get = Request::get(format!("http://{addr}/orders/7"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let _ = service.oneshot(get).await.unwrap_err();
    assert_eq!(requests.load(Ordering::Relaxed), 1 + 3, "a GET is repeated");
    error
}

#[tokio::test]
async fn a_connection_reset_after_the_request_was_written_repeats_a_get_not_a_post() {
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&quick()))
        .map_err(backstop::tower::box_error)
        .service(client());
    let error = a_reset_repeats_a_get_not_a_post(service).await;
    assert!(
        error
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some(),
        "{error}"
    );
}

/// A port of 127.0.0.1 with nothing listening: bound, then closed.
async fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
}

/// How many times a request to a port where nothing listens is retried.
async fn retries_to_a_closed_port<B>(request: impl FnOnce(SocketAddr) -> Request<B>) -> u32
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + Send,
{
    let addr = closed_port().await;
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(backstop::Retry::new(&quick()).on_retry(
            move |_: &backstop::RetryEvent<'_, Response<Incoming>, BoxError>| {
                seen.fetch_add(1, Ordering::Relaxed);
            },
        )))
        .map_err(backstop::tower::box_error)
        .service(client());
    let _ = service.oneshot(request(addr)).await.unwrap_err();
    attempts.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_a_post() {
    let retries = retries_to_a_closed_port(|addr| post(addr, "{}")).await;
    assert_eq!(retries, 2, "nothing was sent: retried");
}

static SHARED_ADAPTIVE: backstop::limit::AdaptiveThrottle =
    backstop::limit::AdaptiveThrottle::standard();

#[retry(throttle = SHARED_ADAPTIVE, attempts = 1)]
async fn refused_by_the_dependency() -> Result<(), BoxError> {
    Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_throttle_is_shared_with_retry_functions() {
    // A function's calls see the dependency refuse everything...
    for _ in 0..40 {
        let _ = refused_by_the_dependency().await;
    }
    let now = backstop::time::Clock::now(&backstop::time::TokioClock);
    // (It sheds most of them too once refusals mount, and a shed call is
    // not a refusal: a few calls are sent, each refused.)
    let shedding = SHARED_ADAPTIVE.rejection_probability_at(now);
    assert!(shedding > 0.5, "{shedding}");
    // ...so the layer, whose dependency refuses it too, sheds most of its
    // calls locally, before sending them.
    let (inner, calls) = scripted((0..20).map(|_| status(503, None)).collect());
    let policy = Policy::new().attempts(1);
    let service =
        RetryLayer::http(backstop::Retry::new(&policy).throttle(&SHARED_ADAPTIVE)).layer(inner);
    let mut shed = 0;
    for _ in 0..20 {
        match service.clone().oneshot(get()).await {
            Err(error) if error.is::<backstop::Throttled>() => shed += 1,
            outcome => assert_eq!(outcome.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE),
        }
    }
    assert!(shed >= 10, "shed {shed} of 20 at {shedding}");
    assert_eq!(calls.load(Ordering::Relaxed), 20 - shed);
}

/// A service that fails its first call at once, then is never ready again
/// (`ready_error`: fails readiness instead), counting readiness polls.
#[derive(Clone)]
struct StuckAfterOne {
    ready_error: bool,
    readied: Arc<AtomicU32>,
    calls: Arc<AtomicU32>,
}

impl tower::Service<u32> for StuckAfterOne {
    type Response = u32;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<u32, std::io::Error>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        let n = self.readied.fetch_add(1, Ordering::Relaxed);
        match n {
            0 => std::task::Poll::Ready(Ok(())),
            _ if self.ready_error => {
                std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
            }
            _ => std::task::Poll::Pending,
        }
    }
    fn call(&mut self, _: u32) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Err(std::io::ErrorKind::ConnectionRefused.into()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_service_not_ready_again_by_the_deadline_gives_up_with_the_last_error() {
    let inner = StuckAfterOne {
        ready_error: false,
        readied: Arc::default(),
        calls: Arc::default(),
    };
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let told = reasons.clone();
    let policy = Policy::new().deadline(Some(Duration::from_secs(1)));
    let service = RetryLayer::new(backstop::Retry::new(&policy).on_give_up(
        move |e: &GiveUpEvent<'_, u32, std::io::Error>| {
            told.lock().unwrap().push(e.reason());
        },
    ))
    .layer(inner.clone());
    let start = tokio::time::Instant::now();
    let error = service.oneshot(7).await.unwrap_err();
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "the last outcome"
    );
    assert!(
        start.elapsed() <= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(inner.calls.load(Ordering::Relaxed), 1);
    assert_eq!(*reasons.lock().unwrap(), [GiveUp::Deadline]);
}

/// A service that fails its first call at once, then is ready again only
/// at `ready_at`.
struct ReadyAgainAt {
    ready_at: tokio::time::Instant,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    calls: Arc<AtomicU32>,
}

impl Clone for ReadyAgainAt {
    fn clone(&self) -> Self {
        Self {
            ready_at: self.ready_at,
            wait: None,
            calls: self.calls.clone(),
        }
    }
}

impl tower::Service<u32> for ReadyAgainAt {
    type Response = u32;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<u32, std::io::Error>>;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        if self.calls.load(Ordering::Relaxed) == 0 {
            return std::task::Poll::Ready(Ok(()));
        }
        let at = self.ready_at;
        let wait = self
            .wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        wait.as_mut().poll(cx).map(Ok)
    }
    fn call(&mut self, _: u32) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Err(std::io::ErrorKind::ConnectionRefused.into()))
    }
}

/// A service ready again only when the deadline has come is not called:
/// no attempt starts past the deadline, however its wait for readiness
/// ended (here, at the same instant as the layer's own wait for it). The
/// call gives up with its last error.
#[tokio::test(start_paused = true)]
async fn a_service_ready_again_only_at_the_deadline_is_not_called() {
    // (Two attempts: one more would depend on the jitter drawn.)
    let policy = Policy::new()
        .attempts(2)
        .deadline(Some(Duration::from_secs(1)));
    // Ready again at each millisecond of the deadline's last ten: when it
    // is called again, and when the call ends.
    let mut runs = Vec::new();
    for ms in 990..=1000 {
        let calls = Arc::new(AtomicU32::new(0));
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let told = reasons.clone();
        let start = tokio::time::Instant::now();
        let inner = ReadyAgainAt {
            ready_at: start + Duration::from_millis(ms),
            wait: None,
            calls: calls.clone(),
        };
        let service = RetryLayer::new(backstop::Retry::new(&policy).on_give_up(
            move |e: &GiveUpEvent<'_, u32, std::io::Error>| {
                told.lock().unwrap().push((e.reason(), e.attempts()));
            },
        ))
        .layer(inner);
        let error = service.oneshot(7).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
        let calls = calls.load(Ordering::Relaxed);
        let reason = if calls == 2 {
            GiveUp::Attempts
        } else {
            GiveUp::Deadline
        };
        assert_eq!(*reasons.lock().unwrap(), [(reason, calls)]);
        runs.push((Duration::from_millis(ms), calls, start.elapsed()));
    }
    // Where the layer stops waiting (the deadline, less its timer's
    // granularity): a service ready then, or later, is not called again.
    let stopped = runs
        .iter()
        .filter(|&&(_, calls, _)| calls == 1)
        .map(|&(_, _, ended)| ended)
        .min()
        .expect("a service ready at the deadline is not called again");
    for &(ready, calls, _) in &runs {
        assert_eq!(
            calls,
            if ready < stopped { 2 } else { 1 },
            "ready again at {ready:?}, the wait stopped at {stopped:?}: {runs:?}"
        );
    }
    assert_eq!(runs[0].1, 2, "ready earlier, it is called again: {runs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_readiness_error_ends_the_call_and_the_failed_service_is_not_polled_again() {
    let inner = StuckAfterOne {
        ready_error: true,
        readied: Arc::default(),
        calls: Arc::default(),
    };
    let service = RetryLayer::new(&Policy::new().attempts(5)).layer(inner.clone());
    let error = service.oneshot(7).await.unwrap_err();
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::BrokenPipe,
        "the readiness error"
    );
    assert_eq!(inner.calls.load(Ordering::Relaxed), 1);
    assert_eq!(
        inner.readied.load(Ordering::Relaxed),
        2,
        "once by the caller, once failed"
    );
}

static OPENED_MEANWHILE: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_during_the_sleep_returns_the_last_response_not_a_rejection() {
    let (inner, calls) = scripted((0..4).map(|_| status(503, None)).collect());
    let layer = RetryLayer::http(backstop::Retry::new(&Policy::new()).breaker(&OPENED_MEANWHILE));
    // The first call fails once and sleeps; the second's failure opens the
    // breaker meanwhile.
    let first = layer.layer(inner.clone()).oneshot(get());
    let second = layer.layer(inner).oneshot(get());
    let (first, second) = tokio::join!(first, second);
    assert_eq!(second.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    let first = first.expect("the last outcome, not the breaker's rejection");
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_small_streamed_body_a_server_did_not_read_is_sent_again_whole() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let log = bodies.clone();
    let inner = service_fn(move |request: Request<ReplayBody<_>>| {
        let log = log.clone();
        async move {
            let first = log.lock().unwrap().is_empty();
            if first {
                // Answers without reading the body.
                log.lock().unwrap().push(Bytes::new());
                return Ok::<_, BoxError>(status(503, None));
            }
            let body = request.into_body().collect().await?.to_bytes();
            log.lock().unwrap().push(body);
            Ok(status(200, None))
        }
    });
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let upload = Request::put("/files/3").body(stream(3)).unwrap();
    let response = service.oneshot(upload).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[1].len(),
        3 * 1024,
        "the unread body, sent whole the second time"
    );
}

/// A stream still open when the server answers (a client-streaming call
/// answered before its last message) cannot be sent again whole: sent
/// once, and given up as not replayable, idempotent or not.
#[tokio::test(start_paused = true)]
async fn a_stream_still_open_when_the_server_answers_is_sent_once_and_reported() {
    use futures_util::StreamExt as _;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let inner = service_fn(move |request: Request<ReplayBody<_>>| {
        counted.fetch_add(1, Ordering::Relaxed);
        async move {
            // Reads the first chunk, then answers: the second is not there.
            let mut body = request.into_body();
            let first = body.frame().await.expect("a first chunk")?;
            assert!(first.is_data());
            Ok::<_, BoxError>(status(503, None))
        }
    });
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let told = reasons.clone();
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new().idempotent(true)).on_give_up(
            move |e: &GiveUpEvent<'_, Response<()>, _>| told.lock().unwrap().push(e.reason()),
        ),
    )
    .layer(inner);
    let chunks = futures_util::stream::iter([Bytes::from_static(b"first")])
        .chain(futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Bytes::from_static(b"second")
        }))
        .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)));
    let request = Request::post("/streams/1")
        .body(StreamBody::new(chunks))
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::Relaxed), 1, "sent once");
    assert_eq!(*reasons.lock().unwrap(), [GiveUp::NotReplayable]);
}

/// A body of two chunks, then trailers: streamed (its length not known)
/// or, if `known`, of a size that says it fits.
fn trailed(known: bool) -> http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", "7".parse().unwrap());
    if known {
        return Full::new(Bytes::from_static(b"ab"))
            .with_trailers(std::future::ready(Some(Ok(trailers))))
            .boxed_unsync();
    }
    let frames = [
        Frame::data(Bytes::from_static(b"a")),
        Frame::data(Bytes::from_static(b"b")),
        Frame::trailers(trailers),
    ];
    StreamBody::new(futures_util::stream::iter(frames.map(Ok))).boxed_unsync()
}

#[tokio::test]
async fn a_bodys_trailers_reach_the_server_on_every_attempt() {
    // Through hyper's HTTP/1 client, which reads a body no further than its
    // trailers, and sends them only with a body of unknown length.
    for known in [true, false] {
        let (addr, seen) = serve(vec![(503, None)]).await;
        let service =
            RetryLayer::http(backstop::Retry::new(&quick()).when(hyper_verdict)).layer(client());
        let upload = Request::put(format!("http://{addr}/files/3"))
            .header("trailer", "x-checksum")
            .body(trailed(known))
            .unwrap();
        let response = service.oneshot(upload).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "known: {known}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "sent again, known: {known}");
        for request in seen.iter() {
            assert_eq!(request.body, "ab", "known: {known}");
            let trailers = request.trailers.as_ref().expect("trailers, each time");
            assert_eq!(trailers["x-checksum"], "7", "known: {known}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_bodys_trailers_are_sent_again_with_it() {
    for known in [true, false] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = service_fn(move |request: Request<ReplayBody<_>>| {
            let log = log.clone();
            async move {
                let hint = hyper::body::Body::size_hint(request.body());
                let hint = (hint.lower(), hint.exact());
                let body = request.into_body().collect().await?;
                let trailers = body.trailers().cloned();
                let mut log = log.lock().unwrap();
                log.push((body.to_bytes(), trailers, hint));
                Ok::<_, BoxError>(status(if log.len() < 2 { 503 } else { 200 }, None))
            }
        });
        let service = RetryLayer::http(&Policy::new()).layer(inner);
        let upload = Request::put("/files/3").body(trailed(known)).unwrap();
        let response = service.oneshot(upload).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "known: {known}");
        for (body, trailers, _) in seen.iter() {
            assert_eq!(body, "ab", "known: {known}");
            let trailers = trailers.as_ref().expect("trailers, each time");
            assert_eq!(trailers["x-checksum"], "7", "known: {known}");
        }
        // Its length is never said exactly (an HTTP/1 client would send
        // `content-length` and could not send the trailers), but at least
        // what is kept once it is known.
        let first = if known { (2, None) } else { (0, None) };
        assert_eq!([seen[0].2, seen[1].2], [first, (2, None)], "known: {known}");
    }
}

/// A `PUT` of `body` through the layer, keeping up to `limit` bytes, to
/// a server that answers 503 then 200: the status the call returned, and
/// how each attempt said its length.
async fn put_lengths<B>(body: B, limit: usize) -> (StatusCode, Vec<String>)
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + Send + Sync + std::fmt::Debug,
{
    let (addr, seen) = serve(vec![(503, None)]).await;
    let service = RetryLayer::http(backstop::Retry::new(&quick()).when(hyper_verdict))
        .replay_limit(limit)
        .layer(client());
    let upload = Request::put(format!("http://{addr}/files/3"))
        .body(body)
        .unwrap();
    let status = service.oneshot(upload).await.unwrap().status();
    let lengths = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.length.clone())
        .collect();
    (status, lengths)
}

#[tokio::test]
async fn every_attempt_says_its_bodys_length_as_the_request_did() {
    // A server may refuse a body sent without its length (a file store's
    // upload): the layer's body says it exactly whenever the request's
    // did, so that hyper sends `content-length`.
    let hello = || Full::new(Bytes::from_static(b"hello"));
    assert_eq!(
        put_lengths(hello(), 1024).await,
        (StatusCode::OK, vec!["5".to_owned(), "5".to_owned()]),
        "kept, and sent again"
    );
    // Too long to keep: streamed once, its length said all the same.
    assert_eq!(
        put_lengths(hello(), 4).await,
        (StatusCode::SERVICE_UNAVAILABLE, vec!["5".to_owned()]),
        "not kept: sent once"
    );
    // A stream that does not say its length is sent chunked, and its
    // copy, kept whole, with its length.
    assert_eq!(
        put_lengths(stream(2), 4096).await,
        (
            StatusCode::OK,
            vec!["chunked".to_owned(), "2048".to_owned()]
        )
    );
}

#[tokio::test]
async fn a_small_streamed_post_to_a_refused_port_is_retried() {
    let retries = retries_to_a_closed_port(|addr| {
        Request::post(format!("http://{addr}/files"))
            .body(stream(2))
            .unwrap()
    })
    .await;
    assert_eq!(retries, 2, "nothing was sent: retried");
}

#[tokio::test]
async fn the_transport_rule_holds_for_hyper_errors_given_to_when() {
    let (addr, requests) = reset_after_reading().await;
    let with_when =
        RetryLayer::http(backstop::Retry::new(&quick()).when(backstop::tower::transport_verdict))
            .layer(client());
    let _ = with_when.oneshot(post(addr, "{}")).await.unwrap_err();
    assert_eq!(
        requests.load(Ordering::Relaxed),
        1,
        "a reset POST, sent once"
    );
}

/// A POST to `addr` through the layer straight over `client`: its error,
/// and the retries the layer made.
#[cfg(feature = "hyper-util")]
async fn post_counting_retries<C>(
    client: Client<C, ReplayBody<Full<Bytes>>>,
    addr: SocketAddr,
) -> (hyper_util::client::legacy::Error, u32)
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let retries = Arc::new(AtomicU32::new(0));
    let seen = retries.clone();
    let service = RetryLayer::http(backstop::Retry::new(&quick()).on_retry(
        move |_: &backstop::RetryEvent<
            '_,
            Response<Incoming>,
            hyper_util::client::legacy::Error,
        >| {
            seen.fetch_add(1, Ordering::Relaxed);
        },
    ))
    .layer(client);
    let error = service.oneshot(post(addr, "{}")).await.unwrap_err();
    (error, retries.load(Ordering::Relaxed))
}

#[cfg(feature = "hyper-util")]
#[tokio::test]
async fn a_hyper_util_client_needs_no_boxing_and_keeps_the_transport_rule() {
    // A reset after the request was written: a POST is sent once, a GET
    // is repeated; the error is the client's own.
    let error: hyper_util::client::legacy::Error =
        a_reset_repeats_a_get_not_a_post(RetryLayer::http(&quick()).layer(client())).await;
    assert!(!error.is_connect(), "{error}");

    // A refused connection sent nothing: even a POST is retried.
    let closed = closed_port().await;
    let (error, retries) = post_counting_retries(client(), closed).await;
    assert!(error.is_connect(), "{error}");
    assert_eq!(retries, 2, "nothing was sent: retried");

    // A connect that failed otherwise (here a connector that timed out):
    // nothing was sent either.
    let timed_out = |_: http::Uri| {
        let error = std::io::Error::from(std::io::ErrorKind::TimedOut);
        std::future::ready(Err::<TokioIo<tokio::net::TcpStream>, _>(error))
    };
    let timing_out = Client::builder(TokioExecutor::new()).build(service_fn(timed_out));
    // (Another destination: a budget of its own.)
    let elsewhere = closed_port().await;
    let (error, retries) = post_counting_retries(timing_out, elsewhere).await;
    assert!(error.is_connect(), "{error}");
    assert_eq!(
        backstop::Classify::classify(&error),
        Verdict::Retry,
        "{error}"
    );
    assert_eq!(retries, 2, "a POST, retried");
    // Boxed below the layer, the same verdict; and boxed anywhere, read
    // down its chain.
    let boxed: BoxError = error.into();
    assert_eq!(
        backstop::classify::Classifier::verdict(&backstop::tower::TransportErrors, &boxed),
        Verdict::Retry
    );
    assert_eq!(backstop::Classify::classify(&boxed), Verdict::Retry);

    // A URL the connector cannot connect to as written (here an `https`
    // URI, which an HTTP-only connector does not make): a retry fails the
    // same way, and is not made.
    let https = Request::post(format!("https://{closed}/orders"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let error = RetryLayer::http(&quick())
        .layer(client())
        .oneshot(https)
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error}");
    assert_eq!(
        backstop::Classify::classify(&error),
        Verdict::Stop,
        "{error}"
    );
    let boxed: BoxError = error.into();
    assert_eq!(
        backstop::classify::Classifier::verdict(&backstop::tower::TransportErrors, &boxed),
        Verdict::Stop
    );
    assert_eq!(backstop::Classify::classify(&boxed), Verdict::Stop);
}

#[cfg(feature = "anyhow")]
#[tokio::test]
async fn the_transport_rule_holds_for_anyhow_errors() {
    let (addr, requests) = reset_after_reading().await;
    let with_anyhow = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&quick()))
        .map_err(anyhow::Error::from)
        .service(client());
    let _ = with_anyhow.oneshot(post(addr, "{}")).await.unwrap_err();
    assert_eq!(
        requests.load(Ordering::Relaxed),
        1,
        "a reset POST, sent once"
    );
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_repeats_a_get_not_a_post() {
    let (addr, requests) = read_then_drop(false).await;
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&quick()))
        .map_err(backstop::tower::box_error)
        .service(client());
    let _ = service.clone().oneshot(post(addr, "{}")).await.unwrap_err();
    assert_eq!(requests.load(Ordering::Relaxed), 1);
    let get = Request::get(format!("http://{addr}/orders/7"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let _ = service.oneshot(get).await.unwrap_err();
    assert_eq!(requests.load(Ordering::Relaxed), 1 + 3);
}

#[tokio::test(start_paused = true)]
async fn an_infallible_inner_service_needs_no_classifier() {
    let inner = service_fn(|_: Request<ReplayBody<String>>| async {
        Ok::<_, Infallible>(status(200, None))
    });
    let response = RetryLayer::http(&Policy::new())
        .layer(inner)
        .oneshot(get())
        .await;
    assert_eq!(response.unwrap().status(), StatusCode::OK);
}

/// Each attempt an in-process service saw: its number, its body, and
/// whether it answered (`false`: dropped before).
type AttemptLog = Arc<Mutex<Vec<(u32, Bytes, bool)>>>;

/// A service of HTTP requests with `B` bodies (`String`s unless said),
/// boxed.
type SlowService<B = String> =
    tower::util::BoxCloneService<Request<ReplayBody<B>>, Response<()>, BoxError>;

/// Notes an attempt when it ends, answered or dropped.
struct Ended(AttemptLog, u32, Bytes, bool);

impl Drop for Ended {
    fn drop(&mut self) {
        let (n, body, done) = (self.1, self.2.clone(), self.3);
        self.0.lock().unwrap().push((n, body, done));
    }
}

/// An in-process service whose attempt `n` (1-based) answers 200 after
/// `latencies[n - 1]` ms (the last for later ones), logging each body it
/// got and each attempt dropped before its answer.
fn slow_service<B>(latencies: &'static [u64]) -> (SlowService<B>, AttemptLog)
where
    B: hyper::body::Body<Data = Bytes, Error: std::fmt::Debug + Send> + Send + 'static,
{
    let log = AttemptLog::default();
    let seen = log.clone();
    let inner = service_fn(move |request: Request<ReplayBody<B>>| {
        let seen = seen.clone();
        async move {
            let attempt = context().expect("inside an attempt").attempt();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut guard = Ended(seen, attempt, body, false);
            let ms = latencies[(attempt as usize - 1).min(latencies.len() - 1)];
            tokio::time::sleep(Duration::from_millis(ms)).await;
            guard.3 = true;
            Ok::<_, BoxError>(status(200, None))
        }
    });
    (tower::util::BoxCloneService::new(inner), log)
}

#[tokio::test(start_paused = true)]
async fn a_slow_get_is_hedged_with_the_same_body_and_the_loser_dropped() {
    let (inner, log) = slow_service::<String>(&[1_000, 10]);
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new())
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
    )
    .layer(inner);
    let start = tokio::time::Instant::now();
    let request = Request::get("/users/7").body("query".to_owned()).unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(60));
    assert_eq!(
        response.extensions().get::<backstop::http::Attempts>(),
        Some(&backstop::http::Attempts(2))
    );
    let log = log.lock().unwrap();
    assert_eq!(
        *log,
        [
            (2, Bytes::from_static(b"query"), true),
            (1, Bytes::from_static(b"query"), false)
        ],
        "the hedge answered, then the first attempt was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_is_not_hedged_a_keyed_post_is() {
    for (keyed, attempts) in [(false, 1), (true, 2)] {
        let (inner, log) = slow_service::<String>(&[1_000, 10]);
        let service = RetryLayer::http(
            backstop::Retry::new(&Policy::new())
                .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
        )
        .layer(inner);
        let mut request = Request::post("/orders").body("order".to_owned()).unwrap();
        if keyed {
            request
                .headers_mut()
                .insert("idempotency-key", "k-1".parse().unwrap());
        }
        let _ = service.oneshot(request).await.unwrap();
        assert_eq!(log.lock().unwrap().len(), attempts, "keyed: {keyed}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_of_unknown_length_read_at_once_is_hedged_one_still_coming_is_sent_unhedged() {
    // A body that does not say its length (a stream, as tonic's and most
    // encoders' are) is read before the first attempt as far as it is
    // there: whole and within the limit, it is kept and the call hedges.
    let (inner, log) = slow_service(&[1_000, 10]);
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new())
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
    )
    .layer(inner);
    let request = Request::get("/users/7").body(stream(2)).unwrap();
    let start = tokio::time::Instant::now();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(60),
        "the hedge answered"
    );
    assert_eq!(
        response.extensions().get::<backstop::http::Attempts>(),
        Some(&backstop::http::Attempts(2))
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.iter().all(|(_, body, _)| body.len() == 2048), "{log:?}");

    // One whose next chunk is not there yet (a stream the caller is still
    // writing) is not waited for: it is sent as it comes, unhedged.
    let (inner, log) = slow_service(&[1_000, 10]);
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new())
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
    )
    .layer(inner);
    let later = futures_util::stream::once(async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"later")))
    });
    let request = Request::get("/users/7")
        .body(StreamBody::new(later))
        .unwrap();
    let start = tokio::time::Instant::now();
    let _ = service.oneshot(request).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1_005));
    let log = log.lock().unwrap();
    assert_eq!(*log, [(1, Bytes::from_static(b"later"), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_limit_is_not_hedged_and_one_at_it_is() {
    // "too long": 8 bytes.
    for (limit, attempts, took) in [(2, 1, 1_000), (7, 1, 1_000), (8, 2, 60)] {
        let (inner, log) = slow_service::<String>(&[1_000, 10]);
        let service = RetryLayer::http(
            backstop::Retry::new(&Policy::new())
                .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
        )
        .replay_limit(limit)
        .layer(inner);
        let request = Request::put("/users/7")
            .body("too long".to_owned())
            .unwrap();
        let start = tokio::time::Instant::now();
        let _ = service.oneshot(request).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(took),
            "limit {limit}"
        );
        assert_eq!(log.lock().unwrap().len(), attempts, "limit {limit}");
    }
}

/// A body that says its length and comes later, in two chunks (a proxied
/// request's body, still arriving).
struct Arriving {
    at: std::pin::Pin<Box<tokio::time::Sleep>>,
    chunks: std::collections::VecDeque<Bytes>,
}

impl Arriving {
    fn new(after: Duration) -> Self {
        Self {
            at: Box::pin(tokio::time::sleep(after)),
            chunks: [Bytes::from_static(b"a"), Bytes::from_static(b"b")].into(),
        }
    }
}

impl hyper::body::Body for Arriving {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::ready!(std::future::Future::poll(self.at.as_mut(), cx));
        std::task::Poll::Ready(self.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(2)
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_says_it_fits_is_waited_for_and_sent_again_after_a_server_read_part_of_it() {
    // A server may answer before it read the whole body: one that says it
    // fits is read whole before the first attempt, however long it takes
    // to come, so that it can be sent again.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let inner = service_fn(move |request: Request<ReplayBody<Arriving>>| {
        let log = log.clone();
        async move {
            let mut body = request.into_body();
            let first = log.lock().unwrap().is_empty();
            let read = if first {
                // One chunk, then 503.
                let frame = body.frame().await.unwrap()?;
                frame.into_data().unwrap()
            } else {
                body.collect().await?.to_bytes()
            };
            log.lock().unwrap().push(read);
            Ok::<_, BoxError>(status(if first { 503 } else { 200 }, None))
        }
    });
    let service = RetryLayer::http(&Policy::new()).layer(inner);
    let upload = Request::put("/files/3")
        .body(Arriving::new(Duration::from_millis(5)))
        .unwrap();
    let response = service.oneshot(upload).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(*seen.lock().unwrap(), ["a", "ab"]);
}

#[tokio::test(start_paused = true)]
async fn a_layer_of_clone_requests_hedges_on_clones_of_its_service_each_made_ready() {
    let inner = Counted::new(|n, request| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(if n == 1 { 1_000 } else { 5 })).await;
            Ok((n, request))
        })
    });
    let policy = Policy::new().idempotent(true);
    let service = RetryLayer::new(
        backstop::Retry::new(&policy)
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(20))),
    )
    .layer(inner.clone());
    assert_eq!(service.oneshot(7).await.unwrap(), (2, 7));
    assert_eq!(inner.calls.load(Ordering::Relaxed), 2);
    assert_eq!(
        inner.readied.load(Ordering::Relaxed),
        3,
        "once by the caller, once per attempt on its own clone"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_request_behind_a_concurrency_limit_uses_the_slot_the_caller_reserved() {
    // The caller's readiness took the one slot: the first attempt sends on
    // it. (Sent on a clone instead, it would wait for the slot held idle
    // by the caller's service: for ever.) The hedge waits for a slot like
    // any request, and the first attempt answers.
    let (inner, log) = slow_service::<String>(&[100, 10]);
    let limited = tower::limit::ConcurrencyLimit::new(inner, 1);
    let service = RetryLayer::http(
        backstop::Retry::new(&Policy::new())
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
    )
    .layer(limited);
    let start = tokio::time::Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(30), service.oneshot(get()))
        .await
        .expect("no deadlock")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(log.lock().unwrap().len(), 1, "the hedge never got a slot");
}

static HUNG_PROBE: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(1));

#[tokio::test(start_paused = true)]
async fn a_probe_that_never_returns_does_not_hold_the_breaker_shut() {
    // The first call fails and opens the breaker; the probe a cooldown
    // later hangs (no `attempt_timeout`: nothing cuts it off); a call a
    // cooldown after the probe was let through is a new trial, and its
    // success closes the breaker while the hung probe is still out.
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            match n {
                1 => Ok::<_, BoxError>(status(503, None)),
                2 => std::future::pending().await,
                _ => Ok(Response::new(())),
            }
        }
    });
    let policy = Policy::new().attempts(1).deadline(None);
    let service = RetryLayer::http(backstop::Retry::new(&policy).breaker(&HUNG_PROBE)).layer(inner);
    assert_eq!(
        service.clone().oneshot(get()).await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(HUNG_PROBE.state(), backstop::limit::BreakerState::Open);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hung = tokio::spawn(service.clone().oneshot(get()));
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::Relaxed), 2, "the probe is out");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let error = service.clone().oneshot(get()).await.unwrap_err();
    assert!(
        error.is::<CircuitOpen>(),
        "within its time, the probe holds the slot: {error}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let response = service.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "a new trial a cooldown after the first"
    );
    assert_eq!(HUNG_PROBE.state(), backstop::limit::BreakerState::Closed);
    assert_eq!(
        service.oneshot(get()).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::Relaxed), 4);
    assert!(!hung.is_finished());
    hung.abort();
}

/// A dependency of two hosts behind one client: `down` refuses every
/// request; the other answers each call's first request 503 and its retry
/// 200 (an odd request of its own is a first one).
fn two_hosts(
    down: &'static str,
) -> impl tower::Service<
    Request<ReplayBody<String>>,
    Response = Response<()>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    let healthy = Arc::new(AtomicU32::new(0));
    service_fn(move |request: Request<ReplayBody<String>>| {
        let healthy = healthy.clone();
        async move {
            if request.uri().host() == Some(down) {
                return Err(support::refused());
            }
            let n = healthy.fetch_add(1, Ordering::Relaxed);
            let status = if n.is_multiple_of(2) { 503 } else { 200 };
            Ok(Response::builder().status(status).body(()).unwrap())
        }
    })
}

/// Of 20 calls to `host` through `service`, how many are answered 200.
async fn rescued_through<S>(service: &S, host: &str) -> usize
where
    S: tower::Service<Request<String>, Response = Response<()>, Error = std::io::Error> + Clone,
{
    let mut rescued = 0;
    for _ in 0..20 {
        let request = Request::get(format!("http://{host}/users/7"))
            .body(String::new())
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        rescued += usize::from(response.status() == 200);
    }
    rescued
}

#[tokio::test(start_paused = true)]
async fn a_host_that_is_down_drains_its_own_token_budget_and_no_other_hosts() {
    let policy = Policy::new();
    let alone = RetryLayer::http(&policy).layer(two_hosts("down-a.test"));
    let rescued_alone = rescued_through(&alone, "up-a.test").await;
    assert!(rescued_alone >= 10, "{rescued_alone}");
    let shared = RetryLayer::http(&policy).layer(two_hosts("down-b.test"));
    for _ in 0..30 {
        let request = Request::get("http://down-b.test/")
            .body(String::new())
            .unwrap();
        assert!(shared.clone().oneshot(request).await.is_err());
    }
    let rescued_beside = rescued_through(&shared, "up-b.test").await;
    assert_eq!(
        rescued_beside, rescued_alone,
        "the healthy host kept its retries"
    );
    // And the host that is down has none left, through any layer.
    let retries = Arc::new(AtomicU32::new(0));
    let counted = retries.clone();
    let counting = RetryLayer::http(backstop::Retry::new(&policy).on_retry(
        move |_: &backstop::RetryEvent<'_, Response<()>, std::io::Error>| {
            counted.fetch_add(1, Ordering::Relaxed);
        },
    ))
    .layer(two_hosts("down-b.test"));
    let request = Request::get("http://down-b.test/")
        .body(String::new())
        .unwrap();
    assert!(counting.oneshot(request).await.is_err());
    assert_eq!(
        retries.load(Ordering::Relaxed),
        0,
        "no retry for the host that is down"
    );
}

/// A destination that finds no place in the process-wide table of
/// default budgets (every place held by a key with a token spent) draws
/// on the layer's own token budget, as a request without a host does: a
/// host that is down drains it for the layer's other new hosts, and for
/// no other layer's. (In a process of its own: filling the table would
/// take the places the other tests' destinations need.)
#[test]
fn a_destination_that_finds_no_place_draws_on_the_layers_own_budget() {
    if !support::in_a_process_of_its_own(
        "tower::a_destination_that_finds_no_place_draws_on_the_layers_own_budget",
        "BACKSTOP_TEST_FULL_TABLE",
    ) {
        return;
    }
    // Every place of the table taken, each key's budget with a token
    // spent (in real time: the layer's paused clock, started after, never
    // sees them refill).
    let once = Policy::new().attempts(1);
    for user in 0..20_000u64 {
        let _ = backstop::Retry::new(&once)
            .key(&user)
            .call(|| Err::<(), _>(support::unreachable()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        // `down-*` answers every request 503; any other host a call's
        // first request 503 and its retry 200.
        let service = || {
            let healthy = Arc::new(AtomicU32::new(0));
            service_fn(move |request: Request<ReplayBody<String>>| {
                let first = request.uri().host().is_some_and(|h| h.starts_with("down-"))
                    || healthy.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
                let status = if first { 503 } else { 200 };
                async move {
                    Ok::<_, std::io::Error>(Response::builder().status(status).body(()).unwrap())
                }
            })
        };
        let policy = Policy::new().base(Duration::from_millis(1));
        let shared = RetryLayer::http(&policy).layer(service());
        for _ in 0..30 {
            let request = Request::get("http://down-full.test/")
                .body(String::new())
                .unwrap();
            let response = shared.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 503);
        }
        // The healthy host beside it found no place either: it draws on
        // the layer's budget the host that is down drained, and no call
        // of its is retried (every other one is answered 200 at once).
        let rescued_beside = rescued_through(&shared, "up-full.test").await;
        assert_eq!(rescued_beside, 10, "no retry left in the layer's own");
        // A layer built apart has a budget of its own, untouched.
        let apart = RetryLayer::http(&policy).layer(service());
        let rescued_apart = rescued_through(&apart, "up-full.test").await;
        assert!(rescued_apart > 10, "{rescued_apart}");
    });
}

/// A layer built for each request draws on its destination's token
/// budget, as one built once does: the retries stop while the host fails
/// every request (a budget of each layer's own, full every time, would
/// retry every call: 90 requests for 30 calls).
#[tokio::test(start_paused = true)]
async fn layers_built_per_request_share_their_destinations_token_budget() {
    let sent = Arc::new(AtomicU32::new(0));
    let counted = sent.clone();
    let inner = service_fn(move |_: Request<ReplayBody<String>>| {
        counted.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, std::io::Error>(Response::builder().status(503).body(()).unwrap()) }
    });
    let policy = Policy::new();
    for _ in 0..30 {
        let service = RetryLayer::http(&policy).layer(inner.clone());
        let request = Request::get("http://failing-per-request.test/")
            .body(String::new())
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 503);
    }
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        (30..=40).contains(&sent),
        "30 calls, a few retries while the destination's budget lasted: {sent}"
    );
}

static TOWER_BUDGET_PER_HOST: backstop::limit::Keyed<TokenBudget> =
    backstop::limit::Keyed::new(TokenBudget::standard());

/// A token budget kept per key, given to the layer: each destination
/// draws on its own, and one that fails every request spends only its own.
#[tokio::test(start_paused = true)]
async fn a_token_budget_kept_per_key_is_spent_by_the_destination_that_fails_only() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    let inner = service_fn(move |request: Request<ReplayBody<String>>| {
        let host = request.uri().host().unwrap().to_owned();
        let failing = host == "down.test" || log.lock().unwrap().last() != Some(&host);
        log.lock().unwrap().push(host);
        let status = if failing { 503 } else { 200 };
        async move { Ok::<_, std::io::Error>(Response::builder().status(status).body(()).unwrap()) }
    });
    let service =
        RetryLayer::http(backstop::Retry::new(&Policy::new()).budget(&TOWER_BUDGET_PER_HOST))
            .layer(inner);
    let to = |uri: &str| Request::get(uri).body(String::new()).unwrap();
    // Thirty calls to a host that is down spend its budget: few retries.
    for _ in 0..30 {
        let response = service
            .clone()
            .oneshot(to("http://down.test/"))
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    }
    let down = sent.lock().unwrap().len();
    assert!((30..=40).contains(&down), "{down}");
    // Another host, failing once then answering, still has its own: the
    // failure is retried.
    let response = service
        .clone()
        .oneshot(to("http://up.test/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        sent.lock().unwrap().len(),
        down + 2,
        "retried on its own budget"
    );
}

static TOWER_PER_HOST: backstop::limit::Keyed<CircuitBreaker> =
    backstop::limit::Keyed::new(CircuitBreaker::new(2, Duration::from_secs(30)));

#[tokio::test(start_paused = true)]
async fn a_breaker_kept_per_key_opens_for_the_destination_that_is_down_only() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = service_fn(move |request: Request<ReplayBody<String>>| {
        seen.fetch_add(1, Ordering::Relaxed);
        async move {
            match request.uri().port_u16() {
                Some(8081) => Err(ApiError::Down),
                _ => Ok(Response::new(())),
            }
        }
    });
    let service = RetryLayer::http(backstop::Retry::new(&Policy::new()).breaker(&TOWER_PER_HOST))
        .layer(inner);
    let to = |uri: &str| Request::get(uri).body(String::new()).unwrap();
    let down = service.clone().oneshot(to("http://db.test:8081/")).await;
    assert!(matches!(down, Err(ApiError::Down)), "{down:?}");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "opened after two failures"
    );
    let rejected = service.clone().oneshot(to("http://db.test:8081/")).await;
    assert!(matches!(rejected, Err(ApiError::Open)), "{rejected:?}");
    // Another port of the same host is another destination.
    let other = service.clone().oneshot(to("http://db.test:8082/")).await;
    assert!(other.is_ok(), "{other:?}");
    let state = TOWER_PER_HOST.get(&"unused").state();
    assert_eq!(state, backstop::limit::BreakerState::Closed);
    // An operator reaches the breaker that opened by its destination,
    // however it is spelled, and a request sent with a path alone by its
    // `Host` header.
    for spelled in [
        backstop::limit::Destination::new("http", "db.test:8081", None),
        backstop::limit::Destination::new("HTTP", "DB.test", Some(8081)),
    ] {
        let breaker = TOWER_PER_HOST.peek(&spelled).expect("a place");
        assert_eq!(
            breaker.state(),
            backstop::limit::BreakerState::Open,
            "{spelled}"
        );
    }
    let path_only = Request::get("/users/7")
        .header(http::header::HOST, "db.test:8083")
        .body(String::new())
        .unwrap();
    assert!(service.clone().oneshot(path_only).await.is_ok());
    assert!(
        TOWER_PER_HOST
            .peek(&backstop::limit::Destination::new("", "db.test:8083", None))
            .is_some()
    );
}

/// A service answering every request with `status`, then `then` for ever
/// after its first.
fn answering(
    first: u16,
    then: u16,
) -> impl tower::Service<
    Request<ReplayBody<String>>,
    Response = Response<()>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    let n = Arc::new(AtomicU32::new(0));
    service_fn(move |_: Request<ReplayBody<String>>| {
        let n = n.fetch_add(1, Ordering::Relaxed);
        let status = if n == 0 { first } else { then };
        async move { Ok(Response::builder().status(status).body(()).unwrap()) }
    })
}

#[tokio::test(start_paused = true)]
async fn per_method_keys_of_path_only_requests_are_each_layers_own() {
    // Two channels to two servers, the same method: the first server is
    // down, the second answers its first request 503 and its retry 200.
    let policy = Policy::new();
    let down = RetryLayer::http(&policy)
        .per_method()
        .layer(answering(503, 503));
    let up = RetryLayer::http(&policy)
        .per_method()
        .layer(answering(503, 200));
    let call = || {
        Request::get("/pkg.Health/Check")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..10 {
        let _ = down.clone().oneshot(call()).await;
    }
    let response = up.clone().oneshot(call()).await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "the second channel kept its retries"
    );
}

// The layer holds a refused call as `#[retry]` does, in paused time: once
// its budget refuses retries, a call waits for the dependency (probes
// about every 200 ms) and is let through when it answers again; one that
// stays down makes calls wait until the budget has refused for its
// ride-out (10 s), and later calls fail at once.
#[tokio::test(start_paused = true)]
async fn a_destination_that_refuses_is_waited_for_through_a_restart_and_not_past_the_ride_out() {
    use tokio::time::Instant;
    static RESTARTING: TokenBudget = TokenBudget::new(2, 1.0);
    static DOWN: TokenBudget = TokenBudget::new(2, 1.0);
    // (A probe is an attempt: attempts enough for the probes.)
    let policy = Policy::new()
        .attempts(100)
        .base(Duration::from_millis(10))
        .deadline(Some(Duration::from_secs(60)));
    let refusing_until = |back: Option<Instant>| {
        service_fn(move |()| async move {
            match back {
                Some(back) if Instant::now() >= back => Ok("answered"),
                _ => Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            }
        })
    };

    // A restart of 3 s: every call made during it is answered after it.
    let t0 = Instant::now();
    let restarting = RetryLayer::new(backstop::Retry::new(&policy).budget(&RESTARTING))
        .layer(refusing_until(Some(t0 + Duration::from_secs(3))));
    let calls = (0..5).map(|_| restarting.clone().oneshot(()));
    for answer in futures_util::future::join_all(calls).await {
        assert_eq!(answer.unwrap(), "answered");
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(3_500),
        "{took:?}"
    );

    // Down for good: calls wait, none past the ride-out; then fail at once.
    let t0 = Instant::now();
    let down =
        RetryLayer::new(backstop::Retry::new(&policy).budget(&DOWN)).layer(refusing_until(None));
    let mut waited = Duration::ZERO;
    while t0.elapsed() < Duration::from_secs(12) {
        let start = Instant::now();
        let error = down.clone().oneshot(()).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
        waited = waited.max(start.elapsed());
        assert!(
            start.elapsed() <= Duration::from_millis(10_600),
            "{:?}",
            start.elapsed()
        );
        if start.duration_since(t0) > Duration::from_millis(10_600) {
            assert!(
                start.elapsed() < Duration::from_millis(100),
                "past the ride-out"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(waited >= Duration::from_secs(5), "held: {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_layer_built_after_another_was_dropped_has_keyed_protection_of_its_own() {
    type BoxError = Box<dyn StdError + Send + Sync>;
    static PER_LAYER: backstop::limit::Keyed<CircuitBreaker> =
        backstop::limit::Keyed::new(CircuitBreaker::new(1, Duration::from_secs(60)));
    let layer =
        || RetryLayer::new(backstop::Retry::new(&Policy::new().attempts(1)).breaker(&PER_LAYER));
    // Requests of `RetryLayer::new` name no destination: each layer's are
    // its own key in the table.
    for round in 0..20 {
        let refused = layer().layer(service_fn(|_: u32| async {
            Err::<u32, BoxError>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
        }));
        let error = refused.oneshot(1).await.unwrap_err();
        assert!(
            !error.is::<CircuitOpen>(),
            "round {round}: a new layer's breaker was open"
        );
        // Built after the one whose breaker opened was dropped.
        let healthy = layer().layer(service_fn(|n: u32| async move { Ok::<_, BoxError>(n) }));
        assert_eq!(healthy.oneshot(7).await.unwrap(), 7, "round {round}");
    }
}
