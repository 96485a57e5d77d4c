//! The circuit breaker (documented in `limit`).

use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::time::{Duration, Instant};

use crate::classify::Verdict;
use crate::limit::adaptive::AdaptiveThrottle;
use crate::state::vocabulary::Attempted;
use crate::sync::AtomicU64;
use crate::time::clock::nanos_since_origin;

/// The breaker's state word, so that every transition is one
/// compare-and-swap: two bits of state; a generation, moved on each time the
/// breaker opens, which every permit remembers, so that a failure reported
/// late by a call admitted before the breaker opened never counts after it
/// closed again; and a payload: the consecutive failures while closed,
/// while open when it opened (milliseconds since the process origin; 0:
/// the cooldown is over, as after a probe that never reported), while
/// half-open when the probe in flight was let through; held open (by an
/// operator, until reset), none.
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const HELD: u64 = 3;
const TAG: u64 = 0b11;
const GEN_SHIFT: u32 = 2;
const GEN_MASK: u64 = (1 << 20) - 1;
const PAYLOAD_SHIFT: u32 = 22;
const PAYLOAD_MAX: u64 = (1 << (64 - PAYLOAD_SHIFT)) - 1;

const fn word(tag: u64, generation: u64, payload: u64) -> u64 {
    (payload << PAYLOAD_SHIFT) | ((generation & GEN_MASK) << GEN_SHIFT) | tag
}

const fn generation(word: u64) -> u64 {
    (word >> GEN_SHIFT) & GEN_MASK
}

const fn payload(word: u64) -> u64 {
    word >> PAYLOAD_SHIFT
}

/// Milliseconds since the process origin, never 0 (the origin lies a day
/// before the first reading) and within the payload.
fn millis(now: Instant) -> u64 {
    (nanos_since_origin(now) / 1_000_000).clamp(1, PAYLOAD_MAX)
}

/// Where a [`CircuitBreaker`] stands.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{BreakerState, CircuitBreaker};
/// let breaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls go through; consecutive retryable failures are counted.
    Closed,
    /// Calls are rejected until the cooldown is over.
    Open,
    /// The cooldown is over: the next call is a trial (the probe; or the
    /// next ones, with [`trials`](CircuitBreaker::trials)). Or the trials
    /// are in flight, and the others are rejected until they report, or
    /// until a cooldown after they were let through (then the next caller
    /// is a new trial).
    HalfOpen,
    /// Held open by [`CircuitBreaker::hold_open`]: every call is rejected
    /// until [`CircuitBreaker::reset`].
    HeldOpen,
}

pub use crate::state::vocabulary::CircuitOpen;

/// Why a [`CircuitBreaker`] changed state, in a [`BreakerChange`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
/// use std::time::{Duration, Instant};
/// use backstop::limit::{BreakerChange, ChangeReason, CircuitBreaker};
/// use backstop::Verdict;
///
/// static OPENED: AtomicU32 = AtomicU32::new(0);
/// static RESET: AtomicU32 = AtomicU32::new(0);
/// fn note(change: &BreakerChange) {
///     match change.reason {
///         ChangeReason::Failures => OPENED.fetch_add(1, Relaxed),
///         ChangeReason::Reset => RESET.fetch_add(1, Relaxed),
///         _ => 0,
///     };
/// }
/// static DB: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(30)).on_change(note);
/// let now = Instant::now();
/// DB.try_acquire(now).unwrap().failed(Verdict::Retry, now);
/// DB.reset();
/// assert_eq!((OPENED.load(Relaxed), RESET.load(Relaxed)), (1, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeReason {
    /// Closed → open: `failure_threshold` consecutive retryable failures,
    /// or, for a breaker that judges ratios, its share of the window.
    Failures,
    /// Open → half-open: the cooldown is over and a trial was let through.
    TrialStarted,
    /// Half-open → closed: the trial succeeded (all of them, with
    /// [`trials`](CircuitBreaker::trials)).
    TrialSucceeded,
    /// Half-open → open: the trial failed; open for another cooldown.
    TrialFailed,
    /// Half-open → open: the trial was dropped (its caller's own timeout,
    /// say) or panicked without reporting. As if it were still out, the
    /// next trial goes a cooldown after it was let through (at once if
    /// that time has passed).
    TrialAbandoned,
    /// → held open, by [`CircuitBreaker::hold_open`].
    HeldOpen,
    /// → closed, by [`CircuitBreaker::reset`].
    Reset,
    /// Open or half-open → closed: its key's place in a full
    /// [`Keyed`](crate::limit::Keyed) table went to another key, its trial
    /// due for a whole cooldown and no call of its key come to make it.
    Forgotten,
}

/// A [`CircuitBreaker`]'s change of state, as its
/// [`on_change`](CircuitBreaker::on_change) hook, `tracing` and `metrics`
/// are told it.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::sync::OnceLock;
/// use std::time::{Duration, Instant};
/// use backstop::limit::{BreakerChange, BreakerState, ChangeReason, CircuitBreaker};
/// use backstop::Verdict;
///
/// static FIRST: OnceLock<BreakerChange> = OnceLock::new();
/// fn note(change: &BreakerChange) {
///     let _ = FIRST.set(*change);
/// }
/// static DB: CircuitBreaker =
///     CircuitBreaker::new(1, Duration::from_secs(30)).named("db").on_change(note);
/// let now = Instant::now();
/// DB.try_acquire(now).unwrap().failed(Verdict::Retry, now);
/// let change = FIRST.get().expect("told");
/// assert_eq!((change.breaker, change.key), ("db", None));
/// assert_eq!((change.from, change.to), (BreakerState::Closed, BreakerState::Open));
/// assert_eq!(change.reason, ChangeReason::Failures);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerChange {
    /// The breaker's [`name`](CircuitBreaker::named) (`""` for none).
    pub breaker: &'static str,
    /// The name of the key whose breaker it is, for a breaker kept per
    /// key ([`Keyed`](crate::limit::Keyed)): the key's `Debug` text, a
    /// destination's `scheme://host:port`, `#` and the hex of its hash for
    /// a key no call named (a hash of this process's: it differs after a
    /// restart), or `(other)` once the names are full (see
    /// `Keyed`'s telemetry); `None` for a breaker of its own (a table's
    /// shared breaker, of the calls that give no key, too).
    pub key: Option<&'static str>,
    /// The state it left.
    pub from: BreakerState,
    /// The state it is in now.
    pub to: BreakerState,
    /// Why.
    pub reason: ChangeReason,
}

/// A lock-free circuit breaker, shareable as a `static`.
///
/// Closed, it lets calls through and counts consecutive retryable
/// failures (a [`Verdict::Stop`] failure, such as a 400, is the caller's
/// fault, not the dependency's: it neither counts nor ends a run; a
/// success does). At `failure_threshold` it opens: calls are rejected for
/// `cooldown` (kept in whole milliseconds, rounded up, on a clock read in
/// whole milliseconds: the trial may go up to a millisecond before the
/// cooldown has passed in full). Then it
/// is half-open: exactly one call, the probe, goes through and is never
/// retried; its success closes the breaker, its failure opens it again. A
/// probe that hangs, panics, or whose future is dropped (its caller's own
/// timeout) holds the slot for a cooldown at most: a cooldown after it was
/// let through, the next caller is a new trial (one per cooldown, as
/// Polly's breaker does, whatever the callers' timeouts), and the first
/// trial to report decides. (That is the default rule: [`ratio`](Self::ratio)
/// judges a share of failures over a window instead, [`trials`](Self::trials)
/// lets several trials through, all to succeed, and
/// [`growing`](Self::growing) lengthens the break after each failed trial.)
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::{Duration, Instant};
/// use backstop::{limit::{BreakerState, CircuitBreaker}, Verdict};
///
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(3, Duration::from_secs(10));
///
/// let now = Instant::now();
/// for _ in 0..3 {
///     let permit = PAYMENTS.try_acquire(now).unwrap();
///     permit.failed(Verdict::Retry, now); // a retryable failure
/// }
/// assert_eq!(PAYMENTS.state(), BreakerState::Open);
/// assert!(PAYMENTS.try_acquire(now).is_err()); // rejected, not run
///
/// let later = now + Duration::from_secs(10);
/// let probe = PAYMENTS.try_acquire(later).unwrap();
/// assert!(PAYMENTS.try_acquire(later).is_err()); // one probe at a time
/// probe.succeeded(later); // it succeeded
/// assert_eq!(PAYMENTS.state(), BreakerState::Closed);
/// ```
///
/// Invalid arguments are rejected while the `static` is compiled:
///
/// ```compile_fail
/// # extern crate backstop_runtime as backstop;
/// # use std::time::Duration; use backstop::limit::CircuitBreaker;
/// static BAD: CircuitBreaker = CircuitBreaker::new(0, Duration::from_secs(10));
/// # fn main() { let _ = &BAD; }
/// ```
pub struct CircuitBreaker {
    failure_threshold: u32,
    cooldown: Duration,
    /// The cooldown in milliseconds, rounded up.
    cooldown_millis: u64,
    state: AtomicU64,
    name: &'static str,
    on_change: Option<fn(&BreakerChange)>,
    /// The ratio rule, for a breaker made by [`ratio`](Self::ratio).
    ratio: Option<RatioRule>,
    /// How the break grows after each failed trial, if it does: the
    /// factor, and the longest break in milliseconds.
    growth: Option<(u32, u64)>,
    /// Trials failed in a row since the breaker last closed.
    streak: AtomicU64,
    /// For a breaker kept per key: its key, as the names of keys keep it
    /// (0: none). Telemetry, and a call's check that the place is still
    /// its key's: std's atomic under loom too.
    key: std::sync::atomic::AtomicU64,
    /// When a failure was last counted while closed (milliseconds from
    /// the clock's origin; 0: never): how long a key whose breaker counts
    /// failures has not failed, for its place in a full table. A
    /// heuristic's input: std's atomic under loom too.
    failed_at: std::sync::atomic::AtomicU64,
    /// Trials a half-open breaker lets through, all to succeed to close it.
    trials: u32,
    /// With more than one trial: the half-open round's trials let through
    /// and succeeded, tagged with the round (the low bits of its start).
    trial_counts: AtomicU64,
}

/// `trial_counts`: the round's tag above the trials let through and the
/// trials succeeded.
const fn trial_word(round: u64, admitted: u64, succeeded: u64) -> u64 {
    ((round & 0xffff_ffff) << 32) | ((admitted & 0xffff) << 16) | (succeeded & 0xffff)
}

const fn trial_round(word: u64) -> u64 {
    word >> 32
}

/// The tag of the half-open round whose state word is `half_open`: its
/// generation and the low bits of its start, so that a round begun in the
/// same millisecond as the last (after a trial was dropped) is another.
const fn round_tag(half_open: u64) -> u64 {
    ((generation(half_open) & GEN_MASK) << 12) | (payload(half_open) & 0xfff)
}

/// The rule of a breaker that judges ratios: calls and failures over a
/// sliding window (an adaptive throttle's window, counting calls as
/// requests and failures as accepts).
struct RatioRule {
    failure_ratio: f64,
    minimum_throughput: u32,
    window: AdaptiveThrottle,
}

/// Leave to make one call through a [`CircuitBreaker`]: report its outcome
/// with [`succeeded`](Permit::succeeded) or [`failed`](Permit::failed).
/// Dropped without a report (the call panicked, or its future was
/// dropped), a probe frees the half-open slot a cooldown after it was let
/// through (at once if that time has passed).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::{Duration, Instant};
/// use backstop::limit::CircuitBreaker;
/// use backstop::Verdict;
///
/// static DB: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));
/// let now = Instant::now();
/// match DB.try_acquire(now) {
///     Ok(permit) => match std::fs::metadata(".") {
///         Ok(_) => permit.succeeded(now),
///         Err(_) => permit.failed(Verdict::Retry, now),
///     },
///     Err(open) => panic!("{open}: not called"),
/// }
/// ```
#[must_use = "report the call's outcome with `succeeded` or `failed`"]
pub struct Permit<'a> {
    breaker: &'a CircuitBreaker,
    probe: bool,
    /// The breaker's state word when the permit was given: its
    /// generation, and for a probe the half-open word it made.
    admitted: u64,
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("probe", &self.probe)
            .finish_non_exhaustive()
    }
}

impl CircuitBreaker {
    const_unless_loom! {
        /// A breaker that opens after `failure_threshold` consecutive
        /// retryable failures and stays open for `cooldown`.
        ///
        /// # Panics
        ///
        /// If `failure_threshold` or `cooldown` is zero (a breaker that
        /// cools down at once lets every call through). In a `static` that
        /// is a compile error.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::time::Duration;
        /// use backstop::limit::CircuitBreaker;
        /// static USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
        /// assert_eq!(USERS.failure_threshold(), 5);
        /// ```
        pub fn new(failure_threshold: u32, cooldown: Duration) -> Self {
            assert!(
                failure_threshold > 0,
                "CircuitBreaker::new: `failure_threshold` must be at least 1"
            );
            assert!(
                !cooldown.is_zero(),
                "CircuitBreaker::new: `cooldown` must be above zero (a breaker that cools down \
                 at once lets every call through)"
            );
            let millis = cooldown.as_nanos().div_ceil(1_000_000);
            Self {
                failure_threshold,
                cooldown,
                cooldown_millis: if millis > u64::MAX as u128 {
                    u64::MAX
                } else {
                    millis as u64
                },
                state: AtomicU64::new(CLOSED),
                name: "",
                on_change: None,
                ratio: None,
                growth: None,
                streak: AtomicU64::new(0),
                key: std::sync::atomic::AtomicU64::new(0),
                failed_at: std::sync::atomic::AtomicU64::new(0),
                trials: 1,
                trial_counts: AtomicU64::new(0),
            }
        }
    }

    const_unless_loom! {
        /// A breaker that judges ratios, as Polly's and resilience4j's do:
        /// it opens when at least `failure_ratio` of the calls of the last
        /// `sampling` failed retryably, once that window saw at least
        /// `minimum_throughput` calls, and breaks for `break_for` (see
        /// [`growing`](Self::growing)). Then its trial goes (or its
        /// [`trials`](Self::trials)), as for [`new`](Self::new); success
        /// closes the breaker with the window emptied.
        ///
        /// Each attempt is a call of the window (a call retried three times
        /// is three). The share is judged when a failure comes in, as
        /// Polly judges it (resilience4j judges at every outcome: a
        /// success never opens a breaker here). Several trials must all
        /// succeed, where resilience4j judges them by the failure rate.
        ///
        /// # Panics
        ///
        /// If `failure_ratio` is not in `(0, 1]`, `minimum_throughput` or
        /// `break_for` is zero, or `sampling` is shorter than 8 µs. In a
        /// `static` that is a compile error.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::time::{Duration, Instant};
        /// use backstop::limit::{BreakerState, CircuitBreaker};
        /// use backstop::Verdict;
        /// // Polly's default: 10% of at least 100 calls over 30 s.
        /// static SEARCH: CircuitBreaker = CircuitBreaker::ratio(
        ///     0.1, 100, Duration::from_secs(30), Duration::from_secs(5));
        /// let now = Instant::now();
        /// for call in 0..100 {
        ///     let permit = SEARCH.try_acquire(now).unwrap();
        ///     if call % 10 == 9 { permit.failed(Verdict::Retry, now) } else { permit.succeeded(now) }
        /// }
        /// assert_eq!(SEARCH.state_at(now), BreakerState::Open, "10 of 100 failed");
        /// ```
        pub fn ratio(
            failure_ratio: f64,
            minimum_throughput: u32,
            sampling: Duration,
            break_for: Duration,
        ) -> Self {
            assert!(
                failure_ratio > 0.0 && failure_ratio <= 1.0,
                "CircuitBreaker::ratio: `failure_ratio` must be above 0 and at most 1"
            );
            assert!(
                minimum_throughput > 0,
                "CircuitBreaker::ratio: `minimum_throughput` must be at least 1"
            );
            assert!(
                !break_for.is_zero(),
                "CircuitBreaker::ratio: `break_for` must be above zero (a breaker that breaks \
                 for no time lets every call through)"
            );
            let mut breaker = Self::new(u32::MAX, break_for);
            breaker.ratio = Some(RatioRule {
                failure_ratio,
                minimum_throughput,
                window: AdaptiveThrottle::new(1.0, sampling),
            });
            breaker
        }
    }

    const_unless_loom! {
        /// This breaker, its break growing `factor` times longer after each
        /// trial that fails, up to `longest`; a trial that succeeds (or a
        /// [`reset`](Self::reset)) brings it back to the cooldown given. A
        /// `longest` shorter than the cooldown is the cooldown: the break
        /// never grows (a configured breaker refuses one). A trial dropped
        /// before its outcome (a caller's own timeout around a hung call)
        /// does not grow it: the breaker opens again for the cooldown it
        /// had. Cut a hung trial off with an `attempt_timeout`, whose
        /// cut-off is a failure, for the break to grow.
        ///
        /// # Panics
        ///
        /// If `factor` is below 2. In a `static` that is a compile error.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::time::{Duration, Instant};
        /// use backstop::limit::CircuitBreaker;
        /// use backstop::Verdict;
        /// static DB: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(1))
        ///     .growing(2, Duration::from_secs(60));
        /// let t0 = Instant::now();
        /// let at = |s| t0 + Duration::from_secs(s);
        /// DB.try_acquire(at(0)).unwrap().failed(Verdict::Retry, at(0)); // open for 1 s
        /// DB.try_acquire(at(1)).unwrap().failed(Verdict::Retry, at(1)); // the trial fails: 2 s
        /// assert!(DB.try_acquire(at(2)).is_err());
        /// assert!(DB.try_acquire(at(3)).is_ok(), "the next trial, 2 s on");
        /// ```
        #[must_use]
        pub fn growing(mut self, factor: u32, longest: Duration) -> Self {
            assert!(factor >= 2, "CircuitBreaker::growing: `factor` must be at least 2");
            let millis = longest.as_nanos().div_ceil(1_000_000);
            self.growth = Some((factor, if millis > u64::MAX as u128 { u64::MAX } else { millis as u64 }));
            self
        }
    }

    const_unless_loom! {
        /// This breaker, letting `trials` calls through when half-open (one
        /// unless told): all of them must succeed to close it, and one
        /// failure opens it again. The others are turned away while the
        /// trials are out. A trial dropped before its outcome (a caller's
        /// timeout around it, a cancelled task) counts as one that failed
        /// for the whole round: the breaker is open again, for a cooldown
        /// from when that trial went, whatever the others then answer.
        ///
        /// # Panics
        ///
        /// If `trials` is zero or above 1000. In a `static` that is a
        /// compile error.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::time::{Duration, Instant};
        /// use backstop::limit::{BreakerState, CircuitBreaker};
        /// use backstop::Verdict;
        /// static DB: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(1)).trials(3);
        /// let t0 = Instant::now();
        /// DB.try_acquire(t0).unwrap().failed(Verdict::Retry, t0);
        /// let later = t0 + Duration::from_secs(1);
        /// let trials: Vec<_> = (0..3).map(|_| DB.try_acquire(later).unwrap()).collect();
        /// assert!(DB.try_acquire(later).is_err(), "three trials out");
        /// for trial in trials {
        ///     trial.succeeded(later);
        /// }
        /// assert_eq!(DB.state_at(later), BreakerState::Closed);
        /// ```
        #[must_use]
        pub fn trials(mut self, trials: u32) -> Self {
            assert!(
                trials >= 1 && trials <= 1000,
                "CircuitBreaker::trials: between 1 and 1000"
            );
            self.trials = trials;
            self
        }
    }

    /// The share of failed calls that opens the breaker, for one made by
    /// [`ratio`](Self::ratio).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::CircuitBreaker;
    /// static COUNTING: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    /// assert_eq!(COUNTING.failure_ratio(), None);
    /// let ratio = CircuitBreaker::ratio(0.5, 20, Duration::from_secs(10), Duration::from_secs(30));
    /// assert_eq!(ratio.failure_ratio(), Some(0.5));
    /// ```
    pub fn failure_ratio(&self) -> Option<f64> {
        self.ratio.as_ref().map(|ratio| ratio.failure_ratio)
    }

    /// Its break as it stands: its [`cooldown`](Self::cooldown), or for
    /// one that is [`growing`](Self::growing), the cooldown grown by each
    /// trial failed in a row since it last closed, up to its longest. Open
    /// or half-open, the break it is in (the next failed trial grows it
    /// once more); closed, the cooldown it opens with next.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::{limit::CircuitBreaker, Verdict};
    /// let breaker = CircuitBreaker::new(1, Duration::from_secs(1))
    ///     .growing(2, Duration::from_secs(60));
    /// let t0 = Instant::now();
    /// breaker.try_acquire(t0).unwrap().failed(Verdict::Retry, t0);
    /// assert_eq!(breaker.current_break(), Duration::from_secs(1));
    /// let trial = t0 + Duration::from_secs(1);
    /// breaker.try_acquire(trial).unwrap().failed(Verdict::Retry, trial);
    /// assert_eq!(breaker.current_break(), Duration::from_secs(2), "a failed trial doubles it");
    /// ```
    pub fn current_break(&self) -> Duration {
        match self.growth {
            None => self.cooldown,
            Some(_) => Duration::from_millis(self.break_millis()).max(self.cooldown),
        }
    }

    /// The break after the trials failed so far in a row.
    fn break_millis(&self) -> u64 {
        match self.growth {
            None => self.cooldown_millis,
            Some((factor, longest)) => {
                let streak = self.streak.load(Acquire).min(64) as u32;
                let grown = u64::from(factor)
                    .checked_pow(streak)
                    .and_then(|f| self.cooldown_millis.checked_mul(f))
                    .unwrap_or(u64::MAX);
                grown.min(longest.max(self.cooldown_millis))
            }
        }
    }

    const_unless_loom! {
        /// This breaker, named `name` in its [`BreakerChange`]s, its
        /// `tracing` events (`breaker` field) and its `metrics` gauge
        /// (`breaker` label). Unnamed, its name is empty, which every
        /// unnamed breaker shares: name each breaker telemetry watches.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::time::Duration;
        /// use backstop::limit::CircuitBreaker;
        /// static PAYMENTS: CircuitBreaker =
        ///     CircuitBreaker::new(5, Duration::from_secs(30)).named("payments");
        /// assert_eq!(PAYMENTS.name(), "payments");
        /// ```
        #[must_use]
        pub fn named(mut self, name: &'static str) -> Self {
            self.name = name;
            self
        }
    }

    const_unless_loom! {
        /// This breaker, calling `hook` with each change of its state
        /// (opened, half-open, closed, held open, and why), on the thread
        /// of the call that changed it, after the change. Keep it short: it
        /// runs inside that call. Changes made on two threads at about the
        /// same instant may reach it in the other order: read
        /// [`state`](Self::state) for where the breaker stands.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use std::sync::atomic::{AtomicU32, Ordering};
        /// use std::time::{Duration, Instant};
        /// use backstop::limit::{BreakerChange, BreakerState, CircuitBreaker};
        /// use backstop::Verdict;
        ///
        /// static OPENED: AtomicU32 = AtomicU32::new(0);
        /// fn count_openings(change: &BreakerChange) {
        ///     if change.to == BreakerState::Open {
        ///         OPENED.fetch_add(1, Ordering::Relaxed);
        ///     }
        /// }
        /// static PAYMENTS: CircuitBreaker =
        ///     CircuitBreaker::new(1, Duration::from_secs(30)).on_change(count_openings);
        /// let now = Instant::now();
        /// PAYMENTS.try_acquire(now).unwrap().failed(Verdict::Retry, now);
        /// assert_eq!(OPENED.load(Ordering::Relaxed), 1);
        /// ```
        #[must_use]
        pub fn on_change(mut self, hook: fn(&BreakerChange)) -> Self {
            self.on_change = Some(hook);
            self
        }
    }

    /// The name given by [`named`](Self::named), `""` for none.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::CircuitBreaker;
    /// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30)).named("db");
    /// assert_eq!(DB.name(), "db");
    /// assert_eq!(CircuitBreaker::new(5, Duration::from_secs(30)).name(), "");
    /// ```
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// A breaker made like this one (its rule, name and hook), closed.
    pub(crate) fn made_like(&self) -> Self {
        let mut fresh = match &self.ratio {
            Some(ratio) => Self::ratio(
                ratio.failure_ratio,
                ratio.minimum_throughput,
                ratio.window.window(),
                self.cooldown,
            ),
            None => Self::new(self.failure_threshold, self.cooldown),
        };
        fresh.name = self.name;
        fresh.on_change = self.on_change;
        fresh.growth = self.growth;
        fresh.trials = self.trials;
        fresh
    }

    /// Tells the hook, `tracing` and `metrics` that the state word went
    /// from `from` to `to`, for `reason`. Only on a change: never on the
    /// path of a call that changes nothing.
    #[cold]
    fn changed(&self, from: u64, to: u64, reason: ChangeReason) {
        self.told(
            self.key.load(std::sync::atomic::Ordering::Relaxed),
            from,
            to,
            reason,
        );
    }

    /// [`changed`](Self::changed), told under the key whose hash is
    /// `key_word` (none: `0`).
    #[cold]
    fn told(&self, key_word: u64, from: u64, to: u64, reason: ChangeReason) {
        let state = |word: u64| match word & TAG {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::HeldOpen,
        };
        // The key's name; a key no call named is named now, by its hash:
        // a name is never changed after, so the gauge goes up and down by
        // the same labels whatever order racing changes are told in.
        let key = match key_word {
            0 => None,
            word => {
                crate::limit::names::name(word, || format!("#{word:016x}"));
                Some(crate::limit::names::of(word))
            }
        };
        let change = BreakerChange {
            breaker: self.name,
            key,
            from: state(from),
            to: state(to),
            reason,
        };
        if change.from == change.to {
            return;
        }
        // A closed breaker starts its count again, and its break from the
        // cooldown given.
        if change.to == BreakerState::Closed {
            self.streak.store(0, Release);
            if let Some(ratio) = &self.ratio {
                ratio.window.clear();
            }
        }
        if reason == ChangeReason::TrialFailed {
            self.streak.fetch_add(1, AcqRel);
        }
        #[cfg(feature = "tracing")]
        {
            let (from, to) = (change.from, change.to);
            let key = change.key;
            macro_rules! told {
                ($level:ident, $what:literal) => {
                    tracing::$level!(breaker = self.name, key, ?from, ?to, ?reason, $what)
                };
            }
            if reason == ChangeReason::Forgotten {
                // Not a recovery: the key's calls go on, if it has any, with
                // a fresh breaker.
                told!(
                    warn,
                    "circuit breaker forgotten: its key has not come since its trial was due, \
                     and its place went to another key"
                );
            } else if to == BreakerState::Closed {
                told!(info, "circuit breaker closed");
            } else if matches!(
                reason,
                ChangeReason::TrialStarted | ChangeReason::TrialFailed
            ) {
                // A trial started or failed: an outage repeats it every
                // cooldown, for every breaker (every key of a table), at
                // INFO; what an on-call engineer is woken for (opened,
                // held open, a trial abandoned, forgotten) at WARN.
                told!(info, "circuit breaker changed");
            } else {
                told!(warn, "circuit breaker changed");
            }
        }
        #[cfg(feature = "metrics")]
        self.set_gauge(key_word, change.key);
        if let Some(hook) = self.on_change {
            hook(&change);
        }
    }

    /// Sets `backstop_breakers_open` for the key whose hash is `key_word`
    /// (named `key`): whether the breaker is not closed, by name, and by
    /// key for a table's; set at every change, not added to, so that a
    /// breaker that changed before the recorder was installed reads right
    /// from its next change (a count kept by adding went below zero).
    /// From the state as it is, not from the change told: changes made on
    /// other threads meanwhile may be told before this one. Set, then look
    /// again (after a full fence, so that the look is not made before the
    /// set lands): a change made after that look is set by its own thread
    /// after it, so the last set is the state's. A key the breaker is no
    /// longer the place of (forgotten, its place another key's) reads 0.
    #[cfg(feature = "metrics")]
    #[cold]
    fn set_gauge(&self, key_word: u64, key: Option<&'static str>) {
        let mut labels = vec![metrics::Label::new("breaker", self.name)];
        if let Some(key) = key {
            labels.push(metrics::Label::new("key", key));
        }
        let gauge = metrics::gauge!("backstop_breakers_open", labels);
        let open = || {
            self.key.load(std::sync::atomic::Ordering::Relaxed) == key_word
                && self.state.load(Acquire) & TAG != CLOSED
        };
        let mut set = open();
        loop {
            gauge.set(if set { 1.0 } else { 0.0 });
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let now = open();
            if now == set {
                break;
            }
            set = now;
        }
    }

    /// Consecutive retryable failures that open the breaker (`u32::MAX`
    /// for one made by [`ratio`](Self::ratio), which judges ratios
    /// instead).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::CircuitBreaker;
    /// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    /// assert_eq!(DB.failure_threshold(), 5);
    /// ```
    pub const fn failure_threshold(&self) -> u32 {
        self.failure_threshold
    }

    /// How long the breaker stays open before it lets a probe through.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::CircuitBreaker;
    /// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    /// assert_eq!(DB.cooldown(), Duration::from_secs(30));
    /// ```
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// Where the breaker stands now, on the clock the retry loops of this
    /// thread read: virtual time under
    /// [`VirtualTime`](crate::testing::VirtualTime), else the timer set
    /// with [`set_timer`](crate::time::set_timer), else tokio's inside a
    /// tokio runtime (paused or not), else the system's; see
    /// [`state_at`](Self::state_at). A sync call reads the system's clock
    /// (or virtual time), not a timer set nor a paused runtime's: for sync
    /// calls made there, ask `state_at` with the clock they read.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::{BreakerState, CircuitBreaker};
    /// use backstop::Verdict;
    /// let db = CircuitBreaker::new(1, Duration::from_secs(30));
    /// assert_eq!(db.state(), BreakerState::Closed);
    /// let now = Instant::now();
    /// db.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// assert_eq!(db.state(), BreakerState::Open);
    /// ```
    pub fn state(&self) -> BreakerState {
        self.state_at(crate::time::clock::loop_now())
    }

    /// Where the breaker stands at `now`: `HalfOpen` as soon as a trial may
    /// go (its cooldown is over), and while one is in flight.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::{BreakerState, CircuitBreaker};
    /// use backstop::Verdict;
    /// let breaker = CircuitBreaker::new(1, Duration::from_secs(10));
    /// let now = Instant::now();
    /// breaker.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// assert_eq!(breaker.state_at(now), BreakerState::Open);
    /// let later = now + Duration::from_secs(10);
    /// assert_eq!(breaker.state_at(later), BreakerState::HalfOpen, "a trial may go");
    /// ```
    pub fn state_at(&self, now: Instant) -> BreakerState {
        let current = self.state.load(Acquire);
        match current & TAG {
            CLOSED => BreakerState::Closed,
            OPEN if self.cooled_down(current, millis(now)) => BreakerState::HalfOpen,
            OPEN => BreakerState::Open,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::HeldOpen,
        }
    }

    /// Holds the breaker open, for an operator (a dependency taken down
    /// for maintenance, or known to be failing): every call is rejected
    /// with [`CircuitOpen`], whatever the cooldown, until
    /// [`reset`](Self::reset). What calls let through before report is
    /// ignored. (Under [`testing::isolate`](crate::testing::isolate), a
    /// test's calls draw on a fresh copy of the breaker: hold that one,
    /// [`testing::own`](crate::testing::own)`(&BREAKER).hold_open()`.)
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::{BreakerState, CircuitBreaker};
    /// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    /// let now = Instant::now();
    /// PAYMENTS.hold_open();
    /// assert_eq!(PAYMENTS.state(), BreakerState::HeldOpen);
    /// assert!(PAYMENTS.try_acquire(now + Duration::from_secs(3600)).is_err(), "no cooldown ends it");
    /// PAYMENTS.reset();
    /// assert!(PAYMENTS.try_acquire(now).is_ok());
    /// ```
    pub fn hold_open(&self) {
        self.restart(HELD);
    }

    /// Closes the breaker, with no failures counted, for an operator (the
    /// dependency is known to be back, or a hold is over). What calls let
    /// through before report is ignored: a failure from before the reset
    /// does not count after it.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::{BreakerState, CircuitBreaker};
    /// use backstop::Verdict;
    /// let breaker = CircuitBreaker::new(1, Duration::from_secs(30));
    /// let now = Instant::now();
    /// breaker.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// assert_eq!(breaker.state_at(now), BreakerState::Open);
    /// breaker.reset();
    /// assert_eq!(breaker.state_at(now), BreakerState::Closed);
    /// ```
    pub fn reset(&self) {
        self.restart(CLOSED);
    }

    /// Its place in a [`Keyed`](crate::limit::Keyed) table is `word`'s
    /// now (a key's hash as the names of keys keep it): its changes are
    /// told with that key's name.
    pub(crate) fn keyed_as(&self, word: u64) {
        self.key.store(word, std::sync::atomic::Ordering::Relaxed);
    }

    /// The key whose place in a [`Keyed`](crate::limit::Keyed) table this
    /// is now (its word, as [`keyed_as`](Self::keyed_as) was given it); 0
    /// for a breaker of no table's, or a table's shared one.
    pub(crate) fn keyed_word(&self) -> u64 {
        self.key.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Closed, in a new generation: a breaker whose place in a table goes
    /// to another key, so that what the calls of the key it held report
    /// counts no more; silently if it was closed with nothing counted, and
    /// told as [`ChangeReason::Forgotten`], under the key it was (`was`,
    /// its hash; its place is labelled with the new key's by then), if it
    /// was open or half-open and given up ([`is_stale`](Self::is_stale)).
    pub(crate) fn renew(&self, was: u64) {
        let mut current = self.state.load(Acquire);
        // Until it holds: a failure of the key before, counted meanwhile,
        // is not the new key's to inherit (nor an open breaker it made).
        while matches!(current & TAG, CLOSED | OPEN | HALF_OPEN) {
            let next = word(CLOSED, generation(current).wrapping_add(1), 0);
            match self
                .state
                .compare_exchange_weak(current, next, AcqRel, Acquire)
            {
                Ok(_) => {
                    if current & TAG != CLOSED {
                        self.told(was, current, next, ChangeReason::Forgotten);
                        // A change of the new key's told before this one
                        // (its call came to the place first) may have set
                        // its gauge while the old breaker was open.
                        #[cfg(feature = "metrics")]
                        {
                            let key = self.key.load(std::sync::atomic::Ordering::Relaxed);
                            if key != 0 && key != was {
                                crate::limit::names::name(key, || format!("#{key:016x}"));
                                self.set_gauge(key, Some(crate::limit::names::of(key)));
                            }
                        }
                    }
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Moves the breaker to `tag` (held open, or closed with no failures),
    /// in a new generation: no permit given before counts after.
    fn restart(&self, tag: u64) {
        let mut current = self.state.load(Acquire);
        loop {
            let next = word(tag, generation(current).wrapping_add(1), 0);
            match self
                .state
                .compare_exchange_weak(current, next, AcqRel, Acquire)
            {
                Ok(_) => {
                    let reason = if tag == HELD {
                        ChangeReason::HeldOpen
                    } else {
                        // Closed again, or still: a ratio's window forgets
                        // the calls it counted (a change of state clears it
                        // too; a reset of a closed breaker changes none).
                        if let Some(ratio) = &self.ratio {
                            ratio.window.clear();
                        }
                        ChangeReason::Reset
                    };
                    self.changed(current, next, reason);
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Asks to make one call at `now`: a permit, or [`CircuitOpen`] while
    /// the breaker is open (or a probe is in flight, for a cooldown at
    /// most).
    ///
    /// # Errors
    ///
    /// [`CircuitOpen`]: the call must not be made.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::CircuitBreaker;
    /// use backstop::Verdict;
    /// let db = CircuitBreaker::new(1, Duration::from_secs(30));
    /// let now = Instant::now();
    /// db.try_acquire(now).expect("closed").failed(Verdict::Retry, now);
    /// assert!(db.try_acquire(now).is_err(), "open: the call is not made");
    /// // A cooldown later, one trial goes.
    /// let later = now + Duration::from_secs(30);
    /// let trial = db.try_acquire(later).expect("the trial");
    /// assert!(trial.is_probe());
    /// trial.succeeded(later);
    /// assert!(db.try_acquire(later).is_ok(), "closed again");
    /// ```
    pub fn try_acquire(&self, now: Instant) -> Result<Permit<'_>, CircuitOpen> {
        let now = millis(now);
        let mut current = self.state.load(Acquire);
        loop {
            match current & TAG {
                CLOSED => {
                    return Ok(Permit {
                        breaker: self,
                        probe: false,
                        admitted: current,
                    });
                }
                // Open past its cooldown, or half-open with a probe let
                // through a cooldown ago that has not reported (hung: no
                // attempt timeout cut it off): exactly one caller wins the
                // move to a new trial.
                OPEN | HALF_OPEN if self.cooled_down(current, now) => {
                    // With several trials, a round after a hung one is a
                    // new generation: the hung round's trials count for
                    // nothing in it. (One trial: the first to report
                    // decides, the hung one included.)
                    let generation = if current & TAG == HALF_OPEN && self.trials > 1 {
                        generation(current).wrapping_add(1)
                    } else {
                        generation(current)
                    };
                    let half_open = word(HALF_OPEN, generation, now);
                    match self
                        .state
                        .compare_exchange(current, half_open, AcqRel, Acquire)
                    {
                        Ok(_) => {
                            if current & TAG == OPEN {
                                self.changed(current, half_open, ChangeReason::TrialStarted);
                            }
                            if self.trials > 1 {
                                // One of the round's trials, counted as
                                // the others are.
                                return self.admit_trial(half_open);
                            }
                            return Ok(Permit {
                                breaker: self,
                                probe: true,
                                admitted: half_open,
                            });
                        }
                        Err(actual) => current = actual,
                    }
                }
                // Half-open with room for another trial of this round.
                HALF_OPEN if self.trials > 1 => return self.admit_trial(current),
                _ => return Err(CircuitOpen::new()),
            }
        }
    }

    /// One more trial of the half-open round `half_open` started, if the
    /// round has room. The round's counts start at the first caller to
    /// count in it (counts tagged with an earlier round are that round's).
    fn admit_trial(&self, half_open: u64) -> Result<Permit<'_>, CircuitOpen> {
        let round = round_tag(half_open);
        let counted = self.trial_counts.fetch_update(AcqRel, Acquire, |t| {
            let (admitted, succeeded) = if trial_round(t) == round {
                ((t >> 16) & 0xffff, t & 0xffff)
            } else {
                (0, 0)
            };
            (admitted < u64::from(self.trials)).then(|| trial_word(round, admitted + 1, succeeded))
        });
        match counted {
            Ok(_) => Ok(Permit {
                breaker: self,
                probe: true,
                admitted: half_open,
            }),
            Err(_) => Err(CircuitOpen::new()),
        }
    }

    /// A cooldown has passed between the opening (or the probe's start) and
    /// `now`, on either side:
    /// callers whose clocks disagree (a test's paused clock an hour ahead
    /// beside real time) share a breaker, and one that opened it from the
    /// far future must not lock the others out until their clocks get
    /// there. A caller less than a cooldown behind waits it out on its own
    /// clock (less than two cooldowns).
    fn cooled_down(&self, current: u64, now: u64) -> bool {
        let opened = payload(current);
        opened == 0 || now.abs_diff(opened) >= self.break_millis()
    }

    /// A probe admitted in generation `admitted` reports: its failure opens
    /// the breaker again for a whole cooldown (a new generation, so that no
    /// report from before counts in the next half-open period), its
    /// success closes it. Only while the breaker is still half-open in that
    /// generation: the first trial to report decides, and a trial that
    /// reports after it (one let through beside a hung probe) is too late.
    ///
    /// A failure reopens for a cooldown from the later of the report and
    /// the latest trial's start: a hung probe that reports after a new
    /// trial went out (its caller's clock behind that trial's) must not
    /// let a third one out while the second is in flight.
    fn settle(&self, admitted_word: u64, failed: bool, now: Instant) {
        let now = millis(now);
        let admitted = generation(admitted_word);
        if !failed && self.trials > 1 {
            // One more of the round's trials succeeded: the last one closes
            // it. A trial of an earlier round (hung past its time) counts
            // for nothing.
            let round = round_tag(admitted_word);
            let counted = self.trial_counts.fetch_update(AcqRel, Acquire, |t| {
                (trial_round(t) == round)
                    .then(|| trial_word(round, (t >> 16) & 0xffff, (t & 0xffff) + 1))
            });
            match counted {
                Ok(before) if (before & 0xffff) + 1 >= u64::from(self.trials) => {}
                _ => return,
            }
        }
        let mut current = self.state.load(Acquire);
        while current & TAG == HALF_OPEN && generation(current) == admitted {
            let next = if failed {
                word(OPEN, admitted.wrapping_add(1), now.max(payload(current)))
            } else {
                word(CLOSED, admitted, 0)
            };
            match self
                .state
                .compare_exchange_weak(current, next, AcqRel, Acquire)
            {
                Ok(_) => {
                    let reason = if failed {
                        ChangeReason::TrialFailed
                    } else {
                        ChangeReason::TrialSucceeded
                    };
                    self.changed(current, next, reason);
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// A retryable failure of a call admitted in `admitted`: one more, or
    /// open (a new generation). Ignored unless the breaker is still closed
    /// in that generation: the failure is older than what happened since.
    fn count_failure(&self, admitted: u64, now: Instant) {
        let mut current = self.state.load(Acquire);
        let opens = match &self.ratio {
            Some(ratio) => {
                if current & TAG != CLOSED || generation(current) != admitted {
                    return;
                }
                ratio.window.add(now, 1, 1);
                let (calls, failures) = ratio.window.counts(now);
                calls >= u64::from(ratio.minimum_throughput)
                    && failures as f64 >= ratio.failure_ratio * calls as f64
            }
            None => false,
        };
        if current & TAG == CLOSED && generation(current) == admitted {
            self.failed_at
                .store(millis(now), std::sync::atomic::Ordering::Relaxed);
        }
        while current & TAG == CLOSED && generation(current) == admitted {
            let failures = payload(current).saturating_add(1).min(PAYLOAD_MAX);
            let next = if opens
                || (self.ratio.is_none() && failures >= u64::from(self.failure_threshold))
            {
                word(OPEN, admitted.wrapping_add(1), millis(now))
            } else {
                word(CLOSED, admitted, failures)
            };
            match self
                .state
                .compare_exchange_weak(current, next, AcqRel, Acquire)
            {
                Ok(_) => {
                    if next & TAG == OPEN {
                        self.changed(current, next, ChangeReason::Failures);
                    }
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// A success while closed: the failures were not consecutive, and a
    /// ratio's window counts one more call.
    fn reset_failures(&self, admitted: u64, now: Instant, succeeded: bool) {
        let current = self.state.load(Acquire);
        if let Some(ratio) = &self.ratio {
            if current & TAG == CLOSED && generation(current) == admitted {
                ratio.window.add(now, 1, 0);
            }
            return;
        }
        if succeeded
            && current & TAG == CLOSED
            && generation(current) == admitted
            && payload(current) != 0
        {
            // Lost to a concurrent change: that one is newer.
            let _ =
                self.state
                    .compare_exchange(current, word(CLOSED, admitted, 0), AcqRel, Acquire);
        }
    }

    /// Closed with no failure counted (nothing in a ratio's window) and
    /// no failed trial remembered: as a fresh breaker is.
    pub(crate) fn is_pristine(&self, now: Instant) -> bool {
        let current = self.state.load(Acquire);
        // (A ratio breaker counts its failures in its window: the word's
        // count, which only a change of state clears, is not its measure.)
        current & TAG == CLOSED
            && (self.ratio.is_some() || payload(current) == 0)
            && self.streak.load(Acquire) == 0
            && self
                .ratio
                .as_ref()
                .is_none_or(|ratio| ratio.window.is_idle(now))
    }

    /// Open (or half-open with its trial hung) for its key, and not
    /// called for a whole cooldown past the time its trial was due; or
    /// closed with failures counted in a row, none for two cooldowns: a
    /// key gone away (a destination retired, a tenant that stopped
    /// calling) or one whose failures are old news. What it holds is worth
    /// less than a place for a key that calls: its place in a full
    /// [`Keyed`](crate::limit::Keyed) table may go. (A ratio breaker's
    /// window tells that itself: it is pristine once its window is idle.)
    pub(crate) fn is_stale(&self, now: Instant) -> bool {
        let current = self.state.load(Acquire);
        let since = match current & TAG {
            OPEN | HALF_OPEN => payload(current),
            CLOSED if self.ratio.is_none() && payload(current) != 0 => {
                self.failed_at.load(std::sync::atomic::Ordering::Relaxed)
            }
            _ => return false,
        };
        millis(now).saturating_sub(since) >= self.break_millis().saturating_mul(2)
    }

    /// Is the breaker closed (calls go through)?
    pub(crate) fn is_closed(&self) -> bool {
        self.state.load(Acquire) & TAG == CLOSED
    }
}

impl Permit<'_> {
    /// Is this the half-open probe?
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::CircuitBreaker;
    /// let db = CircuitBreaker::new(1, Duration::from_secs(30));
    /// let now = Instant::now();
    /// let permit = db.try_acquire(now).unwrap();
    /// assert!(!permit.is_probe(), "closed: an ordinary call");
    /// permit.succeeded(now);
    /// ```
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports that the attempt succeeded: a probe's success closes the
    /// breaker, and any success ends a run of consecutive failures.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::CircuitBreaker;
    /// use backstop::Verdict;
    /// let db = CircuitBreaker::new(2, Duration::from_secs(30));
    /// let now = Instant::now();
    /// db.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// db.try_acquire(now).unwrap().succeeded(now); // the run of failures ends
    /// db.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// assert!(db.try_acquire(now).is_ok(), "one failure in a row: still closed");
    /// ```
    pub fn succeeded(self, now: Instant) {
        self.record(Attempted::Succeeded, now);
    }

    /// Reports that the attempt failed, as classified for retrying.
    /// Retryable failures (`Retry`, `RetryAfter`, `RetryIfIdempotent`) and
    /// an overloaded dependency's `StopOverloaded` count against the
    /// dependency; `Stop` does not (the dependency answered).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::CircuitBreaker;
    /// use backstop::Verdict;
    /// let db = CircuitBreaker::new(1, Duration::from_secs(30));
    /// let now = Instant::now();
    /// // A failure no retry fixes (a 400: the caller's) does not count.
    /// db.try_acquire(now).unwrap().failed(Verdict::Stop, now);
    /// assert!(db.try_acquire(now).is_ok());
    /// db.try_acquire(now).unwrap().failed(Verdict::Retry, now);
    /// assert!(db.try_acquire(now).is_err(), "opened");
    /// ```
    pub fn failed(self, verdict: Verdict, now: Instant) {
        self.record(Attempted::Failed(verdict), now);
    }

    /// Reports what the attempt came to.
    pub(crate) fn record(self, attempted: Attempted, now: Instant) {
        let breaker = self.breaker;
        let failed = matches!(attempted, Attempted::Failed(_)) && !attempted.answered();
        let (probe, admitted, self_admitted) =
            (self.probe, generation(self.admitted), self.admitted);
        std::mem::forget(self); // reported: no release on drop
        match (probe, failed) {
            // Only a probe's holder moves the breaker out of half-open.
            (true, failed) => breaker.settle(self_admitted, failed, now),
            (false, true) => breaker.count_failure(admitted, now),
            // A success ends a run of failures; an answer that is not a
            // success (a `Stop`: the dependency answered) is a call of a
            // ratio's window all the same.
            (false, false) => {
                breaker.reset_failures(admitted, now, attempted == Attempted::Succeeded);
            }
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.probe {
            // The probe never reported (it panicked, or its future was
            // dropped: a caller's own timeout, most often around a
            // dependency that hangs): as if it were still out, the next
            // trial goes a cooldown after this one was let through (at
            // once if that time has passed), as a hung probe's does;
            // unless a new trial took the slot since. Freed at once, a
            // hung dependency would be probed once per caller's timeout,
            // the cooldown for nothing.
            // A new generation: what the round's other trials report
            // counts for nothing in the next one. Open since the trial
            // started: it is given up (`is_stale`) a cooldown after the
            // next trial was due if its key does not come again.
            let opened = payload(self.admitted).max(1);
            let abandoned = word(OPEN, generation(self.admitted).wrapping_add(1), opened);
            if self
                .breaker
                .state
                .compare_exchange(self.admitted, abandoned, AcqRel, Acquire)
                .is_ok()
            {
                self.breaker
                    .changed(self.admitted, abandoned, ChangeReason::TrialAbandoned);
            }
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.name)
            .field("failure_threshold", &self.failure_threshold)
            .field("failure_ratio", &self.failure_ratio())
            .field("cooldown", &self.cooldown)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
