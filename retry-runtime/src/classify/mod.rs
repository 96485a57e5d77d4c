//! Which failures a retry can fix.
//!
//! Retrying a validation error produces the same error again, forever;
//! retrying a timeout of a non-idempotent call may charge a card twice. The
//! classifier is where those are told apart, once, next to the error type.

pub(crate) mod clients;
#[cfg(feature = "http")]
pub mod http;

use std::error::Error;
use std::io;

use crate::state::vocabulary::Attempted;
pub use crate::state::vocabulary::{Classify, Verdict};

/// What an attempt came to: an error judged by `when`, an `Ok` value by
/// `when_ok`, which returns it (a success) unless a retry is asked for.
pub(crate) fn of_result<T, E>(
    outcome: &Result<T, E>,
    when: impl FnOnce(&E) -> Verdict,
    when_ok: impl FnOnce(&T) -> Verdict,
) -> Attempted {
    match outcome {
        Ok(value) => of_value(when_ok(value)),
        Err(error) => Attempted::Failed(when(error)),
    }
}

/// What an `Ok` value came to: a success unless a retry is asked for.
pub(crate) fn of_value(verdict: Verdict) -> Attempted {
    match verdict {
        Verdict::Stop => Attempted::Succeeded,
        retry => Attempted::Failed(retry),
    }
}

impl Classify for io::Error {
    /// By [`io::ErrorKind`], by whether the request can have reached the
    /// other side:
    ///
    /// - refused at once: a refused connection (nothing listens: the
    ///   server is restarting, or not there): [`Verdict::Refused`];
    /// - nothing was sent: a socket not connected, an address not
    ///   available, a host or network unreachable, the network down:
    ///   [`Verdict::Retry`];
    /// - it may have been sent and acted on: a connection reset or
    ///   aborted, a broken pipe, an end of stream before the answer, a
    ///   timeout (`WouldBlock` too: a socket's read timeout on Unix), a
    ///   call a signal interrupted (`Interrupted`: a read after the
    ///   request was written, as well as a connect):
    ///   [`Verdict::RetryIfIdempotent`]. A server that did the
    ///   work and then dropped the connection looks exactly like one that
    ///   never saw the request, so a write is repeated only when the call
    ///   is declared `idempotent`;
    /// - everything else (not found, permission denied, invalid input…):
    ///   [`Verdict::Stop`].
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{Classify, Verdict};
    ///
    /// assert_eq!(Error::from(ErrorKind::ConnectionRefused).classify(), Verdict::Refused);
    /// assert_eq!(Error::from(ErrorKind::NetworkUnreachable).classify(), Verdict::Retry);
    /// assert_eq!(Error::from(ErrorKind::ConnectionReset).classify(), Verdict::RetryIfIdempotent);
    /// assert_eq!(Error::from(ErrorKind::TimedOut).classify(), Verdict::RetryIfIdempotent);
    /// assert_eq!(Error::from(ErrorKind::NotFound).classify(), Verdict::Stop);
    /// ```
    fn classify(&self) -> Verdict {
        let kind = self.kind();
        if kind == io::ErrorKind::ConnectionRefused {
            Verdict::Refused
        } else if never_sent(kind) {
            Verdict::Retry
        } else if may_have_been_sent(kind) {
            Verdict::RetryIfIdempotent
        } else {
            Verdict::Stop
        }
    }
}

/// An HTTP client's transport error, by its source chain: the rule of
/// `tower::TransportErrors` (see `tower::transport_verdict`).
#[cfg(any(feature = "tower", feature = "hyper-util"))]
pub(crate) fn transport_chain(error: &(dyn std::error::Error + 'static)) -> Verdict {
    let mut next = Some(error);
    while let Some(error) = next {
        // hyper-util's client says when it never connected: nothing was
        // sent, however the connect failed (a name not resolved, a connect
        // timed out).
        #[cfg(feature = "hyper-util")]
        if let Some(verdict) = hyper_util_connect(error) {
            return verdict;
        }
        // So does tonic's.
        #[cfg(feature = "tonic")]
        if error.is::<::tonic::ConnectError>() {
            return connect_failed(error);
        }
        // Or that the server refused the request's stream unprocessed.
        #[cfg(any(feature = "tonic", feature = "hyper-util"))]
        if let Some(Verdict::Retry) = crate::classify::hyper_or_h2(error) {
            return Verdict::Retry;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return Verdict::Refused;
            }
            if crate::classify::never_sent(io.kind()) {
                return Verdict::Retry;
            }
        }
        // Or a load shed below the layer turned it away, unsent.
        #[cfg(feature = "tower")]
        if error.is::<::tower::load_shed::error::Overloaded>() {
            return Verdict::Retry;
        }
        next = error.source();
    }
    match crate::classify::known_in_chain(error) {
        Some(Verdict::Retry | Verdict::Refused) | None => Verdict::RetryIfIdempotent,
        Some(verdict) => verdict,
    }
}

/// The transport failures that prove the request never left: no
/// connection was made, or the call did nothing.
#[inline]
pub(crate) fn never_sent(kind: io::ErrorKind) -> bool {
    use io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::NotConnected
            | K::AddrNotAvailable
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown
    )
}

/// The transport failures that can come after the request was written:
/// the other side may have done the work (a reset is a timeout's twin).
#[inline]
fn may_have_been_sent(kind: io::ErrorKind) -> bool {
    use io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::TimedOut
            // A socket's read timeout (`set_read_timeout`) on Unix: the
            // request was written, the answer did not come in time.
            | K::WouldBlock
            // A call a signal interrupted (`EINTR`): a read after the
            // request was written as well as a connect.
            | K::Interrupted
    )
}

/// Classifies an error by the first error of its source chain (the error
/// itself first) that this crate knows: [`io::Error`] (by kind; one that
/// wraps another error is looked into), tokio's and this crate's `Elapsed`
/// (ambiguous: [`Verdict::RetryIfIdempotent`]), [`CircuitOpen`](crate::CircuitOpen)
/// ([`Verdict::Stop`]). [`Verdict::Stop`] when it knows none: an unknown
/// error is not worth a retry.
///
/// With the feature of a client, that client's errors too (see its
/// `Classify` impl). With `tower`, tower's own middlewares' errors below
/// a retry: a `timeout`'s `Elapsed` is ambiguous
/// ([`Verdict::RetryIfIdempotent`]), a `load_shed`'s `Overloaded` was
/// never sent ([`Verdict::Retry`]). With `hyper-util` or `tonic`, a request hyper
/// dropped with its connection is [`Verdict::RetryIfIdempotent`]; with
/// `tonic` (which brings h2), HTTP/2's errors by their reason: a stream
/// the server refused unprocessed (`REFUSED_STREAM`) is [`Verdict::Retry`];
/// a server going away (`GOAWAY`), or a stream it reset after a handler
/// failed or a proxy gave up (`INTERNAL_ERROR`, `CANCEL`, a reason not
/// named here), [`Verdict::RetryIfIdempotent`]; a stream reset for a
/// broken protocol (`PROTOCOL_ERROR`, `FLOW_CONTROL_ERROR`,
/// `STREAM_CLOSED`, `FRAME_SIZE_ERROR`, `COMPRESSION_ERROR`,
/// `INADEQUATE_SECURITY`, `HTTP_1_1_REQUIRED`) [`Verdict::Stop`], and for
/// `ENHANCE_YOUR_CALM` (the client sends too much) [`Verdict::StopOverloaded`].
///
/// This is how `Box<dyn Error + Send + Sync>` and (feature `anyhow`)
/// `anyhow::Error` are classified; for an error type of your own that
/// wraps others, use [`by_source_chain`] as `when`.
///
/// anyhow's own wrappers hide what they wrap from a `dyn Error`: an
/// `anyhow::Error` turned into a `Box<dyn Error>` without a context layer
/// (or a box turned into an `anyhow::Error` with `anyhow!`) classifies as
/// [`Verdict::Stop`]; keep the error in one form, or add a `.context(..)`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{classify::source_chain, Verdict};
///
/// let wrapped = Error::other(Error::from(ErrorKind::ConnectionRefused));
/// assert_eq!(source_chain(&wrapped), Verdict::Refused);
/// assert_eq!(source_chain(&std::fmt::Error), Verdict::Stop);
/// ```
pub fn source_chain(error: &(dyn Error + 'static)) -> Verdict {
    known_in_chain(error).unwrap_or(Verdict::Stop)
}

/// The verdict on the first error of the chain that this crate knows, if
/// any.
pub(crate) fn known_in_chain(error: &(dyn Error + 'static)) -> Option<Verdict> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(verdict) = known(error) {
            return Some(verdict);
        }
        next = error.source();
    }
    None
}

/// [`source_chain`] for an error type of your own, as a path for `when`:
/// `#[retry(when = backstop::classify::by_source_chain)]`.
///
/// The walk finds an error your type holds only if your type's `source()`
/// gives it: a thiserror variant `#[error("database: {0}")] Db(#[from]
/// sqlx::Error)` does; an `#[error(transparent)]` one does not (it gives
/// what the wrapped error holds, past the error itself): an I/O error
/// inside is still found, and a tokio-postgres server error by its
/// SQLSTATE, but sqlx's SQLSTATEs and pool timeouts are not, and are not
/// retried. Classify such a variant in a `when` of your own.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{classify::by_source_chain, Verdict};
/// assert_eq!(by_source_chain(&Error::from(ErrorKind::ConnectionRefused)), Verdict::Refused);
/// ```
pub fn by_source_chain<E: Error + 'static>(error: &E) -> Verdict {
    source_chain(error)
}

/// hyper-util's client error for a connection it never made (nothing was
/// sent): its verdict, as for any failed connect.
#[cfg(feature = "hyper-util")]
fn hyper_util_connect(error: &(dyn Error + 'static)) -> Option<Verdict> {
    error
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .filter(|error| error.is_connect())
        .map(|error| connect_failed(error))
}

/// The verdict on hyper's and h2's errors of a call that did not get its
/// answer:
///
/// - an HTTP/2 stream the server refused before processing it
///   (`REFUSED_STREAM`, RFC 9113 section 8.7): [`Verdict::Retry`], nothing
///   ran;
/// - a stream the server reset for another reason (`RST_STREAM`): by its
///   reason ([`source_chain`] lists them);
/// - the server going away (`GOAWAY`), or a request hyper dropped
///   (`Canceled`, "connection closed"): [`Verdict::RetryIfIdempotent`].
///   A stream above the last one a server going away names was not
///   processed (section 6.8), but hyper gives the same error to a request
///   whose stream it had opened, and whose request may have been
///   processed (the connection's `GOAWAY` read right after the stream
///   opened; with hyper 1.13, `Canceled` to one parked while its stream
///   waited for a slot): neither proves the request never reached the
///   server.
#[cfg(any(feature = "tonic", feature = "hyper-util"))]
pub(crate) fn hyper_or_h2(error: &(dyn Error + 'static)) -> Option<Verdict> {
    if error
        .downcast_ref::<::hyper::Error>()
        .is_some_and(::hyper::Error::is_canceled)
    {
        return Some(Verdict::RetryIfIdempotent);
    }
    #[cfg(feature = "tonic")]
    if let Some(h2) = error.downcast_ref::<::h2::Error>() {
        if h2.reason() == Some(::h2::Reason::REFUSED_STREAM) && !h2.is_go_away() {
            return Some(Verdict::Retry);
        }
        if h2.is_go_away() && h2.is_remote() {
            return Some(Verdict::RetryIfIdempotent);
        }
        if h2.is_reset() && h2.is_remote() {
            return h2.reason().map(stream_reset);
        }
    }
    None
}

/// The verdict on a stream the server reset (`RST_STREAM`, RFC 9113
/// section 6.4) for `reason`, other than refusing it.
#[cfg(feature = "tonic")]
fn stream_reset(reason: ::h2::Reason) -> Verdict {
    use ::h2::Reason as R;
    match reason {
        // The exchange broke the protocol: a retry breaks it again.
        R::PROTOCOL_ERROR
        | R::FLOW_CONTROL_ERROR
        | R::STREAM_CLOSED
        | R::FRAME_SIZE_ERROR
        | R::COMPRESSION_ERROR
        | R::INADEQUATE_SECURITY
        | R::HTTP_1_1_REQUIRED => Verdict::Stop,
        // The client is generating excessive load: the server's "do not
        // retry".
        R::ENHANCE_YOUR_CALM => Verdict::StopOverloaded,
        // A handler that failed, a proxy that gave up, a stream cancelled:
        // the request may have been processed, as with a connection reset.
        _ => Verdict::RetryIfIdempotent,
    }
}

/// [`Verdict::Stop`] for a tonic transport error that says the endpoint
/// cannot be used as written (a URI or user agent that does not parse, TLS
/// asked of a Unix socket), which tonic tells by its message alone: a
/// retry fails the same way. `None` for any other error, a transport
/// failure among them (judged by what it holds).
#[cfg(feature = "tonic")]
pub(crate) fn tonic_endpoint_unusable(error: &(dyn Error + 'static)) -> Option<Verdict> {
    // The kinds that say so, by their messages (one tonic might change
    // falls to the transport rule, never to `Stop`); a URI that does not
    // parse can come as a "transport error" holding http's error.
    const UNUSABLE: [&str; 3] = [
        "invalid URI",
        "user agent is not a valid header value",
        "cannot apply TLS config for unix domain socket",
    ];
    let transport = error.downcast_ref::<::tonic::transport::Error>()?;
    let unusable = UNUSABLE.iter().any(|words| displays_as(transport, words))
        || transport.source().is_some_and(|source| {
            source.is::<::http::uri::InvalidUri>() || source.is::<::http::uri::InvalidUriParts>()
        });
    unusable.then_some(Verdict::Stop)
}

/// A connection could not be made (nothing was sent): [`Verdict::Refused`]
/// when an I/O error in its source chain says the connection was refused,
/// [`Verdict::Stop`] when hyper-util's connector says the URL cannot be
/// connected to as written (its scheme or host missing, a scheme not
/// `http`: a retry fails the same way), [`Verdict::Retry`] otherwise (a
/// name that did not resolve, a connect that timed out, a handshake that
/// failed).
#[cfg(any(feature = "tonic", feature = "reqwest", feature = "hyper-util"))]
pub(crate) fn connect_failed(error: &(dyn Error + 'static)) -> Verdict {
    let mut next = error.source();
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::ConnectionRefused
        {
            return Verdict::Refused;
        }
        // hyper-util's `HttpConnector` says so by its message alone (its
        // error type is not exported); tonic's TLS connector by a
        // transport error of its own (a host missing).
        if displays_as(error, "invalid URL, ") {
            return Verdict::Stop;
        }
        #[cfg(feature = "tonic")]
        if let Some(verdict) = tonic_endpoint_unusable(error) {
            return verdict;
        }
        next = error.source();
    }
    Verdict::Retry
}

/// Whether `error`'s `Display` begins with `prefix`, read as it is
/// written (nothing kept of it).
#[cfg(any(feature = "tonic", feature = "reqwest", feature = "hyper-util"))]
fn displays_as(error: &(dyn Error + 'static), prefix: &str) -> bool {
    use std::fmt::Write;
    /// Compares what is written with what is left of the prefix, and
    /// stops the writing at the first difference or once it is all read.
    /// What is left of the prefix to match; `None` once a write differed
    /// (a `Display` that goes on writing after an error matches nothing
    /// more).
    struct Prefix<'a>(Option<&'a str>);
    impl Write for Prefix<'_> {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let Some(rest) = self.0 else {
                return Err(std::fmt::Error);
            };
            let n = text.len().min(rest.len());
            if text.as_bytes()[..n] != rest.as_bytes()[..n] {
                self.0 = None;
                return Err(std::fmt::Error);
            }
            self.0 = Some(&rest[n..]);
            if rest.len() == n {
                // All of it matched: nothing more to read.
                return Err(std::fmt::Error);
            }
            Ok(())
        }
    }
    let mut rest = Prefix(Some(prefix));
    let _ = write!(rest, "{error}");
    rest.0 == Some("")
}

/// The verdict on one of tonic's errors, if `error` is one with a verdict
/// of its own (a transport error that holds a transport failure has none:
/// what it holds decides).
#[cfg(feature = "tonic")]
fn tonic_known(error: &(dyn Error + 'static)) -> Option<Verdict> {
    if let Some(status) = error.downcast_ref::<::tonic::Status>() {
        return Some(status.classify());
    }
    // A connection that was never made: nothing was sent (refused, if
    // nothing listened).
    if error.is::<::tonic::ConnectError>() {
        return Some(connect_failed(error));
    }
    if error.is::<::tonic::TimeoutExpired>() {
        return Some(Verdict::RetryIfIdempotent);
    }
    tonic_endpoint_unusable(error)
}

/// The verdict on one error of a chain, if it is of a type this crate knows.
fn known(error: &(dyn Error + 'static)) -> Option<Verdict> {
    if let Some(io) = error.downcast_ref::<io::Error>() {
        // `io::Error::other(e)` and friends: what `e` is decides.
        if let Some(inner) = io.get_ref()
            && io.kind() == io::ErrorKind::Other
        {
            let inner: &(dyn Error + 'static) = inner;
            return Some(source_chain(inner));
        }
        return Some(io.classify());
    }
    if let Some(elapsed) = error.downcast_ref::<crate::state::vocabulary::Elapsed>() {
        return Some(elapsed.classify());
    }
    #[cfg(feature = "tokio")]
    if error.is::<tokio::time::error::Elapsed>() {
        return Some(Verdict::RetryIfIdempotent);
    }
    // tower's own middlewares below a retry: a timeout is ambiguous (the
    // work may be done), a load shed's rejection was never sent.
    #[cfg(feature = "tower")]
    if error.is::<::tower::timeout::error::Elapsed>() {
        return Some(Verdict::RetryIfIdempotent);
    }
    #[cfg(feature = "tower")]
    if error.is::<::tower::load_shed::error::Overloaded>() {
        return Some(Verdict::Retry);
    }
    if error.is::<crate::state::vocabulary::CircuitOpen>()
        || error.is::<crate::state::vocabulary::Throttled>()
    {
        return Some(Verdict::Stop);
    }
    #[cfg(feature = "tonic")]
    if let Some(verdict) = tonic_known(error) {
        return Some(verdict);
    }
    #[cfg(feature = "hyper-util")]
    if let Some(verdict) = hyper_util_connect(error) {
        return Some(verdict);
    }
    #[cfg(any(feature = "tonic", feature = "hyper-util"))]
    if let Some(verdict) = hyper_or_h2(error) {
        return Some(verdict);
    }
    #[cfg(feature = "reqwest")]
    if let Some(reqwest) = error.downcast_ref::<::reqwest::Error>() {
        return Some(reqwest.classify());
    }
    #[cfg(feature = "reqwest")]
    if let Some(error) = error.downcast_ref::<crate::reqwest::error::Error>() {
        return Some(error.classify());
    }
    // Its `source()` is its inner error's: what it holds itself (a
    // timed-out attempt, a breaker's rejection, reqwest's error) would be
    // passed over.
    #[cfg(feature = "reqwest-middleware")]
    if let Some(error) = error.downcast_ref::<::reqwest_middleware::Error>() {
        return match error {
            ::reqwest_middleware::Error::Reqwest(error) => Some(error.classify()),
            ::reqwest_middleware::Error::Middleware(error) => known_in_chain(error.as_ref()),
        };
    }
    #[cfg(feature = "redis")]
    if let Some(error) = error.downcast_ref::<::redis::RedisError>() {
        return Some(error.classify());
    }
    #[cfg(feature = "tokio-postgres")]
    if let Some(error) = error.downcast_ref::<::tokio_postgres::Error>() {
        return Some(error.classify());
    }
    // What a tokio-postgres error holds when the server refused: found
    // too past a wrapper that hides the error itself (thiserror's
    // `#[error(transparent)]` gives its source's source).
    #[cfg(feature = "tokio-postgres")]
    if let Some(error) = error.downcast_ref::<::tokio_postgres::error::DbError>() {
        return Some(sqlstate(error.code().code()));
    }
    #[cfg(feature = "sqlx")]
    if let Some(error) = error.downcast_ref::<::sqlx_core::error::Error>() {
        return Some(error.classify());
    }
    // The pools of those clients: a pool's error is generic over its
    // backend's, so each pairing is its own type.
    #[cfg(all(feature = "deadpool", feature = "tokio-postgres"))]
    if let Some(error) =
        error.downcast_ref::<::deadpool::managed::PoolError<::tokio_postgres::Error>>()
    {
        return Some(error.classify());
    }
    #[cfg(all(feature = "deadpool", feature = "redis"))]
    if let Some(error) = error.downcast_ref::<::deadpool::managed::PoolError<::redis::RedisError>>()
    {
        return Some(error.classify());
    }
    #[cfg(all(feature = "bb8", feature = "tokio-postgres"))]
    if let Some(error) = error.downcast_ref::<::bb8::RunError<::tokio_postgres::Error>>() {
        return Some(error.classify());
    }
    #[cfg(all(feature = "bb8", feature = "redis"))]
    if let Some(error) = error.downcast_ref::<::bb8::RunError<::redis::RedisError>>() {
        return Some(error.classify());
    }
    None
}

/// The verdict on a SQL error by its SQLSTATE (the five-character code
/// PostgreSQL, and in its standard classes MySQL and others, send with
/// every error), following PostgreSQL's table of error codes (the
/// PostgreSQL documentation, appendix A, "PostgreSQL Error Codes"):
///
/// - `57P03` cannot connect now (starting up or shutting down), `08001`
///   and `08004` (the connection was never established): [`Verdict::Refused`],
///   nothing ran, and a call may wait for the server to come back;
/// - `53300` too many connections: [`Verdict::Retry`], nothing ran;
/// - `57P01` admin shutdown and `57P02` crash shutdown, as a statement's
///   error: [`Verdict::Retry`], the server rolled its transaction back
///   (only that one: as below, a function that committed something
///   before it, a statement of its own or a transaction, repeats that;
///   and as a rule: one terminated while it waited for a synchronous
///   replica after committing locally says `57P01` too);
/// - `40001` serialization failure and `40P01` deadlock detected:
///   [`Verdict::Retry`], the transaction was rolled back. Only a function
///   that runs the *whole* transaction may retry them: a statement retried
///   inside a larger transaction is not a retried transaction (the
///   transaction is aborted, and every later statement fails with
///   `25P02`). Give such a function `when = ..` that stops on them;
/// - the other connection exceptions (class `08`: connection failure,
///   transaction resolution unknown...) and `57014` query canceled (a
///   statement timeout): [`Verdict::RetryIfIdempotent`], the statement may
///   have run, or committed;
/// - everything else: [`Verdict::Stop`], among them `25P02` (in a failed
///   transaction), integrity constraint violations (class `23`), syntax
///   and access errors (class `42`), data exceptions (class `22`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::sqlstate, Verdict};
///
/// assert_eq!(sqlstate("40001"), Verdict::Retry);        // serialization failure
/// assert_eq!(sqlstate("57P03"), Verdict::Refused);      // the database is starting up
/// assert_eq!(sqlstate("08006"), Verdict::RetryIfIdempotent); // connection failure
/// assert_eq!(sqlstate("23505"), Verdict::Stop);         // unique violation
/// ```
pub fn sqlstate(code: &str) -> Verdict {
    match code {
        "57P03" | "08001" | "08004" => Verdict::Refused,
        "53300" | "57P01" | "57P02" | "40001" | "40P01" => Verdict::Retry,
        "57014" => Verdict::RetryIfIdempotent,
        "08P01" => Verdict::Stop, // protocol violation: a bug, not the network
        _ if code.starts_with("08") => Verdict::RetryIfIdempotent,
        _ => Verdict::Stop,
    }
}

/// By its [source chain](source_chain): what `Box<dyn Error>` holds decides.
impl Classify for dyn Error + 'static {
    fn classify(&self) -> Verdict {
        source_chain(self)
    }
}

/// By its [source chain](source_chain).
impl Classify for dyn Error + Send + 'static {
    fn classify(&self) -> Verdict {
        source_chain(self)
    }
}

/// By its [source chain](source_chain): `Box<dyn Error + Send + Sync>`, the
/// error type of many services, needs no `when`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{Classify, Verdict};
/// let boxed: Box<dyn std::error::Error + Send + Sync> = Error::from(ErrorKind::ConnectionRefused).into();
/// assert_eq!(boxed.classify(), Verdict::Refused);
/// ```
impl Classify for dyn Error + Send + Sync + 'static {
    fn classify(&self) -> Verdict {
        source_chain(self)
    }
}

/// A timeout is ambiguous: the work may have been done.
#[cfg(feature = "tokio")]
impl Classify for tokio::time::error::Elapsed {
    fn classify(&self) -> Verdict {
        Verdict::RetryIfIdempotent
    }
}

/// A timed-out attempt is ambiguous: the work may have been done. A call
/// held after refusals ([`Elapsed::is_refused`](crate::Elapsed::is_refused))
/// is `Refused`, as its last attempt was.
impl Classify for crate::state::vocabulary::Elapsed {
    fn classify(&self) -> Verdict {
        if self.is_refused() {
            Verdict::Refused
        } else {
            Verdict::RetryIfIdempotent
        }
    }
}

/// The breaker rejected the call: retrying now cannot help.
impl Classify for crate::state::vocabulary::CircuitOpen {
    fn classify(&self) -> Verdict {
        Verdict::Stop
    }
}

/// The adaptive throttle shed the attempt: retrying now would only add to
/// what the dependency refuses.
impl Classify for crate::state::vocabulary::Throttled {
    fn classify(&self) -> Verdict {
        Verdict::Stop
    }
}

/// By its chain of causes, as [`source_chain`]: the first error of a type
/// the crate knows (an `io::Error`, a client's error) decides. An error
/// made of a message alone (`bail!("..")`, `anyhow!("..")`) holds none,
/// and is not retried (`Stop`), nor is one holding only errors of your
/// own types (their `Classify` is not asked: the walk cannot name them):
/// give such a function a `when` that says which of its errors a retry
/// can fix (`e.chain().find_map(|c| c.downcast_ref::<MyError>())`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{Classify, Verdict};
/// let e = anyhow::Error::new(Error::from(ErrorKind::ConnectionRefused)).context("loading");
/// assert_eq!(e.classify(), Verdict::Refused);
/// assert_eq!(anyhow::anyhow!("the queue is full").classify(), Verdict::Stop);
/// ```
#[cfg(feature = "anyhow")]
impl Classify for anyhow::Error {
    fn classify(&self) -> Verdict {
        self.chain().find_map(known).unwrap_or(Verdict::Stop)
    }
}

/// A service that cannot fail (an axum `Router`, a `service_fn` returning
/// `Ok::<_, Infallible>`): never reached.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// let never: Result<(), std::convert::Infallible> = Ok(());
/// assert!(never.is_ok());
/// ```
impl Classify for std::convert::Infallible {
    fn classify(&self) -> Verdict {
        match *self {}
    }
}

// (A missing `Classify` is said of the type the user wrote, `&str`.)
#[diagnostic::do_not_recommend]
impl<T: Classify + ?Sized> Classify for &T {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
}

#[diagnostic::do_not_recommend]
impl<T: Classify + ?Sized> Classify for Box<T> {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
}

/// Decides the verdict for a value of type `X`: an error, or an `Ok` value
/// under `when_ok`.
///
/// A [`Retry`](crate::Retry) holds one for errors and one for `Ok` values:
/// [`ByClassify`], [`NeverRetry`], or [`When`] around the closure given to
/// `when` or `when_ok`. A classifier of a type of your own is given as a
/// closure that asks it (`.when(move |e: &MyError| mine.verdict(e))`):
/// `when` takes a closure, so that its argument's type is inferred.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::Verdict;
/// use backstop::classify::{ByClassify, Classifier, NeverRetry, When};
/// let refused = Error::from(ErrorKind::ConnectionRefused);
/// assert_eq!(ByClassify.verdict(&refused), Verdict::Refused); // its `Classify`
/// assert_eq!(NeverRetry.verdict(&"an answer"), Verdict::Stop);
/// let empty_is_retried = When(|body: &String| body.is_empty());
/// assert_eq!(empty_is_retried.verdict(&String::new()), Verdict::Retry);
/// ```
pub trait Classifier<X: ?Sized> {
    /// The verdict for `x`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Verdict;
    /// use backstop::classify::{Classifier, When};
    /// assert_eq!(When(|status: &u16| *status == 503).verdict(&200), Verdict::Stop);
    /// ```
    fn verdict(&self, x: &X) -> Verdict;
}

/// Classifies errors by their [`Classify`] impl (the default for errors).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::{ByClassify, Classifier}, Verdict};
/// let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// assert_eq!(ByClassify.verdict(&e), Verdict::Refused);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ByClassify;

impl<E: Classify + ?Sized> Classifier<E> for ByClassify {
    fn verdict(&self, e: &E) -> Verdict {
        e.classify()
    }
}

/// Never retries (the default for `Ok` values).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::{Classifier, NeverRetry}, Verdict};
/// assert_eq!(NeverRetry.verdict(&42), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverRetry;

impl<X: ?Sized> Classifier<X> for NeverRetry {
    fn verdict(&self, _: &X) -> Verdict {
        Verdict::Stop
    }
}

/// What a `when` or `when_ok` classifier may answer: a [`Verdict`], or a
/// `bool` (`true` is [`Verdict::Retry`], `false` [`Verdict::Stop`]);
/// anything `Into<Verdict>`. A classifier answering something else is
/// refused where it is given, in words.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::IntoVerdict, Verdict};
///
/// assert_eq!(true.into_verdict(), Verdict::Retry);
/// assert_eq!(Verdict::Stop.into_verdict(), Verdict::Stop);
/// ```
#[diagnostic::on_unimplemented(
    message = "a `when` or `when_ok` classifier answers a `Verdict` or a `bool`, not `{Self}`",
    label = "this answers `{Self}`",
    note = "answer `true` to retry and `false` to stop, or a `Verdict` (`Verdict::Retry`, \
            `Verdict::RetryIfIdempotent`, `Verdict::RetryAfter(d)` to retry after `d`, \
            `Verdict::Stop`, ...)"
)]
pub trait IntoVerdict: answer::Sealed {
    /// The verdict answered.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{classify::IntoVerdict, Verdict};
    /// assert_eq!(false.into_verdict(), Verdict::Stop);
    /// ```
    fn into_verdict(self) -> Verdict;
}

/// What may answer: sealed, so that the answers are those of
/// `Into<Verdict>`, which `Verdict`'s own `From` impls say.
mod answer {
    pub trait Sealed {}
    impl<V: Into<super::Verdict>> Sealed for V {}
}

// (A wrong answer's error names `IntoVerdict`, not `From<..> for Verdict`.)
#[diagnostic::do_not_recommend]
impl<V: Into<Verdict>> IntoVerdict for V {
    fn into_verdict(self) -> Verdict {
        self.into()
    }
}

/// A closure or function `Fn(&X) -> impl IntoVerdict` used as a
/// classifier: it may answer `bool` or [`Verdict`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::{Classifier, When}, Verdict};
///
/// let status_503 = When(|status: &u16| *status == 503);
/// assert_eq!(status_503.verdict(&503), Verdict::Retry);
/// assert_eq!(status_503.verdict(&404), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct When<F>(pub F);

impl<X: ?Sized, F, V> Classifier<X> for When<F>
where
    F: Fn(&X) -> V,
    V: IntoVerdict,
{
    fn verdict(&self, x: &X) -> Verdict {
        (self.0)(x).into_verdict()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io::ErrorKind as K;

    #[test]
    fn io_errors_are_classified_by_kind() {
        assert_eq!(
            io::Error::from(K::ConnectionRefused).classify(),
            Verdict::Refused
        );
        let never_sent = [
            K::NotConnected,
            K::AddrNotAvailable,
            K::HostUnreachable,
            K::NetworkUnreachable,
            K::NetworkDown,
        ];
        for kind in never_sent {
            assert_eq!(io::Error::from(kind).classify(), Verdict::Retry, "{kind:?}");
        }
        let may_have_been_sent = [
            K::ConnectionReset,
            K::ConnectionAborted,
            K::BrokenPipe,
            K::UnexpectedEof,
            K::TimedOut,
            K::WouldBlock,
            // A read interrupted by a signal after the request was written.
            K::Interrupted,
        ];
        for kind in may_have_been_sent {
            assert_eq!(
                io::Error::from(kind).classify(),
                Verdict::RetryIfIdempotent,
                "{kind:?}"
            );
        }
        let permanent = [
            K::NotFound,
            K::PermissionDenied,
            K::InvalidInput,
            K::InvalidData,
            K::AlreadyExists,
            K::Unsupported,
            K::Other,
        ];
        for kind in permanent {
            assert_eq!(io::Error::from(kind).classify(), Verdict::Stop, "{kind:?}");
        }
    }

    #[test]
    fn references_and_boxes_classify_like_their_target() {
        let e = io::Error::from(K::ConnectionRefused);
        assert_eq!(Classify::classify(&&e), Verdict::Refused);
        assert_eq!(Box::new(e).classify(), Verdict::Refused);
    }
}
