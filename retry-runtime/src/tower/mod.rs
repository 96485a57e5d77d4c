//! tower (feature `tower`): [`RetryLayer`], the retry loop as a
//! [`Layer`], for hyper clients and any other tower stack.
//!
//! The layer runs the very loop `#[retry]` and [`Retry`] run: the same
//! [`Policy`] (deadline, backoff, attempts), the same token or windowed
//! budget, breaker and adaptive throttle, the same classification, hooks,
//! `tracing` and `metrics`. Each attempt runs with the call's
//! [`Context`](crate::Context) set, so [`context()`](crate::run::scope::context()), the
//! idempotency key and nested `#[retry]` calls work inside the inner
//! service.
//!
//! - [`RetryLayer::new`] retries any request that is `Clone`, classifying
//!   the inner service's errors by [`Classify`] and never
//!   retrying an `Ok` response unless told to ([`Retry::when_ok`]).
//! - [`RetryLayer::http`] is for `http::Request<B>` whatever the body: it
//!   keeps a body of up to 64 KiB to send again ([`ReplayBody`]; a longer
//!   one is streamed once and not retried, and that is reported as
//!   [`GiveUp::NotReplayable`](crate::GiveUp::NotReplayable)), judges
//!   responses by the HTTP rule and `Retry-After`, and repeats a request
//!   after an ambiguous failure (a 502, a timeout) only when its method is
//!   idempotent or it carries an `Idempotency-Key`
//!   ([`http::is_idempotent`](crate::classify::http::is_idempotent)), or the policy
//!   says every request is. A call whose request went out more than once
//!   and that returns an answer saying the dependency failed (a 5xx but
//!   501 and 505; a gRPC `UNKNOWN`, `DEADLINE_EXCEEDED`,
//!   `RESOURCE_EXHAUSTED`, `INTERNAL`, `UNAVAILABLE` or `DATA_LOSS` in the
//!   headers) keeps a retrying call around it from retrying on top
//!   ([`GiveUp::RetriedBelow`](crate::GiveUp::RetriedBelow)), as one that
//!   gave up does.
//!
//! ```
//! # extern crate backstop_runtime as backstop;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use backstop::{tower::RetryLayer, Policy};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A dependency that answers 503 twice, then 201.
//! let calls = Arc::new(AtomicU32::new(0));
//! let seen = calls.clone();
//! let inner = service_fn(move |_: http::Request<_>| {
//!     let status = if seen.fetch_add(1, Ordering::Relaxed) < 2 { 503 } else { 201 };
//!     async move { Ok::<_, std::io::Error>(http::Response::builder().status(status).body(()).unwrap()) }
//! });
//!
//! let service = RetryLayer::http(&Policy::new()).layer(inner);
//! let request = http::Request::post("/orders").body("{}".to_owned()).unwrap();
//! let response = service.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), 201);
//! assert_eq!(calls.load(Ordering::Relaxed), 3);
//! # }
//! ```

#[cfg(feature = "tonic")]
pub mod tonic;

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::classify::{ByClassify, Classifier, Classify, NeverRetry, Verdict};
use crate::limit::keyed::Unplaced;
use crate::limit::{BudgetRef, OwnBudget};
use crate::run::drive::{Drive, Keeps, Lends, LoopSpan, Operation, no_span};
use crate::run::observe::{Ignore, Shown};
use crate::run::{Chosen, Handles, NoBreaker, NoThrottle, NoTimeout, Retry, TimeoutSlot};
use crate::state::policy::Policy;
use crate::state::vocabulary::Elapsed;

mod replay;

pub use replay::{HttpBodies, ReplayBody};

/// The bodies an HTTP layer keeps to send again, by default: 64 KiB.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tower::{DEFAULT_REPLAY_LIMIT, RetryLayer};
/// use backstop::Policy;
///
/// assert_eq!(DEFAULT_REPLAY_LIMIT, 65_536);
/// // Larger bodies (uploads of up to 1 MiB) kept to send again:
/// let _layer = RetryLayer::http(&Policy::new()).replay_limit(16 * DEFAULT_REPLAY_LIMIT);
/// ```
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// A tower [`Layer`] that retries the calls of the service it wraps: see
/// the [module docs](self).
///
/// Its services share one token budget of the layer's own (clones of the
/// layer too), as `#[retry]` gives each function its own, unless the policy
/// or the [`Retry`] it was made from ([`Retry::budget`]) names one to share
/// with other layers and functions.
///
/// Readiness is tower's: [`poll_ready`](Service::poll_ready) is the inner
/// service's, the first attempt uses the service made ready, and each
/// retry waits for that service to be ready again, until the deadline at
/// most (then the call gives up with its last outcome); a readiness error
/// ends the call with that error. The deadline decides whether an attempt
/// starts and how long the loop sleeps; an attempt that hangs is cut off
/// only by the attempt timeout of the [`Retry`] the layer is made from
/// ([`Retry::attempt_timeout`], never past the deadline; a policy's own is
/// applied only when passed on so), or by a
/// [`scope::deadline`](crate::scope::deadline) around the call: a
/// hyper-util client or a tonic `Channel` has no timeout of its own, and
/// a server that never answers would hold the call past its deadline. The error type is the inner service's:
/// a breaker, an adaptive throttle or an attempt timeout needs it to hold
/// their errors (`From<CircuitOpen>`, `From<Throttled>`, `From<Elapsed>`),
/// as `Box<dyn Error + Send + Sync>` does.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use backstop::Policy;
/// use backstop::tower::RetryLayer;
/// use tower::{Layer, ServiceExt};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// static CALLS: AtomicU32 = AtomicU32::new(0);
/// // A service refused once, then answering.
/// let service = tower::service_fn(|name: &'static str| async move {
///     match CALLS.fetch_add(1, Ordering::Relaxed) {
///         0 => Err(Error::from(ErrorKind::ConnectionRefused)),
///         _ => Ok(format!("hello, {name}")),
///     }
/// });
/// let policy = Policy::new();
/// let layer = RetryLayer::new(&policy);
/// let answer = layer.layer(service).oneshot("Ada").await.unwrap();
/// assert_eq!((answer.as_str(), CALLS.load(Ordering::Relaxed)), ("hello, Ada", 2));
/// # }
/// ```
#[must_use = "a layer does nothing until it wraps a service"]
pub struct RetryLayer<
    P = Cloned,
    W = ByClassify,
    K = NeverRetry,
    B = NoBreaker,
    R = Ignore,
    G = Ignore,
    L = NoTimeout,
    A = NoThrottle,
> {
    pub(crate) policy: Policy,
    /// The rest of the loop, shared by the layer's services and calls.
    pub(crate) retry: Arc<Shared<W, K, B, R, G, L, A>>,
    pub(crate) requests: P,
}

impl<P: Clone, W, K, B, R, G, L, A> Clone for RetryLayer<P, W, K, B, R, G, L, A> {
    fn clone(&self) -> Self {
        Self {
            policy: self.policy,
            retry: self.retry.clone(),
            requests: self.requests.clone(),
        }
    }
}

impl<P: fmt::Debug, W, K, B, R, G, L, A> fmt::Debug for RetryLayer<P, W, K, B, R, G, L, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("policy", &self.policy)
            .field("budget", &self.retry.retry.budget)
            .field("requests", &self.requests)
            .field("name", &self.retry.retry.name)
            .finish_non_exhaustive()
    }
}

/// How [`RetryLayer::http`] classifies the inner service's errors. Below
/// an HTTP layer an error is a transport failure, and one that comes after
/// the request was written may come after the server did the work: it is
/// ambiguous, so a `POST` is not repeated on it and a `GET` is. Only a
/// request that was never sent (a connection refused or unreachable; with
/// `tonic`, an HTTP/2 stream the server refused) is sure to have done
/// nothing, and is retried.
///
/// `io::Error`, the boxed errors (`Box<dyn Error + Send + Sync>`, what
/// tower stacks use) and `anyhow::Error` (feature `anyhow`) are read down
/// their source chain by [`transport_verdict`]; any other error type's
/// own [`Classify`] verdict stands (hyper-util's client error has one
/// with the feature `hyper-util`, by this rule; for a transport error type
/// of another crate, make the layer from
/// `Retry::new(&policy).when(transport_verdict::<TheError>)`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{tower::TransportErrors, classify::Classifier, Verdict};
/// type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// let reset: BoxError = Error::other(Error::from(ErrorKind::ConnectionReset)).into();
/// assert_eq!(TransportErrors.verdict(&reset), Verdict::RetryIfIdempotent);
/// let refused: BoxError = Error::from(ErrorKind::ConnectionRefused).into();
/// assert_eq!(TransportErrors.verdict(&refused), Verdict::Refused);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct TransportErrors;

impl<E: Classify + 'static> Classifier<E> for TransportErrors {
    fn verdict(&self, error: &E) -> Verdict {
        let any: &dyn std::any::Any = error;
        if let Some(io) = any.downcast_ref::<std::io::Error>() {
            return crate::classify::transport_chain(io);
        }
        if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>() {
            return crate::classify::transport_chain(&**boxed);
        }
        if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error + Send>>() {
            return crate::classify::transport_chain(&**boxed);
        }
        if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error>>() {
            return crate::classify::transport_chain(&**boxed);
        }
        #[cfg(feature = "anyhow")]
        if let Some(error) = any.downcast_ref::<anyhow::Error>() {
            return crate::classify::transport_chain(error.as_ref());
        }
        error.classify()
    }
}

/// An error of an HTTP client's transport, by its source chain: a refused
/// connection anywhere in it is [`Verdict::Refused`], another failure that
/// proves nothing was sent (not connected, address not available, host or
/// network unreachable; with the feature `hyper-util`, any connect that
/// hyper-util's client says failed; with `tonic`, an HTTP/2 stream the
/// server refused, `REFUSED_STREAM`) [`Verdict::Retry`]; an
/// error this crate knows keeps its verdict, except that a failure a
/// retry could fix becomes [`Verdict::RetryIfIdempotent`] (a reset, a
/// broken pipe: the request may have been written and acted on); an
/// error it does not know (hyper's "connection closed before message
/// completed") is [`Verdict::RetryIfIdempotent`] too. With `tonic`, an
/// HTTP/2 stream the server reset is judged by its reason, as in any
/// source chain ([`classify::source_chain`](crate::classify::source_chain)):
/// not sure for a failed handler (`INTERNAL_ERROR`), [`Verdict::Stop`]
/// for a broken protocol, [`Verdict::StopOverloaded`] for
/// `ENHANCE_YOUR_CALM`. The rule of [`TransportErrors`], for a layer whose
/// inner service has an error type of its own: `RetryLayer::http(Retry::new(&policy).when(transport_verdict::<TheError>))`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{tower::transport_verdict, Verdict};
/// assert_eq!(transport_verdict(&Error::from(ErrorKind::ConnectionRefused)), Verdict::Refused);
/// assert_eq!(transport_verdict(&Error::from(ErrorKind::HostUnreachable)), Verdict::Retry);
/// assert_eq!(transport_verdict(&Error::from(ErrorKind::ConnectionReset)), Verdict::RetryIfIdempotent);
/// assert_eq!(transport_verdict(&std::fmt::Error), Verdict::RetryIfIdempotent);
/// assert_eq!(transport_verdict(&backstop::CircuitOpen::new()), Verdict::Stop);
/// ```
pub fn transport_verdict<E: std::error::Error + 'static>(error: &E) -> Verdict {
    crate::classify::transport_chain(error)
}

/// `error`, boxed: the `map_err` under a layer whose breaker, adaptive
/// throttle or attempt timeout needs room in the error type for its own
/// error (`From<CircuitOpen>`, `From<Throttled>`, `From<Elapsed>`), over a
/// client whose error has none (hyper-util's, tonic's `Channel`'s).
///
/// Use this function rather than `Box::from` or a closure. The service
/// `map_err(box_error)` makes has no lifetime in its type. One made with
/// `Box::<dyn Error + Send + Sync>::from` or a closure has the box's
/// `'static` in its type. Inside an `async` block rustc loses that
/// lifetime, and then it cannot prove the call's future `Send`: it
/// reports "implementation of `Classify` is not general enough"
/// (rust-lang/rust#110338). The same goes for anything else in the stack
/// whose type names the box (a boxed service with the boxed error, a
/// `when` or a hook given as a closure whose argument names it): give a
/// named `fn`, or erase the whole stack's type above the layer
/// (`.boxed_clone()`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::CircuitBreaker;
/// use backstop::tower::{box_error, RetryLayer};
/// use backstop::{Policy, Retry};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// static ORDERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let client = service_fn(|_: http::Request<_>| async {
///     Ok::<_, std::fmt::Error>(http::Response::new(())) // an error without room
/// });
/// let policy = Policy::new();
/// let orders = ServiceBuilder::new()
///     .layer(RetryLayer::http(Retry::new(&policy).breaker(&ORDERS)))
///     .map_err(box_error)
///     .service(client);
/// let request = http::Request::get("/orders").body(String::new()).unwrap();
/// let sent = tokio::spawn(async move { orders.oneshot(request).await.is_ok() });
/// assert!(sent.await.unwrap());
/// # }
/// ```
pub fn box_error<E>(error: E) -> Box<dyn std::error::Error + Send + Sync>
where
    E: std::error::Error + Send + Sync + 'static,
{
    Box::new(error)
}

/// A classifier as a [`Retry`] holds it, for an integration made from it:
/// one given with [`Retry::when`] or [`Retry::when_ok`] is kept; one left
/// as [`Retry::new`] made it becomes the integration's own default `D`
/// (the HTTP rule for responses, [`TransportErrors`] for a hyper client's
/// errors). Not for implementing: the classifiers a `Retry` can hold
/// have it.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::Verdict;
/// use backstop::classify::{ByClassify, When};
/// use backstop::tower::{ClassifierOr, TransportErrors};
///
/// // What `RetryLayer::http` does with the classifier of errors it holds.
/// fn judged_by<W: ClassifierOr<TransportErrors>>(when: W) -> W::Or {
///     when.or(TransportErrors)
/// }
/// // None given (`Retry::new`'s): the transport rule.
/// let _: TransportErrors = judged_by(ByClassify);
/// // One given (`Retry::when`'s): kept.
/// let given = When(|_: &std::io::Error| Verdict::Stop);
/// let _: When<_> = judged_by(given);
/// ```
pub trait ClassifierOr<D>: classifier_or::Sealed {
    /// The classifier the integration uses.
    type Or;
    /// It, given `default`.
    fn or(self, default: D) -> Self::Or;
}

mod classifier_or {
    pub trait Sealed {}
    impl Sealed for crate::classify::ByClassify {}
    impl Sealed for crate::classify::NeverRetry {}
    impl<F> Sealed for crate::classify::When<F> {}
}

/// Errors left to [`Classify`].
impl<D> ClassifierOr<D> for ByClassify {
    type Or = D;
    fn or(self, default: D) -> D {
        default
    }
}

/// `Ok` values left unclassified.
impl<D> ClassifierOr<D> for NeverRetry {
    type Or = D;
    fn or(self, default: D) -> D {
        default
    }
}

/// A classifier given: kept.
impl<F, D> ClassifierOr<D> for crate::classify::When<F> {
    type Or = Self;
    fn or(self, _: D) -> Self {
        self
    }
}

/// Requests that are sent again by cloning them (the default): what
/// [`RetryLayer::new`] makes.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tower::{Cloned, RetryLayer};
/// let policy = backstop::Policy::new();
/// let _layer: RetryLayer<Cloned> = RetryLayer::new(&policy);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Cloned;

impl RetryLayer {
    /// A layer for requests that are `Clone`, from a policy or a
    /// [`Retry`] configured as a closure's would be (its budget, breaker,
    /// adaptive throttle, classifiers, hooks, attempt timeout, hedging and
    /// name): errors are classified by [`Classify`] unless
    /// [`Retry::when`] says otherwise, `Ok` responses are final unless
    /// [`Retry::when_ok`] does, and an ambiguous failure is repeated only
    /// if the policy is `idempotent`.
    ///
    /// Build it once and clone it: unless the [`Retry`] names one, the
    /// layer's token budget is its own, shared by the services it makes
    /// and their clones. A layer built per request starts with a full
    /// token budget every time, which never runs out (a debug build warns
    /// once 100 built at one place have been called); share a `static`
    /// budget with [`Retry::budget`] to build it where you like.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use std::io::{Error, ErrorKind};
    /// use std::time::Duration;
    /// use backstop::{tower::RetryLayer, Policy};
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # static CALLS: AtomicU32 = AtomicU32::new(0);
    /// // Refused once (nothing was sent: retried), then answered.
    /// let inner = service_fn(|()| async {
    ///     match CALLS.fetch_add(1, Relaxed) {
    ///         0 => Err(Error::from(ErrorKind::ConnectionRefused)),
    ///         _ => Ok("done"),
    ///     }
    /// });
    /// let layer = RetryLayer::new(&Policy::new().attempts(4).deadline(Some(Duration::from_secs(2))));
    /// assert_eq!(layer.layer(inner).oneshot(()).await.unwrap(), "done");
    /// assert_eq!(CALLS.load(Relaxed), 2);
    /// # }
    /// ```
    ///
    /// Configured, sharing a `static` budget with whatever else names it
    /// (other layers, `#[retry(budget = ..)]` functions):
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{tower::RetryLayer, Policy, Retry, limit::TokenBudget};
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// static USERS_API: TokenBudget = TokenBudget::standard();
    /// # static CALLS: AtomicU32 = AtomicU32::new(0);
    /// let inner = service_fn(|()| async {
    ///     match CALLS.fetch_add(1, Relaxed) {
    ///         0 => Err(Error::from(ErrorKind::ConnectionRefused)),
    ///         _ => Ok("done"),
    ///     }
    /// });
    /// let policy = Policy::new();
    /// let layer = RetryLayer::new(Retry::new(&policy).budget(&USERS_API).name("users"));
    /// assert_eq!(layer.layer(inner).oneshot(()).await.unwrap(), "done");
    /// // The failure was paid for from the shared budget.
    /// assert!(USERS_API.tokens() < f64::from(USERS_API.max_tokens()));
    /// # }
    /// ```
    #[track_caller]
    pub fn new<'a, W, K, B, R, G, L, A>(
        retry: impl Into<Retry<'a, W, K, B, R, G, L, A>>,
    ) -> RetryLayer<Cloned, W, K, B, R, G, L, A> {
        RetryLayer::from_retry(retry.into(), Cloned)
    }

    /// A layer for `http::Request<B>`, any body `B`, from a policy or a
    /// configured [`Retry`]: the inner service gets
    /// `http::Request<ReplayBody<B>>`. Responses are judged by the HTTP
    /// rule (503 → retry, 404 → return it) with `Retry-After`, errors as
    /// [`TransportErrors`] (unless [`Retry::when_ok`] and [`Retry::when`]
    /// say otherwise); a request is repeated after an ambiguous failure
    /// only when its method is idempotent or it carries an
    /// `Idempotency-Key` (or the policy says every request is idempotent);
    /// a body longer than 64 KiB ([`replay_limit`](RetryLayer::replay_limit))
    /// is sent once.
    ///
    /// Unless the [`Retry`] names a budget, a request draws on its
    /// destination's token budget (the scheme, host and port of its URI,
    /// or of its `Host` header if the URI is a path: one per destination
    /// for the whole process, shared by every layer and middleware that
    /// calls it, in a table of 4096), so a host that is down drains its own
    /// budget and no other host's, and a layer built per request draws on
    /// the same budget as one built once. A request without a host (a path
    /// and no `Host` header, as tonic sends below its `Channel`) draws on
    /// the layer's own, shared by the services it makes and their clones
    /// (with [`per_method`](Self::per_method), its path's within this
    /// layer), as does a new destination while the table is full. A layer
    /// built per request for those starts with a full token budget every
    /// time, which never runs out (a debug build warns once 100 built at
    /// one place have sent such requests). Build the layer once and clone
    /// it, or share a `static` budget with [`Retry::budget`] to build it
    /// where you like.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use backstop::{http::Attempts, tower::RetryLayer, Policy};
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # static CALLS: AtomicU32 = AtomicU32::new(0);
    /// // 503 (the server did nothing: retried, even a POST), then 201.
    /// let inner = service_fn(|_: http::Request<_>| async {
    ///     let status = if CALLS.fetch_add(1, Relaxed) == 0 { 503 } else { 201 };
    ///     Ok::<_, std::io::Error>(http::Response::builder().status(status).body(()).unwrap())
    /// });
    /// let layer = RetryLayer::http(&Policy::new()).replay_limit(1 << 20);
    /// let request = http::Request::post("/orders").body("{}".to_owned()).unwrap();
    /// let response = layer.layer(inner).oneshot(request).await.unwrap();
    /// assert_eq!(response.status(), 201);
    /// assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
    /// # }
    /// ```
    #[track_caller]
    pub fn http<'a, W, K, B, R, G, L, A>(
        retry: impl Into<Retry<'a, W, K, B, R, G, L, A>>,
    ) -> RetryLayer<HttpBodies, W::Or, K::Or, B, R, G, L, A>
    where
        W: ClassifierOr<TransportErrors>,
        K: ClassifierOr<ByClassify>,
    {
        let retry = retry.into().classifying(
            |when| when.or(TransportErrors),
            |when_ok| when_ok.or(ByClassify),
        );
        RetryLayer::from_retry(retry, HttpBodies::new(DEFAULT_REPLAY_LIMIT))
    }
}

impl<W, K, B, R, G, L, A> RetryLayer<HttpBodies, W, K, B, R, G, L, A> {
    /// Keeps request bodies of up to `bytes` to send again; a longer body
    /// is streamed once, and a retryable failure of its request gives up
    /// with [`GiveUp::NotReplayable`](crate::GiveUp::NotReplayable).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use backstop::{tower::{ReplayBody, RetryLayer}, Policy};
    /// use http_body::Body;
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # static CALLS: AtomicU32 = AtomicU32::new(0);
    /// // Reads the request (sends it on), then answers 503.
    /// let inner = service_fn(|request: http::Request<ReplayBody<String>>| async move {
    ///     CALLS.fetch_add(1, Relaxed);
    ///     let mut body = std::pin::pin!(request.into_body());
    ///     while std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await.is_some() {}
    ///     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(()).unwrap())
    /// });
    /// let never_kept = RetryLayer::http(&Policy::new()).replay_limit(0);
    /// let request = http::Request::post("/orders").body("{}".to_owned()).unwrap();
    /// // The body was streamed and not kept: the 503 is the answer.
    /// let response = never_kept.layer(inner).oneshot(request).await.unwrap();
    /// assert_eq!(response.status(), 503);
    /// assert_eq!(CALLS.load(Relaxed), 1);
    /// # }
    /// ```
    pub fn replay_limit(mut self, bytes: usize) -> Self {
        self.requests = self.requests.with_limit(bytes);
        self
    }

    /// Sends the time left before the deadline (or an attempt timeout's
    /// limit, if sooner; one of 71 minutes or more is not sent) as the
    /// `grpc-timeout` of every gRPC request that has none, so that the
    /// server stops working on an attempt nobody will wait for. For a layer that serves unary
    /// calls only: a streaming call would be cut off at the deadline.
    /// Without it, a `grpc-timeout` the request has (tonic's
    /// `Request::set_timeout`) is shortened to the time left, and none is
    /// added. (tonic's `Endpoint::timeout` sets no header: it runs inside
    /// the `Channel`, below the layer, and is not shortened.)
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{tower::RetryLayer, Policy};
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// // The server is told the time left, in its `grpc-timeout` header (all
    /// // of the 2 s here: on tokio's paused clock no time passes).
    /// let inner = service_fn(|request: http::Request<_>| async move {
    ///     let timeout = request.headers().get("grpc-timeout").cloned();
    ///     Ok::<_, std::io::Error>(http::Response::new(timeout))
    /// });
    /// let policy = Policy::new().deadline(Some(Duration::from_secs(2)));
    /// let unary_only = RetryLayer::http(&policy).grpc_deadline();
    /// let request = http::Request::post("/users.Users/Get")
    ///     .header("content-type", "application/grpc")
    ///     .body(String::new())
    ///     .unwrap();
    /// let response = unary_only.layer(inner).oneshot(request).await.unwrap();
    /// assert_eq!(response.into_body().unwrap(), "2000000u"); // 2 s, in microseconds
    /// # }
    /// ```
    pub fn grpc_deadline(mut self) -> Self {
        self.requests.grpc_deadline = true;
        self
    }

    /// Keeps the protection of each destination per method too: the
    /// default token budget, and a `Keyed` budget, breaker or throttle
    /// given, are those of the request's destination and path (a gRPC
    /// method's `/package.Service/Method`), so that one method failing
    /// leaves the others theirs. A request without a host (a tonic client
    /// below its `Channel` sends paths) is then keyed by its path within
    /// this layer: another layer's same path (another channel) is another
    /// key.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// use backstop::{tower::RetryLayer, Policy};
    /// use tower::{service_fn, Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// static SENT: AtomicU32 = AtomicU32::new(0);
    /// // `Export` is down; `Get` answers its first request 503, its retry 200.
    /// let inner = service_fn(|request: http::Request<_>| async move {
    ///     let n = SENT.fetch_add(1, Relaxed);
    ///     let up = request.uri().path().ends_with("/Get") && n % 2 == 1;
    ///     let status = if up { 200 } else { 503 };
    ///     Ok::<_, std::io::Error>(http::Response::builder().status(status).body(()).unwrap())
    /// });
    /// let service = RetryLayer::http(&Policy::new()).per_method().layer(inner);
    /// let call = |method: &str| {
    ///     let request = http::Request::get(format!("/reports.Reports/{method}"))
    ///         .body(String::new())
    ///         .unwrap();
    ///     service.clone().oneshot(request)
    /// };
    /// for _ in 0..10 {
    ///     let _ = call("Export").await; // drains Export's budget
    /// }
    /// SENT.store(0, Relaxed);
    /// assert_eq!(call("Get").await.unwrap().status(), 200, "Get kept its retries");
    /// # }
    /// ```
    pub fn per_method(mut self) -> Self {
        self.requests.per_method = true;
        self
    }
}

impl<P, W, K, B, R, G, L, A> RetryLayer<P, W, K, B, R, G, L, A> {
    /// The layer `retry` configures, for `requests`.
    #[track_caller]
    pub(crate) fn from_retry(retry: Retry<'_, W, K, B, R, G, L, A>, requests: P) -> Self {
        let (policy, given, retry) = retry.detach();
        // A key given to the `Retry`: its default token budgets are the
        // key's (and the path's, per method) at the line building the
        // layer, as a closure's are at its call site, whatever each
        // request's destination.
        let key_site = match given {
            Chosen::Default if retry.key.is_some() => Some(crate::limit::token::at_call_site(
                std::panic::Location::caller(),
            )),
            _ => None,
        };
        let (budget, own) = match (given, key_site) {
            (Chosen::Given(given), _) => (given, None),
            // (The originals: a request draws on them through `budget`, a
            // test's copy under `testing::isolate()`.)
            (Chosen::PerKey(table), _) => (Some(table.entry(None)), None),
            (Chosen::Default, Some(site)) => {
                // (Counted per request, below, not here.)
                let key = retry.key.unwrap_or_default();
                (
                    Some(BudgetRef::Token(crate::run::default_per_key_entry(
                        site, key,
                    ))),
                    None,
                )
            }
            (Chosen::Default, None) => {
                let own = OwnBudget::lend();
                (Some(BudgetRef::Token(own.get())), Some(own))
            }
        };
        Self {
            policy,
            retry: Arc::new(Shared {
                retry: retry.budget_chosen(budget),
                _own: own,
                given,
                key_site,
                id: next_layer_id(),
                #[cfg(debug_assertions)]
                built: Built {
                    at: std::panic::Location::caller(),
                    drawn: std::sync::atomic::AtomicBool::new(false),
                },
            }),
            requests,
        }
    }
}

/// A layer's id, none given twice in the process.
fn next_layer_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What a layer's services and calls share: the loop, drawing on the
/// layer's budget, and the token budget of the layer's own if that is it.
pub(crate) struct Shared<W, K, B, R, G, L, A> {
    pub(crate) retry: Retry<'static, W, K, B, R, G, L, A>,
    /// Held for as long as anything of the layer is: calls draw on it by
    /// a `&'static` reference.
    _own: Option<OwnBudget>,
    /// The budget as it was chosen.
    given: Chosen,
    /// With a key given to the `Retry` and the default budget: the call
    /// site whose per-key budgets the layer's requests draw on.
    key_site: Option<&'static crate::limit::TokenBudget>,
    /// The layer's own, in the process: what its keys that name no host
    /// are mixed with (an address would be a dropped layer's again).
    id: u64,
    /// Where the layer was built, for the warning of
    /// [`count_own_budget`].
    #[cfg(debug_assertions)]
    built: Built,
}

/// Where a layer was built, and whether a call of its has drawn on its
/// token budget of its own yet.
#[cfg(debug_assertions)]
struct Built {
    at: &'static std::panic::Location<'static>,
    drawn: std::sync::atomic::AtomicBool,
}

impl<W, K, B, R, G, L, A> Shared<W, K, B, R, G, L, A> {
    /// The budget a call draws on: the layer's own, or a `static` it
    /// names, looked up at each call, as `#[retry]` looks up its own
    /// (under `testing::isolate()`, a fresh copy: a layer kept from one
    /// case of a test to the next starts each with a full budget).
    pub(crate) fn budget(&self) -> Option<BudgetRef<'static>> {
        crate::limit::isolation::own_budget(self.retry.budget)
    }

    /// `key` made this layer's own (by its id: no other layer's, built
    /// before it or after it is dropped), for keys that name no host.
    pub(crate) fn mixed_with_layer(&self, key: u64) -> u64 {
        self.id.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ key
    }

    /// The key and the budget of a request without a destination (a tonic
    /// client below its `Channel` sends paths): for protection kept per key
    /// (`keyed`: its breaker or throttle; or its budget), a key of this
    /// layer's own, named `(no host)` in telemetry, where it would draw on
    /// the table's shared limiter; otherwise none, and the layer's own
    /// budget.
    pub(crate) fn without_host(&self, keyed: bool) -> (Option<u64>, Option<BudgetRef<'static>>) {
        /// (What the layer's own key is mixed with: "no host".)
        const NO_HOST: u64 = 0x006e_6f20_686f_7374;
        let budget_keyed = matches!(self.given, Chosen::PerKey(_));
        if !keyed && !budget_keyed {
            return (None, self.budget_for(None));
        }
        let key = self.mixed_with_layer(NO_HOST);
        crate::limit::names::name(key, || "(no host)".to_owned());
        let budget = self.budget_for(if budget_keyed { Some(key) } else { None });
        (Some(key), budget)
    }

    /// The budget a call to `destination` (hashed) draws on: by default,
    /// the destination's own token budget, one per destination for the
    /// whole process (every layer and middleware calling it draws on it);
    /// a budget kept per key, the destination's; otherwise as
    /// [`budget`](Self::budget), which calls without a destination draw on.
    pub(crate) fn budget_for(&self, destination: Option<u64>) -> Option<BudgetRef<'static>> {
        // The key given to the `Retry` (every request's, with its path per
        // method): its own default at the line building the layer.
        if let Some(site) = self.key_site {
            return Some(crate::run::default_per_key(
                site,
                destination,
                Some(Unplaced::SiteDefault),
            ));
        }
        match (self.given, destination) {
            // A destination that finds no place in the table draws on the
            // layer's own, as a request without one does.
            (Chosen::Default, Some(destination)) => {
                let table = crate::run::default_per_key_table();
                match table.placed(destination, crate::time::clock::loop_now) {
                    Some(budget) => Some(BudgetRef::Token(crate::limit::isolation::own(budget))),
                    None => {
                        // (Cold: the clock is read again.)
                        table.unplaced(
                            destination,
                            crate::time::clock::loop_now(),
                            Unplaced::LayerOwn,
                        );
                        self.own_budget()
                    }
                }
            }
            (Chosen::Default, None) => self.own_budget(),
            (Chosen::PerKey(table), destination) => Some(table.for_key(destination)),
            _ => self.budget(),
        }
    }

    /// The layer's token budget of its own, drawn on by a call.
    fn own_budget(&self) -> Option<BudgetRef<'static>> {
        self.draws_on_its_own();
        self.budget()
    }

    /// A call draws on protection of this layer's own (its token budget,
    /// or a path's within it): in debug builds, the layer's first such
    /// call is counted (see [`count_own_budget`]).
    #[cfg_attr(not(debug_assertions), allow(clippy::unused_self))]
    pub(crate) fn draws_on_its_own(&self) {
        #[cfg(debug_assertions)]
        {
            use std::sync::atomic::Ordering::Relaxed;
            let drawn = &self.built.drawn;
            if !drawn.load(Relaxed) && !drawn.swap(true, Relaxed) {
                count_own_budget(self.built.at);
            }
        }
    }
}

impl<W, K, B, R, G, L, A> Lends for Arc<Shared<W, K, B, R, G, L, A>> {
    type Loop = Retry<'static, W, K, B, R, G, L, A>;

    fn lent(&self) -> &Self::Loop {
        &self.retry
    }
}

/// How many layers built at one place may draw on token budgets of their
/// own before a debug build warns.
#[cfg(debug_assertions)]
const MANY_LAYERS: u32 = 100;

/// A layer built at `site` drew on protection of its own for the first
/// time: a call without a destination (every call of `RetryLayer::new`;
/// an HTTP request without a host, as tonic sends below its `Channel`). In
/// debug builds the place is counted: layers built per request, each
/// calling without a destination, each have a fresh token budget that
/// never sees the failures of the others, and so never runs out. After
/// [`MANY_LAYERS`] from one place, it says so, once: through `tracing`
/// (feature `tracing`) as a WARN event, or on standard error. (A call to
/// a destination draws on the destination's budget, which every layer
/// and middleware calling it shares: layers built per request are fine
/// there.)
#[cfg(debug_assertions)]
fn count_own_budget(site: &'static std::panic::Location<'static>) {
    type Sites = Vec<(&'static std::panic::Location<'static>, u32)>;
    static SITES: std::sync::Mutex<Sites> = std::sync::Mutex::new(Vec::new());
    let mut sites = SITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let built = if let Some((_, built)) = sites.iter_mut().find(|(at, _)| *at == site) {
        *built += 1;
        *built
    } else {
        sites.push((site, 1));
        1
    };
    drop(sites);
    if built == MANY_LAYERS {
        let warning = "each sent calls without a destination (`RetryLayer::new`'s, or HTTP \
                       requests without a host) on a token budget of its own, full, that no \
                       other call sees fail, so none of them ever runs out: build the layer \
                       once and clone it, or share a `static` budget with \
                       `Retry::new(&policy).budget(&STATIC)`";
        #[cfg(feature = "tracing")]
        tracing::warn!(site = %site, built, "{MANY_LAYERS} retry layers built at one place: {warning}");
        #[cfg(not(feature = "tracing"))]
        note!("backstop: {MANY_LAYERS} retry layers built at {site}: {warning}");
    }
}

impl<S, P: Clone, W, K, B, R, G, L, A> Layer<S> for RetryLayer<P, W, K, B, R, G, L, A> {
    type Service = RetryService<S, P, W, K, B, R, G, L, A>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service a [`RetryLayer`] makes: the inner service's calls, retried.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use tower::Layer;
/// let policy = backstop::Policy::new();
/// let inner = tower::service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x + 1) });
/// let _service: backstop::tower::RetryService<_> = backstop::tower::RetryLayer::new(&policy).layer(inner);
/// ```
pub struct RetryService<
    S,
    P = Cloned,
    W = ByClassify,
    K = NeverRetry,
    B = NoBreaker,
    R = Ignore,
    G = Ignore,
    L = NoTimeout,
    A = NoThrottle,
> {
    inner: S,
    layer: RetryLayer<P, W, K, B, R, G, L, A>,
}

impl<S: Clone, P: Clone, W, K, B, R, G, L, A> Clone for RetryService<S, P, W, K, B, R, G, L, A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, P: fmt::Debug, W, K, B, R, G, L, A> fmt::Debug
    for RetryService<S, P, W, K, B, R, G, L, A>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

/// How a layer sends a request again: [`Cloned`], or [`HttpBodies`]. Not
/// for implementing: the layer calls its methods; a layer's first type
/// parameter says which it is.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tower::{Cloned, HttpBodies, Replay, RetryLayer};
///
/// fn replays<Req, P: Replay<Req>>(_: &RetryLayer<P>) {}
/// let policy = backstop::Policy::new();
/// // Any `Clone` request, cloned for each attempt.
/// replays::<String, Cloned>(&RetryLayer::new(&policy));
/// // An HTTP request, its body kept (up to the replay limit) to send again.
/// fn http_bodies<B>() where HttpBodies: Replay<http::Request<B>> {}
/// http_bodies::<String>();
/// ```
pub trait Replay<Req>: replay::Sealed {
    /// What the inner service is called with.
    type Request: Send;
    /// What a call keeps of its request between attempts.
    type Source: Send;
    /// The requests are HTTP requests.
    const IS_HTTP: bool;
    /// Takes the request of a call.
    fn source(&self, request: Req) -> Self::Source;
    /// Whether the request may be repeated after an ambiguous failure
    /// whatever the policy says (an idempotent HTTP method).
    fn idempotent(source: &Self::Source) -> bool;
    /// The destination the request goes to, hashed (scheme, host and
    /// port of an HTTP request's URI), if it names one, or the key `given`
    /// to the layer's `Retry` in its place: the key of the protection kept
    /// per destination (with the path, per method). `true` beside it: the
    /// key is the request's path alone (per method, no host), which only
    /// the layer knows the destination of.
    fn destination(source: &Self::Source, given: Option<u64>) -> Option<(u64, bool)>;
    /// The request for the next attempt, once it is ready (an HTTP body
    /// that fits the replay limit is read whole first). Asked again only
    /// after [`settle`](Self::settle) said it could be.
    fn poll_next(source: &mut Self::Source, cx: &mut TaskContext<'_>) -> Poll<Self::Request>;
    /// After an attempt: whether another can be sent, for good (what will
    /// be sent is fixed now).
    fn settle(source: &mut Self::Source) -> bool;
    /// What a copy of the request is made from, owned: for hedges.
    type Copy: Send;
    /// Before a hedged call: makes the request copyable if it can be (an
    /// HTTP body that fits the replay limit is read whole now), and says
    /// whether it is.
    fn poll_prepare(source: &mut Self::Source, cx: &mut TaskContext<'_>) -> Poll<bool>;
    /// A copy of a [prepared](Self::poll_prepare) request, to send beside
    /// another.
    fn copy(source: &Self::Source) -> Option<Self::Copy>;
    /// The request of a copy, built inside the attempt that sends it.
    fn from_copy(copy: Self::Copy) -> Self::Request;
    /// How long the next attempt (or copy) may run, if it is cut off:
    /// an HTTP request's `grpc-timeout` is then no longer.
    #[doc(hidden)]
    fn limit(_: &mut Self::Source, _: Option<Duration>) {}
}

impl<Req: Clone + Send> Replay<Req> for Cloned {
    type Request = Req;
    type Source = Req;
    const IS_HTTP: bool = false;

    fn source(&self, request: Req) -> Req {
        request
    }

    fn idempotent(_: &Req) -> bool {
        false
    }

    fn destination(_: &Req, given: Option<u64>) -> Option<(u64, bool)> {
        given.map(|key| (key, false))
    }

    fn poll_next(source: &mut Req, _: &mut TaskContext<'_>) -> Poll<Req> {
        Poll::Ready(source.clone())
    }

    fn settle(_: &mut Req) -> bool {
        true
    }

    type Copy = Req;

    fn poll_prepare(_: &mut Req, _: &mut TaskContext<'_>) -> Poll<bool> {
        Poll::Ready(true)
    }

    fn copy(source: &Req) -> Option<Req> {
        Some(source.clone())
    }

    fn from_copy(copy: Req) -> Req {
        copy
    }
}

/// What a layer tells of a call in the response `R` it returns, by the
/// kind of requests it replays: the HTTP layer ([`HttpBodies`]) puts the
/// number of attempts in its extensions
/// ([`http::Attempts`](crate::classify::http::Attempts)); a layer of `Clone`
/// requests ([`Cloned`]), whose responses may be of any type, tells
/// nothing. Sealed: implemented by the two kinds of requests.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::http::Attempts;
/// use backstop::tower::{Answer, HttpBodies};
///
/// let mut response = http::Response::new(());
/// HttpBodies::took(&mut response, 2);
/// assert_eq!(response.extensions().get::<Attempts>(), Some(&Attempts(2)));
/// ```
pub trait Answer<R>: replay::Sealed {
    /// Notes in `response` that the call took `attempts` attempts.
    fn took(response: &mut R, attempts: u32);

    /// The status a retry was decided on, which the call's `tracing`
    /// events show (`status`), and which tells, after a retry, whether the
    /// answer says the dependency failed (for the one-layer rule): an HTTP
    /// response's, or a gRPC response's `grpc-status` when it carries one
    /// in its headers (an error answered at once, "trailers-only"). None
    /// for any other answer.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::tower::{Answer, HttpBodies};
    ///
    /// let unavailable = http::Response::builder().status(503).body(()).unwrap();
    /// assert_eq!(HttpBodies::status(&unavailable), Some(503));
    /// let grpc = http::Response::builder().header("grpc-status", "14").body(()).unwrap();
    /// assert_eq!(HttpBodies::status(&grpc), Some(14));
    /// ```
    fn status(_response: &R) -> Option<u16> {
        None
    }
}

/// Any response, told nothing.
impl<R> Answer<R> for Cloned {
    fn took(_: &mut R, _: u32) {}
}

impl<B> Answer<http::Response<B>> for HttpBodies {
    fn took(response: &mut http::Response<B>, attempts: u32) {
        response
            .extensions_mut()
            .insert(crate::classify::http::Attempts(attempts));
    }

    fn status(response: &http::Response<B>) -> Option<u16> {
        crate::run::observe::ShowsStatus::shown_status(response)
    }
}

impl<S, Req, P, W, K, B, R, G, L, A> Service<Req> for RetryService<S, P, W, K, B, R, G, L, A>
where
    S: Service<P::Request> + Clone,
    P: Answer<S::Response>,
    P: Replay<Req>,
    L: TimeoutSlot<S::Error>,
    Retry<'static, W, K, B, R, G, L, A>: Handles<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, Req, P, W, K, B, R, G, L, A>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The service made ready goes with this call; the one left behind
        // is a clone, to be made ready for the next.
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        let source = self.layer.requests.source(request);
        let policy = if P::idempotent(&source) {
            self.layer.policy.idempotent(true)
        } else {
            self.layer.policy
        };
        crate::run::check_attempt_timeout(
            &self.layer.policy,
            self.layer.retry.retry.timeout.limit(),
        );
        let retry = self.layer.retry.clone();
        // The key given to the layer's `Retry`, if any, is every request's
        // in place of its destination.
        let destination = P::destination(&source, retry.retry.key).map(|(key, path_only)| {
            // A path alone is this layer's: its destination is the one its
            // service calls, which another layer's path is not.
            if path_only {
                retry.draws_on_its_own();
                let mixed = retry.mixed_with_layer(key);
                // (Named as the path is, if it is.)
                if let Some(path) = crate::limit::names::named(crate::limit::names::word(key)) {
                    crate::limit::names::name(mixed, || path.to_owned());
                }
                mixed
            } else {
                key
            }
        });
        let (key, budget) = match destination {
            Some(_) => (destination, retry.budget_for(destination)),
            None => retry.without_host(crate::run::Steps::<S::Response, S::Error>::keys_its_gates(
                &retry.retry,
            )),
        };
        let call = LayerCall {
            service,
            source,
            attempts: 0,
            lent: false,
            sent: None,
            span: no_span(),
            kinds: PhantomData,
        };
        ResponseFuture {
            drive: Drive::new(retry, policy, budget, key, call, true),
        }
    }
}

pin_project_lite::pin_project! {
    /// One call through the layer, carried from attempt to attempt.
    struct LayerCall<S, Req, P, L>
    where
        S: Service<P::Request>,
        P: Replay<Req>,
    {
        // The service the caller made ready, then made ready again before
        // each retry (in a hedged call, lent to its first attempt).
        service: S,
        source: P::Source,
        // Attempts sent so far.
        attempts: u32,
        // The ready service went to a hedge.
        lent: bool,
        // The request of the attempt running, once sent.
        #[pin]
        sent: Option<S::Future>,
        span: LoopSpan,
        kinds: PhantomData<fn() -> (Req, L)>,
    }
}

impl<S, Req, P, L> Operation for LayerCall<S, Req, P, L>
where
    S: Service<P::Request> + Clone,
    P: Answer<S::Response>,
    P: Replay<Req>,
    L: TimeoutSlot<S::Error>,
{
    type Ok = S::Response;
    type Err = S::Error;
    type Kept = Keeps<Result<S::Response, S::Error>>;
    type Hedge = LayerHedge<S, Req, P>;
    // (A request with no time left at all would be cut off at once, after
    // the server had it.)
    const UNSENT_WITHOUT_TIME: bool = true;

    fn start(self: Pin<&mut Self>, limit: Option<Duration>) -> Option<Duration> {
        let this = self.project();
        *this.attempts += 1;
        P::limit(this.source, limit);
        #[cfg(feature = "tracing")]
        {
            *this.span = attempt_span(*this.attempts, P::IS_HTTP);
        }
        limit
    }

    // All of it in the attempt: it runs inside the attempt's context (its
    // key, its deadline) and the call's span.
    fn poll_attempt(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<S::Response, S::Error>> {
        let mut this = self.project();
        let outcome = {
            #[cfg(feature = "tracing")]
            let _span = this.span.enter();
            if this.sent.is_none() {
                let request = ready!(P::poll_next(this.source, cx));
                this.sent.set(Some(this.service.call(request)));
            }
            let sent = this.sent.as_mut().as_pin_mut();
            let outcome = ready!(sent.expect("the request was sent").poll(cx));
            this.sent.set(None);
            outcome
        };
        // The attempt is over: its span ends now, not when the next one
        // begins (the sleep before a retry is not the attempt's time).
        *this.span = no_span();
        Poll::Ready(outcome)
    }

    fn cut_off(self: Pin<&mut Self>, why: Elapsed) -> S::Error {
        let mut this = self.project();
        {
            #[cfg(feature = "tracing")]
            let _span = this.span.enter();
            this.sent.set(None);
        }
        *this.span = no_span();
        L::elapsed(why)
    }

    fn elapsed(why: Elapsed) -> S::Error {
        L::elapsed(why)
    }

    fn replayable(self: Pin<&mut Self>) -> bool {
        P::settle(self.project().source)
    }

    fn poll_ready(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.project().service.poll_ready(cx)
    }

    fn poll_prepare(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        idempotent: bool,
    ) -> Poll<bool> {
        if !idempotent {
            return Poll::Ready(false);
        }
        P::poll_prepare(self.project().source, cx)
    }

    // Every attempt of a hedged call, hedge or not, sends a copy of the
    // request on a service of its own. The first goes out on the service
    // the caller made ready (what it reserved, a concurrency limit's slot,
    // is used, not held idle while a clone waits for another); the others
    // on clones, each made ready in its attempt.
    fn hedge(self: Pin<&mut Self>, limit: Option<Duration>) -> LayerHedge<S, Req, P> {
        let this = self.project();
        *this.attempts += 1;
        P::limit(this.source, limit);
        let service = if std::mem::replace(this.lent, true) {
            this.service.clone()
        } else {
            let clone = this.service.clone();
            std::mem::replace(this.service, clone)
        };
        LayerHedge {
            service,
            ready: false,
            copy: P::copy(this.source),
            sent: None,
            #[cfg(feature = "tracing")]
            span: attempt_span(*this.attempts, P::IS_HTTP),
            #[cfg(not(feature = "tracing"))]
            span: (),
        }
    }

    fn finish(self: Pin<&mut Self>, outcome: &mut Result<S::Response, S::Error>) {
        if let Ok(response) = outcome {
            P::took(response, *self.project().attempts);
        }
    }

    // A response's status; an error of the service's is of a type the
    // layer cannot show (it asks nothing of it).
    fn shown(outcome: &Result<S::Response, S::Error>) -> Shown<'_> {
        match outcome.as_ref().map(P::status) {
            Ok(Some(status)) => Shown::Status(status),
            _ => Shown::Nothing,
        }
    }
}

pin_project_lite::pin_project! {
    /// An attempt of a hedged call through the layer: a copy of the
    /// request, on a service of its own.
    #[doc(hidden)]
    pub struct LayerHedge<S, Req, P>
    where
        S: Service<P::Request>,
        P: Replay<Req>,
    {
        service: S,
        // The service was made ready for this attempt (the caller's too:
        // asking again costs it nothing).
        ready: bool,
        copy: Option<P::Copy>,
        #[pin]
        sent: Option<S::Future>,
        span: LoopSpan,
    }
}

impl<S, Req, P> Future for LayerHedge<S, Req, P>
where
    S: Service<P::Request>,
    P: Replay<Req>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        #[cfg(feature = "tracing")]
        let _span = this.span.enter();
        if this.sent.is_none() {
            if !*this.ready {
                ready!(this.service.poll_ready(cx))?;
                *this.ready = true;
            }
            // Built inside the attempt: its `grpc-timeout` is the time
            // left then.
            let copy = this.copy.take().expect("a prepared request can be copied");
            this.sent.set(Some(this.service.call(P::from_copy(copy))));
        }
        let sent = this.sent.as_mut().as_pin_mut();
        sent.expect("the request was sent").poll(cx)
    }
}

/// A span per attempt, inside the call's, as dashboards expect: the
/// attempt number, and for HTTP the resends (OpenTelemetry's
/// `http.request.resend_count`, absent on the first).
#[cfg(feature = "tracing")]
pub(crate) fn attempt_span(attempt: u32, http: bool) -> tracing::Span {
    let span = tracing::info_span!(
        "attempt",
        attempt,
        http.request.resend_count = tracing::field::Empty,
    );
    if attempt > 1 && http {
        span.record("http.request.resend_count", attempt - 1);
    }
    span
}

pin_project_lite::pin_project! {
    /// The future of a call through a [`RetryService`].
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{tower::RetryLayer, Policy};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let inner = service_fn(|_: http::Request<_>| async {
    ///     Ok::<_, std::io::Error>(http::Response::new(()))
    /// });
    /// let mut service = RetryLayer::http(&Policy::new()).layer(inner);
    /// // `call` gives the future; awaited, the call runs (and retries).
    /// let future = service.ready().await.unwrap().call(http::Request::new(String::new()));
    /// assert_eq!(future.await.unwrap().status(), 200);
    /// # }
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, Req, P, W, K, B, R, G, L, A>
    where
        S: Service<P::Request>,
        S: Clone,
        P: Answer<S::Response>,
        P: Replay<Req>,
        L: TimeoutSlot<S::Error>,
    {
        #[pin]
        drive: Drive<
            'static,
            Arc<Shared<W, K, B, R, G, L, A>>,
            LayerCall<S, Req, P, L>,
            Keeps<Result<S::Response, S::Error>>,
            LayerHedge<S, Req, P>,
            Policy,
        >,
    }
}

impl<S, Req, P, W, K, B, R, G, L, A> Future for ResponseFuture<S, Req, P, W, K, B, R, G, L, A>
where
    S: Service<P::Request> + Clone,
    P: Answer<S::Response>,
    P: Replay<Req>,
    L: TimeoutSlot<S::Error>,
    Retry<'static, W, K, B, R, G, L, A>: Handles<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        self.project().drive.poll(cx)
    }
}

impl<S, Req, P, W, K, B, R, G, L, A> fmt::Debug for ResponseFuture<S, Req, P, W, K, B, R, G, L, A>
where
    S: Service<P::Request> + Clone,
    P: Answer<S::Response>,
    P: Replay<Req>,
    L: TimeoutSlot<S::Error>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use tower::{Layer, ServiceExt};

    use super::RetryLayer;
    use crate::state::policy::tests::UNAPPLIED;
    use crate::{Policy, Retry};

    /// A layer under a policy whose `attempt_timeout` it was not given
    /// says so (in a debug build); one given it says nothing.
    #[tokio::test]
    async fn a_policys_attempt_timeout_a_layer_does_not_apply_is_said() {
        let limited = Policy::new().attempt_timeout(Some(Duration::from_millis(300)));
        let service = tower::service_fn(|()| async { Ok::<_, crate::Elapsed>(()) });
        let said = || UNAPPLIED.with(Cell::get);
        let _ =
            RetryLayer::new(Retry::new(&limited).attempt_timeout(limited.get_attempt_timeout()))
                .layer(service)
                .oneshot(())
                .await;
        assert_eq!(said(), 0, "applied");
        let _ = RetryLayer::new(&limited).layer(service).oneshot(()).await;
        assert_eq!(said(), 1);
    }
}
