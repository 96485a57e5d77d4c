//! tonic (feature `tonic`): gRPC statuses and tonic's transport errors
//! classified, the call's deadline sent as `grpc-timeout`, and the tower
//! layer on a tonic `Channel`.
//!
//! A `tonic::Status` is judged by [`grpc_verdict`](crate::classify::http::grpc_verdict):
//! `UNAVAILABLE` from the server is retried, `DEADLINE_EXCEEDED` only for
//! an idempotent call, `RESOURCE_EXHAUSTED` only when the server pushed
//! back with a delay (`grpc-retry-pushback-ms`), the rest never; a
//! negative or malformed pushback (not a signed 32-bit integer) means do
//! not retry. An `UNAVAILABLE` tonic made from
//! a transport failure follows the transport rule: retried when the
//! connection was never made or the server refused the call's HTTP/2
//! stream, only for an idempotent call when it broke after the request
//! was written or the server went away. A `Status` boxed in an error's
//! source chain is found there. A `tonic::transport::Error` (from
//! `Endpoint::connect`, or a `Channel`'s own) follows the transport rule.
//!
//! On the server side, [`ServerLayer`] gives the retry calls a handler
//! makes the deadline its own caller set (the request's `grpc-timeout`,
//! less a twentieth for the answer to get back), and tells the caller not
//! to retry a call whose own retries failed.
//!
//! The tower layer retries the calls of a tonic client made on a
//! `Channel` (a streaming one only when its whole request was kept: see
//! the guide to HTTP; `RetryLayer::http(&policy)` above it, its requests' bodies
//! mapped back to tonic's: the `backstop` crate's docs of this module and
//! its guide to HTTP, docs/http.md, show the stack); gRPC requests are
//! `POST`s, so only the statuses above that a retry can fix are retried,
//! and a request's `grpc-timeout` shrinks to the time left before the
//! deadline, or to the attempt's limit under an `attempt_timeout`
//! (`.grpc_deadline()` adds one to every request, for a layer that
//! serves unary calls only). [`status_from_error`] above the layer
//! gives its own errors their codes. A status that no retry fixes
//! (`INTERNAL`, `NOT_FOUND`…) reaches the layer as a response, which it
//! returns as an answer: `on_give_up` and the `not retried` event do not
//! hear of it, as they do of the same status returned as an error by a
//! `#[retry]` function. After a retry, a status of the dependency's failure
//! (`UNKNOWN`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, `INTERNAL`,
//! `UNAVAILABLE`, `DATA_LOSS`) in the headers still keeps a retrying call
//! around the layer from retrying on top, as a give-up does.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::{Duration, Instant};

use crate::classify::{Classify, Verdict};

/// By its code and the server's pushback, as
/// [`grpc_verdict`](crate::classify::http::grpc_verdict) says.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// assert_eq!(tonic::Status::unavailable("draining").classify(), Verdict::Retry);
/// assert_eq!(tonic::Status::invalid_argument("no").classify(), Verdict::Stop);
/// let mut exhausted = tonic::Status::resource_exhausted("quota");
/// exhausted.metadata_mut().insert("grpc-retry-pushback-ms", "100".parse().unwrap());
/// assert_eq!(
///     exhausted.classify(),
///     Verdict::RetryAfter(std::time::Duration::from_millis(100))
/// );
/// ```
///
/// A status this crate made (a breaker's or an adaptive throttle's
/// rejection, a timed-out attempt: see the `From` impls) is judged by
/// what it holds; tonic's own client-side timeout (`CANCELLED`, "Timeout
/// expired") is ambiguous, as any timeout is: retried for an idempotent
/// call, unless a server relaying it says not to retry (a negative
/// `grpc-retry-pushback-ms`, as `ServerLayer` marks an answer after a
/// retry below).
///
/// `UNAVAILABLE` is judged by who said it. A server (or a proxy in front
/// of it) that answers `UNAVAILABLE` has not processed the call: it is
/// retried. A status tonic made on the client from a transport failure
/// follows the transport rule: a connection that was never made
/// (`tonic::ConnectError`, a refused connection) or an HTTP/2 stream the
/// server refused before processing it (`REFUSED_STREAM`) is retried; a
/// connection reset or closed after the request was written, a server
/// going away (`GOAWAY`) or a request hyper dropped with its connection
/// (`CANCELLED`: hyper gives both to requests it may have sent), or a
/// keep-alive timeout, is ambiguous (the server may have done the work)
/// and retried only for an idempotent call. A stream the server reset
/// (tonic's `UNKNOWN`, "transport error", holding h2's `RST_STREAM`) is
/// judged by its reason, as the transport rule judges it: ambiguous for
/// a failed handler or a cancelled stream (`INTERNAL_ERROR`, `CANCEL`),
/// final for a broken protocol, and `ENHANCE_YOUR_CALM` is the server's
/// "do not retry" ([`Verdict::StopOverloaded`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::sync::Arc;
/// use backstop::{Classify, Verdict};
///
/// let mut reset = tonic::Status::unavailable("connection reset");
/// reset.set_source(Arc::new(Error::from(ErrorKind::ConnectionReset)));
/// assert_eq!(reset.classify(), Verdict::RetryIfIdempotent);
/// let mut refused = tonic::Status::unavailable("tcp connect error");
/// refused.set_source(Arc::new(Error::from(ErrorKind::ConnectionRefused)));
/// assert_eq!(refused.classify(), Verdict::Refused);
/// ```
impl Classify for ::tonic::Status {
    fn classify(&self) -> Verdict {
        let source = std::error::Error::source(self);
        if let Some(verdict) = source.and_then(crate::classify::known_in_chain) {
            return verdict;
        }
        if self.code() == ::tonic::Code::Cancelled
            && self.message() == ::tonic::TimeoutExpired(()).to_string()
        {
            // Ambiguous, as a `DEADLINE_EXCEEDED` is, and so not retried
            // when the server that relayed it says not to (its pushback:
            // a call of its own retried below).
            const DEADLINE_EXCEEDED: i32 = ::tonic::Code::DeadlineExceeded as i32;
            return crate::classify::http::grpc_verdict(
                DEADLINE_EXCEEDED,
                self.metadata().as_ref(),
            );
        }
        // An `UNAVAILABLE` the client made from a transport failure it
        // could not place (hyper's keep-alive timeout, a connection that
        // closed mid-call): the request may have reached the server, which
        // gRPC means by "not always safe to retry non-idempotent
        // operations". A refused or failed connect is known above
        // (`Retry`); a server's own `UNAVAILABLE` has no source.
        if source.is_some() && self.code() == ::tonic::Code::Unavailable {
            return Verdict::RetryIfIdempotent;
        }
        crate::classify::http::grpc_verdict(self.code() as i32, self.metadata().as_ref())
    }
}

/// A tonic transport error (what `Endpoint::connect` and a `Channel`
/// answer) by the transport rule of [`classify`](crate::classify): a
/// connection that was never made is retried (refused: [`Verdict::Refused`]),
/// as is an HTTP/2 stream the server refused; one reset or closed after the
/// request was written only for an idempotent call. An endpoint that cannot
/// be used as written (a URI or user agent that does not parse, TLS asked
/// of a Unix socket) is [`Verdict::Stop`]: a retry fails the same way.
///
/// So a function that connects is retried (and rides out a server's
/// restart with an error type that can hold the call, as
/// `Box<dyn Error + Send + Sync>` can), and the layer sits on a `Channel`
/// with its error as it is (boxed, it is judged alike).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// let error = tonic::transport::Endpoint::from_shared("not a URI").unwrap_err();
/// assert_eq!(error.classify(), Verdict::Stop);
/// ```
impl Classify for ::tonic::transport::Error {
    fn classify(&self) -> Verdict {
        match crate::classify::tonic_endpoint_unusable(self) {
            Some(verdict) => verdict,
            None => crate::classify::transport_chain(self),
        }
    }
}

/// A breaker's rejection as a status: `UNAVAILABLE` (the dependency is
/// known to be down), holding the [`CircuitOpen`](crate::CircuitOpen), so
/// that it classifies as final and a function returning
/// `Result<_, tonic::Status>` can take a `breaker`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{CircuitOpen, Classify, Verdict};
/// let status = tonic::Status::from(CircuitOpen::new());
/// assert_eq!(status.code(), tonic::Code::Unavailable);
/// assert_eq!(status.classify(), Verdict::Stop);
/// ```
impl From<crate::CircuitOpen> for ::tonic::Status {
    fn from(open: crate::CircuitOpen) -> Self {
        let mut status = Self::unavailable(open.to_string());
        status.set_source(std::sync::Arc::new(open));
        status
    }
}

/// An adaptive throttle's rejection as a status: `UNAVAILABLE`, holding
/// the [`Throttled`](crate::Throttled): final.
impl From<crate::Throttled> for ::tonic::Status {
    fn from(shed: crate::Throttled) -> Self {
        let mut status = Self::unavailable(shed.to_string());
        status.set_source(std::sync::Arc::new(shed));
        status
    }
}

/// A timed-out attempt as a status: `DEADLINE_EXCEEDED`, holding the
/// [`Elapsed`](crate::Elapsed), so that a function returning
/// `Result<_, tonic::Status>` can take an `attempt_timeout`. A call held
/// after its dependency refused it ([`Elapsed::is_refused`](crate::Elapsed::is_refused))
/// is `DEADLINE_EXCEEDED` too: in this process its source says it was a
/// refusal; a client of this server, which sees only the code, is not
/// invited to retry into a dependency that has been refusing (as
/// `UNAVAILABLE` would, whatever its idempotency).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Elapsed, Verdict};
/// let status = tonic::Status::from(Elapsed::new());
/// assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
/// assert_eq!(status.classify(), Verdict::RetryIfIdempotent);
/// let held = tonic::Status::from(Elapsed::refused());
/// assert_eq!(held.code(), tonic::Code::DeadlineExceeded);
/// assert_eq!(held.classify(), Verdict::Refused);
/// ```
impl From<crate::Elapsed> for ::tonic::Status {
    fn from(elapsed: crate::Elapsed) -> Self {
        let mut status = Self::deadline_exceeded(elapsed.to_string());
        status.set_source(std::sync::Arc::new(elapsed));
        status
    }
}

/// The status a tonic caller should see for an error of the retry layer
/// (for `.map_err(..)` above it): the layer's own errors by their `From`
/// impls (a breaker's or an adaptive throttle's rejection `UNAVAILABLE`, a
/// timed-out attempt `DEADLINE_EXCEEDED`), anything else as tonic's
/// [`Status::from_error`](::tonic::Status::from_error) says (the `Status`
/// in it, or what a transport failure comes to). tonic's own conversion
/// knows none of the layer's errors, and a caller would see `UNKNOWN`.
///
/// With it above the layer, the stack's error is a `Status`, so that it
/// can be erased to a type a struct can hold and a task can be spawned
/// with: tower's `BoxCloneSyncService`, named with `Status` as its error
/// (the crate's docs of the `tonic` module show the stack).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{tonic::status_from_error, CircuitOpen, Elapsed};
/// use tonic::Code;
/// type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// let open: BoxError = CircuitOpen::new().into();
/// assert_eq!(status_from_error(open).code(), Code::Unavailable);
/// let timed_out: BoxError = Elapsed::new().into();
/// assert_eq!(status_from_error(timed_out).code(), Code::DeadlineExceeded);
/// let status: BoxError = tonic::Status::not_found("no such user").into();
/// assert_eq!(status_from_error(status).code(), Code::NotFound);
/// ```
pub fn status_from_error(error: Box<dyn std::error::Error + Send + Sync>) -> ::tonic::Status {
    let error = match error.downcast::<crate::CircuitOpen>() {
        Ok(open) => return (*open).into(),
        Err(error) => error,
    };
    let error = match error.downcast::<crate::Throttled>() {
        Ok(shed) => return (*shed).into(),
        Err(error) => error,
    };
    match error.downcast::<crate::Elapsed>() {
        Ok(elapsed) => (*elapsed).into(),
        Err(error) => ::tonic::Status::from_error(error),
    }
}

/// `request` with the time left before the call's deadline as its
/// `grpc-timeout`, when called inside an attempt and the request has no
/// shorter timeout of its own: the server stops working on an attempt
/// whose answer would come too late. In an attempt cut off after an
/// `attempt_timeout`, the time left before the cut-off, if sooner
/// (tonic's client ends a request at its `grpc-timeout` too, about when
/// the loop cuts the attempt off: such an attempt fails with tonic's
/// `CANCELLED` "Timeout expired", judged as `DEADLINE_EXCEEDED`, or with
/// the loop's `Elapsed`, whichever is seen first; the verdict is the
/// same).
/// Outside an attempt, the deadline of
/// the scope it is called in, if any: a gRPC server's request behind
/// [`ServerLayer`] (so that a handler's plain call sends its caller's
/// time on, less the layer's margin for the answer), or [`scope::deadline`](crate::scope::deadline). Without a
/// deadline, the request is returned as it is.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{tonic::within_attempt, testing::VirtualTime, Policy};
/// let _vt = VirtualTime::start();
/// let policy = Policy::new().deadline(Some(Duration::from_secs(2)));
/// let timeout = backstop::call(&policy, || {
///     let request = within_attempt(tonic::Request::new(()));
///     Ok::<_, std::io::Error>(request.metadata().get("grpc-timeout").cloned())
/// });
/// assert_eq!(timeout.unwrap().unwrap(), "2000000u");
/// ```
pub fn within_attempt<T>(mut request: ::tonic::Request<T>) -> ::tonic::Request<T> {
    let Some(left) = crate::run::scope::time_left() else {
        return request;
    };
    let own = request
        .metadata()
        .get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(crate::classify::http::parse_grpc_timeout);
    if own.is_none_or(|own| left < own)
        && let Ok(value) = crate::classify::http::format_grpc_timeout(left).parse()
    {
        request.metadata_mut().insert("grpc-timeout", value);
    }
    request
}

/// The part of a caller's `grpc-timeout` a server keeps for its answer
/// to get back: a twentieth, at most 100 ms. The time is counted from the
/// request's arrival, so the caller's own cut-off comes a network trip
/// before the server's deadline: an answer sent at that deadline (a call
/// that gave up after retrying, marked not to be retried) would come too
/// late, and the caller would retry on top of the server's retries.
fn answer_margin(timeout: Duration, margin: Option<Duration>) -> Duration {
    margin.unwrap_or_else(|| (timeout / 20).min(Duration::from_millis(100)))
}

/// A tower layer for a gRPC server (`Server::builder().layer(ServerLayer::new())`
/// with tonic's), for the retries around its calls and inside them:
///
/// - each request's `grpc-timeout`, the time its caller gave it, less a
///   twentieth of it (at most 100 ms; [`answer_margin`](Self::answer_margin)
///   sets another) for the answer to get back before the caller gives up
///   (`a_server_answers_its_retried_give_up_before_its_caller_cuts_the_attempt_off`),
///   becomes the deadline of the retry calls its handler makes, as an enclosing
///   retry call's deadline would be: they start no attempt and sleep no
///   retry past that time from the request's arrival at the layer, give
///   up with their own error before it, and can send the time left on
///   (through [`within_attempt`], or a layer on their `Channel` with
///   `.grpc_deadline()` or on requests that carry a timeout of their own:
///   a layer adds none by default), so that one deadline holds across
///   every service of a call chain. A request
///   without one leaves each call its own deadline (a caller that cuts
///   its attempts off after an `attempt_timeout` without sending it
///   retries an idempotent call on top of the handler's retries: its
///   layer sends it with `.grpc_deadline()`, a `#[retry]` call with
///   [`within_attempt`]). Nothing is cut off:
///   tonic's server already ends a handler at its request's
///   `grpc-timeout`. The time is counted from when the request reaches
///   the layer, as tonic's own timeout is: what the request spent on the
///   network, or waiting in the server's queue before (tonic's
///   concurrency limit, which it stacks outside the layers it is given),
///   is not counted.
/// - an error answered after a retry call inside the handler gave up
///   after retrying (through a layer too: retried, then answered with a
///   status of the dependency's failure, `INTERNAL` say) carries
///   `grpc-retry-pushback-ms: -1`, which tells the
///   caller not to retry it (gRFC A6; a `backstop` client, or a gRPC
///   client with a retry policy, then does not): the dependency has had
///   its retries, and a caller retrying the whole chain would multiply
///   them, three attempts over three making nine. It is the rule
///   `#[retry]` keeps between nested calls of one process ("retries at one
///   layer only"), kept between processes, and as there it holds for any
///   error the handler answers after such a give-up, its own included,
///   and in place of a pushback the answer carries (a status forwarded
///   from the dependency carries the dependency's, which the retries
///   inside have honoured). A retry call that gave up without retrying
///   (its budget refused the first retry of a failure other than a
///   refusal: the dependency is known to be failing) leaves the answer as
///   it is; a refused call that held and gave up has retried
///   (`a_call_the_budget_did_not_let_retry_marks_nothing_unless_it_held`).
///
/// Both apply to what the handler's future does while the layer polls
/// it, and to work it carries into a spawned task with
/// [`in_current_call`](crate::scope::InCurrentCall::in_current_call) (or
/// [`current_call`](crate::scope::current_call)) and awaits: not to other
/// spawned work, nor to the messages of a stream it returns (produced
/// after the handler's future is over). An error answered in the
/// trailers after a message (a stream's) is left as it is. A plain client
/// call in the handler sends the time left on through [`within_attempt`].
/// The handling stands on its own, as across a network, even when its
/// caller is in the same process (a test's): a caller's attempt around
/// it lends the handler neither its context nor its deadline
/// (`a_server_called_inside_an_attempt_in_process_handles_its_request_as_over_a_network`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{context, tonic::ServerLayer, Policy};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// // A handler that calls another service with retries (30 s of its own).
/// let handler = tower::service_fn(|_: http::Request<()>| async {
///     let policy = Policy::new().deadline(Some(Duration::from_secs(30)));
///     let left = backstop::call_async(&policy, || async {
///         Ok::<_, std::io::Error>(context().unwrap().remaining().unwrap())
///     })
///     .await?;
///     Ok::<_, std::io::Error>(http::Response::new(left))
/// });
/// let server = ServerLayer::new().layer(handler);
/// // Its caller waits 2 s (`grpc-timeout: 2S`): so do its retries, less
/// // the 100 ms its answer is given to get back.
/// let request = http::Request::builder().header("grpc-timeout", "2S").body(()).unwrap();
/// let left = server.oneshot(request).await.unwrap().into_body();
/// assert_eq!(left, Duration::from_millis(1900));
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerLayer {
    // The part of each `grpc-timeout` kept for the answer; `None`: a
    // twentieth, at most 100 ms.
    margin: Option<Duration>,
}

impl ServerLayer {
    /// The layer, keeping a twentieth of each request's `grpc-timeout`
    /// (at most 100 ms) for its answer to get back.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// let _layer = backstop::tonic::ServerLayer::new();
    /// ```
    pub const fn new() -> Self {
        Self { margin: None }
    }

    /// Keeps `margin` of each request's `grpc-timeout` for the answer to
    /// get back to the caller, in place of a twentieth (at most 100 ms):
    /// for callers farther than that (another region, say), whose
    /// attempts would be cut off before an answer sent at the handler's
    /// deadline reached them, and which would then retry an idempotent
    /// call on top of the handler's retries. A `margin` as long as the `grpc-timeout` leaves
    /// its handler's retry calls no time: each makes its first attempt
    /// and no retry (`a_server_keeps_the_answer_margin_it_is_given`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{context, tonic::ServerLayer, Policy};
    /// use tower::{Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let handler = tower::service_fn(|_: http::Request<()>| async {
    ///     let policy = Policy::new().deadline(Some(Duration::from_secs(30)));
    ///     let left = backstop::call_async(&policy, || async {
    ///         Ok::<_, std::io::Error>(context().unwrap().remaining().unwrap())
    ///     })
    ///     .await?;
    ///     Ok::<_, std::io::Error>(http::Response::new(left))
    /// });
    /// // Callers 150 ms away: keep 300 ms of their time for the answer.
    /// let server = ServerLayer::new()
    ///     .answer_margin(Duration::from_millis(300))
    ///     .layer(handler);
    /// let request = http::Request::builder().header("grpc-timeout", "2S").body(()).unwrap();
    /// let left = server.oneshot(request).await.unwrap().into_body();
    /// assert_eq!(left, Duration::from_millis(1700));
    /// # }
    /// ```
    #[must_use]
    pub const fn answer_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }
}

impl<S> tower_layer::Layer<S> for ServerLayer {
    type Service = Serving<S>;

    fn layer(&self, inner: S) -> Serving<S> {
        Serving {
            inner,
            margin: self.margin,
        }
    }
}

/// The service [`ServerLayer`] makes: `S`, each call's future run under
/// its request's deadline, and its error answer marked not to be retried
/// when a retry call inside gave up after retrying.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tonic::{Serving, ServerLayer};
/// use tower::Layer;
/// let handler = tower::service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::io::Error>(http::Response::new(()))
/// });
/// let _server: Serving<_> = ServerLayer::new().layer(handler);
/// ```
#[derive(Clone, Debug)]
pub struct Serving<S> {
    inner: S,
    margin: Option<Duration>,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for Serving<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = ServingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> ServingFuture<S::Future> {
        use crate::time::clock::Clock;
        let deadline = request
            .headers()
            .get(&crate::classify::http::GRPC_TIMEOUT)
            .and_then(|value| value.to_str().ok())
            .and_then(crate::classify::http::parse_grpc_timeout)
            .and_then(|timeout| {
                crate::time::timer::RuntimeClock::current()
                    .now()
                    .checked_add(timeout.saturating_sub(answer_margin(timeout, self.margin)))
            });
        ServingFuture {
            deadline,
            served: crate::run::scope::Served::default(),
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`Serving`] service: its inner service's, run
    /// under the request's deadline, its error answer marked not to be
    /// retried when a retry call inside gave up after retrying.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::tonic::{ServerLayer, ServingFuture};
    /// use tower::{Layer, Service};
    /// let handler = tower::service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::io::Error>(http::Response::new(()))
    /// });
    /// let mut server = ServerLayer::new().layer(handler);
    /// let _future: ServingFuture<_> = server.call(http::Request::new(()));
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct ServingFuture<F> {
        deadline: Option<Instant>,
        // Whether a retry call inside gave up after retrying.
        served: crate::run::scope::Served,
        #[pin]
        inner: F,
    }
}

impl<F> std::fmt::Debug for ServingFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingFuture")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<F, R, E> Future for ServingFuture<F>
where
    F: Future<Output = Result<http::Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let inner = this.inner;
        let mut out = ready!(crate::run::scope::serving(
            *this.deadline,
            this.served,
            || inner.poll(cx)
        ));
        if this.served.retried()
            && let Ok(response) = &mut out
        {
            not_to_be_retried(response.headers_mut());
        }
        Poll::Ready(out)
    }
}

/// Marks a gRPC error answered in the headers ("trailers-only") not to be
/// retried: `grpc-retry-pushback-ms: -1`, in place of any pushback it
/// carries (a status forwarded from the dependency carries the
/// dependency's, which the retries inside have already honoured).
fn not_to_be_retried(headers: &mut http::HeaderMap) {
    let failed = headers
        .get("grpc-status")
        .is_some_and(|status| status.as_bytes() != b"0");
    if failed {
        headers.insert(
            crate::classify::http::GRPC_RETRY_PUSHBACK_MS,
            http::HeaderValue::from_static("-1"),
        );
    }
}
