//! reqwest-middleware (feature `reqwest-middleware`): [`RetryMiddleware`],
//! the retry loop of `#[retry]` for a `reqwest_middleware::ClientWithMiddleware`,
//! in place of reqwest-retry's `RetryTransientMiddleware`.
//!
//! ```no_run
//! # extern crate retry_runtime as backstop;
//! use std::time::Duration;
//! use backstop::{reqwest_middleware::RetryMiddleware, Policy};
//! use reqwest_middleware::ClientBuilder;
//!
//! # async fn run() -> Result<(), reqwest_middleware::Error> {
//! let policy = Policy::new().attempts(4).deadline(Some(Duration::from_secs(10)));
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(&policy))
//!     .build();
//! let response = client.get("http://127.0.0.1:8080/users/7").send().await?;
//! # let _ = response; Ok(()) }
//! ```
//!
//! What it does with each request:
//!
//! - a response is judged by the HTTP rule (408, 425, 429, 503 retried,
//!   after their `Retry-After`; 500, 502, 504 only if idempotent; the
//!   others returned), an error by [`Classify`] (a connection that failed
//!   is retried; a timeout, or a failure after the request was sent, only
//!   if idempotent);
//! - a request is idempotent when its method is (`GET`, `HEAD`, `OPTIONS`,
//!   `TRACE`, `PUT`, `DELETE`), when it carries an `Idempotency-Key`, or
//!   when the policy says so; with
//!   [`add_idempotency_key`](RetryMiddleware::add_idempotency_key), every
//!   other request gets the call's key on all its attempts, and is then
//!   idempotent;
//! - the time left before the deadline is each attempt's timeout (with
//!   the attempt timeout, the `Retry`'s `.attempt_timeout(..)` or the policy's, if
//!   sooner): a timeout of the request's own shrinks to it, and reqwest
//!   reports it (`is_timeout()`); a request without one keeps the
//!   `Client`'s, and is cut off at the time left with an
//!   [`Error::Middleware`] holding an [`Elapsed`] (ambiguous, retried only
//!   if idempotent);
//! - a request whose body cannot be cloned (a stream) is sent once, and a
//!   retryable failure of it gives up with
//!   [`GiveUp::NotReplayable`](crate::GiveUp::NotReplayable), told to
//!   hooks, `tracing` and `metrics`;
//! - retries draw on a retry throttle of the middleware's own (or the
//!   budget named), and the breaker and adaptive throttle, if given, turn
//!   calls away with a [`reqwest_middleware::Error::Middleware`] holding
//!   their error.

use std::fmt;
use std::time::Duration;

use ::reqwest_middleware::{Error, Middleware, Next};
use http::Extensions;

use crate::classify::{ByClassify, Classifier, Classify, Verdict};
use crate::limit::adaptive::Throttled;
use crate::limit::breaker::CircuitOpen;
use crate::run::observe::{Ignore, OnGiveUp, OnRetry};
use crate::run::{
    AttemptNotes, BreakerSlot, Driver, Elapsed, NoBreaker, NoThrottle, NoTimeout, Retry,
    ThrottleSlot, TimeoutSlot,
};
use crate::tower::{ClassifierOr, RetryLayer};

/// The requests of a reqwest-middleware client, sent again by
/// `try_clone`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqwestRequests {
    /// Non-idempotent requests get the call's `Idempotency-Key`.
    add_key: bool,
}

/// A reqwest-middleware [`Middleware`] that retries requests as a
/// [`Retry`] configures: see the [module docs](self). It keeps what a
/// [`RetryLayer`] keeps, and runs the same loop.
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
    /// hooks, attempt timeout and name; the middleware does not hedge, and
    /// a [`Retry::hedge`] given here is not used): responses judged by the HTTP rule
    /// and `Retry-After` and errors by [`Classify`] unless
    /// [`Retry::when_ok`] and [`Retry::when`] say otherwise, each request
    /// idempotent or not by its method. A `Retry` is made before it knows
    /// what it will judge, so a `when` closure names its argument's type:
    /// `Retry::new(&policy).when(|e: &reqwest_middleware::Error| e.is_connect())`.
    ///
    /// Build the client once and share it (reqwest's `Client` is made to
    /// be): unless the [`Retry`] names one, the middleware's retry throttle
    /// is its own, so a client built per request starts with a full
    /// throttle every time and never throttles (a debug build warns after
    /// 100 built at one place); share a `static` throttle with
    /// [`Retry::budget`] to build it where you like.
    ///
    /// ```
    /// # extern crate retry_runtime as backstop;
    /// use backstop::{http::Attempts, reqwest_middleware::RetryMiddleware, Policy};
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
    /// # extern crate retry_runtime as backstop;
    /// use backstop::{http::Attempts, reqwest_middleware::RetryMiddleware, Policy};
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
/// # extern crate retry_runtime as backstop;
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
/// # extern crate retry_runtime as backstop;
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

/// One call through the middleware, carried from attempt to attempt.
struct Call<'a> {
    /// The request to clone for each attempt; or, for a body that cannot
    /// be cloned, the request itself until it is sent.
    request: Option<reqwest::Request>,
    /// The request could be cloned.
    clonable: bool,
    extensions: &'a mut Extensions,
    next: Next<'a>,
    add_key: bool,
    timed_out: bool,
    attempts: u32,
}

impl Driver for Call<'_> {
    type Ok = reqwest::Response;
    type Err = Error;

    fn ready(&mut self) -> impl Future<Output = Result<(), Error>> + Send {
        std::future::ready(Ok(()))
    }

    // All of it in the future: it runs inside the attempt's context (its
    // key, its deadline) and the call's span.
    async fn attempt(&mut self, limit: Option<Duration>) -> Result<reqwest::Response, Error> {
        self.timed_out = false;
        self.attempts += 1;
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
        if let Some(cx) = crate::run::context::context() {
            let key = crate::classify::http::IDEMPOTENCY_KEY;
            if self.add_key
                && !crate::classify::http::is_idempotent_parts(request.method(), request.headers())
                && let Ok(value) = http::HeaderValue::try_from(cx.idempotency_key().to_string())
            {
                request.headers_mut().insert(key, value);
            }
        }
        // The time left (and the attempt timeout, if any), less the timer's
        // slack: the call returns by its deadline. A timeout of the
        // request's own shrinks to it, so that reqwest reports the timeout
        // (`is_timeout()`); one of the `Client`'s, which the middleware
        // cannot see, is never overridden (a request's own would replace
        // it): the attempt is then cut off from outside.
        let limit = limit.filter(|limit| *limit < Duration::MAX);
        let mut cut = limit;
        if let (Some(limit), Some(own)) = (limit, request.timeout_mut()) {
            *own = (*own).min(limit);
            cut = None;
        }
        #[cfg(feature = "tracing")]
        let span = crate::tower::attempt_span(self.attempts, true);
        let send = self.next.clone().run(request, self.extensions);
        #[cfg(feature = "tracing")]
        let send = tracing::Instrument::instrument(send, span);
        let Some(limit) = cut else {
            return send.await;
        };
        let outcome = crate::time::timer::timeout(limit, send).await;
        outcome.unwrap_or_else(|_| {
            self.timed_out = true;
            Err(Error::from(Elapsed::new()))
        })
    }

    fn attempted(&mut self) -> AttemptNotes {
        AttemptNotes {
            timed_out: self.timed_out,
            replayable: self.clonable,
        }
    }
}

#[async_trait::async_trait]
impl<W, K, B, R, G, L, A> Middleware for RetryMiddleware<W, K, B, R, G, L, A>
where
    W: Classifier<Error> + Send + Sync + 'static,
    K: Classifier<reqwest::Response> + Send + Sync + 'static,
    B: BreakerSlot<Error> + Copy + Send + Sync + 'static,
    R: OnRetry<reqwest::Response, Error> + Send + Sync + 'static,
    G: OnGiveUp<reqwest::Response, Error> + Send + Sync + 'static,
    L: TimeoutSlot<Error> + Copy + Send + Sync + 'static,
    A: ThrottleSlot<Error> + Copy + Send + Sync + 'static,
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
        let budget = layer.budget_ref();
        let clonable = request.try_clone().is_some();
        let mut call = Call {
            request: Some(request),
            clonable,
            extensions,
            next,
            add_key: layer.requests.add_key,
            timed_out: false,
            attempts: 0,
        };
        // Every attempt is bounded by the time left, as its timeout, and by
        // the attempt timeout given here or in the policy.
        let own = layer
            .retry
            .attempt_limit::<Error>()
            .filter(|limit| *limit < Duration::MAX);
        let timeout = Some(
            own.or(policy.get_attempt_timeout())
                .unwrap_or(Duration::MAX),
        );
        let mut outcome = layer
            .retry
            .by_ref(&policy, budget)
            .run_driven(&mut call, timeout)
            .await;
        if let Ok(response) = &mut outcome {
            response
                .extensions_mut()
                .insert(crate::classify::http::Attempts(call.attempts));
        }
        outcome
    }
}
