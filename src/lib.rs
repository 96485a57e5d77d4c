// The crate's documentation is the manual, written once in docs/manual.md
// (the chapters beyond it are the `guide` module's, in docs/ too).
#![doc = include_str!("../docs/manual.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Loom's models are the runtime's own tests: no user builds with `loom`.
#![cfg_attr(docsrs, doc(auto_cfg(hide(loom))))]
#![forbid(unsafe_code)]

#[doc(inline)]
pub use backstop_macros::retry;
#[doc(inline)]
pub use backstop_runtime::{
    Backoff, CircuitOpen, Classify, Context, Elapsed, GiveUp, GiveUpEvent, Jitter, Policy, Retry,
    RetryEvent, Throttled, Verdict, call, context,
};
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[doc(inline)]
pub use backstop_runtime::{call_async, call_async_with};
// (Without a timer feature, hidden ones that are an error naming the
// features that give one.)
#[cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]
#[doc(hidden)]
pub use backstop_runtime::{call_async, call_async_with};

#[doc(inline)]
pub use backstop_runtime::{backoff, builder, classify, hedge, limit, scope, testing, time};

#[cfg(feature = "http")]
#[doc(inline)]
pub use backstop_runtime::http;

#[cfg(feature = "serde")]
#[doc(inline)]
pub use backstop_runtime::config;

#[cfg(feature = "reqwest")]
#[doc(inline)]
pub use backstop_runtime::reqwest;

#[cfg(feature = "tower")]
#[doc(inline)]
pub use backstop_runtime::tower;

/// tonic (feature `tonic`): the retry layer on a `Channel`, gRPC statuses
/// and tonic's transport errors classified, the call's deadline sent as `grpc-timeout`, and for a
/// server (`ServerLayer`) its caller's deadline kept by the retry calls its
/// handlers make, and their failure after retrying not retried again.
///
/// # A tonic client on a `Channel`, behind the retry layer
///
/// ```no_run
/// use backstop::{tower::{box_error, ReplayBody, RetryLayer}, Policy};
/// use tonic::body::Body;
///
/// # async fn run(channel: tonic::transport::Channel) {
/// let policy = Policy::new().deadline(Some(std::time::Duration::from_secs(5)));
/// let service = tower::ServiceBuilder::new()
///     .layer(RetryLayer::http(&policy))
///     .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
///     .map_err(box_error::<tonic::transport::Error>) // room for a breaker's error
///     .service(channel);
/// // `GreeterClient::new(service)`, or `tonic::client::Grpc::new(service)`.
/// # let _ = service; }
/// ```
///
/// # Kept in a struct, its calls spawned
///
/// `tonic::status_from_error` above the layer makes the stack's error a
/// `tonic::Status` (the layer's own errors as their codes: a breaker's
/// rejection `UNAVAILABLE`, a timed-out attempt `DEADLINE_EXCEEDED`, where
/// tonic alone would say `UNKNOWN`), so that tower's
/// `BoxCloneSyncService` erases it to a type a struct can name:
///
/// ```no_run
/// use backstop::{tonic::status_from_error, tower::{box_error, ReplayBody, RetryLayer}, Policy};
/// use tonic::{body::Body, Status};
/// use tower::util::BoxCloneSyncService;
///
/// /// A client of the users service: cheap to clone, `Send` and `Sync`.
/// #[derive(Clone)]
/// struct Users {
///     service: BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Status>,
/// }
///
/// fn users(channel: tonic::transport::Channel, policy: &Policy) -> Users {
///     let service = tower::ServiceBuilder::new()
///         .map_err(status_from_error)
///         .layer(RetryLayer::http(policy))
///         .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
///         .map_err(box_error::<tonic::transport::Error>)
///         .service(channel);
///     Users { service: BoxCloneSyncService::new(service) }
/// }
/// // `GreeterClient::new(users.service.clone())` in a spawned task, or
/// // `tonic::client::Grpc::new(..)`.
/// # let _ = users;
/// ```
///
/// A `Channel`'s requests carry no host: a `Keyed` budget, breaker or
/// throttle given to the layer keys them by the layer, one place in the
/// table for each layer (a layer on each channel: one breaker for each).
/// One layer on several channels keys them all alike (a key given to its
/// `Retry` is every request's alike): build a layer per channel, or the
/// generated client `with_origin(..)`, whose requests name their host.
#[cfg(feature = "tonic")]
#[doc(inline)]
pub use backstop_runtime::tonic;

/// The items most code needs, for a glob import: `use backstop::prelude::*;`.
///
/// It holds items only, no modules: a glob import of the crate root would
/// bring its modules too, and `backstop::reqwest`, `backstop::http`,
/// `backstop::tower`, `backstop::tonic`, `backstop::time`,
/// `backstop::config` or `backstop::backoff` would then shadow the crates
/// of the same names (`reqwest::Client` would be looked up in
/// `backstop::reqwest`). Import from the crate root
/// and its modules by name.
///
/// ```
/// use backstop::prelude::*;
/// # let _vt = backstop::testing::VirtualTime::start();
///
/// #[retry(attempts = 2)]
/// fn ping() -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// assert!(ping().is_ok());
/// assert_eq!(Verdict::from(true), Verdict::Retry);
/// ```
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::limit::{AdaptiveThrottle, CircuitBreaker, TokenBudget, WindowBudget};
    #[doc(no_inline)]
    pub use crate::{
        Backoff, CircuitOpen, Classify, Context, Elapsed, GiveUp, GiveUpEvent, Jitter, Policy,
        Retry, RetryEvent, Throttled, Verdict, call, context, retry, scope::InCurrentCall,
    };
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[doc(no_inline)]
    pub use crate::{call_async, call_async_with};
}

/// For code generated by `#[retry]` only: not a public API, may change in
/// any release.
#[doc(hidden)]
pub use backstop_runtime::__private;

/// The manual's chapters beyond the crate's front page, also in the
/// repository's `docs/`: why retries need a budget, the storm reproduced,
/// hedging, each integration, configuration, the guarantees with the
/// tests that check them, and coming from backon or tokio-retry.
/// (Documentation only: this
/// module holds no items.)
// In the documentation whatever the features (a user's `cargo doc` has
// the chapters too, an item of a feature left off shown as plain text);
// its examples run with every feature, as the workspace's tests have them.
#[cfg(any(
    doc,
    all(
        doctest,
        feature = "tokio",
        feature = "reqwest",
        feature = "reqwest-blocking",
        feature = "tower",
        feature = "reqwest-middleware",
        feature = "tonic",
        feature = "serde",
        feature = "tracing",
        feature = "metrics",
        feature = "anyhow",
        feature = "redis",
        feature = "tokio-postgres",
        feature = "sqlx",
        feature = "deadpool",
    )
))]
#[cfg_attr(docsrs, doc(auto_cfg = false))]
pub mod guide {
    #[doc = include_str!("../docs/why.md")]
    pub mod why {}
    #[doc = include_str!("../docs/storm.md")]
    pub mod storm {}
    #[doc = include_str!("../docs/hedging.md")]
    pub mod hedging {}
    #[doc = include_str!("../docs/http.md")]
    pub mod http {}
    #[doc = include_str!("../docs/clients.md")]
    pub mod clients {}
    #[doc = include_str!("../docs/config.md")]
    pub mod config {}
    #[doc = include_str!("../docs/migrating.md")]
    pub mod migrating {}
    #[doc = include_str!("../docs/guarantees.md")]
    pub mod guarantees {}
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;
