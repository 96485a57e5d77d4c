//! tonic (feature `tonic`): gRPC statuses classified, the call's deadline
//! sent as `grpc-timeout`, and the tower layer on a tonic `Channel`.
//!
//! A `tonic::Status` is judged by [`grpc_verdict`](crate::classify::http::grpc_verdict):
//! `UNAVAILABLE` from the server is retried, `DEADLINE_EXCEEDED` only for
//! an idempotent call, `RESOURCE_EXHAUSTED` only when the server pushed
//! back with a delay (`grpc-retry-pushback-ms`), the rest never; a
//! negative pushback means do not retry. An `UNAVAILABLE` tonic made from
//! a transport failure follows the transport rule: retried when the
//! connection was never made or the call never processed (an HTTP/2
//! stream refused, or above the last stream of a server's `GOAWAY`), only
//! for an idempotent call when it broke after the request was written. A
//! `Status` boxed in an error's source chain is found there.
//!
//! The tower layer retries the unary calls of a tonic client made on a
//! `Channel` (as the example at the top of this page stacks it); gRPC requests are `POST`s, so only the statuses above that a
//! retry can fix are retried, and a request's `grpc-timeout` shrinks to
//! the time left before the deadline (`.grpc_deadline()` adds one to
//! every request, for a layer that serves unary calls only).

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
/// call.
///
/// `UNAVAILABLE` is judged by who said it. A server (or a proxy in front
/// of it) that answers `UNAVAILABLE` has not processed the call: it is
/// retried. A status tonic made on the client from a transport failure
/// follows the transport rule: a connection that was never made
/// (`tonic::ConnectError`, a refused connection) or an HTTP/2 stream the
/// server refused before processing it (`REFUSED_STREAM`) is retried; so
/// is a call above the last stream a server going away named in its
/// `GOAWAY` (RFC 9113 section 6.8), or one hyper never wrote (queued on
/// a connection that closed: `CANCELLED`), each as a refusal
/// ([`Verdict::Refused`]: the server is shutting down); a connection
/// reset or closed after the request was written, or a keep-alive
/// timeout, is ambiguous (the server may have done the work) and retried
/// only for an idempotent call.
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
            return Verdict::RetryIfIdempotent;
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

/// `request` with the time left before the call's deadline as its
/// `grpc-timeout`, when called inside an attempt and the request has no
/// shorter timeout of its own: the server stops working on an attempt
/// whose answer would come too late. Outside an attempt, or without a
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
    let Some(left) = crate::run::scope::context().and_then(|cx| cx.remaining()) else {
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
