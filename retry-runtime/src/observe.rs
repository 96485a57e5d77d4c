//! Observing retries: what hooks (`on_retry`, `on_give_up`) are told.
//!
//! A retry that nobody can see is a retry storm nobody can diagnose: every
//! retry and every give-up can be reported, with the attempt, the delay,
//! the verdict, the reason and the outcome itself.

use std::fmt;
use std::time::Duration;

use crate::classify::Verdict;
use crate::clock::Clock;
use crate::state::{AttemptState, Decision, GiveUp};

/// The `function` of a call nobody named.
pub(crate) const ANONYMOUS: &str = "anonymous";

/// The span of one call: `retry`, with its `function` recorded once named.
#[cfg(feature = "tracing")]
pub(crate) fn call_span() -> tracing::Span {
    tracing::info_span!("retry", function = tracing::field::Empty)
}

/// Reports a decision to `tracing` and `metrics`, where enabled. With
/// neither feature it is empty and compiles away.
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables, clippy::needless_pass_by_value)
)]
pub(crate) fn decided<C: Clock>(
    state: &AttemptState<'_, C>,
    decision: Decision,
    verdict: Option<Verdict>,
) {
    #[cfg(feature = "tracing")]
    match decision {
        Decision::Retry(delay) => tracing::info!(
            parent: state.span(),
            function = state.name(),
            attempt = state.done(),
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            verdict = ?verdict.unwrap_or(Verdict::Retry),
            "retrying"
        ),
        Decision::GiveUp(reason) => tracing::info!(
            parent: state.span(),
            function = state.name(),
            attempts = state.done(),
            reason = reason.as_str(),
            "giving up"
        ),
        Decision::Return => {}
    }
    #[cfg(feature = "metrics")]
    {
        let function = state.name();
        match decision {
            Decision::Retry(_) => {
                metrics::counter!("backstop_retries_total", "function" => function).increment(1);
            }
            Decision::GiveUp(reason) => {
                metrics::counter!(
                    "backstop_give_ups_total",
                    "function" => function,
                    "reason" => reason.as_str()
                )
                .increment(1);
                if reason == GiveUp::Budget {
                    metrics::counter!("backstop_budget_refusals_total", "function" => function)
                        .increment(1);
                }
            }
            Decision::Return => {}
        }
        if !matches!(decision, Decision::Retry(_)) {
            // The call is over: count it, its attempts and its sleeps.
            metrics::counter!("backstop_calls_total", "function" => function).increment(1);
            metrics::histogram!("backstop_attempts", "function" => function)
                .record(f64::from(state.done()));
            metrics::histogram!("backstop_slept_seconds", "function" => function)
                .record(state.slept().as_secs_f64());
        }
    }
}

/// A retry about to happen: reported after an attempt failed (or returned
/// an `Ok` value that `when_ok` retries), before the sleep.
///
/// ```
/// use std::time::Duration;
/// use retry_runtime::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
/// let _vt = VirtualTime::start();
///
/// let policy = Policy::new().jitter(Jitter::None).no_budget();
/// let seen = std::cell::RefCell::new(Vec::new());
/// let _ = Retry::new(&policy)
///     .on_retry(|event: &RetryEvent<'_, (), std::io::Error>| {
///         seen.borrow_mut().push((event.attempt(), event.delay()));
///     })
///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
/// let ms = Duration::from_millis;
/// assert_eq!(*seen.borrow(), [(1, ms(100)), (2, ms(200))]);
/// ```
pub struct RetryEvent<'a, T, E> {
    pub(crate) attempt: u32,
    pub(crate) delay: Duration,
    pub(crate) verdict: Verdict,
    pub(crate) outcome: Result<&'a T, &'a E>,
    pub(crate) elapsed: Duration,
}

impl<'a, T, E> RetryEvent<'a, T, E> {
    /// The attempt that failed (1-based); the next one is `attempt() + 1`.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How long the loop sleeps before the next attempt.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Why it is retried: `Retry`, `RetryAfter(d)` or `RetryIfIdempotent`.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The failed attempt's outcome: its error, or the `Ok` value that
    /// `when_ok` retries.
    ///
    /// # Errors
    ///
    /// The attempt's error, when it failed with one.
    pub fn outcome(&self) -> Result<&'a T, &'a E> {
        self.outcome
    }

    /// The error, if the attempt failed with one.
    pub fn error(&self) -> Option<&'a E> {
        self.outcome.err()
    }

    /// Time since the call began.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl<T, E> fmt::Debug for RetryEvent<'_, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryEvent")
            .field("attempt", &self.attempt)
            .field("delay", &self.delay)
            .field("verdict", &self.verdict)
            .field("ok", &self.outcome.is_ok())
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// A call that stopped retrying and returns its last outcome, with the
/// reason. Not reported for an outcome returned because it needed no retry
/// (a success).
///
/// ```
/// use retry_runtime::{testing::VirtualTime, GiveUp, GiveUpEvent, Policy, Retry};
/// let _vt = VirtualTime::start();
///
/// let policy = Policy::new().attempts(2).no_budget();
/// let reasons = std::cell::RefCell::new(Vec::new());
/// let _ = Retry::new(&policy)
///     .on_give_up(|event: &GiveUpEvent<'_, (), std::io::Error>| {
///         reasons.borrow_mut().push((event.reason(), event.attempts()));
///     })
///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
/// assert_eq!(*reasons.borrow(), [(GiveUp::Attempts, 2)]);
/// ```
pub struct GiveUpEvent<'a, T, E> {
    pub(crate) attempts: u32,
    pub(crate) reason: GiveUp,
    pub(crate) outcome: Result<&'a T, &'a E>,
    pub(crate) elapsed: Duration,
}

impl<'a, T, E> GiveUpEvent<'a, T, E> {
    /// Attempts made, the last included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Why retrying stopped.
    pub fn reason(&self) -> GiveUp {
        self.reason
    }

    /// The outcome the call returns.
    ///
    /// # Errors
    ///
    /// The error the call returns, when it is one.
    pub fn outcome(&self) -> Result<&'a T, &'a E> {
        self.outcome
    }

    /// The error the call returns, if it is one.
    pub fn error(&self) -> Option<&'a E> {
        self.outcome.err()
    }

    /// Time since the call began.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl<T, E> fmt::Debug for GiveUpEvent<'_, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GiveUpEvent")
            .field("attempts", &self.attempts)
            .field("reason", &self.reason)
            .field("ok", &self.outcome.is_ok())
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// A hook that ignores what it is told: the default of [`Retry`](crate::Retry).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ignore;

/// Something told about retries: a closure `Fn(&RetryEvent<'_, T, E>)`,
/// or [`Ignore`].
pub trait OnRetry<T, E> {
    /// Tells it.
    fn on_retry(&self, event: &RetryEvent<'_, T, E>);
}

impl<T, E> OnRetry<T, E> for Ignore {
    fn on_retry(&self, _: &RetryEvent<'_, T, E>) {}
}

impl<T, E, F: Fn(&RetryEvent<'_, T, E>)> OnRetry<T, E> for F {
    fn on_retry(&self, event: &RetryEvent<'_, T, E>) {
        self(event);
    }
}

/// Something told when a call gives up: a closure
/// `Fn(&GiveUpEvent<'_, T, E>)`, or [`Ignore`].
pub trait OnGiveUp<T, E> {
    /// Tells it.
    fn on_give_up(&self, event: &GiveUpEvent<'_, T, E>);
}

impl<T, E> OnGiveUp<T, E> for Ignore {
    fn on_give_up(&self, _: &GiveUpEvent<'_, T, E>) {}
}

impl<T, E, F: Fn(&GiveUpEvent<'_, T, E>)> OnGiveUp<T, E> for F {
    fn on_give_up(&self, event: &GiveUpEvent<'_, T, E>) {
        self(event);
    }
}
