//! reqwest (feature `reqwest`): its errors classified, responses judged by
//! status and `Retry-After`, and requests given the attempt's deadline and
//! the call's idempotency key.
//!
//! ```no_run
//! # extern crate retry_runtime as backstop;
//! use backstop::{reqwest::{response_verdict, within_attempt}, Retry, Policy};
//!
//! # async fn run(client: reqwest::Client) -> Result<(), reqwest::Error> {
//! let policy = Policy::new().attempts(4);
//! let response = Retry::new(&policy)
//!     .when_ok(response_verdict)
//!     .call_async(|| within_attempt(client.post("http://127.0.0.1:8080/orders")).send())
//!     .await?;
//! # let _ = response; Ok(()) }
//! ```

use std::time::SystemTime;

use crate::classify::{Classify, Verdict};

/// A failed request: connecting failed ([`Verdict::Retry`]: nothing was
/// sent); timed out ([`Verdict::RetryIfIdempotent`]: it may have been
/// served); an error status, by the HTTP rule of `http::StatusCode`; a
/// request that broke off after it was sent ([`Verdict::RetryIfIdempotent`]);
/// building it, its body, decoding the answer or a redirect loop
/// ([`Verdict::Stop`]: a retry would fail alike).
impl Classify for ::reqwest::Error {
    fn classify(&self) -> Verdict {
        if self.is_builder() || self.is_body() || self.is_decode() || self.is_redirect() {
            Verdict::Stop
        } else if self.is_connect() {
            Verdict::Retry
        } else if self.is_timeout() {
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

/// A `when_ok` classifier for responses: a success or a status not worth a
/// retry is returned ([`Verdict::Stop`]); 408, 425, 429, 500, 502, 503, 504
/// are retried, after the server's `Retry-After` when it sent one.
///
/// ```
/// # extern crate retry_runtime as backstop;
/// use backstop::{reqwest::response_verdict, Verdict};
/// let ok = reqwest::Response::from(http::Response::new(""));
/// assert_eq!(response_verdict(&ok), Verdict::Stop);
/// let busy = http::Response::builder().status(503).header("retry-after", "2").body("").unwrap();
/// assert_eq!(
///     response_verdict(&reqwest::Response::from(busy)),
///     Verdict::RetryAfter(std::time::Duration::from_secs(2))
/// );
/// ```
pub fn response_verdict(response: &::reqwest::Response) -> Verdict {
    match response.status().classify() {
        Verdict::Stop => Verdict::Stop,
        retry => crate::http::retry_after(response.headers(), SystemTime::now())
            .map_or(retry, Verdict::RetryAfter),
    }
}

/// The request, fitted to the attempt it is sent from: its timeout is the
/// time left before the call's deadline (if the attempt has a
/// [`context`](crate::context())) or the request's own timeout if that is
/// shorter, and it carries the call's `Idempotency-Key`, the same for every
/// attempt, so that a server that honours the header does a retried `POST`
/// once (a key the request already has is kept). Outside an attempt, the
/// request unchanged.
///
/// A timeout set on the `Client` (`ClientBuilder::timeout`) cannot be seen
/// here and is replaced by the time left: set a shorter one on the request.
pub fn within_attempt(request: ::reqwest::RequestBuilder) -> ::reqwest::RequestBuilder {
    let Some(cx) = crate::context() else {
        return request;
    };
    // What the request already has, from a copy (a streaming body cannot be
    // copied: then nothing is known, and nothing is kept).
    let (has_key, own_timeout) = request
        .try_clone()
        .and_then(|copy| copy.build().ok())
        .map_or((false, None), |built| {
            (
                built.headers().contains_key("idempotency-key"),
                built.timeout().copied(),
            )
        });
    let request = if has_key {
        request
    } else {
        request.header("idempotency-key", cx.idempotency_key().to_string())
    };
    match (cx.remaining(), own_timeout) {
        (Some(remaining), Some(own)) => request.timeout(remaining.min(own)),
        (Some(remaining), None) => request.timeout(remaining),
        (None, _) => request,
    }
}
