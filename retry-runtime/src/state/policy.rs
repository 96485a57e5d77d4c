//! The retry policy: schedule, limits, and what may be repeated.

use std::time::Duration;

use crate::limit::{BudgetRef, TokenBudget, WindowBudget};
use crate::state::backoff::{self, Backoff, Jitter, Rng};
use crate::time::units;

/// Everything a retry loop needs to know, built in `const` context if you
/// like.
///
/// The builder methods are named after the options of `#[retry]`. Values are
/// normalised rather than rejected, so a policy read from configuration can
/// never make a retry loop panic: `attempts(0)` means one attempt, a
/// `factor` below 1 (or NaN) means 1, and a `cap` below `base` simply wins.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Jitter, Policy};
///
/// static POLICY: Policy = Policy::new()
///     .attempts(5)
///     .base(Duration::from_millis(50))
///     .cap(Duration::from_secs(2))
///     .jitter(Jitter::Equal)
///     .deadline(Some(Duration::from_secs(10)));
///
/// assert_eq!(POLICY.ceiling(0), Duration::from_millis(50));
/// assert_eq!(POLICY.ceiling(10), Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub(crate) attempts: u32,
    pub(crate) deadline: Option<Duration>,
    pub(crate) backoff: Backoff,
    pub(crate) base: Duration,
    pub(crate) factor: f64,
    pub(crate) cap: Duration,
    pub(crate) jitter: Jitter,
    pub(crate) idempotent: bool,
    pub(crate) retry_after_max: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) budget: BudgetChoice,
}

impl Policy {
    /// The defaults: 3 attempts, a 30 s deadline, exponential backoff from
    /// 100 ms by a factor of 2, capped at 20 s, full jitter, not idempotent,
    /// `Retry-After` honoured up to 60 s, no attempt timeout, and the
    /// default protection: a token budget of the call site's own
    /// (`#[retry]`: of the function's own).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::Policy;
    /// static DEFAULTS: Policy = Policy::DEFAULT;
    /// assert_eq!(DEFAULTS.get_attempts(), 3);
    /// assert_eq!(DEFAULTS.get_deadline(), Some(Duration::from_secs(30)));
    /// ```
    pub const DEFAULT: Self = Self {
        attempts: units::DEFAULT_ATTEMPTS,
        deadline: Some(Duration::from_secs(units::DEFAULT_DEADLINE_SECS)),
        backoff: Backoff::Exponential,
        base: Duration::from_millis(units::DEFAULT_BASE_MILLIS),
        factor: 2.0,
        cap: Duration::from_secs(units::DEFAULT_CAP_SECS),
        jitter: Jitter::Full,
        idempotent: false,
        retry_after_max: Duration::from_secs(units::DEFAULT_RETRY_AFTER_MAX_SECS),
        attempt_timeout: None,
        budget: BudgetChoice::Default,
    };

    /// [`Policy::DEFAULT`], as a `const fn`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::Policy;
    /// assert_eq!(Policy::new(), Policy::default());
    /// ```
    pub const fn new() -> Self {
        Self::DEFAULT
    }

    /// The backstop on total attempts, the first included. `0` is read as 1.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// let p = Policy::new().attempts(5);
    /// assert_eq!(p.get_attempts(), 5);
    /// assert_eq!(Policy::new().attempts(0).get_attempts(), 1);
    /// ```
    #[must_use]
    #[doc(alias("max_retries", "max_times", "max_attempts"))]
    pub const fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = if attempts == 0 { 1 } else { attempts };
        self
    }

    /// The bound on the whole call, measured from entry; `None` for none.
    ///
    /// No attempt starts after it, and no sleep runs into it: when the next
    /// delay would reach it, the loop gives up instead. An attempt running
    /// at the deadline is not interrupted, except by an `attempt_timeout`
    /// (async), which is clamped to the time left.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new().deadline(Some(Duration::from_secs(2)));
    /// assert_eq!(p.get_deadline(), Some(Duration::from_secs(2)));
    /// ```
    #[must_use]
    #[doc(alias("total_delay", "max_elapsed_time", "timeout"))]
    pub const fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The schedule's shape.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Backoff, Policy};
    /// let p = Policy::new().backoff(Backoff::Fixed);
    /// assert_eq!(p.ceiling(0), p.ceiling(5), "the same delay every time");
    /// ```
    #[must_use]
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The first delay (and the floor of decorrelated jitter). Zero retries
    /// at once (for tests and benchmarks): only the attempts, the deadline
    /// and the budget then bound the retries. Above [`cap`](Self::cap),
    /// the delays are `cap`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new().base(Duration::from_millis(250));
    /// assert_eq!(p.ceiling(0), Duration::from_millis(250));
    /// assert_eq!(p.ceiling(1), Duration::from_millis(500));
    /// ```
    #[must_use]
    #[doc(alias("min_delay", "initial_delay"))]
    pub const fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The exponential multiplier. Below 1 (or NaN) is read as 1.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// # use std::time::Duration;
    /// let p = Policy::new().factor(1.5);
    /// assert_eq!(p.ceiling(1), Duration::from_millis(150));
    /// assert_eq!(Policy::new().factor(0.5).get_factor(), 1.0);
    /// ```
    #[must_use]
    pub const fn factor(mut self, factor: f64) -> Self {
        // `!(x >= 1.0)` is also true for NaN.
        self.factor = if factor >= 1.0 { factor } else { 1.0 };
        self
    }

    /// No delay computed from the schedule exceeds it, jitter included.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new().cap(Duration::from_secs(5));
    /// assert_eq!(p.ceiling(20), Duration::from_secs(5));
    /// ```
    #[must_use]
    #[doc(alias("max_delay"))]
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// How delays are randomised.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Jitter, Policy};
    /// let p = Policy::new().jitter(Jitter::Decorrelated);
    /// assert_eq!(p.get_jitter(), Jitter::Decorrelated);
    /// ```
    #[must_use]
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// May an ambiguous failure ([`Verdict::RetryIfIdempotent`], a timeout)
    /// be repeated? Only say yes when doing the work twice is harmless.
    ///
    /// [`Verdict::RetryIfIdempotent`]: crate::Verdict::RetryIfIdempotent
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// let p = Policy::new().idempotent(true);
    /// assert!(p.is_idempotent());
    /// ```
    #[must_use]
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// A server asking for a longer wait than this is taken at its word:
    /// the loop gives up instead of sleeping.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new().retry_after_max(Duration::from_secs(5));
    /// assert_eq!(p.get_retry_after_max(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub const fn retry_after_max(mut self, max: Duration) -> Self {
        self.retry_after_max = max;
        self
    }

    /// How long one async attempt may run (`None`, the default: no attempt
    /// timeout). Where it applies, an attempt still running after it (or at
    /// the deadline, if sooner) is cut off and fails with
    /// [`Elapsed`](crate::Elapsed), an ambiguous failure.
    ///
    /// A timed-out attempt is returned through the function's error type,
    /// which must be able to hold an `Elapsed` (`E: From<Elapsed>`):
    ///
    /// - `#[retry(policy = P)]` on an `async fn` applies it when the error
    ///   type written in the signature implements `From<Elapsed>`
    ///   (`std::io::Error`, `Box<dyn Error + ..>`, `anyhow::Error`,
    ///   `backstop::reqwest::Error` do), and cannot otherwise: there would
    ///   be no error to return. A sync function cannot interrupt an attempt
    ///   at all. With `None` nothing cuts an attempt off, even at the
    ///   deadline, as for a function without `attempt_timeout`
    ///   (`a_policy_without_an_attempt_timeout_cuts_no_attempt_off_at_the_deadline`);
    /// - closures: [`Retry::attempt_timeout`](crate::Retry::attempt_timeout)
    ///   with `policy.get_attempt_timeout()`, whose error type is checked
    ///   at compile time; the tower layer likewise, with its own
    ///   `.attempt_timeout(..)`. Given there, `None` cuts an attempt off at
    ///   the deadline: the method asks for cut-offs, and the deadline is
    ///   then their only limit;
    /// - the reqwest middleware applies the policy's, or the `Retry`'s
    ///   `.attempt_timeout(..)` if given, and bounds every attempt by the
    ///   deadline in any case
    ///   (`an_attempt_timeout_applies_from_the_policy_or_the_retry`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new().attempt_timeout(Some(Duration::from_secs(2)));
    /// assert_eq!(p.get_attempt_timeout(), Some(Duration::from_secs(2)));
    /// ```
    #[must_use]
    pub const fn attempt_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The windowed budget this policy draws on (instead of the default
    /// token budget). A `const fn`, as the policy's other setters: one for
    /// each kind of budget, where [`Retry::budget`](crate::Retry::budget)
    /// and `budget = ..` take either.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::{Policy, limit::WindowBudget};
    /// static BUDGET: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));
    /// static POLICY: Policy = Policy::new().window_budget(&BUDGET);
    /// assert!(POLICY.get_budget().is_some());
    /// ```
    #[must_use]
    pub const fn window_budget(mut self, budget: &'static WindowBudget) -> Self {
        self.budget = BudgetChoice::Set(BudgetRef::Window(budget));
        self
    }

    /// The token budget this policy draws on (instead of the default one:
    /// a `static` shared with other calls).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, limit::TokenBudget};
    /// static PAYMENTS: TokenBudget = TokenBudget::standard();
    /// static POLICY: Policy = Policy::new().token_budget(&PAYMENTS);
    /// # let _ = &POLICY;
    /// ```
    #[must_use]
    pub const fn token_budget(mut self, budget: &'static TokenBudget) -> Self {
        self.budget = BudgetChoice::Set(BudgetRef::Token(budget));
        self
    }

    /// No budget at all: every retry the other limits
    /// allow is made, however many calls fail. (Without this, or a budget
    /// of its own, a policy draws on a token budget of the call site's
    /// own: see [`Retry::new`](crate::Retry::new).)
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// let p = Policy::new().no_budget();
    /// assert!(p.get_budget().is_none() && !p.has_default_budget());
    /// ```
    #[must_use]
    pub const fn no_budget(mut self) -> Self {
        self.budget = BudgetChoice::Off;
        self
    }

    /// The schedule's ceiling for retry number `n` (0 for the first delay),
    /// before jitter: `min(cap, schedule(n))`, saturating.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// let p = Policy::new(); // 100ms · 2^n, capped at 20s
    /// assert_eq!(p.ceiling(3), Duration::from_millis(800));
    /// assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(20));
    /// ```
    pub fn ceiling(&self, n: u32) -> Duration {
        backoff::ceiling(self.backoff, self.base, self.factor, self.cap, n)
    }

    /// One backoff delay, jitter drawn from `rng`: the delay before retry
    /// number `n` (0 for the first), `prev` being the previous delay (used by
    /// [`Jitter::Decorrelated`]; pass `base` for the first). Never above
    /// `cap`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::{backoff::Rng, Jitter, Policy};
    /// let p = Policy::new().jitter(Jitter::Equal); // ceiling 400ms at n = 2
    /// let d = p.delay(2, Duration::ZERO, &mut Rng::seeded(1));
    /// assert!(d >= Duration::from_millis(200) && d <= Duration::from_millis(400));
    /// ```
    pub fn delay(&self, n: u32, prev: Duration, rng: &mut Rng) -> Duration {
        backoff::jittered(self.jitter, self.ceiling(n), self.base, prev, self.cap, rng)
    }

    /// The budget, if any.
    ///
    /// The getters, named as `std`'s are beside setters of the bare name
    /// (`Command::arg` and `Command::get_args`), let a service log or
    /// expose the policy it runs with (with the feature `serde`, a `Policy`
    /// also serializes).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert!(Policy::new().get_budget().is_none());
    /// ```
    pub const fn get_budget(&self) -> Option<BudgetRef<'static>> {
        match self.budget {
            BudgetChoice::Set(budget) => Some(budget),
            BudgetChoice::Default | BudgetChoice::Off => None,
        }
    }

    /// Whether the policy leaves the budget to the default (a token
    /// budget of the call site's, or the function's, own): neither
    /// [`window_budget`](Self::window_budget), [`token_budget`](Self::token_budget)
    /// nor [`no_budget`](Self::no_budget) was set.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert!(Policy::new().has_default_budget());
    /// ```
    pub const fn has_default_budget(&self) -> bool {
        matches!(self.budget, BudgetChoice::Default)
    }

    /// The backstop on attempts, the first included.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert_eq!(Policy::new().attempts(0).get_attempts(), 1);
    /// ```
    pub const fn get_attempts(&self) -> u32 {
        self.attempts
    }

    /// The bound on the whole call, if any.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// assert_eq!(Policy::new().get_deadline(), Some(Duration::from_secs(30)));
    /// ```
    pub const fn get_deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The schedule's shape.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Backoff, Policy};
    /// assert_eq!(Policy::new().get_backoff(), Backoff::Exponential);
    /// ```
    pub const fn get_backoff(&self) -> Backoff {
        self.backoff
    }

    /// The first delay.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// assert_eq!(Policy::new().get_base(), Duration::from_millis(100));
    /// ```
    pub const fn get_base(&self) -> Duration {
        self.base
    }

    /// The exponential multiplier, as normalised (at least 1).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert_eq!(Policy::new().factor(0.5).get_factor(), 1.0);
    /// ```
    pub const fn get_factor(&self) -> f64 {
        self.factor
    }

    /// The largest delay the schedule computes.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// assert_eq!(Policy::new().get_cap(), Duration::from_secs(20));
    /// ```
    pub const fn get_cap(&self) -> Duration {
        self.cap
    }

    /// How delays are randomised.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Jitter, Policy};
    /// assert_eq!(Policy::new().get_jitter(), Jitter::Full);
    /// ```
    pub const fn get_jitter(&self) -> Jitter {
        self.jitter
    }

    /// Whether ambiguous failures may be repeated.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert!(!Policy::new().is_idempotent());
    /// ```
    pub const fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The longest `Retry-After` honoured.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::Policy;
    /// assert_eq!(Policy::new().get_retry_after_max(), Duration::from_secs(60));
    /// ```
    pub const fn get_retry_after_max(&self) -> Duration {
        self.retry_after_max
    }

    /// How long one attempt may run, if limited (see
    /// [`attempt_timeout`](Self::attempt_timeout) for where it applies).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::Policy;
    /// assert_eq!(Policy::new().get_attempt_timeout(), None);
    /// ```
    pub const fn get_attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }
}

/// What a policy's calls draw on: the default, nothing, or a token or
/// windowed budget of the user's.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BudgetChoice {
    Default,
    Off,
    Set(BudgetRef<'static>),
}

impl Default for Policy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl PartialEq for Policy {
    /// Equal schedules and limits, and the very same budget (by address).
    fn eq(&self, other: &Self) -> bool {
        let same_budget = match (self.budget, other.budget) {
            (BudgetChoice::Default, BudgetChoice::Default)
            | (BudgetChoice::Off, BudgetChoice::Off) => true,
            (BudgetChoice::Set(a), BudgetChoice::Set(b)) => a.same_as(&b),
            _ => false,
        };
        same_budget
            && self.attempts == other.attempts
            && self.deadline == other.deadline
            && self.backoff == other.backoff
            && self.base == other.base
            && self.factor.to_bits() == other.factor.to_bits()
            && self.cap == other.cap
            && self.jitter == other.jitter
            && self.idempotent == other.idempotent
            && self.retry_after_max == other.retry_after_max
            && self.attempt_timeout == other.attempt_timeout
    }
}

/// A policy's `attempt_timeout` that the loop running under it does not
/// apply (`applied` false): a closure form or a tower layer not given
/// `.attempt_timeout(..)`, `call_async_with`, a `#[retry(policy = ..)]`
/// function whose error type cannot hold an `Elapsed`, or a sync one.
/// Said once a process on standard error, in debug builds: a policy from
/// configuration would otherwise lose it without a word.
#[inline]
pub(crate) fn check_attempt_timeout_applied(policy: &Policy, applied: bool) {
    #[cfg(debug_assertions)]
    if !applied && policy.attempt_timeout.is_some() {
        warn_attempt_timeout_unapplied();
    }
    #[cfg(not(debug_assertions))]
    let _ = (policy, applied);
}

/// See [`check_attempt_timeout_applied`].
#[cfg(debug_assertions)]
#[cold]
fn warn_attempt_timeout_unapplied() {
    #[cfg(test)]
    tests::UNAPPLIED.with(|said| said.set(said.get() + 1));
    note_once!(
        "backstop: a policy's attempt_timeout is not applied here. `call_async`, \
         `Retry::call_async` and a tower layer apply it only when passed on with \
         `.attempt_timeout(policy.get_attempt_timeout())`, `#[retry(policy = ..)]` only on an \
         async fn whose error type, written as a type (not `impl Trait`), holds \
         `backstop::Elapsed` (`From<Elapsed>`); \
         `call_async_with` and sync functions never do. Said once; debug builds only."
    );
}

#[cfg(all(test, debug_assertions))]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// How many times this thread's loops found a policy's
        /// `attempt_timeout` they do not apply.
        pub(crate) static UNAPPLIED: Cell<u32> = const { Cell::new(0) };
    }
}
