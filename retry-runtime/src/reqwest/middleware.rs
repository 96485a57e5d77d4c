//! The reqwest-middleware retry loop (documented in `reqwest`).

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;

use ::reqwest_middleware::{Error, Middleware, Next};
use http::Extensions;

use crate::classify::{ByClassify, Classify, Verdict};
use crate::limit::adaptive::Throttled;
use crate::limit::breaker::CircuitOpen;
use crate::run::drive::{Drive, Keeps, Operation};
use crate::run::observe::{Ignore, Shown};
use crate::run::{Elapsed, Handles, NoBreaker, NoThrottle, NoTimeout, Retry};
use crate::tower::{ClassifierOr, RetryLayer};

/// The requests of a reqwest-middleware client, sent again by
/// `try_clone`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqwestRequests {
    /// Non-idempotent requests get the call's `Idempotency-Key`.
    add_key: bool,
}

/// A reqwest-middleware [`Middleware`] that retries requests as a
/// [`Retry`] configures. It runs the layer's loop ([`RetryLayer`]), with
/// the request's body kept as reqwest's `try_clone` keeps it: a body of
/// bytes is sent again whatever its size, a stream never.
///
/// It is the retry loop of `#[retry]` for a
/// `reqwest_middleware::ClientWithMiddleware`, in place of reqwest-retry's
/// `RetryTransientMiddleware`.
///
/// ```no_run
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{reqwest::RetryMiddleware, Policy};
/// use reqwest_middleware::ClientBuilder;
///
/// # async fn run() -> Result<(), reqwest_middleware::Error> {
/// let policy = Policy::new().attempts(4).deadline(Some(Duration::from_secs(10)));
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(&policy))
///     .build();
/// let response = client.get("http://127.0.0.1:8080/users/7").send().await?;
/// # let _ = response; Ok(()) }
/// ```
///
/// What it does with each request:
///
/// - a response is judged by the HTTP rule (408, 425, 429, 503 retried,
///   after their `Retry-After`; 500, 502, 504 only if idempotent; the
///   others returned), an error by [`Classify`] (a connection that failed
///   is retried; a timeout, or a failure after the request was sent, only
///   if idempotent);
/// - a request is idempotent when its method is (`GET`, `HEAD`, `OPTIONS`,
///   `TRACE`, `PUT`, `DELETE`), when it carries an `Idempotency-Key`, or
///   when the policy says so; with
///   [`add_idempotency_key`](RetryMiddleware::add_idempotency_key), every
///   other request gets the call's key on all its attempts, and is then
///   idempotent;
/// - the time left before the deadline is each attempt's timeout (with
///   the attempt timeout, the `Retry`'s `.attempt_timeout(..)` or the policy's, if
///   sooner): a timeout of the request's own shrinks to it, and reqwest
///   reports it (`is_timeout()`); a request without one keeps the
///   `Client`'s, and is cut off at the time left with an
///   [`Error::Middleware`] holding an
///   [`Elapsed`] (ambiguous, retried only if idempotent). The cut-off
///   ends when the response's head has come: its body, read after the
///   middleware returns it, is bounded by a timeout of the request's own
///   (shrunk to the time left: it covers the body too) or the `Client`'s
///   only. With no time
///   left at all (a handler passing on a deadline already spent), the
///   request is not sent, hedged or not: the call is turned away with
///   that error, as by an open breaker, and no limiter counts it;
/// - a call whose request went out more than once and that returns an
///   answer saying the dependency failed (a 5xx but 501 and 505) keeps a
///   retrying call around it from retrying on top
///   ([`GiveUp::RetriedBelow`](crate::GiveUp::RetriedBelow)), as one that
///   gave up does;
/// - a request whose body cannot be cloned (a stream) is sent once, and a
///   retryable failure of it gives up with
///   [`GiveUp::NotReplayable`](crate::GiveUp::NotReplayable), told to
///   hooks, `tracing` and `metrics`;
/// - retries draw on their destination's token budget, shared by every
///   middleware and layer that calls it (or on the budget named), and the
///   breaker and adaptive throttle, if given, turn
///   calls away with a [`reqwest_middleware::Error::Middleware`] holding
///   their error.
#[must_use = "a middleware does nothing until a client is built `.with(..)` it"]
pub struct RetryMiddleware<
    W = ByClassify,
    K = ByClassify,
    B = NoBreaker,
    R = Ignore,
    G = Ignore,
    L = NoTimeout,
    A = NoThrottle,
> {
    inner: RetryLayer<ReqwestRequests, W, K, B, R, G, L, A>,
}

/// A copy sharing the original's loop (its budget, breaker, throttle and
/// hooks), as a clone of a [`RetryLayer`] does: one per client built.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{reqwest::RetryMiddleware, Policy};
/// let middleware = RetryMiddleware::new(&Policy::new());
/// let clients: Vec<_> = (0..2)
///     .map(|_| reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware.clone()).build())
///     .collect();
/// assert_eq!(clients.len(), 2);
/// ```
impl<W, K, B, R, G, L, A> Clone for RetryMiddleware<W, K, B, R, G, L, A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<W, K, B, R, G, L, A> fmt::Debug for RetryMiddleware<W, K, B, R, G, L, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("layer", &self.inner)
            .finish()
    }
}

impl RetryMiddleware {
    /// A middleware from a policy or a [`Retry`] configured as a closure's
    /// would be (its budget, breaker, adaptive throttle, classifiers,
    /// hooks, attempt timeout, hedging and name): responses judged by the
    /// HTTP rule and `Retry-After` and errors by [`Classify`] unless
    /// [`Retry::when_ok`] and [`Retry::when`] say otherwise, each request
    /// idempotent or not by its method. A `Retry` is made before it knows
    /// what it will judge, so a `when` closure names its argument's type:
    /// `Retry::new(&policy).when(|e: &reqwest_middleware::Error| e.is_connect())`.
    ///
    /// With [`Retry::hedge`], an idempotent request (by its method, its key
    /// or the policy) whose body can be cloned is sent again beside an
    /// attempt slow to answer, and the first answer wins; the others are
    /// dropped. Every attempt runs with a copy of the caller's extensions,
    /// and the copy of the last to end (the winner's) becomes the
    /// caller's.
    ///
    /// Unless the [`Retry`] names a budget, a request draws on its
    /// destination's token budget (its scheme, host and port: one per
    /// destination for the whole process, shared by every middleware and
    /// layer that calls it, in a table of 4096), so a host that is down
    /// drains its own budget and no other host's, and a client built per
    /// request draws on the same budget as one built once. Build the
    /// client once and share it all the same: reqwest's `Client` is made
    /// to be (its connection pool).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{http::Attempts, reqwest::RetryMiddleware, Policy};
    /// use reqwest_middleware::ClientBuilder;
    /// # use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    /// # /// Stands in for the network: answers these statuses in turn (the last
    /// # /// ever after; 0 hangs for a minute, then answers 200; 1 is an error).
    /// # struct Server(&'static [u16], AtomicUsize, std::sync::Mutex<Vec<String>>);
    /// # impl Server { fn new(statuses: &'static [u16]) -> Self { Self(statuses, AtomicUsize::new(0), Default::default()) } }
    /// # #[async_trait::async_trait]
    /// # impl reqwest_middleware::Middleware for Server {
    /// #     async fn handle(&self, request: reqwest::Request, _: &mut http::Extensions, _: reqwest_middleware::Next<'_>)
    /// #     -> reqwest_middleware::Result<reqwest::Response> {
    /// #         let key = request.headers().get("idempotency-key").map(|k| k.to_str().unwrap().to_owned());
    /// #         self.2.lock().unwrap().push(key.unwrap_or_default());
    /// #         let mut status = self.0[self.1.fetch_add(1, Relaxed).min(self.0.len() - 1)];
    /// #         if status == 0 { tokio::time::sleep(std::time::Duration::from_secs(60)).await; status = 200; }
    /// #         if status == 1 { return Err(reqwest_middleware::Error::middleware(std::io::Error::other("pool busy"))); }
    /// #         Ok(http::Response::builder().status(status).body("").unwrap().into())
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let client = ClientBuilder::new(reqwest::Client::new())
    ///     .with(RetryMiddleware::new(&Policy::new()))
    ///     .with(Server::new(&[503, 200])) // stands in for the network: 503, then 200
    ///     .build();
    /// // Unavailable once, then answered.
    /// let response = client.get("http://users.internal/users/7").send().await.unwrap();
    /// assert_eq!(response.status(), 200);
    /// assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
    /// # }
    /// ```
    #[track_caller]
    pub fn new<'a, W, K, B, R, G, L, A>(
        retry: impl Into<Retry<'a, W, K, B, R, G, L, A>>,
    ) -> RetryMiddleware<W::Or, K::Or, B, R, G, L, A>
    where
        W: ClassifierOr<ByClassify>,
        K: ClassifierOr<ByClassify>,
    {
        let retry = retry
            .into()
            .classifying(|when| when.or(ByClassify), |when_ok| when_ok.or(ByClassify));
        RetryMiddleware {
            inner: RetryLayer::from_retry(retry, ReqwestRequests::default()),
        }
    }
}

impl<W, K, B, R, G, L, A> RetryMiddleware<W, K, B, R, G, L, A> {
    /// Sends the call's `Idempotency-Key` (the same on every attempt) with
    /// each request that is not idempotent by its method and has no key
    /// of its own, so that a server honouring the header does a retried
    /// `POST` once; such a request is then repeated after an ambiguous
    /// failure too.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{http::Attempts, reqwest::RetryMiddleware, Policy};
    /// use std::sync::Arc;
    /// use reqwest_middleware::ClientBuilder;
    /// # use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    /// # /// Stands in for the network: answers these statuses in turn (the last
    /// # /// ever after; 0 hangs for a minute, then answers 200; 1 is an error).
    /// # struct Server(&'static [u16], AtomicUsize, std::sync::Mutex<Vec<String>>);
    /// # impl Server { fn new(statuses: &'static [u16]) -> Self { Self(statuses, AtomicUsize::new(0), Default::default()) } }
    /// # #[async_trait::async_trait]
    /// # impl reqwest_middleware::Middleware for Server {
    /// #     async fn handle(&self, request: reqwest::Request, _: &mut http::Extensions, _: reqwest_middleware::Next<'_>)
    /// #     -> reqwest_middleware::Result<reqwest::Response> {
    /// #         let key = request.headers().get("idempotency-key").map(|k| k.to_str().unwrap().to_owned());
    /// #         self.2.lock().unwrap().push(key.unwrap_or_default());
    /// #         let mut status = self.0[self.1.fetch_add(1, Relaxed).min(self.0.len() - 1)];
    /// #         if status == 0 { tokio::time::sleep(std::time::Duration::from_secs(60)).await; status = 200; }
    /// #         if status == 1 { return Err(reqwest_middleware::Error::middleware(std::io::Error::other("pool busy"))); }
    /// #         Ok(http::Response::builder().status(status).body("").unwrap().into())
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let server = Arc::new(Server::new(&[502, 201])); // stands in for the network: 502, then 201
    /// let client = ClientBuilder::new(reqwest::Client::new())
    ///     .with(RetryMiddleware::new(&Policy::new()).add_idempotency_key())
    ///     .with_arc(server.clone())
    ///     .build();
    /// // A 502 may come after the server did the work: a POST is sent again only
    /// // because it carries the same key, for the server to do the work once.
    /// let response = client.post("http://orders.internal/orders").body("{}").send().await.unwrap();
    /// assert_eq!(response.status(), 201);
    /// assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
    /// let keys = server.2.lock().unwrap(); // each attempt's Idempotency-Key header
    /// assert!(!keys[0].is_empty());
    /// assert_eq!(keys[0], keys[1]);
    /// # }
    /// ```
    pub fn add_idempotency_key(mut self) -> Self {
        self.inner.requests.add_key = true;
        self
    }
}

/// A response judged by its status and `Retry-After`, as
/// [`response_verdict`](crate::reqwest::response_verdict) does.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// let busy = http::Response::builder().status(503).body("").unwrap();
/// assert_eq!(reqwest::Response::from(busy).classify(), Verdict::Retry);
/// ```
impl Classify for ::reqwest::Response {
    fn classify(&self) -> Verdict {
        crate::reqwest::response_verdict(self)
    }
}

/// reqwest's errors by [`Classify`] for `reqwest::Error`; a middleware's
/// by the first error of its chain that this crate knows (a breaker's
/// rejection, a timed-out attempt), [`Verdict::Stop`] if none.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{CircuitOpen, Classify, Elapsed, Verdict};
/// let open = reqwest_middleware::Error::from(CircuitOpen::new());
/// assert_eq!(open.classify(), Verdict::Stop);
/// let timed_out = reqwest_middleware::Error::from(Elapsed::new());
/// assert_eq!(timed_out.classify(), Verdict::RetryIfIdempotent);
/// ```
impl Classify for Error {
    fn classify(&self) -> Verdict {
        match self {
            Error::Reqwest(error) => error.classify(),
            Error::Middleware(error) => {
                let error: &(dyn std::error::Error + 'static) = error.as_ref();
                crate::classify::source_chain(error)
            }
        }
    }
}

/// The breaker's rejection, as a middleware error.
impl From<CircuitOpen> for Error {
    fn from(open: CircuitOpen) -> Self {
        Error::middleware(open)
    }
}

/// The adaptive throttle's rejection, as a middleware error.
impl From<Throttled> for Error {
    fn from(shed: Throttled) -> Self {
        Error::middleware(shed)
    }
}

/// A timed-out attempt, as a middleware error.
impl From<Elapsed> for Error {
    fn from(elapsed: Elapsed) -> Self {
        Error::middleware(elapsed)
    }
}

/// What an attempt through the middleware gives: the extensions it ran
/// with, and its outcome.
type Sent<'a> =
    Pin<Box<dyn Future<Output = (Extensions, Result<reqwest::Response, Error>)> + Send + 'a>>;

/// One call through the middleware, carried from attempt to attempt.
struct Call<'a> {
    /// The request to clone for each attempt; or, for a body that cannot
    /// be cloned, the request itself until it is sent.
    request: Option<reqwest::Request>,
    /// The request could be cloned.
    clonable: bool,
    /// The caller's: each attempt runs with a copy, which becomes the
    /// caller's when it is over.
    extensions: &'a mut Extensions,
    next: Next<'a>,
    add_key: bool,
    attempts: u32,
    /// How long the attempt running may take, if limited.
    limit: Option<Duration>,
    sent: Option<Sent<'a>>,
    /// The extensions of the last attempt of a hedged round to end: the
    /// caller's when the call is over. Made for a call's first hedged
    /// round: one that does not hedge allocates nothing for it.
    hedged: Option<Arc<Mutex<Option<Extensions>>>>,
}

impl<'a> Call<'a> {
    /// The request of the next attempt, made inside it (its key is the
    /// call's), and its timeout within `limit`: a timeout of the
    /// request's own shrinks to it, so that reqwest reports the timeout
    /// (`is_timeout()`).
    fn request(&mut self, limit: Option<Duration>) -> reqwest::Request {
        let mut request = if self.clonable {
            let template = self.request.as_ref().expect("kept for every attempt");
            template
                .try_clone()
                .expect("a request that cloned once clones again")
        } else {
            self.request
                .take()
                .expect("the decider retries only a request that can be sent again")
        };
        if let (Some(limit), Some(own)) = (limit, request.timeout_mut()) {
            *own = (*own).min(limit);
        }
        request
    }

    /// Sends `request` with a copy of the caller's extensions, inside the
    /// attempt's context (which gives it the call's key) and span.
    fn send(&self, request: reqwest::Request, attempt: u32) -> Sent<'a> {
        let extensions = self.extensions.clone();
        let next = self.next.clone();
        let add_key = self.add_key;
        let send = async move {
            let mut request = request;
            if add_key {
                with_key(&mut request);
            }
            let mut extensions = extensions;
            let outcome = next.run(request, &mut extensions).await;
            (extensions, outcome)
        };
        #[cfg(feature = "tracing")]
        let send = tracing::Instrument::instrument(send, crate::tower::attempt_span(attempt, true));
        #[cfg(not(feature = "tracing"))]
        let _ = attempt;
        Box::pin(send)
    }
}

/// Gives a request that is not idempotent by its method the call's
/// `Idempotency-Key`.
fn with_key(request: &mut reqwest::Request) {
    if let Some(cx) = crate::run::scope::context()
        && !crate::classify::http::is_idempotent_parts(request.method(), request.headers())
        && let Ok(value) = http::HeaderValue::try_from(cx.idempotency_key().to_string())
    {
        request
            .headers_mut()
            .insert(crate::classify::http::IDEMPOTENCY_KEY, value);
    }
}

/// The middleware's error in the events' words: reqwest's without its URL
/// ([`OwnText`](crate::state::vocabulary::OwnText) for `reqwest::Error`), a
/// middleware's by its whole chain (anyhow's `{:#}`).
impl crate::state::vocabulary::OwnText for Error {
    fn write_text(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Reqwest(error) => error.write_text(f),
            Error::Middleware(error) => write!(f, "{error:#}"),
        }
    }
}

impl<'a> Operation for Call<'a> {
    type Ok = reqwest::Response;
    type Err = Error;
    type Kept = Keeps<Result<reqwest::Response, Error>>;
    type Hedge = Pin<Box<dyn Future<Output = Result<reqwest::Response, Error>> + Send + 'a>>;
    // (With no time left at all, nothing is sent, as `within_attempt`
    // sends nothing.)
    const UNSENT_WITHOUT_TIME: bool = true;

    // The time left (and the attempt timeout, if any), less the timer's
    // slack: the call returns by its deadline. A request with a timeout of
    // its own gets it shrunk to that, and is not cut off from outside; one
    // of the `Client`'s, which the middleware cannot see, is never
    // overridden (a request's own would replace it): the attempt is then
    // cut off from outside.
    fn start(self: Pin<&mut Self>, limit: Option<Duration>) -> Option<Duration> {
        let this = self.get_mut();
        this.attempts += 1;
        this.limit = limit.filter(|limit| *limit < Duration::MAX);
        let own = this.request.as_ref().is_some_and(|r| r.timeout().is_some());
        this.limit.filter(|_| !own)
    }

    fn poll_attempt(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<reqwest::Response, Error>> {
        let this = self.get_mut();
        if this.sent.is_none() {
            let request = this.request(this.limit);
            this.sent = Some(this.send(request, this.attempts));
        }
        let sent = this.sent.as_mut().expect("the request was sent");
        let (extensions, outcome) = ready!(sent.as_mut().poll(cx));
        this.sent = None;
        *this.extensions = extensions;
        Poll::Ready(outcome)
    }

    fn cut_off(self: Pin<&mut Self>, why: Elapsed) -> Error {
        self.get_mut().sent = None;
        Self::elapsed(why)
    }

    fn elapsed(why: Elapsed) -> Error {
        Error::from(why)
    }

    fn replayable(self: Pin<&mut Self>) -> bool {
        self.clonable
    }

    fn poll_prepare(self: Pin<&mut Self>, _: &mut TaskContext<'_>, idempotent: bool) -> Poll<bool> {
        Poll::Ready(idempotent && self.clonable)
    }

    // Each attempt of a hedged round runs with a copy of the caller's
    // extensions; the copy of the one that ends the round (it ends last)
    // becomes the caller's. The round cuts it off after `limit`: its own
    // timeout, if it has one, shrinks to that.
    fn hedge(self: Pin<&mut Self>, limit: Option<Duration>) -> Self::Hedge {
        let this = self.get_mut();
        this.attempts += 1;
        let request = this.request(limit.filter(|limit| *limit < Duration::MAX));
        let sent = this.send(request, this.attempts);
        let hedged = this.hedged.get_or_insert_with(Arc::default).clone();
        Box::pin(async move {
            let (extensions, outcome) = sent.await;
            *hedged.lock().unwrap_or_else(PoisonError::into_inner) = Some(extensions);
            outcome
        })
    }

    fn shown(outcome: &Result<reqwest::Response, Error>) -> Shown<'_> {
        match outcome {
            Ok(response) => Shown::Status(response.status().as_u16()),
            Err(error) => Shown::Error(crate::run::observe::ErrorShown::Own(error)),
        }
    }

    fn finish(self: Pin<&mut Self>, outcome: &mut Result<reqwest::Response, Error>) {
        let this = self.get_mut();
        let hedged = this
            .hedged
            .as_ref()
            .and_then(|hedged| hedged.lock().unwrap_or_else(PoisonError::into_inner).take());
        if let Some(extensions) = hedged {
            *this.extensions = extensions;
        }
        if let Ok(response) = outcome {
            response
                .extensions_mut()
                .insert(crate::classify::http::Attempts(this.attempts));
        }
    }
}

#[async_trait::async_trait]
impl<W, K, B, R, G, L, A> Middleware for RetryMiddleware<W, K, B, R, G, L, A>
where
    Retry<'static, W, K, B, R, G, L, A>: Handles<reqwest::Response, Error>,
    // (Each part, for the middleware to be shared between threads.)
    W: Send + Sync + 'static,
    K: Send + Sync + 'static,
    B: Send + Sync + 'static,
    R: Send + Sync + 'static,
    G: Send + Sync + 'static,
    L: Send + Sync + 'static,
    A: Send + Sync + 'static,
{
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<reqwest::Response, Error> {
        let layer = &self.inner;
        let idempotent = layer.requests.add_key
            || crate::classify::http::is_idempotent_parts(request.method(), request.headers());
        let policy = if idempotent {
            layer.policy.idempotent(true)
        } else {
            layer.policy
        };
        let url = request.url();
        // The key given to the middleware's `Retry`, if any, is every
        // request's; the request's host otherwise.
        let destination = layer.retry.retry.key.or_else(|| {
            url.host_str().map(|host| {
                crate::classify::http::recent_destination(
                    Some(url.scheme()),
                    url.authority(),
                    || crate::classify::http::destination(Some(url.scheme()), host, url.port()),
                )
            })
        });
        let budget = layer.retry.budget_for(destination);
        let retry = &layer.retry.retry;
        // What `try_clone` asks, without a copy made to be dropped: a body
        // in memory, or none, can be sent again; a stream cannot.
        let clonable = request.body().is_none_or(|body| body.as_bytes().is_some());
        let call = Call {
            request: Some(request),
            clonable,
            extensions,
            next,
            add_key: layer.requests.add_key,
            attempts: 0,
            limit: None,
            sent: None,
            hedged: None,
        };
        // Every attempt is bounded by the time left, as its timeout, and by
        // the attempt timeout given here or in the policy.
        let own = crate::run::Steps::<reqwest::Response, Error>::timeout(retry)
            .filter(|limit| *limit < Duration::MAX);
        let timeout = own
            .or(policy.get_attempt_timeout())
            .unwrap_or(Duration::MAX);
        Drive::new(retry, policy, budget, destination, call, true)
            .with_timeout(Some(timeout))
            .await
    }
}
