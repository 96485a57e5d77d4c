//! The windowed budget (documented in `limit`).

use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::{Duration, Instant};

use crate::sync::AtomicU64;
use crate::time::clock::nanos_since_origin;

/// How many slots the `ttl` window is cut into: calls count for the
/// `SLOTS` newest slots, so the window's edge is accurate to `ttl / SLOTS`.
#[cfg(not(loom))]
const SLOTS: u64 = 10;

/// Under loom, two slots: the algorithm does not depend on their number,
/// and every slot word is a scheduling point the model checker explores.
#[cfg(loom)]
const SLOTS: u64 = 2;

/// Slots kept: retries count one slot longer than calls. A retry granted
/// late in a slot must still count a whole `ttl` later, or a window of
/// length `ttl` straddling a slot boundary could see the reserve spent
/// twice.
const RING: u64 = SLOTS + 1;

/// How far before its first caller's instant a budget's slot 0 begins.
const BASE_MARGIN: u128 = 12 * 3600 * 1_000_000_000;

/// One retry, in the budget's fixed-point units: ratios are kept to six
/// decimal places, so `0.3` is exactly 0.3 retries per call.
const UNIT: u64 = 1_000_000;

/// A slot is one atomic word: the epoch it counts for (its low 32 bits, the
/// tag) above the count. Whoever moves a slot to a new epoch does so by a
/// compare-and-swap from the word it read, and accounts for exactly the
/// count it cleared: a count written for the new epoch can never be swept
/// away with the old one (which is how a racing caller could overdraw a
/// budget whose slots were cleared by `swap(0)` after the window moved).
const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

const fn pack(epoch: u64, count: u64) -> u64 {
    (epoch << COUNT_BITS) | count
}

const fn count(word: u64) -> u64 {
    word & COUNT_MASK
}

/// How far `epoch` is ahead of the epoch tagged in `word` (negative:
/// behind). Tags are 32 bits; epochs compared are never 2³¹ slots apart.
const fn tag_ahead(epoch: u64, word: u64) -> i32 {
    (epoch as u32)
        .wrapping_sub((word >> COUNT_BITS) as u32)
        .cast_signed()
}

/// How far logical epoch `a` is ahead of `b` (negative: behind).
const fn ahead(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b).cast_signed()
}

/// A lock-free windowed budget, shareable as a `static`.
///
/// Each call deposits `ratio` of a retry; each retry withdraws one; a
/// deposit counts for `ttl`. The bound it keeps, checked at every grant:
///
/// > in the `ttl` before a retry is granted (that retry included), retries
/// > granted ≤ `ratio` × calls recorded in that `ttl` + `min_per_sec` × `ttl`
///
/// with no slack at slot edges, so any window of length `ttl` holds at most
/// the reserve plus `ratio` × the calls of that window and the `ttl` before
/// it. Time is cut into ten slots of `ttl / 10`: calls leave the window
/// between `ttl - ttl / 10` and `ttl` after they were made (the budget errs
/// on the strict side), retries between `ttl` and `ttl + ttl / 10`.
///
/// The bound is over the instants callers pass: a call made with a stale
/// reading of the clock counts at that reading.
///
/// `min_per_sec × ttl` is a reserve of retries per window, as Finagle's
/// `minRetriesPerSec` is, so that a quiet service can still retry at all:
/// it is not a rate limit, and all of it may be spent at once.
///
/// - No lock on any path. Recording a call is one compare-and-swap on the
///   current slot (and, for the first call of each new slot of time,
///   moving the slots that left the window); a withdrawal is one
///   compare-and-swap of the retries granted against the allowance, so
///   racing callers can never overdraw (a check-then-subtract can).
/// - Bounded work per call: after an idle hour, the first call moves at
///   most 22 slots.
/// - Time is read through the retry loop's clock, so virtual time drives
///   the window too. Callers whose clocks disagree (a test's virtual time
///   beside real time, on one `static`) or go backwards never wedge it: a
///   call more than a `ttl` behind the window, or more than a `ttl` ahead,
///   starts a new window. A caller less than a `ttl` behind keeps the
///   bound (its retries count in the newest slot). The bound is a promise
///   among callers on one clock: callers whose clocks disagree by more
///   than a `ttl` start a new window each time they alternate, so give a
///   test running in virtual time budgets of its own.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::WindowBudget;
///
/// // 10% of calls may be retried, plus a reserve of 5 × 10 = 50 retries
/// // per 10 s window.
/// static BUDGET: WindowBudget = WindowBudget::new(0.1, 5, Duration::from_secs(10));
///
/// let now = std::time::Instant::now();
/// for _ in 0..100 {
///     BUDGET.record_call(now);
/// }
/// let granted = (0..1000).filter(|_| BUDGET.try_withdraw(now)).count();
/// assert_eq!(granted, 10 + 5 * 10); // 10% of 100 calls, plus the reserve
/// assert_eq!(BUDGET.stats().refusals, 1000 - 60);
/// ```
///
/// Invalid arguments are rejected while the `static` is compiled:
///
/// ```compile_fail
/// # extern crate backstop_runtime as backstop;
/// # use std::time::Duration; use backstop::limit::WindowBudget;
/// static BAD: WindowBudget = WindowBudget::new(1.5, 10, Duration::from_secs(10));
/// # fn main() { let _ = &BAD; }
/// ```
pub struct WindowBudget {
    ratio: f64,
    min_per_sec: u32,
    ttl: Duration,
    /// Units deposited per call.
    deposit: u64,
    /// Units always available per window (the reserve).
    reserve: u64,
    /// `⌈2⁶⁴ / slot length in nanoseconds⌉`: a slot number is a multiplication, not a
    /// 64-bit division (tens of cycles on the path of every call). Slots
    /// come out shorter than `ttl / 10` by the fraction `(ttl / 10) / 2⁶⁴`
    /// (under 10⁻⁹ for any slot under 18 s): the window errs on the strict
    /// side.
    slot_reciprocal: u128,
    /// Added to a caller's slot number to give the budget's logical epoch.
    /// It only grows: a caller far outside the window moves it so that the
    /// caller lands just past the newest slot, which starts a new window
    /// while logical time stays monotonic (so tags compare correctly).
    offset: AtomicU64,
    /// Where slot 0 begins, in nanoseconds from the process's origin, plus
    /// one (0: no call yet). Set by the first caller, at a fixed distance
    /// before its own instant: slot edges then follow the callers' clock (a paused
    /// tokio clock included) rather than the moment the process started,
    /// so a run in virtual time makes the same decisions every time.
    base: AtomicU64,
    /// The newest logical epoch opened.
    head: AtomicU64,
    /// Calls per slot, tagged with the slot's epoch.
    calls: [AtomicU64; RING as usize],
    /// Retries per slot, tagged with the slot's epoch.
    retries: [AtomicU64; RING as usize],
    /// Retries granted and not yet expired: what the allowance is checked
    /// against, in one CAS. Incremented before the retry is written to its
    /// slot, decremented only by whoever moves that slot to a new epoch, so
    /// it never falls below the retries in the window.
    granted: AtomicU64,
    expired_calls: AtomicU64,
    expired_retries: AtomicU64,
    refusals: AtomicU64,
}

/// What a [`WindowBudget`] has seen since it was created.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::{Duration, Instant};
/// use backstop::limit::WindowBudget;
/// // 10% of calls, no reserve.
/// let budget = WindowBudget::new(0.1, 0, Duration::from_secs(10));
/// let now = Instant::now();
/// for _ in 0..20 {
///     budget.record_call(now);
/// }
/// assert!(budget.try_withdraw(now) && budget.try_withdraw(now));
/// assert!(!budget.try_withdraw(now), "2 retries of 20 calls: the budget is spent");
/// let stats = budget.stats();
/// assert_eq!((stats.calls, stats.retries, stats.refusals), (20, 2, 1));
/// assert_eq!(stats.retry_ratio(), 0.1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::limit::WindowBudget;
    /// let budget = WindowBudget::new(0.5, 0, Duration::from_secs(10));
    /// assert_eq!(budget.stats().retry_ratio(), 0.0, "no call yet");
    /// let now = Instant::now();
    /// budget.record_call(now);
    /// budget.record_call(now);
    /// assert!(budget.try_withdraw(now));
    /// assert_eq!(budget.stats().retry_ratio(), 0.5);
    /// ```
    pub fn retry_ratio(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.retries as f64 / self.calls as f64
        }
    }
}

impl WindowBudget {
    const_unless_loom! {
    /// A budget allowing `ratio` retries per call (0.1 = 10%), plus a
    /// reserve of `min_per_sec × ttl` retries, over a sliding `ttl`.
    ///
    /// # Panics
    ///
    /// If `ratio` is not in `(0, 1]` or `ttl` is zero. In a `static` that is
    /// a compile error.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::WindowBudget;
    /// static SHARED: WindowBudget = WindowBudget::new(0.2, 10, Duration::from_secs(10));
    /// assert_eq!(SHARED.ratio(), 0.2);
    /// ```
    pub fn new(ratio: f64, min_per_sec: u32, ttl: Duration) -> Self {
        assert!(
            ratio > 0.0 && ratio <= 1.0,
            "WindowBudget::new: `ratio` must be in (0, 1], e.g. 0.1 for 10% of calls"
        );
        assert!(
            !ttl.is_zero(),
            "WindowBudget::new: `ttl` must be greater than zero"
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
            slot_reciprocal: (1u128 << 64).div_ceil(slot_nanos as u128),
            // Any caller is far ahead of epoch 0: the first call starts
            // the first window at logical epoch RING, so that every slot's
            // initial tag (0) is older than the epoch it moves to.
            offset: AtomicU64::new(2 * RING),
            base: AtomicU64::new(0),
            head: AtomicU64::new(0),
            calls: zeroed_atomics!(RING as usize),
            retries: zeroed_atomics!(RING as usize),
            granted: AtomicU64::new(0),
            expired_calls: AtomicU64::new(0),
            expired_retries: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }
    }

    const_unless_loom! {
    /// The standard windowed budget: 10% of calls, plus a reserve of 100
    /// retries (10 a second), over 10 s. (`#[retry]`'s default is a
    /// [`TokenBudget`](crate::limit::TokenBudget), not this.)
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::WindowBudget;
    /// static B: WindowBudget = WindowBudget::standard();
    /// assert_eq!(B.min_per_sec(), 10);
    /// ```
    pub fn standard() -> Self {
        Self::new(0.1, 10, Duration::from_secs(10))
    }
    }

    /// Retries allowed per call.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::limit::WindowBudget;
    /// let b = WindowBudget::new(0.25, 3, Duration::from_secs(5));
    /// assert_eq!((b.ratio(), b.min_per_sec(), b.ttl()), (0.25, 3, Duration::from_secs(5)));
    /// ```
    pub const fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The reserve, per second of `ttl`: `min_per_sec × ttl` retries per
    /// window are allowed regardless of traffic.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::WindowBudget;
    /// static API: WindowBudget = WindowBudget::new(0.2, 10, Duration::from_secs(10));
    /// assert_eq!(API.min_per_sec(), 10);
    /// ```
    pub const fn min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// How long a deposit counts.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::WindowBudget;
    /// static API: WindowBudget = WindowBudget::new(0.2, 10, Duration::from_secs(10));
    /// assert_eq!(API.ttl(), Duration::from_secs(10));
    /// ```
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records one call (the first attempt), depositing `ratio` of a retry.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::{Duration, Instant}; use backstop::limit::WindowBudget;
    /// let b = WindowBudget::new(0.5, 0, Duration::from_secs(1));
    /// b.record_call(Instant::now());
    /// assert_eq!(b.stats().calls, 1);
    /// ```
    pub fn record_call(&self, now: Instant) {
        let epoch = self.open(now);
        self.add(&self.calls, &self.expired_calls, None, epoch);
    }

    /// Takes one retry from the budget if it has one; `false` is a refusal.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::{Duration, Instant}; use backstop::limit::WindowBudget;
    /// let b = WindowBudget::new(0.5, 0, Duration::from_secs(1));
    /// let now = Instant::now();
    /// b.record_call(now);
    /// b.record_call(now);
    /// assert!(b.try_withdraw(now)); // two calls at 50% pay for one retry
    /// assert!(!b.try_withdraw(now));
    /// ```
    #[must_use = "a withdrawal granted is a retry paid for: make it, or do not ask"]
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let epoch = self.open(now);
        let head = self.head.load(Acquire);
        // Calls of the SLOTS newest epochs; a slot not yet moved to its
        // epoch in this window counts nothing (it only makes us stricter).
        let calls = self.calls.iter().fold(0u64, |sum, slot| {
            let word = slot.load(Acquire);
            let age = tag_ahead(head, word);
            if (0..SLOTS as i32).contains(&age) {
                sum.saturating_add(count(word))
            } else {
                sum
            }
        });
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
            // After `granted`: whoever later clears this count from its
            // slot subtracts it from `granted`, which already holds it.
            // In the newest slot, even for a caller whose clock reads behind
            // the window (a stale read, a clock running behind another's):
            // at its own, older slot the retry would leave the window early,
            // and the reserve could be spent twice within one ttl.
            self.add(
                &self.retries,
                &self.expired_retries,
                Some(&self.granted),
                epoch.max(head),
            );
            true
        } else {
            self.refusals.fetch_add(1, Relaxed);
            false
        }
    }

    /// Calls, retries and refusals since creation (exact once concurrent
    /// callers are done; a snapshot taken during their calls may be off by
    /// the counts being moved out of the window at that instant).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::limit::WindowBudget;
    /// let b = WindowBudget::standard();
    /// assert_eq!(b.stats().calls, 0);
    /// ```
    pub fn stats(&self) -> BudgetStats {
        let live = |slots: &[AtomicU64; RING as usize]| {
            slots
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(count(c.load(Acquire))))
        };
        BudgetStats {
            calls: self
                .expired_calls
                .load(Acquire)
                .saturating_add(live(&self.calls)),
            retries: self
                .expired_retries
                .load(Acquire)
                .saturating_add(live(&self.retries)),
            refusals: self.refusals.load(Relaxed),
        }
    }

    /// Nothing of its window applies at `now`, as for a fresh one: never
    /// used, idle for longer than its window, or no retry granted and no
    /// call counted in it.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        if self.base.load(Acquire) == 0 {
            return true;
        }
        let head = self.head.load(Acquire);
        let epoch = self.slot(now).wrapping_add(self.offset.load(Acquire));
        if ahead(epoch, head) > RING.cast_signed() {
            return true;
        }
        let live = |slots: &[AtomicU64; RING as usize]| {
            slots.iter().any(|slot| {
                let word = slot.load(Acquire);
                count(word) > 0 && (0..RING as i32).contains(&tag_ahead(head, word))
            })
        };
        self.granted.load(Acquire) == 0 && !live(&self.calls) && !live(&self.retries)
    }

    /// The slot `now` falls in, counted from this budget's base.
    fn slot(&self, now: Instant) -> u64 {
        let nanos = nanos_since_origin(now);
        let mut base = self.base.load(Relaxed);
        if base == 0 {
            // Half a day before the first caller's instant (the process
            // origin lies a day before its first use): callers whose
            // clocks read earlier, by up to that much, still land after it.
            let margin = self.ttl.as_nanos().saturating_mul(2).max(BASE_MARGIN);
            let want = nanos
                .saturating_sub(u64::try_from(margin).unwrap_or(u64::MAX))
                .saturating_add(1);
            base = match self.base.compare_exchange(0, want, Relaxed, Relaxed) {
                Ok(_) => want,
                Err(set) => set,
            };
        }
        let since = nanos.saturating_sub(base - 1);
        ((u128::from(since) * self.slot_reciprocal) >> 64) as u64
    }

    /// Moves the window up to `now` if it is ahead, and returns the logical
    /// epoch to count in.
    fn open(&self, now: Instant) -> u64 {
        let slot = self.slot(now);
        loop {
            let offset = self.offset.load(Acquire);
            let epoch = slot.wrapping_add(offset);
            let head = self.head.load(Acquire);
            let ahead = ahead(epoch, head);
            if ahead > RING.cast_signed() || ahead <= -RING.cast_signed() {
                // Idle for longer than the window, or a clock that disagrees
                // with the window's by more than its length (virtual time,
                // a clock gone backwards): nothing in the window applies to
                // this caller. Shift logical time so that it lands just
                // past the newest slot, which expires every slot; time stays
                // monotonic, so other callers' tags keep comparing right.
                let shift = head.wrapping_add(RING).wrapping_sub(epoch);
                let _ = self.offset.compare_exchange(
                    offset,
                    offset.wrapping_add(shift),
                    AcqRel,
                    Acquire,
                );
                continue;
            }
            if ahead <= 0 {
                // Within the window: count where this caller's clock says.
                return epoch;
            }
            if self
                .head
                .compare_exchange(head, epoch, AcqRel, Acquire)
                .is_ok()
            {
                self.rotate(epoch);
                return epoch;
            }
        }
    }

    /// Moves every slot that is older than the window ending at `head` to
    /// the epoch it stands for in that window. Run by whoever moved `head`,
    /// and helped by callers who find their slot not moved yet: at most
    /// `2 × RING` slots, however long the budget sat idle.
    fn rotate(&self, head: u64) {
        for i in 0..RING {
            // The epoch in (head - RING, head] whose slot is `i`.
            let epoch = head - (head - i) % RING;
            let slot = (epoch % RING) as usize;
            Self::advance(&self.calls[slot], epoch, &self.expired_calls, None);
            Self::advance(
                &self.retries[slot],
                epoch,
                &self.expired_retries,
                Some(&self.granted),
            );
        }
    }

    /// Moves `slot` to `epoch` if it holds an older one, accounting for the
    /// count it clears exactly once: the CAS from the word read means that
    /// a count written for a newer epoch is never swept away.
    fn advance(slot: &AtomicU64, epoch: u64, expired: &AtomicU64, granted: Option<&AtomicU64>) {
        let mut word = slot.load(Acquire);
        while tag_ahead(epoch, word) > 0 {
            match slot.compare_exchange_weak(word, pack(epoch, 0), AcqRel, Acquire) {
                Ok(_) => {
                    let cleared = count(word);
                    if cleared > 0 {
                        expired.fetch_add(cleared, Relaxed);
                        if let Some(granted) = granted {
                            let _ = granted
                                .fetch_update(AcqRel, Acquire, |g| Some(g.saturating_sub(cleared)));
                        }
                    }
                    return;
                }
                Err(current) => word = current,
            }
        }
    }

    /// Adds one to the count of `epoch` in `slots`. A slot still holding an
    /// older epoch is moved first; one already moved past `epoch` (this
    /// caller was descheduled while the window moved on by a whole `ttl`)
    /// counts the event in the newest epoch instead.
    fn add(
        &self,
        slots: &[AtomicU64; RING as usize],
        expired: &AtomicU64,
        granted: Option<&AtomicU64>,
        mut epoch: u64,
    ) {
        loop {
            let slot = &slots[(epoch % RING) as usize];
            let mut word = slot.load(Acquire);
            loop {
                match tag_ahead(epoch, word) {
                    0 if count(word) == COUNT_MASK => return, // saturated
                    0 => match slot.compare_exchange_weak(word, word + 1, AcqRel, Acquire) {
                        Ok(_) => return,
                        Err(current) => word = current,
                    },
                    1.. => {
                        Self::advance(slot, epoch, expired, granted);
                        word = slot.load(Acquire);
                    }
                    _ => break,
                }
            }
            epoch = self.head.load(Acquire);
        }
    }
}

impl fmt::Debug for WindowBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowBudget")
            .field("ratio", &self.ratio)
            .field("min_per_sec", &self.min_per_sec)
            .field("ttl", &self.ttl)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for WindowBudget {
    fn default() -> Self {
        Self::standard()
    }
}
