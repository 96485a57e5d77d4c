//! The error of an HTTP call made with reqwest under a retry loop
//! ([`reqwest::Error`](crate::reqwest::Error)), below [`classify`](crate::classify),
//! which recognises it in a chain of errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::state::vocabulary::{CircuitOpen, Classify, Elapsed, Throttled, Verdict};

/// The error of an HTTP call made with reqwest under a retry loop: what
/// reqwest reported, an error status, or the loop's own rejections. It
/// implements [`Classify`] and `From` each of them, so a function returning
/// `Result<reqwest::Response, backstop::reqwest::Error>` can take
/// `breaker`, `throttle` and `attempt_timeout` (a `reqwest::Error` cannot:
/// no crate but reqwest can give it a `From<CircuitOpen>`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{reqwest::Error, CircuitOpen, Classify, Elapsed, Verdict};
///
/// assert_eq!(Error::from(CircuitOpen::new()).classify(), Verdict::Stop);
/// assert_eq!(Error::from(backstop::Throttled::new()).classify(), Verdict::Stop);
/// assert_eq!(Error::from(Elapsed::new()).classify(), Verdict::RetryIfIdempotent);
/// assert!(Error::from(Elapsed::new()).is_timeout());
/// // A call held after the server refused it, given up:
/// assert_eq!(Error::from(Elapsed::refused()).classify(), Verdict::Refused);
/// assert!(!Error::from(Elapsed::refused()).is_timeout());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// reqwest failed: connecting, sending, a timeout of its own, reading
    /// or decoding the answer.
    Request(::reqwest::Error),
    /// The server answered with an error status ([`error_for_status`](crate::reqwest::error_for_status),
    /// or the blocking client's `reqwest::blocking::error_for_status`).
    #[non_exhaustive]
    Status {
        /// The status.
        status: ::http::StatusCode,
        /// How long the server asked to wait, from its `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// The circuit breaker rejected the call.
    CircuitOpen(CircuitOpen),
    /// The adaptive throttle shed the call.
    Throttled(Throttled),
    /// The attempt ran out of time: its `attempt_timeout`, the call's
    /// deadline while the async client waited for the response, or no time
    /// left to send the request at all; or the call was held after the
    /// server refused it, and gave up ([`Elapsed::is_refused`]). (The
    /// blocking client's timeouts, the deadline's included, are
    /// [`Error::Request`]s.)
    Elapsed(Elapsed),
}

impl Error {
    /// Whether the request timed out: reqwest's own timeout, the attempt's
    /// or the call's deadline (not a call held after refusals, which gave
    /// up: [`Elapsed::is_refused`]).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{reqwest::Error, CircuitOpen, Elapsed};
    /// assert!(Error::from(Elapsed::new()).is_timeout());
    /// assert!(!Error::from(CircuitOpen::new()).is_timeout());
    /// // A call held after refusals, given up at its deadline: not a timeout.
    /// assert!(!Error::from(Elapsed::refused()).is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        match self {
            Self::Request(e) => e.is_timeout(),
            Self::Elapsed(e) => !e.is_refused(),
            Self::Status { .. } | Self::CircuitOpen(_) | Self::Throttled(_) => false,
        }
    }

    /// The error status, if the server answered with one.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{reqwest::Error, Elapsed};
    /// assert_eq!(Error::from(Elapsed::new()).status(), None);
    /// let answer = http::Response::builder().status(503).body("").unwrap();
    /// let error = backstop::reqwest::error_for_status(reqwest::Response::from(answer)).unwrap_err();
    /// assert_eq!(error.status(), Some(http::StatusCode::SERVICE_UNAVAILABLE));
    /// ```
    pub fn status(&self) -> Option<::http::StatusCode> {
        match self {
            Self::Request(e) => e.status(),
            Self::Status { status, .. } => Some(*status),
            Self::CircuitOpen(_) | Self::Throttled(_) | Self::Elapsed(_) => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Request(e) => fmt::Display::fmt(e, f),
            Self::Status {
                status,
                retry_after: Some(after),
            } => write!(f, "server answered {status}, retry after {after:?}"),
            Self::Status { status, .. } => write!(f, "server answered {status}"),
            Self::CircuitOpen(e) => fmt::Display::fmt(e, f),
            Self::Throttled(e) => fmt::Display::fmt(e, f),
            Self::Elapsed(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// reqwest's error in the events' words: what failed, and why (its
/// sources), without the URL its `Display` ends with (a query's secret
/// stays out of the logs).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use backstop::macro_support::ErrorShown;
/// let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let url = format!("http://{}/users?api_key=secret", closed.local_addr().unwrap());
/// drop(closed);
/// let error = reqwest::get(&url).await.unwrap_err();
/// let text = ErrorShown::Own(&error).to_string();
/// assert!(text.starts_with("error sending request"), "{text}");
/// assert!(!text.contains("secret"), "{text}");
/// # }
/// ```
impl crate::state::vocabulary::OwnText for ::reqwest::Error {
    fn write_text(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // reqwest's own words for its kinds, as its `Display` has them.
        if let Some(status) = self.status() {
            write!(f, "HTTP status {status}")?;
        } else {
            f.write_str(if self.is_builder() {
                "builder error"
            } else if self.is_request() {
                "error sending request"
            } else if self.is_body() {
                "request or response body error"
            } else if self.is_decode() {
                "error decoding response body"
            } else if self.is_redirect() {
                "error following redirect"
            } else if self.is_upgrade() {
                "error upgrading connection"
            } else {
                "reqwest error"
            })?;
        }
        let mut source = self.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The crate's reqwest error in the events' words: reqwest's without its
/// URL ([`OwnText`](crate::state::vocabulary::OwnText) for `reqwest::Error`),
/// the others by their `Display`.
impl crate::state::vocabulary::OwnText for Error {
    fn write_text(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Request(error) => error.write_text(f),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// Each variant that holds an error says its message and gives it as its
/// `source()`, so that a chain walked past a wrapper of this error (a
/// thiserror `#[error(transparent)]` variant, which gives this error's
/// `source()`) still finds it and classifies it. A printer of the whole
/// chain (anyhow's `{:#}`) says the held error's message twice.
impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Request(e) => Some(e),
            Self::CircuitOpen(e) => Some(e),
            Self::Throttled(e) => Some(e),
            Self::Elapsed(e) => Some(e),
            Self::Status { .. } => None,
        }
    }
}

/// By what it holds: reqwest's error as [`Classify`] for `reqwest::Error`
/// has it, a status by the HTTP rule with its `Retry-After`, the breaker's
/// or the adaptive throttle's rejection [`Verdict::Stop`], a timeout
/// [`Verdict::RetryIfIdempotent`] (a call held after refusals that gave
/// up, [`Verdict::Refused`]: [`Elapsed::is_refused`]).
impl Classify for Error {
    fn classify(&self) -> Verdict {
        match self {
            Self::Request(e) => e.classify(),
            Self::Status {
                status,
                retry_after,
            } => match (status.classify(), retry_after) {
                (Verdict::Retry, Some(after)) => Verdict::RetryAfter(*after),
                (verdict, _) => verdict,
            },
            Self::CircuitOpen(e) => e.classify(),
            Self::Throttled(e) => e.classify(),
            Self::Elapsed(e) => e.classify(),
        }
    }
}

impl From<::reqwest::Error> for Error {
    fn from(error: ::reqwest::Error) -> Self {
        Self::Request(error)
    }
}

impl From<CircuitOpen> for Error {
    fn from(open: CircuitOpen) -> Self {
        Self::CircuitOpen(open)
    }
}

impl From<Throttled> for Error {
    fn from(shed: Throttled) -> Self {
        Self::Throttled(shed)
    }
}

impl From<Elapsed> for Error {
    fn from(elapsed: Elapsed) -> Self {
        Self::Elapsed(elapsed)
    }
}
