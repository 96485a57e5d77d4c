//! reqwest (feature `reqwest`): its errors classified, responses judged by
//! status and `Retry-After`, requests sent within the call's deadline with
//! the call's idempotency key, and an error type that takes the breaker's,
//! the adaptive throttle's and `attempt_timeout`'s rejections; with feature `reqwest-middleware`, `RetryMiddleware`
//! for a `reqwest_middleware::ClientWithMiddleware`; with feature
//! `reqwest-blocking`, the same helpers for `reqwest::blocking` in
#![cfg_attr(feature = "reqwest-blocking", doc = "[`blocking`].")]
#![cfg_attr(not(feature = "reqwest-blocking"), doc = "`blocking`.")]
//!
//! ```no_run
//! # extern crate backstop_runtime as backstop;
//! use backstop::reqwest::{response_verdict, within_attempt, Error};
//! use backstop::{Policy, Retry};
//!
//! # async fn run(client: reqwest::Client) -> Result<(), Error> {
//! let policy = Policy::new().attempts(4);
//! let response = Retry::new(&policy)
//!     .when_ok(response_verdict)
//!     .call_async(|| within_attempt(client.post("http://127.0.0.1:8080/orders")).send())
//!     .await?;
//! # let _ = response; Ok(()) }
//! ```

#[cfg(feature = "reqwest-blocking")]
pub mod blocking;
pub(crate) mod error;
#[cfg(feature = "reqwest-middleware")]
mod middleware;

#[cfg(feature = "reqwest-middleware")]
pub use middleware::RetryMiddleware;

use std::error::Error as StdError;
use std::time::SystemTime;

use crate::classify::{Classify, Verdict};

/// A failed request:
///
/// - connecting failed (nothing was sent): [`Verdict::Refused`] when the
///   connection was refused, [`Verdict::Retry`] otherwise;
/// - it timed out, or broke off after it was sent (a request's body
///   broken off on its way, the response's body cut off midway):
///   [`Verdict::RetryIfIdempotent`], as the server may have done the work;
/// - an error status (from `error_for_status`): by the status, as
///   `http::StatusCode` classifies it;
/// - building it, a redirect loop, or an answer that arrived whole and
///   could not be decoded (JSON that does not parse): [`Verdict::Stop`], as
///   a retry would fail alike.
impl Classify for ::reqwest::Error {
    fn classify(&self) -> Verdict {
        if self.is_builder() || self.is_redirect() {
            Verdict::Stop
        } else if self.is_connect() {
            crate::classify::connect_failed(self)
        } else if self.is_timeout() {
            Verdict::RetryIfIdempotent
        } else if self.is_decode() {
            if broke_off(self) {
                Verdict::RetryIfIdempotent
            } else {
                Verdict::Stop
            }
        } else if self.is_body() {
            // A body that failed on its way: the response's cut off, or
            // the request's broken off while it was sent (the blocking
            // client reports that without its cause, its channel to the
            // connection closed).
            Verdict::RetryIfIdempotent
        } else if let Some(status) = self.status() {
            status.classify()
        } else if self.is_request() {
            Verdict::RetryIfIdempotent
        } else {
            Verdict::Stop
        }
    }
}

/// Whether a body or decode error came from the transport (the connection
/// failed while the body was on its way: an `io::Error` in its causes)
/// rather than from content that arrived whole (a JSON parse error).
fn broke_off(error: &::reqwest::Error) -> bool {
    let mut next = error.source();
    while let Some(cause) = next {
        if cause.is::<std::io::Error>() {
            return true;
        }
        next = cause.source();
    }
    false
}

/// A `when_ok` classifier for responses, by [`http::verdict`](crate::classify::http::verdict):
/// a success or a status not worth a retry is returned ([`Verdict::Stop`]);
/// 408, 425, 429 and 503 are retried, after the server's `Retry-After` when
/// it sent one; 500, 502 and 504 only for an `idempotent` call (the server
/// may have done the work).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{reqwest::response_verdict, Verdict};
/// let ok = reqwest::Response::from(http::Response::new(""));
/// assert_eq!(response_verdict(&ok), Verdict::Stop);
/// let busy = http::Response::builder().status(503).header("retry-after", "2").body("").unwrap();
/// assert_eq!(
///     response_verdict(&reqwest::Response::from(busy)),
///     Verdict::RetryAfter(std::time::Duration::from_secs(2))
/// );
/// let failed = http::Response::builder().status(500).body("").unwrap();
/// assert_eq!(response_verdict(&reqwest::Response::from(failed)), Verdict::RetryIfIdempotent);
/// ```
pub fn response_verdict(response: &::reqwest::Response) -> Verdict {
    crate::classify::http::verdict(response.status(), response.headers())
}

// Its status, in the events of a `#[retry]` function whose `when_ok`
// judged it a failure.
impl crate::run::observe::ShowsStatus for ::reqwest::Response {
    fn shown_status(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }
}

/// The request, to be sent from an attempt: see [`AttemptRequest::send`].
///
/// ```no_run
/// # extern crate backstop_runtime as backstop;
/// use backstop::reqwest::{within_attempt, Error};
///
/// // `#[retry(when_ok = backstop::reqwest::response_verdict)]` on it.
/// async fn get_user(client: &reqwest::Client, id: u64) -> Result<reqwest::Response, Error> {
///     within_attempt(client.get(format!("http://127.0.0.1:8080/users/{id}"))).send().await
/// }
/// ```
pub fn within_attempt(request: ::reqwest::RequestBuilder) -> AttemptRequest {
    AttemptRequest { request }
}

/// A request fitted to the attempt it is sent from, made by
/// [`within_attempt`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// let client = reqwest::Client::new();
/// let request: backstop::reqwest::AttemptRequest =
///     backstop::reqwest::within_attempt(client.get("http://users.internal/users/7"));
/// # drop(request);
/// ```
#[derive(Debug)]
#[must_use = "a request does nothing until it is sent: `.send().await`"]
pub struct AttemptRequest {
    request: ::reqwest::RequestBuilder,
}

impl AttemptRequest {
    /// Sends the request. Inside an attempt (where
    /// [`context()`](crate::run::scope::context()) answers):
    ///
    /// - it carries the call's `Idempotency-Key`, the same for every
    ///   attempt, so that a server that honours the header does a retried
    ///   `POST` once; a key the request already has is kept, never doubled;
    /// - the time left before the call's deadline bounds the wait for the
    ///   response. The deadline only ever shortens the timeouts already
    ///   set: the `Client`'s timeout still applies, and a timeout of the
    ///   request's own becomes the time left if that is less (reqwest's
    ///   timeouts also cover reading the body: a timeout of the request's
    ///   own, shrunk to the time left, bounds the body wherever it is
    ///   read; without one, the body is bounded by the deadline only when
    ///   read inside a function that has an `attempt_timeout`); under an
    ///   `attempt_timeout`, the time left is the attempt's (its cut-off, if
    ///   sooner than the deadline), and the loop, not the request, cuts
    ///   the wait for the response off, saying which limit ran out (a
    ///   timeout of the request's own is shrunk to 5 ms past the cut-off:
    ///   `a_request_under_an_attempt_timeout_is_cut_off_by_the_loop`); a key
    ///   among the `Client`'s default headers gives way to the call's.
    ///
    /// Both hold whatever the body, a stream included. Outside an attempt,
    /// within a [`scope::deadline`](crate::scope::deadline) (or a
    /// server's request deadline, as `tonic::ServerLayer` keeps one), the
    /// time left is the scope's, and the request carries no key; outside
    /// both, it is sent as it is.
    ///
    /// ```no_run
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::reqwest::{within_attempt, Error};
    /// # async fn f() -> Result<(), Error> {
    /// let client = reqwest::Client::new();
    /// let response = within_attempt(client.post("http://orders.internal/orders").body("{}"))
    ///     .send()
    ///     .await?;
    /// # let _ = response; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Request`] when reqwest fails (the `Client`'s or the
    /// request's own timeout included), [`Error::Elapsed`] when the call's
    /// deadline came first, or had come before it was sent (nothing is
    /// sent then).
    pub async fn send(self) -> Result<::reqwest::Response, Error> {
        let cx = crate::run::scope::context();
        // The attempt's time left, or else an enclosing scope's.
        let left = match &cx {
            Some(cx) => cx.remaining(),
            None => crate::run::scope::scope_left(crate::time::timer::RuntimeClock::current()),
        };
        if cx.is_none() && left.is_none() {
            return Ok(self.request.send().await?);
        }
        let (client, request) = self.request.build_split();
        let mut request = request?;
        if let Some(cx) = &cx {
            with_key(request.headers_mut(), cx);
        }
        let Some(left) = left else {
            return Ok(client.execute(request).await?);
        };
        if left.is_zero() {
            // The attempt's own work ran to the deadline: nothing is sent.
            return Err(Error::Elapsed(crate::time::timer::cut_off(
                crate::Elapsed::at_deadline(),
            )));
        }
        // An attempt cut off at its time left: the loop cuts the wait for
        // the response off, saying which limit ran out; the request's own
        // timeout, shrunk to a moment after that, bounds only a body read
        // later (shrunk to the same instant, which came first was a race).
        let cut = cx.as_ref().is_some_and(crate::Context::is_cut_off);
        if let Some(own) = request.timeout_mut() {
            *own = (*own).min(if cut {
                left.saturating_add(LOOP_FIRST)
            } else {
                left
            });
        }
        if cut {
            return Ok(client.execute(request).await?);
        }
        match tokio::time::timeout(left, client.execute(request)).await {
            Ok(response) => Ok(response?),
            Err(_) => Err(Error::Elapsed(crate::time::timer::cut_off(
                crate::Elapsed::at_deadline(),
            ))),
        }
    }
}

/// How long after an attempt's cut-off a request's own timeout, shrunk to
/// it, runs out: a few of the timers' ticks (a millisecond each), so that
/// the loop's cut-off comes first.
const LOOP_FIRST: std::time::Duration = std::time::Duration::from_millis(5);

/// The response, or [`Error::Status`] if its status is a client or server
/// error (4xx, 5xx), keeping the server's `Retry-After` for the retry loop
/// (reqwest's own `error_for_status` drops it).
///
/// # Errors
///
/// [`Error::Status`] for a 4xx or 5xx status.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{reqwest::error_for_status, Classify, Verdict};
///
/// let busy = http::Response::builder().status(429).header("retry-after", "3").body("").unwrap();
/// let error = error_for_status(reqwest::Response::from(busy)).unwrap_err();
/// assert_eq!(error.status(), Some(http::StatusCode::TOO_MANY_REQUESTS));
/// assert_eq!(error.classify(), Verdict::RetryAfter(Duration::from_secs(3)));
/// ```
pub fn error_for_status(response: ::reqwest::Response) -> Result<::reqwest::Response, Error> {
    match status_error(response.status(), response.headers()) {
        Some(error) => Err(error),
        None => Ok(response),
    }
}

/// The call's `Idempotency-Key` on a request that has none.
fn with_key(headers: &mut ::http::HeaderMap, cx: &crate::Context) {
    use crate::classify::http::IDEMPOTENCY_KEY;
    // A UUID is always a valid header value.
    if !headers.contains_key(IDEMPOTENCY_KEY)
        && let Ok(value) = ::http::HeaderValue::try_from(cx.idempotency_key().to_string())
    {
        headers.insert(IDEMPOTENCY_KEY, value);
    }
}

/// [`Error::Status`] for a client or server error status, with the
/// server's `Retry-After`.
fn status_error(status: ::http::StatusCode, headers: &::http::HeaderMap) -> Option<Error> {
    (status.is_client_error() || status.is_server_error()).then(|| Error::Status {
        status,
        retry_after: crate::classify::http::retry_after(headers, SystemTime::now()),
    })
}

pub use crate::reqwest::error::Error;
