//! reqwest's blocking client (feature `reqwest-blocking`): the helpers of
//! [`backstop::reqwest`](crate::reqwest) for `reqwest::blocking`, for a
//! synchronous `#[retry]` function or [`Retry::call`](crate::Retry::call).
//! Its errors are `reqwest::Error`s, classified as the async client's, and
//! [`Error`] holds them as it does those.
//!
//! ```no_run
//! # extern crate backstop_runtime as backstop;
//! use backstop::reqwest::blocking::{response_verdict, within_attempt};
//! use backstop::reqwest::Error;
//! use backstop::{Policy, Retry};
//!
//! # fn run(client: reqwest::blocking::Client) -> Result<(), Error> {
//! let policy = Policy::new().attempts(4);
//! let response = Retry::new(&policy)
//!     .when_ok(response_verdict)
//!     .call(|| within_attempt(client.get("http://127.0.0.1:8080/users/7")).send())?;
//! # let _ = response; Ok(()) }
//! ```

use crate::classify::Verdict;

use super::Error;

/// A `when_ok` classifier for the blocking client's responses, as
/// [`reqwest::response_verdict`](crate::reqwest::response_verdict) is for
/// the async client's: a success or a status not worth a retry is returned
/// ([`Verdict::Stop`]); 408, 425, 429 and 503 are retried, after the
/// server's `Retry-After` when it sent one; 500, 502 and 504 only for an
/// `idempotent` call.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{reqwest::blocking::response_verdict, Verdict};
/// let busy = http::Response::builder().status(503).header("retry-after", "2").body("").unwrap();
/// assert_eq!(
///     response_verdict(&reqwest::blocking::Response::from(busy)),
///     Verdict::RetryAfter(Duration::from_secs(2))
/// );
/// let failed = http::Response::builder().status(500).body("").unwrap();
/// assert_eq!(
///     response_verdict(&reqwest::blocking::Response::from(failed)),
///     Verdict::RetryIfIdempotent
/// );
/// ```
pub fn response_verdict(response: &::reqwest::blocking::Response) -> Verdict {
    crate::classify::http::verdict(response.status(), response.headers())
}

// Its status, in the events of a `#[retry]` function whose `when_ok`
// judged it a failure.
impl crate::run::observe::ShowsStatus for ::reqwest::blocking::Response {
    fn shown_status(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }
}

/// The response, or [`Error::Status`] if its status is a client or server
/// error (4xx, 5xx), keeping the server's `Retry-After` for the retry loop
/// (reqwest's own `error_for_status` drops it), as
/// [`reqwest::error_for_status`](crate::reqwest::error_for_status) does
/// for the async client.
///
/// # Errors
///
/// [`Error::Status`] for a 4xx or 5xx status.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{reqwest::blocking::error_for_status, Classify, Verdict};
///
/// let busy = http::Response::builder().status(429).header("retry-after", "3").body("").unwrap();
/// let error = error_for_status(reqwest::blocking::Response::from(busy)).unwrap_err();
/// assert_eq!(error.status(), Some(http::StatusCode::TOO_MANY_REQUESTS));
/// assert_eq!(error.classify(), Verdict::RetryAfter(Duration::from_secs(3)));
/// ```
pub fn error_for_status(
    response: ::reqwest::blocking::Response,
) -> Result<::reqwest::blocking::Response, Error> {
    match super::status_error(response.status(), response.headers()) {
        Some(error) => Err(error),
        None => Ok(response),
    }
}

/// The request, to be sent from an attempt: see [`AttemptRequest::send`].
///
/// ```no_run
/// # extern crate backstop_runtime as backstop;
/// use backstop::reqwest::{blocking::within_attempt, Error};
///
/// // `#[retry(when_ok = backstop::reqwest::blocking::response_verdict)]` on it.
/// fn get_user(client: &reqwest::blocking::Client, id: u64) -> Result<reqwest::blocking::Response, Error> {
///     within_attempt(client.get(format!("http://127.0.0.1:8080/users/{id}"))).send()
/// }
/// ```
pub fn within_attempt(request: ::reqwest::blocking::RequestBuilder) -> AttemptRequest {
    AttemptRequest { request }
}

/// A blocking request fitted to the attempt it is sent from, made by
/// [`within_attempt`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// let client = reqwest::blocking::Client::new();
/// let request: backstop::reqwest::blocking::AttemptRequest =
///     backstop::reqwest::blocking::within_attempt(client.get("http://users.internal/users/7"));
/// # drop(request);
/// ```
#[derive(Debug)]
#[must_use = "a request does nothing until it is sent: `.send()`"]
pub struct AttemptRequest {
    request: ::reqwest::blocking::RequestBuilder,
}

impl AttemptRequest {
    /// Sends the request. Inside an attempt (where
    /// [`context()`](crate::run::scope::context()) answers):
    ///
    /// - it carries the call's `Idempotency-Key`, the same for every
    ///   attempt, so that a server that honours the header does a retried
    ///   `POST` once; a key the request already has is kept, never doubled;
    /// - a timeout of the request's own (`.timeout(..)` on the builder)
    ///   becomes the time left before the call's deadline if that is less.
    ///   A synchronous attempt cannot be cut off from outside, and the
    ///   `Client`'s timeout (30 s unless set) cannot be seen from here: a
    ///   request without a timeout of its own keeps the `Client`'s, which
    ///   may outlast the deadline. Give the request one
    ///   (`client.get(url).timeout(Duration::from_secs(10))`) for the
    ///   deadline to bound it. The blocking client applies that timeout
    ///   to each read of the response's body too: read the body inside
    ///   the function, where a body cut off is the attempt's failure, retried if idempotent;
    /// - with no time left at all (the attempt's own work ran to the
    ///   deadline), the request is not sent: [`Error::Elapsed`].
    ///
    /// A key among the `Client`'s default headers gives way to the
    /// call's. A body read from a reader is read on the calling thread,
    /// and a slow reader can outlast the timeout by one read. Outside an
    /// attempt, within a [`scope::deadline_sync`](crate::scope::deadline_sync),
    /// its timeout shrinks to the scope's time left alike (read on the
    /// system's clock, as that scope's deadline is), and it carries no key;
    /// outside both, it is sent as it is.
    ///
    /// ```no_run
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::reqwest::{blocking::within_attempt, Error};
    /// # fn f() -> Result<(), Error> {
    /// let client = reqwest::blocking::Client::new();
    /// let request = client.post("http://orders.internal/orders").body("{}");
    /// let response = within_attempt(request.timeout(Duration::from_secs(10))).send()?;
    /// # let _ = response; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Request`] when reqwest fails (a timeout included),
    /// [`Error::Elapsed`] when no time was left to send it.
    pub fn send(self) -> Result<::reqwest::blocking::Response, Error> {
        let cx = crate::run::scope::context();
        // The attempt's time left, or else an enclosing scope's (on the
        // system's clock, as `deadline_sync` made it).
        let left = match &cx {
            Some(cx) => cx.remaining(),
            None => crate::run::scope::scope_left(crate::time::clock::SystemClock),
        };
        if cx.is_none() && left.is_none() {
            return Ok(self.request.send()?);
        }
        let (client, request) = self.request.build_split();
        let mut request = request?;
        if let Some(cx) = &cx {
            super::with_key(request.headers_mut(), cx);
        }
        if let Some(left) = left {
            if left.is_zero() {
                // The attempt's own work ran to the deadline: nothing is sent.
                return Err(Error::Elapsed(crate::time::timer::cut_off(
                    crate::Elapsed::at_deadline(),
                )));
            }
            if let Some(own) = request.timeout_mut() {
                *own = (*own).min(left);
            }
        }
        Ok(client.execute(request)?)
    }
}
