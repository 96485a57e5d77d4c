//! Feature `tonic`: the tower layer on a tonic `Channel`, against a gRPC
//! server on 127.0.0.1 (tonic's own server side, served by hyper), with a
//! codec of UTF-8 strings so that no `.proto` is needed.
//! Run with `cargo test -p backstop --features tonic --test integrations tonic::`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::classify::Classifier;
use backstop::tower::{HttpBodies, ReplayBody, RetryLayer, TransportErrors};
use backstop::{Classify, Policy, Verdict};
use bytes::{Buf, BufMut};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use tower::Layer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Messages are UTF-8 strings.
#[derive(Clone, Copy, Debug, Default)]
struct Utf8;

impl Codec for Utf8 {
    type Encode = String;
    type Decode = String;
    type Encoder = Utf8;
    type Decoder = Utf8;
    fn encoder(&mut self) -> Utf8 {
        Utf8
    }
    fn decoder(&mut self) -> Utf8 {
        Utf8
    }
}

impl Encoder for Utf8 {
    type Item = String;
    type Error = Status;
    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for Utf8 {
    type Item = String;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// `Say(message)` through a tonic client on a plain `Channel`.
async fn say_plain(addr: SocketAddr, request: tonic::Request<String>) -> Result<String, Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
    Ok(grpc.unary(request, path, Utf8).await?.into_inner())
}

/// What the server saw of each call: its message and its `grpc-timeout`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Answers each call with the next status of its script (OK once it is
/// over), echoing the message.
#[derive(Clone)]
struct Scripted {
    script: Arc<Mutex<VecDeque<Status>>>,
    seen: Seen,
}

impl tonic::server::UnaryService<String> for Scripted {
    type Response = String;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<tonic::Response<String>, Status>> + Send>,
    >;
    fn call(&mut self, request: tonic::Request<String>) -> Self::Future {
        let timeout = request
            .metadata()
            .get("grpc-timeout")
            .map(|value| value.to_str().unwrap().to_owned());
        let message = request.into_inner();
        self.seen.lock().unwrap().push((message.clone(), timeout));
        let next = self.script.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                // (A status whose message is "hang" never answers.)
                Some(status) if status.message() == "hang" => std::future::pending().await,
                Some(status) => Err(status),
                None => Ok(tonic::Response::new(format!("echo {message}"))),
            }
        })
    }
}

/// A gRPC server on loopback answering `/test.Echo/Say` by `script`.
async fn serve(script: Vec<Status>) -> (SocketAddr, Seen) {
    serve_after(script, 0).await
}

/// [`serve`], its first `going_away` connections closed at once with an
/// HTTP/2 `GOAWAY` that says no stream was processed (last stream 0), as a
/// server shutting down gracefully closes one a client opened streams on
/// as it went.
async fn serve_after(script: Vec<Status>, mut going_away: usize) -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let unary = Scripted {
        script: Arc::new(Mutex::new(script.into())),
        seen: seen.clone(),
    };
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            if going_away > 0 {
                going_away -= 1;
                tokio::spawn(go_away(stream));
                continue;
            }
            let unary = unary.clone();
            let handler = hyper::service::service_fn(move |request| {
                let unary = unary.clone();
                async move {
                    let mut grpc = tonic::server::Grpc::new(Utf8);
                    Ok::<_, Infallible>(grpc.unary(unary, request).await)
                }
            });
            serve_connection(stream, handler);
        }
    });
    (addr, seen)
}

/// Serves gRPC on `stream`, an accepted connection, with `handler`, in a
/// task of its own.
fn serve_connection<S>(stream: tokio::net::TcpStream, handler: S)
where
    S: hyper::service::Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<Body>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    tokio::spawn(async move {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), handler)
            .await;
    });
}

/// A gRPC server on 127.0.0.1 answering every request with `answer`, in
/// a task of its own; and a client of it through the layer on a
/// `Channel`.
async fn served<F, Fut>(
    answer: F,
) -> tonic::client::Grpc<
    impl tonic::client::GrpcService<
        Body,
        ResponseBody = impl hyper::body::Body<
            Data = bytes::Bytes,
            Error = impl Into<Box<dyn std::error::Error + Send + Sync>>,
        > + Send
                       + 'static,
    >,
>
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Body>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let answer = answer.clone();
            let handler = hyper::service::service_fn(move |request| {
                let answer = answer.clone();
                async move { Ok::<_, Infallible>(answer(request).await) }
            });
            serve_connection(stream, handler);
        }
    });
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&quick()))
        .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
        .map_err(backstop::tower::box_error)
        .service(connect(addr).await);
    let mut grpc = tonic::client::Grpc::new(service);
    grpc.ready().await.unwrap();
    grpc
}

/// Speaks just enough HTTP/2 on `stream` to read a client's first request
/// and close the connection with `GOAWAY` (last stream 0, `NO_ERROR`):
/// RFC 9113 section 6.8, the streams the client opened were not processed.
async fn go_away(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The client's preface, then its frames up to its first HEADERS (a
    // second late: the GOAWAY is sent whether or not it came).
    let mut read = Vec::new();
    let mut buffer = [0; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            if has_headers(&read) {
                return;
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    // SETTINGS (none), then GOAWAY: last stream 0, NO_ERROR.
    let mut frames = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    frames.extend_from_slice(&[0, 0, 8, 0x7, 0, 0, 0, 0, 0]);
    frames.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    stream.write_all(&frames).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Whether `read` (a client's preface and frames) holds a HEADERS frame.
fn has_headers(read: &[u8]) -> bool {
    !headers_frames(read, &mut 24).is_empty() // past the preface
}

/// The streams of the HEADERS frames whose frame header `read` holds from
/// `at` on (a frame's start), `at` moved past the frames read.
fn headers_frames(read: &[u8], at: &mut usize) -> Vec<[u8; 4]> {
    let mut streams = Vec::new();
    while read.len() >= *at + 9 {
        let frame = &read[*at..*at + 9];
        let len = usize::from(frame[0]) << 16 | usize::from(frame[1]) << 8 | usize::from(frame[2]);
        if frame[3] == 0x1 {
            streams.push([frame[5], frame[6], frame[7], frame[8]]);
        }
        *at += 9 + len;
    }
    streams
}

/// Retrying at once: the loopback tests take milliseconds.
fn quick() -> Policy {
    Policy::new()
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(2))
}

/// `Say(message)` through a tonic client on a `Channel` behind the layer.
async fn say(addr: SocketAddr, policy: &Policy, message: &str) -> Result<String, Status> {
    say_with(
        addr,
        RetryLayer::http(policy),
        tonic::Request::new(message.to_owned()),
    )
    .await
}

/// A `Channel` to the server at `addr`, connected.
async fn connect(addr: SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A request through a tonic client on a `Channel` behind `layer`.
async fn say_with(
    addr: SocketAddr,
    layer: RetryLayer<HttpBodies, TransportErrors, backstop::classify::ByClassify>,
    request: tonic::Request<String>,
) -> Result<String, Status> {
    let channel = connect(addr).await;
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
        .map_err(backstop::tower::box_error)
        .service(channel);
    let mut grpc = tonic::client::Grpc::new(service);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
    Ok(grpc.unary(request, path, Utf8).await?.into_inner())
}

#[tokio::test]
async fn unavailable_twice_then_ok_is_three_calls_with_the_same_message() {
    let (addr, seen) = serve(vec![
        Status::unavailable("draining"),
        Status::unavailable("draining"),
    ])
    .await;
    assert_eq!(say(addr, &quick(), "hi").await.unwrap(), "echo hi");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(message, _)| message == "hi"), "{seen:?}");
}

#[tokio::test]
async fn a_status_no_retry_can_fix_is_one_call() {
    for status in [
        Status::invalid_argument("no"),
        Status::not_found("gone"),
        Status::aborted("conflict"),
        Status::internal("bug"),
        Status::resource_exhausted("quota"),
    ] {
        let code = status.code();
        let (addr, seen) = serve(vec![status]).await;
        let error = say(addr, &quick(), "hi").await.unwrap_err();
        assert_eq!(error.code(), code);
        assert_eq!(seen.lock().unwrap().len(), 1, "{code:?}");
    }
}

#[tokio::test]
async fn the_servers_pushback_is_honoured_and_a_negative_one_stops() {
    let mut exhausted = Status::resource_exhausted("quota");
    exhausted
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "20".parse().unwrap());
    let (addr, seen) = serve(vec![exhausted]).await;
    let started = std::time::Instant::now();
    assert_eq!(say(addr, &quick(), "hi").await.unwrap(), "echo hi");
    assert!(started.elapsed() >= Duration::from_millis(20));
    assert_eq!(seen.lock().unwrap().len(), 2, "retried after the pushback");

    let mut refused = Status::unavailable("go away");
    refused
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    let (addr, seen) = serve(vec![refused]).await;
    let error = say(addr, &quick(), "hi").await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a negative pushback: not retried"
    );
}

static PUSHED_BACK: backstop::limit::TokenBudget = backstop::limit::TokenBudget::standard();

#[tokio::test]
async fn a_negative_pushback_is_a_failure_for_the_token_budget() {
    // gRFC A6: the server says it is overloaded; that is no answer.
    let mut refused = Status::unavailable("overloaded");
    refused
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    let (addr, seen) = serve(vec![refused]).await;
    let layer = RetryLayer::http(backstop::Retry::new(&quick()).budget(&PUSHED_BACK));
    let request = tonic::Request::new("hi".to_owned());
    let error = say_with(addr, layer.clone(), request).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(seen.lock().unwrap().len(), 1, "not retried");
    assert!(
        (PUSHED_BACK.tokens() - 9.0).abs() < 1e-9,
        "a token taken, none given: {}",
        PUSHED_BACK.tokens()
    );
    // The next call answers: a tenth of a token back.
    let request = tonic::Request::new("hi".to_owned());
    assert_eq!(say_with(addr, layer, request).await.unwrap(), "echo hi");
    assert!(
        (PUSHED_BACK.tokens() - 9.1).abs() < 1e-9,
        "{}",
        PUSHED_BACK.tokens()
    );
}

#[tokio::test]
async fn deadline_exceeded_is_retried_only_for_an_idempotent_call() {
    let (addr, seen) = serve(vec![Status::deadline_exceeded("slow")]).await;
    let error = say(addr, &quick(), "hi").await.unwrap_err();
    assert_eq!(error.code(), Code::DeadlineExceeded);
    assert_eq!(seen.lock().unwrap().len(), 1, "the work may have been done");

    let (addr, seen) = serve(vec![Status::deadline_exceeded("slow")]).await;
    assert_eq!(
        say(addr, &quick().idempotent(true), "hi").await.unwrap(),
        "echo hi"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// Each timeout the server saw, in microseconds.
fn micros(seen: &Seen) -> Vec<Option<u64>> {
    let seen = seen.lock().unwrap();
    seen.iter()
        .map(|(_, timeout)| {
            let timeout = timeout.as_deref()?;
            Some(
                timeout
                    .strip_suffix('u')
                    .expect("in microseconds")
                    .parse()
                    .unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_grpc_timeout_shrinks_to_the_time_left_and_none_is_added_unless_asked() {
    let policy = quick().deadline(Some(Duration::from_secs(5)));
    // None added: a stream on the same channel must not end at the deadline.
    let (addr, seen) = serve(vec![Status::unavailable("draining")]).await;
    let request = tonic::Request::new("hi".to_owned());
    assert_eq!(
        say_with(addr, RetryLayer::http(&policy), request)
            .await
            .unwrap(),
        "echo hi"
    );
    assert_eq!(micros(&seen), [None, None]);

    // One of the request's own, longer than the time left, shrinks to it.
    let (addr, seen) = serve(vec![Status::unavailable("draining")]).await;
    let mut request = tonic::Request::new("hi".to_owned());
    request.set_timeout(Duration::from_secs(60));
    assert_eq!(
        say_with(addr, RetryLayer::http(&policy), request)
            .await
            .unwrap(),
        "echo hi"
    );
    let timeouts = micros(&seen);
    assert_eq!(timeouts.len(), 2);
    for timeout in timeouts {
        assert!(
            (4_000_000..=5_000_000).contains(&timeout.unwrap()),
            "{timeout:?}"
        );
    }

    // Asked: every attempt carries the time left.
    let (addr, seen) = serve(vec![Status::unavailable("draining")]).await;
    let request = tonic::Request::new("hi".to_owned());
    let layer = RetryLayer::http(&policy).grpc_deadline();
    assert_eq!(say_with(addr, layer, request).await.unwrap(), "echo hi");
    let timeouts = micros(&seen);
    assert_eq!(timeouts.len(), 2);
    for timeout in timeouts {
        assert!(
            (4_000_000..=5_000_000).contains(&timeout.unwrap()),
            "{timeout:?}"
        );
    }
}

/// Under an attempt timeout, the `grpc-timeout` an attempt carries is its
/// own limit when that is sooner than the deadline, hedged or not, added
/// (`grpc_deadline`) or the request's own, shrunk: the server stops
/// working when the client stops waiting.
#[tokio::test(start_paused = true)]
async fn a_grpc_timeout_is_no_longer_than_the_attempts_own_limit() {
    use tower::ServiceExt;
    let policy = Policy::new()
        .deadline(Some(Duration::from_secs(2)))
        .idempotent(true);
    for (hedged, own) in [(false, false), (true, false), (false, true), (true, true)] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let told = seen.clone();
        // The first attempt hangs, to be cut off (or hedged).
        let inner = tower::service_fn(move |request: http::Request<ReplayBody<String>>| {
            let told = told.clone();
            async move {
                let timeout = request.headers().get("grpc-timeout").cloned();
                let n = {
                    let mut seen = told.lock().unwrap();
                    seen.push(timeout);
                    seen.len()
                };
                if n == 1 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, BoxError>(http::Response::new(String::new()))
            }
        });
        let retry = backstop::Retry::new(&policy).attempt_timeout(Duration::from_millis(500));
        let retry = if hedged {
            retry.hedge(backstop::hedge::Hedge::after(Duration::from_millis(100)))
        } else {
            retry
        };
        let mut request = http::Request::post("/test.Echo/Say")
            .header("content-type", "application/grpc")
            .body(String::new())
            .unwrap();
        let layer = if own {
            // A timeout of the request's own, longer than the attempt's.
            request
                .headers_mut()
                .insert("grpc-timeout", "10S".parse().unwrap());
            RetryLayer::http(retry)
        } else {
            RetryLayer::http(retry).grpc_deadline()
        };
        layer.layer(inner).oneshot(request).await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            [
                Some("500000u".parse().unwrap()),
                Some("500000u".parse().unwrap())
            ],
            "hedged: {hedged}, own: {own}"
        );
    }
}

/// A service whose copies (a hedge's) are ready only 200 ms after first
/// asked; the first request hangs, the others answer; it keeps each
/// request's `grpc-timeout`.
struct SlowClone {
    copy: bool,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    seen: Arc<Mutex<Vec<Option<http::HeaderValue>>>>,
}

impl Clone for SlowClone {
    fn clone(&self) -> Self {
        Self {
            copy: true,
            wait: None,
            seen: self.seen.clone(),
        }
    }
}

impl tower::Service<http::Request<ReplayBody<String>>> for SlowClone {
    type Response = http::Response<String>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<http::Response<String>, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        if !self.copy {
            return std::task::Poll::Ready(Ok(()));
        }
        let wait = self
            .wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(200))));
        wait.as_mut().poll(cx).map(Ok)
    }

    fn call(&mut self, request: http::Request<ReplayBody<String>>) -> Self::Future {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(request.headers().get("grpc-timeout").cloned());
            seen.len()
        };
        Box::pin(async move {
            if n == 1 {
                std::future::pending::<()>().await;
            }
            Ok(http::Response::new(String::new()))
        })
    }
}

/// A hedge whose service is ready only 200 ms after it was due says the
/// time its attempt has left when it goes, not when it was due: the
/// server is asked to work no longer than the client waits.
#[tokio::test(start_paused = true)]
async fn a_hedge_ready_late_sends_the_time_its_attempt_has_left() {
    use tower::ServiceExt;
    let policy = Policy::new()
        .deadline(Some(Duration::from_secs(2)))
        .idempotent(true);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = SlowClone {
        copy: false,
        wait: None,
        seen: seen.clone(),
    };
    let retry = backstop::Retry::new(&policy)
        .attempt_timeout(Duration::from_millis(500))
        .hedge(backstop::hedge::Hedge::after(Duration::from_millis(100)));
    let request = http::Request::post("/test.Echo/Say")
        .header("content-type", "application/grpc")
        .body(String::new())
        .unwrap();
    let service = RetryLayer::http(retry).grpc_deadline().layer(inner);
    service.oneshot(request).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            Some("500000u".parse().unwrap()),
            Some("300000u".parse().unwrap())
        ]
    );
}

#[test]
fn a_status_is_found_in_a_source_chain() {
    let boxed: BoxError = Box::new(Status::unavailable("draining"));
    assert_eq!(boxed.classify(), Verdict::Retry);
    let wrapped = std::io::Error::other(Status::invalid_argument("no"));
    assert_eq!(wrapped.classify(), Verdict::Stop);
}

/// `Say(message)` through a lazy `Channel`, as a client that connects on
/// its first call sees it: every failure a `Status`.
async fn say_lazy(addr: SocketAddr) -> Status {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(error) = grpc.ready().await {
        return Status::from_error(error.into());
    }
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
    grpc.unary(tonic::Request::new("hi".to_owned()), path, Utf8)
        .await
        .unwrap_err()
}

/// An address on loopback where nothing listens.
fn nothing_listens() -> SocketAddr {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    closed.local_addr().unwrap()
}

/// A server on loopback that reads a request, then resets the connection:
/// it may have acted on it.
async fn resetting_after_reading() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0; 4096];
        let _ = socket.read(&mut request).await;
        socket.set_zero_linger().unwrap();
    });
    addr
}

#[tokio::test]
async fn a_connection_never_made_is_retried_and_one_reset_after_the_request_only_if_idempotent() {
    // Nothing listens: the call never reached a server.
    let addr = nothing_listens();
    let refused = say_lazy(addr).await;
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
    // A server that reads the request, then resets the connection: it may
    // have acted on it.
    let addr = resetting_after_reading().await;
    let reset = say_lazy(addr).await;
    assert_eq!(reset.classify(), Verdict::RetryIfIdempotent, "{reset:?}");
}

/// The error a `Channel` itself answers a request to `addr` with, as the
/// service below the layer does (its `transport::Error` unboxed).
async fn channel_error(addr: SocketAddr) -> tonic::transport::Error {
    use tower::ServiceExt;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let request = http::Request::post(format!("http://{addr}/test.Echo/Say"))
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    channel.oneshot(request).await.unwrap_err()
}

/// `error` unboxed, boxed under the layer, and boxed in a `#[retry]`
/// function: one verdict.
fn judged_alike(error: tonic::transport::Error) -> Verdict {
    let verdict = error.classify();
    let boxed: BoxError = Box::new(error);
    assert_eq!(TransportErrors.verdict(&boxed), verdict, "{boxed:?}");
    assert_eq!(boxed.classify(), verdict, "{boxed:?}");
    verdict
}

#[tokio::test]
async fn a_tonic_transport_error_follows_the_transport_rule_and_an_unusable_endpoint_stops() {
    use tonic::transport::Endpoint;
    // Nothing listens: the connection was never made.
    let addr = nothing_listens();
    let endpoint = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    let refused = endpoint.connect().await.unwrap_err();
    assert_eq!(judged_alike(refused), Verdict::Refused);
    assert_eq!(judged_alike(channel_error(addr).await), Verdict::Refused);
    // A server that reads the request, then resets the connection: it may
    // have acted on it.
    let addr = resetting_after_reading().await;
    let reset = channel_error(addr).await;
    assert_eq!(judged_alike(reset), Verdict::RetryIfIdempotent);
    // A connect that failed otherwise (timed out, a name not resolved):
    // nothing was sent, whatever the call.
    for cause in [
        Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)) as BoxError,
        "dns error: failed to lookup address information".into(),
    ] {
        let boxed: BoxError = Box::new(tonic::ConnectError(cause));
        assert_eq!(TransportErrors.verdict(&boxed), Verdict::Retry, "{boxed:?}");
        assert_eq!(boxed.classify(), Verdict::Retry, "{boxed:?}");
    }
    // One that failed as the endpoint cannot be used as written (tonic's
    // TLS connector says so of a URI without its host): no retry fixes it.
    let unusable: BoxError = Box::new(tonic::ConnectError(Box::new(
        Endpoint::from_shared("not a URI").unwrap_err(),
    )));
    assert_eq!(
        TransportErrors.verdict(&unusable),
        Verdict::Stop,
        "{unusable:?}"
    );
    assert_eq!(unusable.classify(), Verdict::Stop, "{unusable:?}");
    // An endpoint that cannot be used as written fails the same way again:
    // without its scheme, hyper-util's connector says so at connect.
    let unscheme = Endpoint::from_shared(nothing_listens().to_string()).unwrap();
    let unusable = [
        unscheme.connect().await.unwrap_err(),
        Endpoint::from_shared("not a URI").unwrap_err(),
        Endpoint::new("not a URI".to_owned()).unwrap_err(),
        Endpoint::from_static("http://127.0.0.1:1")
            .user_agent("a\nb")
            .unwrap_err(),
    ];
    for error in unusable {
        let shown = format!("{error:?}");
        assert_eq!(judged_alike(error), Verdict::Stop, "{shown}");
    }
}

/// Connects to `endpoint`, counting its attempts in `tries`: its error as
/// tonic gives it, its budget the function's own (the default).
#[backstop::retry(attempts = 30, base = 10ms, cap = 20ms, deadline = 10s)]
async fn connect_as_is(
    endpoint: &tonic::transport::Endpoint,
    tries: &AtomicUsize,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tries.fetch_add(1, Ordering::Relaxed);
    endpoint.connect().await
}

/// The same, its error boxed (by `?`).
#[backstop::retry(attempts = 30, base = 10ms, cap = 20ms, deadline = 10s)]
async fn connect_boxed(
    endpoint: &tonic::transport::Endpoint,
    tries: &AtomicUsize,
) -> Result<tonic::transport::Channel, BoxError> {
    tries.fetch_add(1, Ordering::Relaxed);
    Ok(endpoint.connect().await?)
}

/// Serves HTTP/2 at `addr` once `tries` is above `after`.
async fn up_after(addr: SocketAddr, tries: &AtomicUsize, after: usize) -> ! {
    while tries.load(Ordering::Relaxed) <= after {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let handler = hyper::service::service_fn(|_| async {
            Ok::<_, Infallible>(http::Response::new(Body::empty()))
        });
        serve_connection(stream, handler);
    }
}

#[tokio::test(start_paused = true)]
async fn a_function_that_connects_rides_out_a_restart_when_its_error_can_hold() {
    let addr = nothing_listens();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    // Retried while the budget allows; once it refuses, a call would hold
    // until the server answers, but tonic's error cannot hold what it
    // would give up with: it gives up at once, its attempts not spent.
    let as_is = AtomicUsize::new(0);
    let error = connect_as_is(&endpoint, &as_is).await.unwrap_err();
    assert_eq!(error.classify(), Verdict::Refused);
    let refused_after = as_is.load(Ordering::Relaxed);
    assert!((2..30).contains(&refused_after), "{refused_after}");
    // Boxed, it holds, and connects once the server is up, later than the
    // other gave up.
    let boxed = AtomicUsize::new(0);
    let channel = tokio::select! {
        channel = connect_boxed(&endpoint, &boxed) => channel,
        never = up_after(addr, &boxed, refused_after) => never,
    };
    channel.expect("connected once the server was up");
    assert!(
        boxed.load(Ordering::Relaxed) > refused_after + 1,
        "{boxed:?}"
    );
}

#[test]
fn unavailable_from_the_server_is_retried_and_from_a_transport_failure_follows_the_transport_rule()
{
    use std::io::{Error, ErrorKind};
    assert_eq!(Status::unavailable("draining").classify(), Verdict::Retry);
    let with_source = |kind: ErrorKind| {
        let mut status = Status::unavailable("transport error");
        status.set_source(Arc::new(Error::from(kind)));
        status.classify()
    };
    assert_eq!(with_source(ErrorKind::ConnectionRefused), Verdict::Refused);
    assert_eq!(
        with_source(ErrorKind::ConnectionReset),
        Verdict::RetryIfIdempotent
    );
    assert_eq!(
        with_source(ErrorKind::BrokenPipe),
        Verdict::RetryIfIdempotent
    );
    // A transport failure the walk does not know (hyper's keep-alive
    // timeout): the request may have been served.
    let mut unknown = Status::unavailable("keep-alive timed out");
    unknown.set_source(Arc::new(std::fmt::Error));
    assert_eq!(unknown.classify(), Verdict::RetryIfIdempotent);
}

#[test]
fn a_stream_the_server_refused_before_processing_is_retried_and_other_http2_errors_are_not_sure() {
    // RFC 9113 section 8.7: REFUSED_STREAM means the server did not process
    // the request, so it is safe to send again whatever it does. A tonic
    // client (feature `channel`) makes it an `UNKNOWN` that holds h2's
    // error; with tonic's `server` feature, an `UNAVAILABLE` that holds it.
    let refused = Status::from_error(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
    assert_eq!(refused.classify(), Verdict::Retry, "{refused:?}");
    let mut unavailable = Status::unavailable("h2 protocol error");
    unavailable.set_source(Arc::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
    assert_eq!(unavailable.classify(), Verdict::Retry, "{unavailable:?}");
    // So it is below the tower layer, by the transport rule.
    let boxed: BoxError = Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM));
    assert_eq!(TransportErrors.verdict(&boxed), Verdict::Retry);
    // A stream reset for any other reason may have been processed.
    let mut reset = Status::unavailable("stream reset");
    reset.set_source(Arc::new(h2::Error::from(h2::Reason::INTERNAL_ERROR)));
    assert_eq!(reset.classify(), Verdict::RetryIfIdempotent, "{reset:?}");
    let boxed: BoxError = Box::new(h2::Error::from(h2::Reason::INTERNAL_ERROR));
    assert_eq!(TransportErrors.verdict(&boxed), Verdict::RetryIfIdempotent);
}

#[tokio::test]
async fn the_layer_on_a_channel_makes_a_tonic_client_service() {
    fn is_grpc_service<S: tonic::client::GrpcService<Body>>(_: &S) {}
    let channel = tonic::transport::Channel::from_static("http://127.0.0.1:1").connect_lazy();
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&Policy::new()))
        .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
        .map_err(backstop::tower::box_error)
        .service(channel);
    is_grpc_service(&service);
    // Its error as it is, without a breaker or an attempt timeout to make
    // room for.
    let channel = tonic::transport::Channel::from_static("http://127.0.0.1:1").connect_lazy();
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(&Policy::new()))
        .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
        .service(channel);
    is_grpc_service(&service);
    let _ = RetryLayer::http(&Policy::new()).layer(tower::service_fn(
        |_: http::Request<ReplayBody<Body>>| async {
            Ok::<_, BoxError>(http::Response::new(Body::empty()))
        },
    ));
}

#[backstop::retry(attempts = 3, base = 1ms, deadline = 5s, idempotent)]
async fn say_idempotent(addr: SocketAddr) -> Result<String, Status> {
    let mut request = tonic::Request::new("hi".to_owned());
    request.set_timeout(Duration::from_millis(100));
    say_plain(addr, backstop::tonic::within_attempt(request)).await
}

#[backstop::retry(attempts = 3, base = 1ms, deadline = 5s, idempotent, attempt_timeout = 100ms)]
async fn say_within_100ms(addr: SocketAddr) -> Result<String, Status> {
    say_plain(addr, tonic::Request::new("hi".to_owned())).await
}

// (Paused: its 100 ms timeouts cannot fire before the server, on the same
// runtime, has answered, however busy the machine.)
#[tokio::test(start_paused = true)]
async fn a_retry_fn_retries_tonics_own_timeout_and_takes_an_attempt_timeout() {
    let (addr, seen) = serve(vec![Status::unknown("hang")]).await;
    assert_eq!(say_idempotent(addr).await.unwrap(), "echo hi");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "tonic's timeout, retried as ambiguous"
    );

    let (addr, seen) = serve(vec![Status::unknown("hang")]).await;
    assert_eq!(say_within_100ms(addr).await.unwrap(), "echo hi");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "the attempt timeout, as a DEADLINE_EXCEEDED status"
    );
}

#[tokio::test]
async fn a_server_going_away_is_a_transport_failure_retried_only_for_an_idempotent_call() {
    // RFC 9113 section 6.8: a stream above the last one a server going
    // away names was not processed; but hyper gives the same error to a
    // request whose stream it had opened, which the server may have
    // processed. Ambiguous, then: retried for an idempotent call only.
    let (addr, seen) = serve_after(Vec::new(), 1).await;
    let gone = say_lazy(addr).await;
    assert_eq!(gone.classify(), Verdict::RetryIfIdempotent, "{gone:?}");
    assert!(seen.lock().unwrap().is_empty());

    // Through the layer, on one channel: idempotent calls in flight when
    // the server goes away (or queued behind them) are sent again on the
    // next connection, none twice; the others are returned. (Without a
    // budget: eight failures at once are more than a token budget lets
    // retry, as it is meant to.)
    for idempotent in [true, false] {
        let (addr, seen) = serve_after(Vec::new(), 1).await;
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let service = tower::ServiceBuilder::new()
            .layer(RetryLayer::http(
                &quick().idempotent(idempotent).no_budget(),
            ))
            .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
            .map_err(backstop::tower::box_error)
            .service(channel);
        let calls = (0..8).map(|n| {
            let mut grpc = tonic::client::Grpc::new(service.clone());
            async move {
                grpc.ready().await.unwrap();
                let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
                grpc.unary(tonic::Request::new(format!("{n}")), path, Utf8)
                    .await
                    .map(tonic::Response::into_inner)
            }
        });
        let answers = futures_util::future::join_all(calls).await;
        let answered: Vec<String> = answers.into_iter().filter_map(Result::ok).collect();
        let mut seen: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(m, _)| format!("echo {m}"))
            .collect();
        seen.sort();
        assert_eq!(seen, answered, "each processed at most once, and answered");
        if idempotent {
            assert_eq!(answered.len(), 8, "every call rescued");
        } else {
            assert!(answered.len() < 8, "the calls in flight are returned");
        }
    }
}

/// A server that speaks just enough HTTP/2 to reset every stream a client
/// opens, after reading its request's headers, with `reason` (an
/// `RST_STREAM`, RFC 9113 section 6.4): the requests it read are counted.
async fn resetting(reason: h2::Reason) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                // SETTINGS (none) first, as a server's preface.
                let _ = stream.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await;
                let (mut read, mut at) = (Vec::new(), 24); // past the client's preface
                let mut buffer = [0; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buffer).await {
                    read.extend_from_slice(&buffer[..n]);
                    for opened in headers_frames(&read, &mut at) {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let mut reset = vec![0, 0, 4, 0x3, 0];
                        reset.extend_from_slice(&opened);
                        reset.extend_from_slice(&u32::from(reason).to_be_bytes());
                        let _ = stream.write_all(&reset).await;
                    }
                }
            });
        }
    });
    (addr, requests)
}

#[tokio::test]
async fn a_stream_the_server_resets_is_judged_by_its_reason_whichever_client_saw_it() {
    // RFC 9113 section 7: a stream reset after the request was sent (a
    // server's handler that failed, a proxy that gave up) may have been
    // processed, as a connection reset may: not sure. A reset that says
    // the exchange broke the protocol will break it again (Stop); one
    // that says the client is sending too much is the server's "do not
    // retry" (StopOverloaded); one that refused the stream unprocessed
    // is safe to send again (Retry).
    for (reason, verdict) in [
        (h2::Reason::INTERNAL_ERROR, Verdict::RetryIfIdempotent),
        (h2::Reason::CANCEL, Verdict::RetryIfIdempotent),
        (h2::Reason::NO_ERROR, Verdict::RetryIfIdempotent),
        (h2::Reason::PROTOCOL_ERROR, Verdict::Stop),
        (h2::Reason::FRAME_SIZE_ERROR, Verdict::Stop),
        (h2::Reason::HTTP_1_1_REQUIRED, Verdict::Stop),
        (h2::Reason::ENHANCE_YOUR_CALM, Verdict::StopOverloaded),
        (h2::Reason::REFUSED_STREAM, Verdict::Retry),
    ] {
        let (addr, _) = resetting(reason).await;
        // A tonic client makes a status of it (gRPC's code for the reason,
        // holding h2's error).
        let status = say_lazy(addr).await;
        assert_eq!(status.classify(), verdict, "{reason:?}: {status:?}");
        // A hyper client's error, as the source chain of an error of the
        // user's (a `Box<dyn Error>`, anyhow's) and under the tower layer.
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        let request = http::Request::post("http://example.com/orders")
            .body(String::new())
            .unwrap();
        let error = sender.send_request(request).await.unwrap_err();
        assert_eq!(
            backstop::classify::by_source_chain(&error),
            verdict,
            "{reason:?}: {error:?}"
        );
        let boxed: BoxError = Box::new(error);
        assert_eq!(TransportErrors.verdict(&boxed), verdict, "{reason:?}");
    }

    // Through the layer on a channel: sent again only when idempotent.
    for idempotent in [true, false] {
        let (addr, requests) = resetting(h2::Reason::INTERNAL_ERROR).await;
        let policy = quick().attempts(3).idempotent(idempotent);
        let error = say(addr, &policy, "hi").await.unwrap_err();
        assert!(format!("{error:?}").contains("INTERNAL_ERROR"), "{error:?}");
        let sent = requests.load(Ordering::SeqCst);
        assert_eq!(
            sent,
            if idempotent { 3 } else { 1 },
            "idempotent: {idempotent}"
        );
    }
}

#[tokio::test]
async fn a_request_hyper_dropped_is_retried_only_for_an_idempotent_call() {
    // hyper's `Canceled`: the request was dropped by the connection (here
    // before it was written; hyper 1.13 gives it too to a request whose
    // stream was opened and may have been processed): ambiguous.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, String>(TokioIo::new(stream))
            .await
            .unwrap();
    drop(connection);
    let error = sender
        .send_request(http::Request::new(String::new()))
        .await
        .unwrap_err();
    assert!(error.is_canceled(), "{error:?}");
    assert_eq!(
        backstop::classify::by_source_chain(&error),
        Verdict::RetryIfIdempotent
    );
    let status = Status::from_error(Box::new(error));
    assert_eq!(status.classify(), Verdict::RetryIfIdempotent, "{status:?}");
}

#[tokio::test]
async fn a_slow_call_through_the_layer_on_a_channel_is_hedged() {
    // A tonic request's body is a stream that does not say its length:
    // read before the call, it is kept, and a hedge sends a copy.
    let (addr, seen) = serve(vec![Status::unknown("hang")]).await;
    let layer = RetryLayer::http(
        backstop::Retry::new(&quick().idempotent(true))
            .hedge(backstop::hedge::Hedge::after(Duration::from_millis(50))),
    );
    let request = tonic::Request::new("hi".to_owned());
    let answer = tokio::time::timeout(Duration::from_secs(2), say_with(addr, layer, request))
        .await
        .expect("the hedge answers: the call does not wait for the first attempt");
    assert_eq!(answer.unwrap(), "echo hi");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the first hangs, the hedge answers");
    assert!(seen.iter().all(|(message, _)| message == "hi"), "{seen:?}");
}

/// `Say("hi")` to `addr` with retries (no budget: the tests share the
/// function), the time left sent on.
#[backstop::retry(attempts = 3, base = 1ms, deadline = 30s, budget = none)]
async fn say_on(addr: SocketAddr) -> Result<String, Status> {
    say_plain(
        addr,
        backstop::tonic::within_attempt(tonic::Request::new("hi".to_owned())),
    )
    .await
}

/// Told when the call in [`say_between`] has ended.
static BETWEEN_GAVE_UP: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// [`say_on`] in a call of its own (a call between), whose first attempt
/// then takes 5 s more: its handler cuts it off when told.
#[backstop::retry(attempts = 3, base = 1ms, deadline = 30s, budget = none)]
async fn say_between(addr: SocketAddr) -> Result<String, Status> {
    let answer = say_on(addr).await;
    BETWEEN_GAVE_UP.notify_one();
    tokio::time::sleep(Duration::from_secs(5)).await;
    answer
}

/// [`say_on`], each attempt cut off after 100 ms.
#[backstop::retry(attempts = 5, base = 1ms, attempt_timeout = 100ms, idempotent, budget = none)]
async fn say_on_timed(addr: SocketAddr) -> Result<String, Status> {
    say_plain(
        addr,
        backstop::tonic::within_attempt(tonic::Request::new("hi".to_owned())),
    )
    .await
}

/// How a [`Relay`] calls downstream.
#[derive(Clone, Copy, PartialEq)]
enum Relaying {
    /// With retries ([`say_on`]), in the handler.
    Retried,
    /// With retries cut off after 100 ms each ([`say_on_timed`]).
    TimedRetried,
    /// With retries, in a task the handler spawns in its call.
    Spawned,
    /// Once, without retries, sending the time left on.
    Plain,
    /// With retries, through the layer on a `Channel`, answering
    /// `UNAVAILABLE` of its own if that call fails.
    Layered,
    /// With retries, in the first attempt of a call between that the
    /// handler cuts off once that call has ended, answering `UNAVAILABLE`
    /// of its own.
    Between,
}

/// Answers `Say` with what `downstream`'s `Say` answers, counting its
/// calls.
#[derive(Clone)]
struct Relay(SocketAddr, Arc<AtomicUsize>, Relaying);

impl tonic::server::UnaryService<String> for Relay {
    type Response = String;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<tonic::Response<String>, Status>> + Send>,
    >;
    fn call(&mut self, _: tonic::Request<String>) -> Self::Future {
        self.1.fetch_add(1, Ordering::Relaxed);
        let downstream = self.0;
        match self.2 {
            Relaying::Retried => {
                Box::pin(async move { say_on(downstream).await.map(tonic::Response::new) })
            }
            Relaying::TimedRetried => {
                Box::pin(async move { say_on_timed(downstream).await.map(tonic::Response::new) })
            }
            Relaying::Spawned => {
                use backstop::scope::InCurrentCall;
                let task = tokio::spawn(say_on(downstream).in_current_call());
                Box::pin(async move { task.await.unwrap().map(tonic::Response::new) })
            }
            Relaying::Layered => Box::pin(async move {
                say(downstream, &quick(), "hi")
                    .await
                    .map(tonic::Response::new)
                    .map_err(|_| Status::unavailable("downstream failed"))
            }),
            Relaying::Between => Box::pin(async move {
                tokio::select! {
                    biased;
                    answer = say_between(downstream) => answer.map(tonic::Response::new),
                    () = BETWEEN_GAVE_UP.notified() => {
                        Err(Status::unavailable("downstream too slow"))
                    }
                }
            }),
            Relaying::Plain => {
                let request = backstop::tonic::within_attempt(tonic::Request::new("hi".into()));
                Box::pin(async move {
                    say_plain(downstream, request)
                        .await
                        .map(tonic::Response::new)
                })
            }
        }
    }
}

/// A gRPC server on loopback behind the `ServerLayer`, relaying `Say` to
/// `downstream` as `relaying` says; the calls it got.
async fn serve_relay(downstream: SocketAddr, relaying: Relaying) -> (SocketAddr, Arc<AtomicUsize>) {
    use backstop::tonic::ServerLayer;
    use tower::ServiceExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let relay = Relay(downstream, Arc::default(), relaying);
    let calls = relay.1.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let relay = relay.clone();
            let handler = hyper::service::service_fn(move |request| {
                let relay = relay.clone();
                let grpc = tower::service_fn(move |request| {
                    let relay = relay.clone();
                    async move {
                        let mut grpc = tonic::server::Grpc::new(Utf8);
                        Ok::<_, Infallible>(grpc.unary(relay, request).await)
                    }
                });
                ServerLayer::new().layer(grpc).oneshot(request)
            });
            serve_connection(stream, handler);
        }
    });
    (addr, calls)
}

#[tokio::test]
async fn a_servers_incoming_deadline_is_kept_by_the_retry_calls_its_handler_makes() {
    // A server whose handler calls another service with retries (30 s of
    // their own), and its caller, which waits 2 s for it: 1.9 s for the
    // calls, 100 ms kept for the answer to get back.
    let (downstream, seen) = serve(Vec::new()).await;
    let (server, _) = serve_relay(downstream, Relaying::Retried).await;
    let mut request = tonic::Request::new("hi".to_owned());
    request.set_timeout(Duration::from_secs(2));
    assert_eq!(say_plain(server, request).await.unwrap(), "echo hi");
    // A request without one leaves the call its own.
    let request = tonic::Request::new("hi".to_owned());
    assert_eq!(say_plain(server, request).await.unwrap(), "echo hi");
    let first = micros(&seen);
    assert_eq!(first.len(), 2);
    let (kept, own) = (first[0].unwrap(), first[1].unwrap());
    assert!((1_800_000..=1_900_000).contains(&kept), "{kept}");
    assert!((29_900_000..=30_000_000).contains(&own), "{own}");

    // A plain call in the handler sends the caller's time on through
    // `within_attempt`; none without one.
    let (downstream, seen) = serve(Vec::new()).await;
    let (server, _) = serve_relay(downstream, Relaying::Plain).await;
    let mut request = tonic::Request::new("hi".to_owned());
    request.set_timeout(Duration::from_secs(2));
    assert_eq!(say_plain(server, request).await.unwrap(), "echo hi");
    let request = tonic::Request::new("hi".to_owned());
    assert_eq!(say_plain(server, request).await.unwrap(), "echo hi");
    let sent = micros(&seen);
    assert!(
        (1_800_000..=1_900_000).contains(&sent[0].unwrap()),
        "{sent:?}"
    );
    assert_eq!(sent[1], None);
}

/// A server whose callers are farther than a twentieth of their time
/// keeps the margin it is given for its answer, of every `grpc-timeout`.
#[tokio::test(start_paused = true)]
async fn a_server_keeps_the_answer_margin_it_is_given() {
    use backstop::tonic::ServerLayer;
    use tower::{Layer, ServiceExt};
    let handler = tower::service_fn(|_: http::Request<()>| async {
        let policy = backstop::Policy::new().deadline(Some(Duration::from_secs(30)));
        let left = backstop::call_async(&policy, || async {
            Ok::<_, std::io::Error>(backstop::context().unwrap().remaining().unwrap())
        })
        .await?;
        Ok::<_, std::io::Error>(http::Response::new(left))
    });
    let left = |layer: ServerLayer, timeout: &'static str| {
        let request = http::Request::builder()
            .header("grpc-timeout", timeout)
            .body(())
            .unwrap();
        layer.layer(handler).oneshot(request)
    };
    let margin = ServerLayer::new().answer_margin(Duration::from_millis(300));
    let kept = left(margin, "2S").await.unwrap().into_body();
    assert_eq!(kept, Duration::from_millis(1700));
    let kept = left(ServerLayer::new(), "2S").await.unwrap().into_body();
    assert_eq!(kept, Duration::from_millis(1900), "the default's");
    let kept = left(ServerLayer::new(), "400m").await.unwrap().into_body();
    assert_eq!(kept, Duration::from_millis(380), "a twentieth");
    // Outside a retry call, the handler reads the same time.
    let outside = tower::service_fn(|_: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(backstop::scope::time_left()))
    });
    let request = http::Request::builder()
        .header("grpc-timeout", "2S")
        .body(())
        .unwrap();
    let response = margin.layer(outside).oneshot(request).await.unwrap();
    assert_eq!(response.into_body(), Some(Duration::from_millis(1700)));
    // A margin as long as the caller's time leaves the handler's calls
    // none: a first attempt, no retry.
    let kept = left(margin, "200m").await.unwrap().into_body();
    assert_eq!(kept, Duration::ZERO);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let failing = tower::service_fn(move |_: http::Request<()>| {
        let calls = Arc::clone(&counted);
        async move {
            let policy = backstop::Policy::new().no_budget();
            let outcome = backstop::call_async(&policy, || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
            })
            .await;
            Ok::<_, Infallible>(http::Response::new(outcome.is_err()))
        }
    });
    let request = http::Request::builder()
        .header("grpc-timeout", "200m")
        .body(())
        .unwrap();
    let failed = margin.layer(failing).oneshot(request).await.unwrap();
    assert!(failed.into_body());
    assert_eq!(calls.load(Ordering::Relaxed), 1, "no retry");
}

/// The caller: each attempt cut off after 300 ms, the time left sent on.
#[backstop::retry(attempts = 3, base = 1ms, deadline = 1s, attempt_timeout = 300ms, idempotent, budget = none)]
async fn say_within_300ms(addr: SocketAddr) -> Result<String, Status> {
    say_plain(
        addr,
        backstop::tonic::within_attempt(tonic::Request::new("hi".to_owned())),
    )
    .await
}

/// A chain whose last service hangs: the caller's attempt has 300 ms,
/// sent as its `grpc-timeout`; the server's retries (100 ms each) end
/// before that time is up, less the time its answer needs to get back,
/// so that its answer, marked not to be retried, reaches the caller
/// before the caller cuts its attempt off and retries on top (3 requests
/// at the dependency, not 6 to 9).
#[tokio::test]
async fn a_server_answers_its_retried_give_up_before_its_caller_cuts_the_attempt_off() {
    let hang = || Status::unavailable("hang");
    let (downstream, seen) = serve((0..9).map(|_| hang()).collect()).await;
    let (server, calls) = serve_relay(downstream, Relaying::TimedRetried).await;
    let started = std::time::Instant::now();
    let error = say_within_300ms(server).await.unwrap_err();
    assert_eq!(
        error
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().unwrap()),
        Some("-1"),
        "{error:?}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1, "the caller did not retry");
    assert_eq!(seen.lock().unwrap().len(), 3, "the server's three attempts");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_servers_error_after_its_own_retries_is_not_retried_by_its_caller() {
    // Downstream is unavailable: the server's call retries it three times,
    // gives up, and answers UNAVAILABLE, which its caller's layer would
    // retry (three times three) but for the server's word not to.
    // The same when the handler makes the call in a task it spawns in its
    // call (`in_current_call`), and when it cuts off a call between in its
    // first attempt, after the call in it gave up.
    for relaying in [Relaying::Retried, Relaying::Spawned, Relaying::Between] {
        let (downstream, seen) = serve(vec![Status::unavailable("down"); 9]).await;
        let (server, calls) = serve_relay(downstream, relaying).await;
        let error = say(server, &quick(), "hi").await.unwrap_err();
        assert_eq!(error.code(), Code::Unavailable);
        assert_eq!(
            error.metadata().get("grpc-retry-pushback-ms").unwrap(),
            "-1"
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1, "not retried");
        assert_eq!(seen.lock().unwrap().len(), 3, "retried once, below");
    }

    // A status forwarded from downstream with its pushback, which the
    // retries below honoured: marked in its place.
    let mut exhausted = Status::resource_exhausted("quota");
    exhausted
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "1".parse().unwrap());
    let (downstream, seen) = serve(vec![exhausted; 9]).await;
    let (server, calls) = serve_relay(downstream, Relaying::Retried).await;
    let error = say(server, &quick(), "hi").await.unwrap_err();
    assert_eq!(error.code(), Code::ResourceExhausted);
    assert_eq!(
        error.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1, "not retried");
    assert_eq!(seen.lock().unwrap().len(), 3, "retried below");

    // A call whose retry below succeeded is answered as it is; an error
    // no retry was made for is answered as it is.
    let (downstream, _) = serve(vec![Status::unavailable("down")]).await;
    let (server, calls) = serve_relay(downstream, Relaying::Retried).await;
    let answer = say(server, &quick(), "hi").await;
    assert_eq!(answer.unwrap(), "echo hi");
    assert_eq!(calls.load(Ordering::Relaxed), 1, "retried below, answered");
    let (downstream, _) = serve(vec![Status::invalid_argument("no")]).await;
    let (server, _) = serve_relay(downstream, Relaying::Retried).await;
    let error = say_plain(server, tonic::Request::new("hi".to_owned()))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(error.metadata().get("grpc-retry-pushback-ms").is_none());
}

#[tokio::test]
async fn a_servers_error_after_its_layers_retries_ended_on_a_final_status_is_not_retried() {
    // The handler's call through the layer retries an UNAVAILABLE, then
    // gets an INTERNAL no retry fixes, a response the layer returns as
    // it is; the handler answers UNAVAILABLE of its own, which its
    // caller's layer would retry (three times two) but for the server's
    // word not to: the call below retried, and failed.
    let alternating = |then: Status| -> Vec<Status> {
        (0..6)
            .map(|i| {
                if i % 2 == 0 {
                    Status::unavailable("down")
                } else {
                    then.clone()
                }
            })
            .collect()
    };
    let (downstream, seen) = serve(alternating(Status::internal("broken"))).await;
    let (server, calls) = serve_relay(downstream, Relaying::Layered).await;
    let error = say(server, &quick(), "hi").await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(
        error
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().unwrap()),
        Some("-1")
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1, "not retried");
    assert_eq!(seen.lock().unwrap().len(), 2, "retried once, below");

    // An answer about the request after the retry (`NOT_FOUND`) is one
    // the handler may act on: nothing is marked, and its caller retries.
    let (downstream, _) = serve(alternating(Status::not_found("no"))).await;
    let (server, calls) = serve_relay(downstream, Relaying::Layered).await;
    let error = say(server, &quick(), "hi").await.unwrap_err();
    assert!(error.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(calls.load(Ordering::Relaxed), 3, "retried by the caller");

    // A final status at once, without a retry below, is answered as it is.
    let (downstream, _) = serve(vec![Status::internal("broken"); 3]).await;
    let (server, calls) = serve_relay(downstream, Relaying::Layered).await;
    let error = say(server, &quick(), "hi").await.unwrap_err();
    assert!(error.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(calls.load(Ordering::Relaxed), 3, "retried by the caller");
}

/// An `UNAVAILABLE` answered at once (trailers-only), as a tonic handler's
/// error is.
fn unavailable() -> http::Response<()> {
    let mut unavailable = http::Response::new(());
    unavailable
        .headers_mut()
        .insert("grpc-status", http::HeaderValue::from_static("14"));
    unavailable
}

#[tokio::test]
async fn what_an_earlier_call_on_the_thread_left_does_not_mark_a_request() {
    use backstop::scope::InCurrentCall;
    use backstop::tonic::ServerLayer;
    use tower::ServiceExt;
    // A call whose attempt saw a nested call give up after retrying, on
    // this thread before the request (it leaves its note behind).
    let policy = quick().no_budget();
    let _ = backstop::call_async(&policy, || async {
        let _ = backstop::call_async(&policy, || async {
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        })
        .await;
        Ok::<_, std::io::Error>(())
    })
    .await;
    // A request whose handler spawns work in its call that retries
    // nothing, and answers an error of its own.
    let handler = tower::service_fn(|_: http::Request<()>| async {
        tokio::spawn(async {}.in_current_call()).await.unwrap();
        Ok::<_, Infallible>(unavailable())
    });
    let answer = ServerLayer::new()
        .layer(handler)
        .oneshot(http::Request::new(()))
        .await;
    let answer = answer.unwrap();
    assert_eq!(answer.headers().get("grpc-retry-pushback-ms"), None);
}

#[tokio::test(start_paused = true)]
async fn a_call_the_budget_did_not_let_retry_marks_nothing_unless_it_held() {
    use backstop::limit::TokenBudget;
    use backstop::retry;
    use backstop::tonic::ServerLayer;
    use tower::ServiceExt;
    // One token each: the first failure takes it, and the budget refuses
    // the retry.
    static UNREACHABLE: TokenBudget = TokenBudget::new(1, 0.1);
    static REFUSING: TokenBudget = TokenBudget::new(1, 0.1);
    #[retry(budget = UNREACHABLE, deadline = 1s)]
    async fn unreachable() -> std::io::Result<()> {
        Err(std::io::ErrorKind::HostUnreachable.into())
    }
    // A refusal whose retry the budget refuses holds (probes while the
    // dependency refuses), and gives up: that was its retry.
    #[retry(budget = REFUSING, deadline = 1s)]
    async fn refusing() -> std::io::Result<()> {
        Err(std::io::ErrorKind::ConnectionRefused.into())
    }
    // The pushback on the error a handler answers after `call` gave up.
    async fn pushback_after<F: Future<Output = std::io::Result<()>>>(
        call: fn() -> F,
    ) -> Option<http::HeaderValue> {
        let handler = tower::service_fn(move |_: http::Request<()>| async move {
            assert!(call().await.is_err());
            Ok::<_, Infallible>(unavailable())
        });
        let response = ServerLayer::new()
            .layer(handler)
            .oneshot(http::Request::new(()))
            .await;
        response
            .unwrap()
            .headers()
            .get("grpc-retry-pushback-ms")
            .cloned()
    }
    assert_eq!(pushback_after(unreachable).await, None);
    assert_eq!(pushback_after(refusing).await.unwrap(), "-1");
}

#[tokio::test]
async fn a_server_called_inside_an_attempt_in_process_handles_its_request_as_over_a_network() {
    use backstop::tonic::ServerLayer;
    use tower::ServiceExt;
    // A handler whose call gives up after retrying, and answers an error;
    // it sees no attempt of its caller's, nor its deadline: its call has
    // its own (30 s by default), not what is left of the caller's 1 s.
    let handler = tower::service_fn(|_: http::Request<()>| async {
        assert!(backstop::context().is_none(), "the caller's attempt");
        let _ = backstop::call_async(&quick().no_budget(), || async {
            let left = backstop::context().unwrap().remaining().unwrap();
            assert!(
                left > Duration::from_secs(29),
                "the caller's deadline: {left:?}"
            );
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        })
        .await;
        Ok::<_, Infallible>(unavailable())
    });
    let server = ServerLayer::new().layer(handler);
    // Its caller, in the same process (a test's): the answer says not to
    // retry, as it would over a network.
    let caller = quick().no_budget().deadline(Some(Duration::from_secs(1)));
    let answer = backstop::call_async(&caller, || server.clone().oneshot(http::Request::new(())))
        .await
        .unwrap();
    assert_eq!(
        answer.headers().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
}

#[test]
fn tonics_own_timeout_is_ambiguous_even_relayed_without_its_source_and_another_cancel_is_final() {
    // A status that crossed a hop keeps its code and message, not its
    // source: tonic's client-side timeout is known by both.
    let relayed = Status::cancelled(tonic::TimeoutExpired(()).to_string());
    assert_eq!(
        relayed.classify(),
        Verdict::RetryIfIdempotent,
        "{relayed:?}"
    );
    let gone = Status::cancelled("the caller went away");
    assert_eq!(gone.classify(), Verdict::Stop);
    let other = Status::unknown(tonic::TimeoutExpired(()).to_string());
    assert_eq!(
        other.classify(),
        Verdict::Stop,
        "the message under another code"
    );
    // Relayed by a server that retried below (its `ServerLayer` marks the
    // answer not to be retried): not retried, as a `DEADLINE_EXCEEDED` so
    // marked is not (the layer retries no `CANCELLED` answer at all).
    let mut marked = Status::cancelled(tonic::TimeoutExpired(()).to_string());
    marked
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    assert_eq!(marked.classify(), Verdict::StopOverloaded, "{marked:?}");
}

#[test]
fn within_attempt_shortens_a_longer_grpc_timeout_and_keeps_a_shorter_one() {
    use backstop::tonic::within_attempt;
    let _vt = backstop::testing::VirtualTime::start();
    let policy = Policy::new().deadline(Some(Duration::from_secs(2)));
    let with = |own: &str| {
        let mut request = tonic::Request::new(());
        request
            .metadata_mut()
            .insert("grpc-timeout", own.parse().unwrap());
        let request = within_attempt(request);
        request
            .metadata()
            .get("grpc-timeout")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    let timeouts = backstop::call(&policy, || {
        Ok::<_, std::io::Error>([with("10S"), with("1S"), with("2S")])
    });
    assert_eq!(timeouts.unwrap(), ["2000000u", "1S", "2S"]);
}

#[backstop::retry(deadline = 2s, attempt_timeout = 500ms, attempts = 1)]
async fn timed_grpc_timeout() -> Result<Option<String>, std::io::Error> {
    let request = backstop::tonic::within_attempt(tonic::Request::new(()));
    Ok(request
        .metadata()
        .get("grpc-timeout")
        .map(|value| value.to_str().unwrap().to_owned()))
}

/// In an attempt cut off after its `attempt_timeout`, the time left before
/// the cut-off is sent: the server does not work on after the client gave
/// the attempt up.
#[tokio::test(start_paused = true)]
async fn within_attempt_sends_the_time_left_before_the_attempts_cut_off() {
    assert_eq!(
        timed_grpc_timeout().await.unwrap().as_deref(),
        Some("500000u")
    );
}

/// A service that is never ready: it says so with an error.
#[derive(Clone)]
struct NeverReady;

impl tower::Service<http::Request<()>> for NeverReady {
    type Response = http::Response<()>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<http::Response<()>, std::io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        unreachable!("never ready")
    }
}

#[tokio::test]
async fn the_server_layer_is_ready_when_its_service_is() {
    use backstop::tonic::ServerLayer;
    use tower::ServiceExt;
    let mut serving = ServerLayer::new().layer(NeverReady);
    let error = serving.ready().await.err().expect("not ready");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe);
}

/// `Say("hi")` through `layer` on a `Channel`, the stack erased with
/// `Status` as its error, from a spawned task.
async fn say_through(
    addr: SocketAddr,
    layer: &RetryLayer<
        HttpBodies,
        TransportErrors,
        backstop::classify::ByClassify,
        backstop::builder::Static<backstop::limit::Keyed<backstop::limit::CircuitBreaker>>,
    >,
) -> Result<String, Status> {
    let channel = connect(addr).await;
    // Erased as a struct keeps it, its calls sent from a spawned task.
    let service: tower::util::BoxCloneSyncService<
        http::Request<Body>,
        http::Response<Body>,
        Status,
    > = tower::util::BoxCloneSyncService::new(
        tower::ServiceBuilder::new()
            .map_err(backstop::tonic::status_from_error)
            .layer(layer.clone())
            .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
            .map_err(backstop::tower::box_error::<tonic::transport::Error>)
            .service(channel),
    );
    tokio::spawn(async move {
        let mut grpc = tonic::client::Grpc::new(service);
        grpc.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
        Ok(grpc
            .unary(tonic::Request::new(String::from("hi")), path, Utf8)
            .await?
            .into_inner())
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_keyed_breaker_keeps_one_breaker_per_layer_for_a_channels_requests_which_name_no_host() {
    use backstop::limit::{CircuitBreaker, Keyed};
    static PER_CHANNEL: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(2, Duration::from_secs(60)));
    let down = vec![Status::unavailable("down"); 100];
    let ((sick, sick_seen), (healthy, healthy_seen)) = (serve(down).await, serve(vec![]).await);
    let layer =
        || RetryLayer::http(backstop::Retry::new(&quick().attempts(1)).breaker(&PER_CHANNEL));
    let (to_sick, to_healthy) = (layer(), layer());
    for _ in 0..3 {
        let _ = say_through(sick, &to_sick).await;
    }
    // The sick channel's breaker opened, and its rejection is `UNAVAILABLE`,
    // not the `UNKNOWN` tonic would make of it.
    assert_eq!(sick_seen.lock().unwrap().len(), 2);
    let rejected = say_through(sick, &to_sick).await.unwrap_err();
    assert_eq!(rejected.code(), Code::Unavailable);
    assert!(
        rejected.message().contains("circuit breaker open"),
        "{rejected:?}"
    );
    // The healthy channel's layer has a breaker of its own.
    assert_eq!(say_through(healthy, &to_healthy).await.unwrap(), "echo hi");
    assert_eq!(healthy_seen.lock().unwrap().len(), 1);
    assert_eq!(PER_CHANNEL.len(), 2);
}

/// How a server-streaming call answers: an error at once (trailers-only),
/// or a stream whose first item is an error (after its headers).
#[derive(Clone)]
struct Streaming {
    calls: Arc<std::sync::atomic::AtomicU32>,
    /// Calls answered with an error at once, before the stream.
    at_once: u32,
    /// Whether the stream's first item is an error.
    fails_in_stream: bool,
}

impl tonic::server::ServerStreamingService<String> for Streaming {
    type Response = String;
    type ResponseStream =
        std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<String, Status>> + Send>>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, Status>>;
    fn call(&mut self, _: tonic::Request<String>) -> Self::Future {
        let call = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if call <= self.at_once {
            return std::future::ready(Err(Status::unavailable("draining")));
        }
        let items: Vec<Result<String, Status>> = if self.fails_in_stream {
            vec![Err(Status::unavailable("draining"))]
        } else {
            vec![Ok("one".to_owned()), Ok("two".to_owned())]
        };
        let stream: Self::ResponseStream = Box::pin(futures_util::stream::iter(items));
        std::future::ready(Ok(tonic::Response::new(stream)))
    }
}

/// A server-streaming call through the layer on a `Channel`: `calls` counts
/// what the server saw; the messages the caller read, or its error.
async fn stream_through(streaming: Streaming) -> Result<Vec<String>, Status> {
    use futures_util::StreamExt as _;
    let mut grpc = served(move |request| {
        let streaming = streaming.clone();
        async move {
            let mut grpc = tonic::server::Grpc::new(Utf8);
            grpc.server_streaming(streaming, request).await
        }
    })
    .await;
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Watch");
    let mut stream = grpc
        .server_streaming(tonic::Request::new("hi".to_owned()), path, Utf8)
        .await?
        .into_inner();
    let mut messages = Vec::new();
    while let Some(message) = stream.next().await {
        messages.push(message?);
    }
    Ok(messages)
}

/// A server-streaming call is retried on an error status the server
/// answers at once, in its headers (trailers-only); once its headers have
/// come, an error in the stream is the caller's, not retried.
#[tokio::test]
async fn a_server_streaming_call_is_retried_only_on_a_status_answered_at_once() {
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let at_once = Streaming {
        calls: calls.clone(),
        at_once: 2,
        fails_in_stream: false,
    };
    assert_eq!(stream_through(at_once).await.unwrap(), ["one", "two"]);
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 3);

    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let in_stream = Streaming {
        calls: calls.clone(),
        at_once: 0,
        fails_in_stream: true,
    };
    let status = stream_through(in_stream).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "not retried"
    );
}

/// A client-streaming service that reads the whole stream, keeps what it
/// read, and answers `UNAVAILABLE` to its first `fail` calls.
#[derive(Clone)]
struct Collect {
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    fail: usize,
}

impl tonic::server::ClientStreamingService<String> for Collect {
    type Response = String;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<tonic::Response<String>, Status>> + Send>,
    >;
    fn call(&mut self, request: tonic::Request<tonic::Streaming<String>>) -> Self::Future {
        let (seen, fail) = (self.seen.clone(), self.fail);
        Box::pin(async move {
            let mut stream = request.into_inner();
            let mut messages = Vec::new();
            while let Some(message) = stream.message().await? {
                messages.push(message);
            }
            let mut seen = seen.lock().unwrap();
            seen.push(messages.clone());
            if seen.len() <= fail {
                return Err(Status::unavailable("draining"));
            }
            Ok(tonic::Response::new(messages.join(",")))
        })
    }
}

/// A client-streaming call whose stream had ended when the server answered
/// (the server read it whole first) is retried on a retryable status, and
/// every attempt sends the server the same messages.
#[tokio::test]
async fn a_client_streaming_call_whose_stream_ended_before_the_answer_is_retried_whole() {
    let collect = Collect {
        seen: Arc::default(),
        fail: 2,
    };
    let seen = collect.seen.clone();
    let mut grpc = served(move |request| {
        let collect = collect.clone();
        async move {
            let mut grpc = tonic::server::Grpc::new(Utf8);
            grpc.client_streaming(collect, request).await
        }
    })
    .await;
    let messages = ["one", "two", "three"].map(str::to_owned);
    let request = tonic::Request::new(futures_util::stream::iter(messages.clone()));
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Collect");
    let answer = grpc.client_streaming(request, path, Utf8).await.unwrap();
    assert_eq!(answer.into_inner(), "one,two,three");
    assert_eq!(
        *seen.lock().unwrap(),
        [messages.to_vec(), messages.to_vec(), messages.to_vec()]
    );
}
