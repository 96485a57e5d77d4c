//! The errors of the HTTP, database and cache clients services call most,
//! classified by the clients' own predicates and codes (never by message
//! text), under the transport rule of [`classify`](crate::classify): what
//! provably never reached the server is retried, what may have been
//! executed (a connection dropped after the command was written) only for
//! an idempotent call.

#[cfg(any(
    feature = "hyper-util",
    feature = "redis",
    feature = "tokio-postgres",
    feature = "sqlx",
    feature = "deadpool",
    feature = "bb8"
))]
use crate::classify::{Classify, Verdict};
#[cfg(any(feature = "sqlx", feature = "redis"))]
use crate::{CircuitOpen, Throttled};

/// An error of hyper-util's legacy `Client`, by the transport rule of
/// `tower::TransportErrors`:
///
/// - a connection it never made (`is_connect()`: nothing was sent) is
///   [`Verdict::Refused`] if it was refused, [`Verdict::Retry`] otherwise
///   (a name that did not resolve, a connect that timed out, a TLS
///   handshake that failed — a certificate refused too, as for reqwest's
///   connect errors: a permanent failure spends the call's attempts), but
///   [`Verdict::Stop`] for a URL its connector cannot connect to as
///   written (its scheme or host missing, `https` through an HTTP-only
///   connector: every attempt would fail alike);
/// - any other failure is read down its source chain: an I/O error that
///   proves nothing was sent is retried as above; a reset, a broken pipe,
///   hyper's "connection closed before message completed" may have come
///   after the request was written, and are [`Verdict::RetryIfIdempotent`];
///   an error of a kind this crate classifies otherwise keeps that verdict
///   (an I/O error of a kind that says nothing of the connection is
///   [`Verdict::Stop`]);
/// - HTTP/2's own errors are read by their reason with the feature
///   `tonic`, which brings the `h2` crate: a stream the server refused
///   (`REFUSED_STREAM`) is [`Verdict::Retry`], one it reset for a broken
///   protocol [`Verdict::Stop`] (see [`source_chain`](crate::classify::source_chain)'s
///   HTTP/2 list). Without it they are errors this crate does not know:
///   [`Verdict::RetryIfIdempotent`], as anything after the request was
///   written.
///
/// The same verdict as the error's, boxed (`Box<dyn Error + Send + Sync>`)
/// below a `RetryLayer::http`. With this impl the layer goes straight over
/// the client, nothing boxed; a layer with a breaker or an attempt timeout
/// still needs an error type that can hold their errors (`From<CircuitOpen>`,
/// `From<Elapsed>`): box it then, with `map_err(box_error)` below the layer
/// ([`box_error`](crate::tower::box_error)).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use backstop::{Classify, Policy, Verdict, tower::RetryLayer};
/// use http_body_util::Full;
/// use hyper_util::{client::legacy::Client, rt::TokioExecutor};
/// use tower::{Layer, ServiceExt};
///
/// let policy = Policy::new().base(Duration::from_millis(1));
/// let client = Client::builder(TokioExecutor::new()).build_http();
/// let orders = RetryLayer::http(&policy).layer(client);
/// // (Nothing listens on port 9: the connection is refused, each time.)
/// let request = http::Request::get("http://127.0.0.1:9/orders")
///     .body(Full::new(bytes::Bytes::new()))
///     .unwrap();
/// let error = orders.oneshot(request).await.unwrap_err();
/// assert!(error.is_connect());
/// assert_eq!(error.classify(), Verdict::Refused);
/// # }
/// ```
#[cfg(feature = "hyper-util")]
impl Classify for hyper_util::client::legacy::Error {
    fn classify(&self) -> Verdict {
        crate::classify::transport_chain(self)
    }
}

/// A Redis error, by what the client says of it:
///
/// - a refused connection, and `LOADING` (the server restarted and is
///   loading its data): [`Verdict::Refused`] (nothing was done, and a
///   call may wait for the server to come back);
/// - a cluster or sentinel with no node to send to: [`Verdict::Retry`]
///   (nothing was sent);
/// - `TRYAGAIN`, `MOVED`, `ASK`, `BUSY`, `CLUSTERDOWN`,
///   `MASTERDOWN`, `READONLY` (a write that reached a replica after a
///   failover): [`Verdict::Retry`], as the server did not run the command;
/// - a connection dropped, reset or timed out, an I/O error the client
///   does not place, an answer it could not parse: [`Verdict::RetryIfIdempotent`]:
///   the command may have run (an `INCR` would count twice);
/// - everything else (a wrong type, a reply that does not convert to the
///   Rust type asked for, a script error, `NOSCRIPT`, a refused
///   authentication, a bad configuration): [`Verdict::Stop`].
///
/// A retry sends the whole function again. A pipeline that failed part-way
/// may have run its first commands: its verdict is its error's, so declare
/// it `idempotent` only when every command in it is. (`MULTI`/`EXEC` runs
/// all or nothing, but a connection lost after `EXEC` is as ambiguous as
/// any write.)
///
/// redis gives two failures one kind, `Parse`, and no predicate tells them
/// apart: a reply that does not parse (the connection is out of step,
/// after the command was sent: ambiguous) and a reply that does not
/// convert to the type asked for (a wrong type: [`Verdict::Stop`]). The
/// parser's own failure is told by its message (combine's "Parse error
/// at …"), the one place this impl reads text. A server's error reply
/// read as a value (a pipeline run with `ignore_errors`) comes as a
/// conversion failure too, and is not retried.
///
/// redis keeps the I/O error behind an `Arc<dyn Error>`, where a chain walk
/// cannot see it: this impl, which the walk uses for a `RedisError` in a
/// `Box<dyn Error>` or an `anyhow::Error`, asks the client instead.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io;
/// use backstop::{Classify, Verdict};
///
/// let refused = redis::RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
/// assert_eq!(refused.classify(), Verdict::Refused);
/// let dropped = redis::RedisError::from(io::Error::from(io::ErrorKind::ConnectionReset));
/// assert_eq!(dropped.classify(), Verdict::RetryIfIdempotent);
/// let wrong = redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "not a number"));
/// assert_eq!(wrong.classify(), Verdict::Stop);
/// // A reply that does not convert to the type asked for: a wrong type.
/// let nil = redis::from_redis_value::<i64>(redis::Value::Nil).unwrap_err();
/// assert_eq!(redis::RedisError::from(nil).classify(), Verdict::Stop);
/// ```
#[cfg(feature = "redis")]
impl Classify for redis::RedisError {
    fn classify(&self) -> Verdict {
        use redis::{ErrorKind as K, ServerErrorKind as S};
        if self.is_connection_refusal() {
            return Verdict::Refused;
        }
        match self.kind() {
            K::Server(S::BusyLoading) => Verdict::Refused,
            K::Server(
                S::TryAgain | S::Moved | S::Ask | S::ClusterDown | S::MasterDown | S::ReadOnly,
            )
            | K::ClusterConnectionNotFound
            | K::MasterNameNotFoundBySentinel
            | K::NoValidReplicasFoundBySentinel => Verdict::Retry,
            // A script runs: the server ran nothing else meanwhile.
            K::Extension if self.code() == Some("BUSY") => Verdict::Retry,
            // A read timeout (`TimedOut`, or `WouldBlock` from a socket's
            // timeout): the command was sent.
            K::Io if self.is_timeout() => Verdict::RetryIfIdempotent,
            K::Io => match io_source(self) {
                // This crate's own errors, carried as I/O errors (below): as
                // they say.
                Some(io) if io.get_ref().is_some_and(own_error) => io.classify(),
                Some(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => Verdict::Refused,
                Some(io) if crate::classify::never_sent(io.kind()) => Verdict::Retry,
                // Dropped, reset, timed out, or a kind it does not say.
                _ => Verdict::RetryIfIdempotent,
            },
            // redis gives two failures as `Parse`: a reply that does not
            // parse (its parser's own errors say where: the connection is
            // out of step, after the command was sent), and a reply that
            // does not convert to the type asked for (a wrong type, which
            // no retry changes).
            K::Parse
                if self
                    .detail()
                    .is_some_and(|detail| detail.starts_with("Parse error at")) =>
            {
                Verdict::RetryIfIdempotent
            }
            _ => Verdict::Stop,
        }
    }
}

/// The I/O error a `RedisError` holds, if any (behind its `Arc`).
#[cfg(feature = "redis")]
fn io_source(error: &redis::RedisError) -> Option<&std::io::Error> {
    let held = std::error::Error::source(error)?;
    // `source()` is the `Arc<dyn Error>` itself: look inside it.
    held.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .or_else(|| held.downcast_ref::<std::io::Error>())
}

/// One of this crate's own errors: a timed-out or held attempt's, a
/// breaker's or an adaptive throttle's rejection.
#[cfg(feature = "redis")]
fn own_error(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    error.is::<crate::Elapsed>() || error.is::<CircuitOpen>() || error.is::<Throttled>()
}

/// A timed-out attempt as a redis error: an I/O error of kind `TimedOut`
/// holding the [`Elapsed`](crate::Elapsed), as redis makes its own from
/// an [`io::Error`](std::io::Error), so that a function returning
/// `RedisError` can take an `attempt_timeout`, and hold through a restart
/// once the budget refuses its retry (giving up with a held call's, of
/// kind `ConnectionRefused`, `Refused`). A timeout is retried only if
/// idempotent, as redis's own.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Elapsed, Verdict};
/// let error = redis::RedisError::from(Elapsed::new());
/// assert!(error.is_timeout());
/// assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
/// assert_eq!(redis::RedisError::from(Elapsed::refused()).classify(), Verdict::Refused);
/// ```
#[cfg(feature = "redis")]
impl From<crate::Elapsed> for redis::RedisError {
    fn from(elapsed: crate::Elapsed) -> Self {
        std::io::Error::from(elapsed).into()
    }
}

/// A call the circuit breaker turned away as a redis error (an I/O error
/// holding the [`CircuitOpen`]), so that a function returning
/// `RedisError` can take a `breaker`. Never retried by this crate (redis's
/// own hints, `is_io_error()` and `retry_method()`, read it as any I/O
/// error: a retry layer of your own around it should ask [`Classify`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{CircuitOpen, Classify, Verdict};
/// assert_eq!(redis::RedisError::from(CircuitOpen::new()).classify(), Verdict::Stop);
/// ```
#[cfg(feature = "redis")]
impl From<CircuitOpen> for redis::RedisError {
    fn from(open: CircuitOpen) -> Self {
        std::io::Error::from(open).into()
    }
}

/// An attempt the adaptive throttle shed as a redis error (an I/O error
/// holding the [`Throttled`]), so that a function returning `RedisError`
/// can take a `throttle`. Never retried.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Throttled, Verdict};
/// assert_eq!(redis::RedisError::from(Throttled::new()).classify(), Verdict::Stop);
/// ```
#[cfg(feature = "redis")]
impl From<Throttled> for redis::RedisError {
    fn from(shed: Throttled) -> Self {
        std::io::Error::from(shed).into()
    }
}

/// A PostgreSQL error (tokio-postgres, and the blocking `postgres` crate,
/// whose error is the same type):
///
/// - an error the server sent: by its SQLSTATE, as
///   [`classify::sqlstate`](crate::classify::sqlstate) says (too many
///   connections, starting up or shutting down, a serialization failure
///   or a deadlock: retried; a constraint, syntax or data error: not);
/// - a connection closed (the client's connection task ended: the server
///   restarted, or the connection broke mid-query):
///   [`Verdict::RetryIfIdempotent`], since the statement may have run;
/// - a connection that could not be made ("error connecting to server":
///   refused, timed out, a host that does not resolve, a Unix socket that
///   is not there, or, with
///   `target_session_attrs`, a server that does not allow writes, as a
///   standby before a failover ends): nothing of the call was sent,
///   [`Verdict::Refused`] if refused, [`Verdict::Retry`] otherwise;
/// - any other I/O error: by the transport rule (a reset or a timeout
///   retried only if idempotent);
/// - everything else (a parameter or a row that does not convert, a bad
///   configuration, a refused authentication): [`Verdict::Stop`].
///
/// A pool's checkout (deadpool's `PoolError`, bb8's `RunError`) is
/// classified by the features `deadpool` and `bb8`, its backend's error
/// by this impl.
///
/// A `tokio_postgres::Error` cannot hold this crate's [`Elapsed`](crate::Elapsed)
/// (tokio-postgres makes its errors itself): an async function returning
/// it takes no `attempt_timeout`, and does not hold through a restart once
/// the budget refuses its retry, but gives up with its last error (a sync
/// one, the blocking `postgres` crate's, holds: it returns its last error
/// when it gives up holding). Return
/// `anyhow::Error`, `Box<dyn Error + Send + Sync>` or an error type of your
/// own that is `From<Elapsed>` for those.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{classify::sqlstate, Verdict};
/// use tokio_postgres::error::SqlState;
///
/// assert_eq!(sqlstate(SqlState::T_R_SERIALIZATION_FAILURE.code()), Verdict::Retry);
/// assert_eq!(sqlstate(SqlState::UNIQUE_VIOLATION.code()), Verdict::Stop);
/// ```
#[cfg(feature = "tokio-postgres")]
impl Classify for tokio_postgres::Error {
    fn classify(&self) -> Verdict {
        if let Some(code) = self.code() {
            return crate::classify::sqlstate(code.code());
        }
        if self.is_closed() {
            return Verdict::RetryIfIdempotent;
        }
        match std::error::Error::source(self).and_then(|e| e.downcast_ref::<std::io::Error>()) {
            // Nothing of the call was sent.
            Some(io) if never_connected(self) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Verdict::Refused,
                _ => Verdict::Retry,
            },
            Some(io) => database_io(io),
            None => Verdict::Stop,
        }
    }
}

/// Whether tokio-postgres failed to connect (its error kind `Connect`,
/// which it shows only in its `Display`: "error connecting to server"),
/// read without allocating.
#[cfg(feature = "tokio-postgres")]
fn never_connected(error: &tokio_postgres::Error) -> bool {
    /// Compares what is written with `rest`, and stops once it is told.
    struct StartsWith {
        rest: &'static str,
    }
    impl std::fmt::Write for StartsWith {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let n = text.len().min(self.rest.len());
            if text.as_bytes()[..n] != self.rest.as_bytes()[..n] {
                return Err(std::fmt::Error);
            }
            self.rest = &self.rest[n..];
            if self.rest.is_empty() {
                // Told: no need to write the rest.
                return Err(std::fmt::Error);
            }
            Ok(())
        }
    }
    let mut prefix = StartsWith {
        rest: "error connecting to server",
    };
    let _ = std::fmt::Write::write_fmt(&mut prefix, format_args!("{error}"));
    prefix.rest.is_empty()
}

/// A sqlx error (sqlx 0.8, any of its databases):
///
/// - an error the database sent: by its SQLSTATE, as
///   [`classify::sqlstate`](crate::classify::sqlstate) says (PostgreSQL's
///   too many connections, starting up or shutting down; a serialization
///   failure or a deadlock, MySQL's deadlock 1213 among them, which it
///   reports as `40001`: retried; a constraint, syntax or data error:
///   not). An error without a code is [`Verdict::Stop`], and so are
///   `SQLite`'s, whose codes are its own result codes, not SQLSTATEs (a
///   `when` can retry its `SQLITE_BUSY`);
/// - a pool that timed out waiting for a connection (`PoolTimedOut`):
///   [`Verdict::Refused`], nothing of the call was sent (sqlx's pool tries
///   a refused connection again until its `acquire_timeout`, then says
///   only this: through a pool, a server restarting times out so, and a
///   call with a deadline can hold for it; a pool full of slow queries
///   times out the same way, and its callers hold too once the budget
///   refuses their retries);
/// - an I/O error, while connecting or later, by the transport rule: a
///   refused connection is [`Verdict::Refused`]; a connection reset,
///   closed or timed out under a statement (the server restarted) is
///   [`Verdict::RetryIfIdempotent`], since the statement may have run;
/// - a TLS handshake that failed: [`Verdict::Retry`] (the connection was
///   never made; a certificate refused, or TLS asked of a sqlx built
///   without it, spends the call's attempts too, as for hyper-util's
///   connect errors);
/// - everything else (no row, a column that does not decode, a message
///   the client could not read, as PostgreSQL's own protocol violation
///   `08P01` is not retried; a closed pool, a bad configuration or
///   argument): [`Verdict::Stop`].
///
/// MySQL's lock wait timeout (1205) has the general SQLSTATE `HY000`, and
/// is not retried: sqlx gives its number only to code that names
/// sqlx-mysql's error type; a `when` that does can retry it. A host name
/// that does not resolve is an I/O error of a kind that says nothing of
/// the transport, retried only if idempotent.
///
/// A function returning `sqlx::Error` can take an `attempt_timeout`, a
/// `breaker` and a `throttle`: their errors are made I/O errors holding
/// this crate's (below).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// // (`sqlx::Error` is sqlx-core's `Error`.)
/// assert_eq!(sqlx_core::Error::PoolTimedOut.classify(), Verdict::Refused);
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// assert_eq!(sqlx_core::Error::Io(refused).classify(), Verdict::Refused);
/// let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
/// assert_eq!(sqlx_core::Error::Io(reset).classify(), Verdict::RetryIfIdempotent);
/// assert_eq!(sqlx_core::Error::RowNotFound.classify(), Verdict::Stop);
/// ```
#[cfg(feature = "sqlx")]
impl Classify for sqlx_core::error::Error {
    fn classify(&self) -> Verdict {
        use sqlx_core::error::Error;
        match self {
            Error::Database(error) => error
                .code()
                .map_or(Verdict::Stop, |code| crate::classify::sqlstate(&code)),
            // Nothing of the call was sent. sqlx's pool tries a refused
            // connection again until its acquire timeout, and then says
            // only this: a server restarting looks so through a pool.
            Error::PoolTimedOut => Verdict::Refused,
            // The connection was never made.
            Error::Tls(_) => Verdict::Retry,
            // A rejection of this crate's own (below): never retried.
            Error::Io(io)
                if io
                    .get_ref()
                    .is_some_and(|e| e.is::<CircuitOpen>() || e.is::<Throttled>()) =>
            {
                Verdict::Stop
            }
            Error::Io(io) => database_io(io),
            // A message the client could not read (`Protocol`) is not
            // retried, as PostgreSQL's protocol violation `08P01` is not.
            _ => Verdict::Stop,
        }
    }
}

/// A timed-out attempt as a sqlx error: an I/O error of kind `TimedOut`
/// holding the [`Elapsed`](crate::Elapsed), as
/// [`io::Error`](std::io::Error)'s own conversion makes it, so that a
/// function returning `sqlx::Error` can take an `attempt_timeout`, and
/// give up at its deadline while held after a refusal. Retried only if
/// idempotent, as any timeout; a held call's, of kind
/// `ConnectionRefused` ([`Elapsed::is_refused`](crate::Elapsed::is_refused)),
/// is `Refused`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Elapsed, Verdict};
/// // (`sqlx::Error` is sqlx-core's `Error`.)
/// let error = sqlx_core::Error::from(Elapsed::new());
/// assert!(matches!(&error, sqlx_core::Error::Io(io) if io.get_ref().is_some_and(|e| e.is::<Elapsed>())));
/// assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
/// assert_eq!(sqlx_core::Error::from(Elapsed::refused()).classify(), Verdict::Refused);
/// ```
#[cfg(feature = "sqlx")]
impl From<crate::Elapsed> for sqlx_core::error::Error {
    fn from(elapsed: crate::Elapsed) -> Self {
        Self::Io(elapsed.into())
    }
}

/// A call the circuit breaker turned away as a sqlx error: an I/O error
/// holding the [`CircuitOpen`], as [`io::Error`](std::io::Error)'s own
/// conversion makes it, so that a function returning `sqlx::Error` can
/// take a `breaker`. Never retried.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{CircuitOpen, Classify, Verdict};
/// let error = sqlx_core::Error::from(CircuitOpen::new());
/// assert!(matches!(&error, sqlx_core::Error::Io(io) if io.get_ref().is_some_and(|e| e.is::<CircuitOpen>())));
/// assert_eq!(error.classify(), Verdict::Stop);
/// ```
#[cfg(feature = "sqlx")]
impl From<CircuitOpen> for sqlx_core::error::Error {
    fn from(open: CircuitOpen) -> Self {
        Self::Io(open.into())
    }
}

/// An attempt the adaptive throttle shed as a sqlx error: an I/O error
/// holding the [`Throttled`], as [`io::Error`](std::io::Error)'s own
/// conversion makes it, so that a function returning `sqlx::Error` can
/// take a `throttle`. Never retried.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Throttled, Verdict};
/// let error = sqlx_core::Error::from(Throttled::new());
/// assert_eq!(error.classify(), Verdict::Stop);
/// ```
#[cfg(feature = "sqlx")]
impl From<Throttled> for sqlx_core::error::Error {
    fn from(throttled: Throttled) -> Self {
        Self::Io(throttled.into())
    }
}

/// A database client's I/O error, by the transport rule; one whose kind
/// says nothing of the transport (the server went away mid-message) may
/// have come after the statement ran.
#[cfg(any(feature = "tokio-postgres", feature = "sqlx"))]
fn database_io(io: &std::io::Error) -> Verdict {
    match io.classify() {
        Verdict::Stop => Verdict::RetryIfIdempotent,
        verdict => verdict,
    }
}

/// A deadpool checkout (deadpool-postgres, deadpool-redis...): one that
/// timed out, waiting for a connection, making one or checking one, sent
/// nothing of the call ([`Verdict::Retry`]); the backend's error is
/// classified as its own: `?` on a query's error wraps it there too, and
/// a connection that closed under a query may have run it (one that
/// could not be made is retried as the client judges it: tokio-postgres
/// of every connection its I/O failed to make, redis of a refused or
/// unreachable one, not of one that timed out or was reset while made); a
/// `post_create` hook's error came before any of the call, and what its
/// backend calls ambiguous is retried; a closed pool, or one
/// with no runtime for its timeouts, is [`Verdict::Stop`]. Found in a
/// source chain for tokio-postgres's and redis's pools.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
/// use deadpool::managed::{PoolError, TimeoutType};
///
/// let timed_out: PoolError<std::io::Error> = PoolError::Timeout(TimeoutType::Wait);
/// assert_eq!(timed_out.classify(), Verdict::Retry);
/// let refused = PoolError::Backend(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert_eq!(refused.classify(), Verdict::Refused);
/// assert_eq!(PoolError::<std::io::Error>::Closed.classify(), Verdict::Stop);
/// // A reset: after a query was sent, maybe; in a hook on a new connection, not.
/// let reset = || std::io::Error::from(std::io::ErrorKind::ConnectionReset);
/// assert_eq!(PoolError::Backend(reset()).classify(), Verdict::RetryIfIdempotent);
/// let hook = PoolError::PostCreateHook(deadpool::managed::HookError::Backend(reset()));
/// assert_eq!(hook.classify(), Verdict::Retry);
/// ```
#[cfg(feature = "deadpool")]
impl<E: Classify> Classify for deadpool::managed::PoolError<E> {
    fn classify(&self) -> Verdict {
        use deadpool::managed::{HookError, PoolError};
        match self {
            PoolError::Timeout(_) => Verdict::Retry,
            PoolError::Backend(error) => error.classify(),
            // A hook run on a connection just made: nothing of the call
            // was sent, so what the backend calls ambiguous is retried.
            PoolError::PostCreateHook(HookError::Backend(error)) => match error.classify() {
                Verdict::RetryIfIdempotent => Verdict::Retry,
                verdict => verdict,
            },
            _ => Verdict::Stop,
        }
    }
}

/// A bb8 checkout (bb8-postgres, bb8-redis...): one that timed out sent
/// nothing of the call, and is taken for a refusal ([`Verdict::Refused`]),
/// as sqlx's `PoolTimedOut` is: bb8 tries a refused connection again until
/// its `connection_timeout` and then says only `TimedOut`, so that calls
/// through the pool hold through a restart once the budget refuses their
/// retries (a pool busy with slow calls times out alike: its callers hold
/// too, and go as it frees connections). The backend's error is
/// classified as its own: `?` on a query's error wraps it here too, and a
/// connection that closed under a query may have run it. Found in a
/// source chain for tokio-postgres's and redis's pools.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
///
/// assert_eq!(bb8::RunError::<std::io::Error>::TimedOut.classify(), Verdict::Refused);
/// // A reset, maybe after the statement ran: as the backend judges it.
/// let reset = bb8::RunError::User(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
/// assert_eq!(reset.classify(), Verdict::RetryIfIdempotent);
/// ```
#[cfg(feature = "bb8")]
impl<E: Classify> Classify for bb8::RunError<E> {
    fn classify(&self) -> Verdict {
        match self {
            bb8::RunError::TimedOut => Verdict::Refused,
            bb8::RunError::User(error) => error.classify(),
        }
    }
}
