//! The retry budget: retries as a fraction of calls.
//!
//! Backoff bounds what one client sends; a budget bounds what the fleet
//! sends. When a dependency is down, every call fails and every call wants
//! to retry: without a budget that multiplies the load on the one service
//! least able to take it (a retry storm). With a budget of 10%, the worst
//! case is 1.1× normal traffic, however long the outage lasts.

use std::fmt;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};
use std::time::{Duration, Instant};

use crate::clock::nanos_since_origin;

/// How many slots the `ttl` window is cut into. Deposits expire a slot at a
/// time, so the window's edge is accurate to `ttl / SLOTS`.
const SLOTS: usize = 10;

/// One retry, in the budget's fixed-point units: ratios are kept to six
/// decimal places, so `0.3` is exactly 0.3 retries per call.
const UNIT: u64 = 1_000_000;

/// A lock-free retry budget, shareable as a `static`.
///
/// Each call deposits `ratio` of a retry; each retry withdraws one. Deposits
/// count for `ttl` and then expire, and `min_per_sec × ttl` retries are
/// always allowed on top, so a quiet service can still retry at all.
///
/// Over any window of length `ttl`, retries granted ≤ `ratio` × calls +
/// `min_per_sec` × `ttl` (plus one slot, `ttl / 10`, of rounding at the
/// window's edge).
///
/// - No lock on any path. Recording a call is one atomic add (and, for the
///   first call of each new slot of time, clearing the slots that left the
///   window); a withdrawal is one compare-and-swap of the retries granted
///   against the allowance, so racing callers can never overdraw (a
///   check-then-subtract can).
/// - Bounded work per call: after an idle hour, the first call clears at
///   most ten slots.
/// - Time is read through the retry loop's clock, so virtual time drives
///   the window too.
///
/// ```
/// use std::time::Duration;
/// use retry_runtime::RetryBudget;
///
/// // 10% of calls may be retried, plus 5 retries a second, over 10 s.
/// static BUDGET: RetryBudget = RetryBudget::new(0.1, 5, Duration::from_secs(10));
///
/// let now = std::time::Instant::now();
/// for _ in 0..100 {
///     BUDGET.record_call(now);
/// }
/// let granted = (0..1000).filter(|_| BUDGET.try_withdraw(now)).count();
/// assert_eq!(granted, 10 + 5 * 10); // 10% of 100 calls, plus the floor
/// assert_eq!(BUDGET.stats().refusals, 1000 - 60);
/// ```
///
/// Invalid arguments are rejected while the `static` is compiled:
///
/// ```compile_fail
/// # use std::time::Duration; use retry_runtime::RetryBudget;
/// static BAD: RetryBudget = RetryBudget::new(1.5, 10, Duration::from_secs(10));
/// # fn main() { let _ = &BAD; }
/// ```
pub struct RetryBudget {
    ratio: f64,
    min_per_sec: u32,
    ttl: Duration,
    /// Units deposited per call.
    deposit: u64,
    /// Units always available (the floor), in units.
    reserve: u64,
    slot_nanos: u64,
    /// The newest slot index opened; slots older than `head - SLOTS` are clear.
    head: AtomicU64,
    calls: [AtomicU64; SLOTS],
    retries: [AtomicU64; SLOTS],
    /// The sum of `retries`: what the allowance is checked against, in one CAS.
    granted: AtomicU64,
    expired_calls: AtomicU64,
    expired_retries: AtomicU64,
    refusals: AtomicU64,
}

/// What a [`RetryBudget`] has seen since it was created.
///
/// ```
/// use retry_runtime::BudgetStats;
/// let s = BudgetStats { calls: 200, retries: 20, refusals: 3 };
/// assert_eq!(s.retry_ratio(), 0.1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// Calls recorded.
    pub calls: u64,
    /// Retries granted.
    pub retries: u64,
    /// Retries refused.
    pub refusals: u64,
}

impl BudgetStats {
    /// Retries granted per call (0 before the first call).
    pub fn retry_ratio(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.retries as f64 / self.calls as f64
        }
    }
}

impl RetryBudget {
    /// A budget allowing `ratio` retries per call (0.1 = 10%), plus
    /// `min_per_sec` retries a second, counted over a sliding `ttl`.
    ///
    /// # Panics
    ///
    /// If `ratio` is not in `(0, 1]` or `ttl` is zero. In a `static` that is
    /// a compile error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_runtime::RetryBudget;
    /// static SHARED: RetryBudget = RetryBudget::new(0.2, 10, Duration::from_secs(10));
    /// assert_eq!(SHARED.ratio(), 0.2);
    /// ```
    pub const fn new(ratio: f64, min_per_sec: u32, ttl: Duration) -> Self {
        assert!(
            ratio > 0.0 && ratio <= 1.0,
            "RetryBudget::new: `ratio` must be in (0, 1], e.g. 0.1 for 10% of calls"
        );
        assert!(
            !ttl.is_zero(),
            "RetryBudget::new: `ttl` must be greater than zero"
        );
        let ttl_nanos = ttl.as_nanos();
        let slot = ttl_nanos / SLOTS as u128;
        let slot_nanos = if slot == 0 {
            1
        } else if slot > u64::MAX as u128 {
            u64::MAX
        } else {
            slot as u64
        };
        // min_per_sec × ttl_secs retries, in units: × UNIT / 1e9 = / 1000.
        let reserve = min_per_sec as u128 * ttl_nanos / 1_000;
        let reserve = if reserve > u64::MAX as u128 {
            u64::MAX
        } else {
            reserve as u64
        };
        Self {
            ratio,
            min_per_sec,
            ttl,
            deposit: (ratio * UNIT as f64 + 0.5) as u64,
            reserve,
            slot_nanos,
            head: AtomicU64::new(0),
            calls: [const { AtomicU64::new(0) }; SLOTS],
            retries: [const { AtomicU64::new(0) }; SLOTS],
            granted: AtomicU64::new(0),
            expired_calls: AtomicU64::new(0),
            expired_retries: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// The budget `#[retry]` gives each function by default: 10% of calls,
    /// 10 retries a second, over 10 s.
    ///
    /// ```
    /// use retry_runtime::RetryBudget;
    /// static B: RetryBudget = RetryBudget::standard();
    /// assert_eq!(B.min_per_sec(), 10);
    /// ```
    pub const fn standard() -> Self {
        Self::new(0.1, 10, Duration::from_secs(10))
    }

    /// Retries allowed per call.
    ///
    /// ```
    /// # use std::time::Duration; use retry_runtime::RetryBudget;
    /// let b = RetryBudget::new(0.25, 3, Duration::from_secs(5));
    /// assert_eq!((b.ratio(), b.min_per_sec(), b.ttl()), (0.25, 3, Duration::from_secs(5)));
    /// ```
    pub const fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Retries a second allowed regardless of traffic.
    pub const fn min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// How long a deposit counts.
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records one call (the first attempt), depositing `ratio` of a retry.
    ///
    /// ```
    /// # use std::time::{Duration, Instant}; use retry_runtime::RetryBudget;
    /// let b = RetryBudget::new(0.5, 0, Duration::from_secs(1));
    /// b.record_call(Instant::now());
    /// assert_eq!(b.stats().calls, 1);
    /// ```
    pub fn record_call(&self, now: Instant) {
        let slot = self.open(now);
        self.calls[slot].fetch_add(1, Relaxed);
    }

    /// Takes one retry from the budget if it has one; `false` is a refusal.
    ///
    /// ```
    /// # use std::time::{Duration, Instant}; use retry_runtime::RetryBudget;
    /// let b = RetryBudget::new(0.5, 0, Duration::from_secs(1));
    /// let now = Instant::now();
    /// b.record_call(now);
    /// b.record_call(now);
    /// assert!(b.try_withdraw(now)); // two calls at 50% pay for one retry
    /// assert!(!b.try_withdraw(now));
    /// ```
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let slot = self.open(now);
        let calls = self
            .calls
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(c.load(Relaxed)));
        let allowance = self
            .deposit
            .saturating_mul(calls)
            .saturating_add(self.reserve);
        // Check and take in one CAS: two callers racing for the last token
        // cannot both get it.
        let granted = self.granted.fetch_update(AcqRel, Acquire, |g| {
            let after = g.saturating_add(1);
            (after.saturating_mul(UNIT) <= allowance).then_some(after)
        });
        if granted.is_ok() {
            // After `granted`: the sum of the slots never exceeds it.
            self.retries[slot].fetch_add(1, Relaxed);
            true
        } else {
            self.refusals.fetch_add(1, Relaxed);
            false
        }
    }

    /// Calls, retries and refusals since creation.
    ///
    /// ```
    /// # use std::time::Duration; use retry_runtime::RetryBudget;
    /// let b = RetryBudget::standard();
    /// assert_eq!(b.stats().calls, 0);
    /// ```
    pub fn stats(&self) -> BudgetStats {
        let live = |slots: &[AtomicU64; SLOTS]| {
            slots
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(c.load(Relaxed)))
        };
        BudgetStats {
            calls: self
                .expired_calls
                .load(Relaxed)
                .saturating_add(live(&self.calls)),
            retries: self
                .expired_retries
                .load(Relaxed)
                .saturating_add(live(&self.retries)),
            refusals: self.refusals.load(Relaxed),
        }
    }

    /// Moves the window up to `now` and returns the slot to count in.
    fn open(&self, now: Instant) -> usize {
        let epoch = nanos_since_origin(now) / self.slot_nanos;
        let mut head = self.head.load(Acquire);
        while epoch > head {
            match self
                .head
                .compare_exchange_weak(head, epoch, AcqRel, Acquire)
            {
                Ok(_) => {
                    self.expire(head, epoch);
                    head = epoch;
                }
                Err(current) => head = current,
            }
        }
        // A caller whose clock reads behind the window (another thread's
        // virtual time, a stale read) counts in the newest slot instead.
        let epoch = if epoch.saturating_add(SLOTS as u64) <= head {
            head
        } else {
            epoch
        };
        (epoch % SLOTS as u64) as usize
    }

    /// Clears the slots that the move of `head` from `old` to `new` reuses.
    /// Only the winner of the `head` CAS runs it, and it touches at most
    /// `SLOTS` slots however long the budget sat idle.
    fn expire(&self, old: u64, new: u64) {
        let n = (new - old).min(SLOTS as u64);
        for i in 1..=n {
            let slot = (old.wrapping_add(i) % SLOTS as u64) as usize;
            let calls = self.calls[slot].swap(0, Relaxed);
            let retries = self.retries[slot].swap(0, Relaxed);
            self.expired_calls.fetch_add(calls, Relaxed);
            self.expired_retries.fetch_add(retries, Relaxed);
            self.granted.fetch_sub(retries, AcqRel);
        }
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("ratio", &self.ratio)
            .field("min_per_sec", &self.min_per_sec)
            .field("ttl", &self.ttl)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::standard()
    }
}
