//! The vocabulary of a retry decision, below everything that makes one:
//! the verdict on an outcome ([`Verdict`]) and the errors that know theirs
//! ([`Classify`]), what to do after it
//! ([`Decision`]), and why retrying stopped ([`GiveUp`]); and the errors
//! the runtime gives a call ([`Elapsed`], [`CircuitOpen`], [`Throttled`]).

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// What to do about one outcome of an attempt.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::Verdict;
///
/// assert_eq!(Verdict::from(true), Verdict::Retry);
/// assert_eq!(Verdict::from(false), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Transient: another attempt may well succeed.
    Retry,
    /// Refused before any work was done: a refused connection, a server
    /// still starting up, a pooled connection found closed before the
    /// request was sent. Retried as [`Retry`](Self::Retry) is, with one
    /// difference: when the token budget refuses its retry (failure is
    /// systemic), a call with a deadline *holds* instead of giving up. It
    /// sends nothing while it waits, and retries once the dependency has
    /// answered again (another caller's first attempt succeeded; with no
    /// other caller, one held call goes as a probe about every 200 ms), one
    /// held call at a time per budget, two once a released retry has been
    /// answered. A probe or a released retry is an attempt, counted in
    /// `attempts` (a probe refused on the last attempt ends the call). It
    /// gives up at its deadline, or once the budget has
    /// refused retries for its
    /// [`ride_out`](crate::limit::TokenBudget::ride_out) without an answer
    /// (10 s by default: refusing longer, the dependency is down, not
    /// restarting). Held to the end, a
    /// loop that keeps its outcome (a sync call, the tower layer, the
    /// reqwest middleware) returns its last error; one that dropped it
    /// before sleeping returns an [`Elapsed`] through `E: From<Elapsed>`
    /// (an async `#[retry]` function whose error type has it; `call_async`
    /// with an attempt timeout), and one that could do neither does not
    /// hold. `on_retry` is told when the call begins to hold (the event's
    /// delay is its first wait), `on_give_up` with [`GiveUp::Budget`] if
    /// it gives up; `tracing` and `metrics` tell the hold apart (an event
    /// "holding until the dependency answers", `backstop_held_total`) and
    /// count the retry when it goes. That is how a restarting dependency is
    /// ridden out without feeding a storm.
    Refused,
    /// The server said when to come back (`Retry-After`). The wait is
    /// honoured, spread upward by up to a fifth of it or a base delay,
    /// whichever is more (a `Retry-After: 0` too), never shortened.
    RetryAfter(Duration),
    /// Ambiguous: the work may have happened (a timeout). Retried only when
    /// the operation is declared idempotent.
    RetryIfIdempotent,
    /// Retrying cannot help (a 400, a validation error): return at once.
    Stop,
    /// The dependency is overloaded and said not to retry (gRPC's negative
    /// or malformed `grpc-retry-pushback-ms`): return at once, as for [`Stop`](Self::Stop),
    /// but as a failure. The token budget loses a token, the breaker counts
    /// it and the adaptive throttle does not count it as accepted (gRFC
    /// A6), where a `Stop` is an answer.
    StopOverloaded,
}

impl Verdict {
    /// Whether a retry is wanted at all, assuming the operation is
    /// idempotent.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Verdict;
    /// assert!(Verdict::RetryIfIdempotent.is_retryable());
    /// assert!(!Verdict::Stop.is_retryable());
    /// assert!(!Verdict::StopOverloaded.is_retryable());
    /// ```
    pub const fn is_retryable(self) -> bool {
        !matches!(self, Self::Stop | Self::StopOverloaded)
    }
}

impl From<bool> for Verdict {
    /// `true` → [`Verdict::Retry`], `false` → [`Verdict::Stop`].
    fn from(retry: bool) -> Self {
        if retry { Self::Retry } else { Self::Stop }
    }
}

/// What one attempt came to, classified: what the decider
/// ([`AttemptState::decide`](crate::state::AttemptState::decide)) and a breaker's
/// permit are told.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{macro_support::Attempted, Verdict};
///
/// assert_eq!(Attempted::from(Verdict::Retry), Attempted::Failed(Verdict::Retry));
/// assert_eq!(Attempted::Succeeded.verdict(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attempted {
    /// A success, or an `Ok` value no `when_ok` asked to retry: the call
    /// returns it.
    Succeeded,
    /// An error, or an `Ok` value a `when_ok` asked to retry, with the
    /// verdict on it (a [`Verdict::Stop`] returns it too, as a failure).
    Failed(Verdict),
}

impl Attempted {
    /// The verdict on a failure; `None` for a success.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::Attempted, Verdict};
    /// assert_eq!(Attempted::Failed(Verdict::Stop).verdict(), Some(Verdict::Stop));
    /// assert_eq!(Attempted::Succeeded.verdict(), None);
    /// ```
    pub const fn verdict(self) -> Option<Verdict> {
        match self {
            Self::Succeeded => None,
            Self::Failed(verdict) => Some(verdict),
        }
    }

    /// The dependency answered: a success, or a failure no retry can fix
    /// (what the throttles count as an answer).
    pub(crate) const fn answered(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed(Verdict::Stop))
    }

    /// The call ends with this outcome, whatever the policy: an answer, or
    /// a dependency that said not to retry. (What ends a hedged round.)
    #[cfg(all(
        any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
        not(loom)
    ))]
    pub(crate) const fn is_final(self) -> bool {
        self.answered() || matches!(self, Self::Failed(Verdict::StopOverloaded))
    }
}

impl From<Verdict> for Attempted {
    /// A failure with this verdict.
    fn from(verdict: Verdict) -> Self {
        Self::Failed(verdict)
    }
}

/// Errors that know whether a retry can fix them.
///
/// Implement it next to your error type, or pass `when` to the retry loop.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Verdict};
///
/// enum ApiError { Overloaded, BadRequest }
///
/// impl Classify for ApiError {
///     fn classify(&self) -> Verdict {
///         match self {
///             ApiError::Overloaded => Verdict::Retry,
///             ApiError::BadRequest => Verdict::Stop,
///         }
///     }
/// }
/// assert_eq!(ApiError::BadRequest.classify(), Verdict::Stop);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say which of its errors are worth retrying",
    label = "this error type does not implement `Classify`",
    note = "say which errors to retry at the call: `when = |e| ...` in `#[retry]`, \
            `.when(..)` on `Retry` or a layer; or implement `backstop::Classify` for an \
            error type of your own crate (retry only what a retry can fix)",
    note = "errors of other crates are classified with backstop's features: \
            `anyhow` for `anyhow::Error`, `reqwest` for `reqwest::Error`, `reqwest-middleware` \
            for `reqwest_middleware::Error`, `hyper-util` for hyper-util's client error, \
            `http` for `http::StatusCode`, `tonic` for `tonic::Status` and \
            `tonic::transport::Error`, `redis` for \
            `redis::RedisError`, \
            `tokio-postgres` for `tokio_postgres::Error` and `postgres::Error`, \
            `sqlx` for `sqlx::Error`, `deadpool` and `bb8` for their pools' errors \
            (`std::io::Error` and `Box<dyn Error>` need none)",
    note = "below a tower layer, box a service's error of another crate with \
            `.map_err(backstop::tower::box_error)`: it is then classified by what it holds",
    note = "for an error that wraps others, `when = backstop::classify::by_source_chain` \
            classifies it by the first error in its source chain that backstop knows"
)]
pub trait Classify {
    /// The verdict for this error.
    fn classify(&self) -> Verdict;
}

/// An error with words of its own for the events, in place of its
/// `Display`: reqwest's errors, whose `Display` ends with the request's
/// whole URL (its query, a secret's usual place, included), say what
/// failed and why (their sources), without it.
pub trait OwnText {
    /// Writes the text.
    ///
    /// # Errors
    ///
    /// The formatter's.
    fn write_text(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// Why a retry loop stopped retrying and returned the last outcome.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::GiveUp;
/// assert_eq!(GiveUp::Budget.to_string(), "retry budget exhausted");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUp {
    /// The classifier said [`Verdict::Stop`] (retrying cannot help) or
    /// [`Verdict::StopOverloaded`] (the dependency asked not to be
    /// retried); or, through the tower layer, the service failed its
    /// readiness before a retry (a failed service is to be discarded: no
    /// retry can go through it), and the call ends with that error.
    Stopped,
    /// An ambiguous failure ([`Verdict::RetryIfIdempotent`]) of an operation
    /// not declared idempotent.
    NotIdempotent,
    /// The attempt backstop was reached.
    Attempts,
    /// The next attempt could not start before the deadline.
    Deadline,
    /// The retry budget had no token: the dependency is failing for many
    /// callers, and retrying would only add load.
    Budget,
    /// The server asked to wait longer than `retry_after_max`.
    RetryAfterTooLong,
    /// The circuit breaker is open: the dependency is known to be down (or
    /// the attempt was the half-open probe, which is never retried).
    BreakerOpen,
    /// A call nested in the attempt gave up after retrying (or, through
    /// the HTTP layer, the reqwest middleware or a function returning a
    /// response or a status, retried and then returned an answer saying the
    /// dependency failed), directly or below calls between that did not retry it:
    /// retrying here too would multiply the attempts (3 × 3 = 9), so one
    /// layer retries per failure domain, the innermost.
    RetriedBelow,
    /// The adaptive throttle shed the next attempt: the dependency has been
    /// refusing much of what it gets.
    Throttled,
    /// The request cannot be sent again: its body was streamed and not
    /// kept (longer than the replay buffer, or not read to its end).
    NotReplayable,
}

impl GiveUp {
    /// A short, stable name for metrics labels (`"deadline"`, `"budget"`…).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// assert_eq!(backstop::GiveUp::RetryAfterTooLong.as_str(), "retry_after_too_long");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::NotIdempotent => "not_idempotent",
            Self::Attempts => "attempts",
            Self::Deadline => "deadline",
            Self::Budget => "budget",
            Self::RetryAfterTooLong => "retry_after_too_long",
            Self::RetriedBelow => "retried_below",
            Self::BreakerOpen => "breaker_open",
            Self::Throttled => "throttled",
            Self::NotReplayable => "not_replayable",
        }
    }
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stopped => "error is not retryable",
            Self::NotIdempotent => "ambiguous failure of a non-idempotent operation",
            Self::Attempts => "attempts exhausted",
            Self::Deadline => "deadline would be passed",
            Self::Budget => "retry budget exhausted",
            Self::RetryAfterTooLong => "server asked to wait longer than retry_after_max",
            Self::RetriedBelow => "a nested call already retried",
            Self::BreakerOpen => "circuit breaker open",
            Self::Throttled => "attempt shed by the adaptive throttle",
            Self::NotReplayable => "request body cannot be replayed",
        })
    }
}

/// Why a hedge was due (its delay passed, no attempt answered) and not
/// sent.
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[derive(Clone, Copy)]
pub(crate) enum NotSent {
    /// Refused as a retry would have been (the budget, the breaker, the
    /// adaptive throttle, the deadline).
    Refused(GiveUp),
    /// A call nested in an attempt in flight has hedged: a hedge here would
    /// copy its copies.
    HedgedBelow,
    /// The call runs in an attempt that a hedged round around it has
    /// copied: that copy copies this call too.
    HedgedAbove,
}

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
impl NotSent {
    /// Its name, for the `hedge not sent` event and the metric's `reason`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Refused(reason) => reason.as_str(),
            Self::HedgedBelow => "hedged_below",
            Self::HedgedAbove => "hedged_above",
        }
    }
}

/// What to do after an attempt.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{macro_support::{AttemptState, Attempted, Decision}, GiveUp, Policy, time::SystemClock, Verdict};
///
/// let policy = Policy::new().no_budget();
/// let mut state = AttemptState::new(&policy, SystemClock);
/// match state.decide(Attempted::Failed(Verdict::Stop)) {
///     Decision::Retry(delay) => println!("sleep {delay:?}, then attempt again"),
///     Decision::GiveUp(reason) => assert_eq!(reason, GiveUp::Stopped),
///     Decision::Return => unreachable!("an error is never a plain return"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Return the outcome: a success nobody asked to retry.
    Return,
    /// Return the outcome unchanged: retrying is over, for this reason.
    GiveUp(GiveUp),
    /// Sleep this long, then attempt again.
    Retry(Duration),
}

/// The error of a time limit that ran out: an attempt's, cut off under
/// `attempt_timeout` or, through the reqwest middleware or
/// `within_attempt`, at the deadline (or turned away with no time left);
/// the future `backstop::scope::deadline` ran; a call that woke past its
/// deadline; or an async call's held after a refusal ([`Verdict::Refused`]) that gave up
/// at its deadline or its budget's ride-out (its last outcome, the
/// refusal, was dropped before it slept: through `E: From<Elapsed>` this
/// is what it returns, and [`is_refused`](Self::is_refused) says so).
///
/// A function with `#[retry(attempt_timeout = ..)]` returns it through its
/// own error type, which must implement `From<Elapsed>`. A timed-out
/// attempt is ambiguous (the work may have been done): it is retried only
/// for an `idempotent` function. A held call's is not: the failure it
/// held after was a refusal (for a hedged call, the last of its round).
///
/// Its message says which limit ran out, where the loop knows: "attempt
/// timed out: its `attempt_timeout` of 2s ran out", "attempt cut off at
/// its deadline (the call's, or one it runs within: an enclosing call's or
/// attempt's, a scope's, a served request's)", "`scope::deadline` of 3s
/// ran out"; two `Elapsed` of different limits are not equal (match
/// `Elapsed { .. }` to take any).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::Elapsed;
/// assert_eq!(Elapsed::new().to_string(), "time limit elapsed");
/// assert!(!Elapsed::new().is_refused());
/// // Matched without naming its private field:
/// let outcome: Result<(), Elapsed> = Err(Elapsed::default());
/// assert!(matches!(outcome, Err(Elapsed { .. })));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Elapsed {
    // The call was held after its dependency refused it, and gave up.
    refused: bool,
    // Why, if known: its deadline, or the budget's ride-out.
    reason: Option<GiveUp>,
    // Which limit ran out, if known.
    cut: Cut,
    // That limit's length in nanoseconds (at most `u64::MAX`: 584 years),
    // where the message gives it.
    limit_ns: u64,
}

/// The limit an [`Elapsed`] says ran out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
// (Without a timer, nothing is cut off by a scope's deadline.)
#[cfg_attr(
    not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")),
    allow(dead_code)
)]
enum Cut {
    /// Not known (a hand-made `Elapsed`, a held call's).
    #[default]
    Unknown,
    /// The attempt's `attempt_timeout`.
    AttemptTimeout,
    /// The call's deadline (the time left, the last attempt's limit).
    Deadline,
    /// `scope::deadline`'s limit.
    Scope,
    /// `scope::deadline`'s, cut off sooner, at the deadline it runs
    /// within.
    ScopeWithin,
    /// The call's deadline, come while it slept before a retry (its task
    /// ran late): no attempt was started past it.
    Late,
}

impl Elapsed {
    /// The error of a time limit not named (for tests and hand-written
    /// wrappers): "time limit elapsed". The runtime's own say which limit
    /// ran out, and are not equal to it. Its fields are private so that it
    /// can grow; match it as `Elapsed { .. }`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Elapsed;
    /// let elapsed = Elapsed::new();
    /// assert_eq!(elapsed.to_string(), "time limit elapsed");
    /// assert!(matches!(elapsed, Elapsed { .. }));
    /// ```
    pub const fn new() -> Self {
        Self {
            refused: false,
            reason: None,
            cut: Cut::Unknown,
            limit_ns: 0,
        }
    }

    /// An attempt's, cut off after `cut` under `timeout` (its attempt
    /// timeout, if it has one): by that timeout if `cut` was it, else at
    /// the deadline (the time left was shorter). Decided when the limit is
    /// made, so that a timer that fires late is told as what it was.
    pub(crate) fn cut_after(cut: Duration, timeout: Option<Duration>) -> Self {
        match timeout {
            Some(timeout) if timeout < Duration::MAX && cut >= timeout => Self {
                cut: Cut::AttemptTimeout,
                limit_ns: nanos(timeout),
                ..Self::new()
            },
            _ => Self {
                cut: Cut::Deadline,
                ..Self::new()
            },
        }
    }

    /// A `within_attempt` request's, cut off at its deadline.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) const fn at_deadline() -> Self {
        Self {
            cut: Cut::Deadline,
            ..Self::new()
        }
    }

    /// `scope::deadline`'s, whose `limit` ran out.
    #[cfg_attr(
        not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")),
        allow(dead_code)
    )]
    pub(crate) fn scope(limit: Duration) -> Self {
        Self {
            cut: Cut::Scope,
            limit_ns: nanos(limit),
            ..Self::new()
        }
    }

    /// `scope::deadline`'s (of `limit`), cut off at the sooner deadline it
    /// runs within: an attempt's, an enclosing scope's.
    #[cfg_attr(
        not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")),
        allow(dead_code)
    )]
    pub(crate) fn scope_within(limit: Duration) -> Self {
        Self {
            cut: Cut::ScopeWithin,
            limit_ns: nanos(limit),
            ..Self::new()
        }
    }

    /// The error of an async call held after its dependency refused it
    /// ([`Verdict::Refused`]: a refused connection, a server starting up),
    /// which gave up at its deadline or its budget's
    /// [`ride_out`](crate::limit::TokenBudget::ride_out) without the
    /// dependency answering: what an async `#[retry]` function returns
    /// through `E: From<Elapsed>` in place of the refusal it dropped
    /// before sleeping, as do the closure forms given an attempt timeout
    /// (without one they do not hold); a sync loop returns the refusal
    /// itself.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{Classify, Elapsed, Verdict};
    ///
    /// let held = Elapsed::refused();
    /// assert!(held.is_refused());
    /// assert_eq!(held.classify(), Verdict::Refused);
    /// // As an `io::Error`, of the kind a refused connection has.
    /// assert_eq!(Error::from(held).kind(), ErrorKind::ConnectionRefused);
    /// ```
    pub const fn refused() -> Self {
        Self {
            refused: true,
            ..Self::new()
        }
    }

    /// A call's whose deadline came while it slept before a retry (its
    /// task ran late), which gave up rather than start an attempt past it:
    /// `refused` if its last attempt was refused ([`is_refused`](Self::is_refused)),
    /// so that it classifies as that failure did (nothing of it was sent).
    pub(crate) const fn late(refused: bool) -> Self {
        Self {
            refused,
            reason: Some(GiveUp::Deadline),
            cut: Cut::Late,
            ..Self::new()
        }
    }

    /// Why a call that gave up with it gave up: its deadline, unless it
    /// says otherwise (a held call's, at the budget's ride-out).
    pub(crate) fn gave_up_for(&self) -> GiveUp {
        self.reason.unwrap_or(GiveUp::Deadline)
    }

    /// A held call's, which gave up for `reason` (its deadline, or the
    /// budget's ride-out: [`GiveUp::Budget`]), said in its message.
    pub(crate) const fn held(reason: GiveUp) -> Self {
        Self {
            refused: true,
            reason: Some(reason),
            ..Self::new()
        }
    }

    /// Whether the call was held after its dependency refused it, and gave
    /// up waiting for it to answer ([`refused`](Self::refused)), or woke
    /// past its deadline after a refusal (its task ran late): the failure
    /// it gave up after was a refusal (for a hedged call, the last of its
    /// round), and nothing was left running.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Elapsed;
    /// assert!(Elapsed::refused().is_refused());
    /// assert!(!Elapsed::new().is_refused(), "an attempt's time limit");
    /// ```
    pub const fn is_refused(&self) -> bool {
        self.refused
    }
}

/// `limit` in nanoseconds, at most `u64::MAX` (584 years).
fn nanos(limit: Duration) -> u64 {
    u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX)
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = Duration::from_nanos(self.limit_ns);
        if self.cut == Cut::Late {
            return f.write_str(if self.refused {
                "gave up at the call's deadline, which came while it waited to retry \
                 (its task ran late) after its dependency refused it: no attempt started past it"
            } else {
                "gave up at the call's deadline, which came while it waited to retry \
                 (its task ran late): no attempt started past it"
            });
        }
        if !self.refused {
            return match self.cut {
                Cut::Unknown => f.write_str("time limit elapsed"),
                Cut::AttemptTimeout => write!(
                    f,
                    "attempt timed out: its `attempt_timeout` of {limit:?} ran out"
                ),
                Cut::Deadline => f.write_str(
                    "attempt cut off at its deadline (the call's, or one it runs within: an \
                     enclosing call's or attempt's, a scope's, a served request's)",
                ),
                Cut::Scope => write!(f, "`scope::deadline` of {limit:?} ran out"),
                Cut::ScopeWithin => write!(
                    f,
                    "`scope::deadline` of {limit:?} cut off at the deadline it runs within (an \
                     enclosing call's, scope's or served request's)"
                ),
                Cut::Late => unreachable!("said above"),
            };
        }
        f.write_str(match self.reason {
            Some(GiveUp::Deadline) => {
                "gave up at the call's deadline, holding for a dependency that refused it"
            }
            Some(GiveUp::Budget) => {
                "gave up holding for a dependency that refused it for longer than the retry \
                 budget's ride-out"
            }
            _ => "gave up holding for a dependency that refused it",
        })
    }
}

impl Error for Elapsed {}

/// An [`io::Error`](std::io::Error) wrapping the `Elapsed`, of kind
/// `TimedOut` (or `ConnectionRefused`, as a refused connection's, for a
/// call held after refusals: [`Elapsed::is_refused`]), so that a function returning `io::Result` can
/// take `attempt_timeout` (its own `From` impl would break the orphan
/// rule).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{Classify, Elapsed, Verdict};
/// let error = Error::from(Elapsed::new());
/// assert_eq!(error.kind(), ErrorKind::TimedOut);
/// assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
/// assert!(error.get_ref().is_some_and(|e| e.is::<Elapsed>()));
/// ```
impl From<Elapsed> for std::io::Error {
    fn from(elapsed: Elapsed) -> Self {
        let kind = if elapsed.refused {
            std::io::ErrorKind::ConnectionRefused
        } else {
            std::io::ErrorKind::TimedOut
        };
        Self::new(kind, elapsed)
    }
}

/// The error of a call the circuit breaker rejected without running it.
///
/// A function with `#[retry(breaker = ..)]` returns it through its own error
/// type, which must implement `From<CircuitOpen>`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::CircuitOpen;
/// assert_eq!(CircuitOpen::new().to_string(), "circuit breaker open: the dependency is failing, call rejected");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CircuitOpen(());

impl CircuitOpen {
    /// The error, as the runtime makes it (for tests and hand-written
    /// wrappers). Its field is private so that it can grow; match it as
    /// `CircuitOpen { .. }`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::CircuitOpen;
    /// // A hand-written wrapper's rejection, as the runtime would give it.
    /// let error = std::io::Error::from(CircuitOpen::new());
    /// assert!(error.get_ref().is_some_and(|e| e.is::<CircuitOpen>()));
    /// ```
    pub const fn new() -> Self {
        Self(())
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit breaker open: the dependency is failing, call rejected")
    }
}

impl Error for CircuitOpen {}

/// An [`io::Error`](std::io::Error) of kind `Other` wrapping the
/// `CircuitOpen`, so that a function returning `io::Result` can take a
/// `breaker` (its own `From` impl would break the orphan rule). It is not
/// retried: the breaker is known to be open.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{CircuitOpen, Classify, Verdict};
/// let error = std::io::Error::from(CircuitOpen::new());
/// assert_eq!(error.classify(), Verdict::Stop);
/// assert!(error.get_ref().is_some_and(|e| e.is::<CircuitOpen>()));
/// ```
impl From<CircuitOpen> for std::io::Error {
    fn from(open: CircuitOpen) -> Self {
        Self::other(open)
    }
}

/// The error of an attempt the adaptive throttle shed without making it.
///
/// A function with `#[retry(throttle = ..)]` returns it through its own
/// error type, which must implement `From<Throttled>` (`std::io::Error`
/// does).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::Throttled;
/// assert_eq!(Throttled::new().to_string(), "attempt shed by the adaptive throttle");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Throttled(());

impl Throttled {
    /// The error, as the runtime makes it (for tests and hand-written
    /// wrappers). Its field is private so that it can grow; match it as
    /// `Throttled { .. }`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Throttled;
    /// let error = std::io::Error::from(Throttled::new());
    /// assert!(error.get_ref().is_some_and(|e| e.is::<Throttled>()));
    /// ```
    pub const fn new() -> Self {
        Self(())
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("attempt shed by the adaptive throttle")
    }
}

impl Error for Throttled {}

/// An [`io::Error`](std::io::Error) of kind `Other` wrapping the
/// `Throttled`, so that a function returning `io::Result` can take
/// `throttle`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Classify, Throttled, Verdict};
/// let error = std::io::Error::from(Throttled::new());
/// assert_eq!(error.classify(), Verdict::Stop);
/// ```
impl From<Throttled> for std::io::Error {
    fn from(throttled: Throttled) -> Self {
        Self::other(throttled)
    }
}
