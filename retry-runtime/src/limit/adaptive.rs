//! The adaptive throttle (documented in `limit`).

use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::{Duration, Instant};

use crate::sync::AtomicU64;

use crate::time::clock::Anchor;

/// Slots the window is cut into: counts leave it a slot at a time.
const SLOTS: u64 = 8;

/// A slot is one word: its epoch's low 16 bits, then requests and accepts,
/// 24 bits each (16 million per slot; more saturate).
const COUNT_BITS: u32 = 24;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const TAG_SHIFT: u32 = 2 * COUNT_BITS;
const TAG_MASK: u64 = (1 << 16) - 1;

const fn pack(tag: u64, requests: u64, accepts: u64) -> u64 {
    ((tag & TAG_MASK) << TAG_SHIFT) | (requests << COUNT_BITS) | accepts
}

const fn tag_of(word: u64) -> u64 {
    word >> TAG_SHIFT
}

const fn requests_of(word: u64) -> u64 {
    (word >> COUNT_BITS) & COUNT_MAX
}

const fn accepts_of(word: u64) -> u64 {
    word & COUNT_MAX
}

/// Each time the latest epoch counted in moves past a multiple of this,
/// the slots older than the window are swept to zero first: no slot
/// written on the clock of the latest is then ever more than
/// `2 * SWEEP_EPOCHS + SLOTS` epochs behind it, within its 16 bits, so
/// none comes round again to read as the window's (after 65,536 slots
/// without a write: 4 h 33 min at 2 s). Callers on clocks hours apart
/// are the exception the docs state (they see less).
const SWEEP_EPOCHS: u64 = 1 << 14;

pub use crate::state::vocabulary::Throttled;

/// Client-side throttling (Google SRE): before every attempt, the first
/// included, reject it locally with probability
/// `max(0, (requests − K × accepts) / (requests + 1))`, counted over a
/// sliding window; an accept is an answer (a success, or a `Stop` verdict).
/// The window slides by eighths: a count leaves it between seven eighths
/// of a window and a window after it was made, and each eighth counts up
/// to 16,777,215 requests and as many accepts (more saturate).
///
/// It sheds load a dependency is already refusing, in proportion, before
/// it is sent: at `K = 2` a client keeps sending up to twice what gets
/// through, so that it notices recovery, and no more. A rejected first
/// attempt is the call's error (`E: From<Throttled>`); a rejected later
/// attempt gives up with the last outcome
/// ([`GiveUp::Throttled`](crate::GiveUp::Throttled)). With healthy traffic
/// the probability is exactly 0 — so long as callers let their attempts
/// end: an attempt dropped in flight is a request not accepted (below), so
/// callers that race a call against something else (a cache, in a
/// `select!`) and drop it more often than it answers are shed as if the
/// dependency refused them. Give such a race no adaptive throttle, or let
/// the call run to its end (spawned) and ignore its answer.
///
/// Three choices depart from the SRE book, each from measurement (the
/// storm example, `cargo run --release --example storm`):
///
/// - `requests` counts the attempts *sent*, not the ones shed. Counted with
///   them (as the book counts them), an outage of timeouts leaves no
///   accepts, the throttle's own shedding keeps `requests` high, and it
///   re-opens only by doubling what it lets through once per window: the
///   storm recovers 13.7 s after the outage, against 5.1 s without any
///   retry. Counting what was sent, it re-opens once a window passes
///   without refusals, like a breaker's probe: 1.5 s.
/// - An attempt is counted once its outcome is known, then (a request,
///   and an accept if it was answered), or when it is dropped in flight
///   (a request: a caller's own timeout, a cancelled task), as gRPC's own
///   client-side throttle counts a request at its response: an attempt
///   still in flight counts for nothing. Counted as it was sent, twenty
///   healthy calls sent together after a quiet spell saw 12 of them shed
///   (the second call of an empty window is shed with probability ½),
///   and a healthy dependency slower than the window was shed nearly
///   whole. Counted so, the storm recovers in 1.5 s where it took 1.2 s:
///   a stall is seen when its attempts time out, not as they are sent.
/// - The window is 2 s by default, where the book suggests 2 minutes: with
///   10 s the storm recovers in 10.3 s, with 30 s in 6.9 s, with 2 s in
///   1.5 s (1.5 s at 90% load, where no retry takes 9.2 s). A short window
///   forgets an outage as soon as it ends; give a caller that makes only a
///   few calls a second a longer one, so that a single failure does not
///   weigh on the next attempts — knowing that it forgets an outage later
///   too (with 10 s the storm recovers after not retrying's 5.1 s).
///
/// Time is read from the retry loop's clock (virtual time works), and the
/// random draw from the call's own stream (`testing::seed_jitter` replays
/// it). Lock-free: each count is one compare-and-swap on its slot.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Instant;
/// use backstop::limit::AdaptiveThrottle;
///
/// static USERS: AdaptiveThrottle = AdaptiveThrottle::standard();
/// let now = Instant::now();
/// for _ in 0..100 {
///     USERS.requested(now);
///     USERS.accepted(now);
/// }
/// assert_eq!(USERS.rejection_probability_at(now), 0.0, "healthy: never");
/// for _ in 0..300 {
///     USERS.requested(now); // refused by the dependency
/// }
/// // (400 − 2 × 100) / 401
/// assert!((USERS.rejection_probability_at(now) - 200.0 / 401.0).abs() < 1e-9);
/// ```
pub struct AdaptiveThrottle {
    k: f64,
    window: Duration,
    slot_nanos: u64,
    slots: [AtomicU64; SLOTS as usize],
    /// Where its slots are counted from.
    anchor: Anchor,
    /// Attempts sent whose outcome has not been counted yet: a throttle
    /// with some is not idle (kept per key, its place is not given away
    /// while they are out).
    in_flight: AtomicU64,
    /// The latest epoch counted in (0 before any): nothing counted within
    /// a window of it, the window is empty, whatever the slots' tags say.
    latest: AtomicU64,
}

impl AdaptiveThrottle {
    const_unless_loom! {
    /// A throttle rejecting with probability
    /// `(requests − k × accepts) / (requests + 1)` over a sliding `window`.
    ///
    /// # Panics
    ///
    /// If `k` is below 1 (it would shed healthy traffic) or not finite, or
    /// `window` is shorter than 8 µs. In a `static` that is a compile error.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::AdaptiveThrottle;
    /// static SEARCH: AdaptiveThrottle = AdaptiveThrottle::new(1.5, Duration::from_secs(60));
    /// assert_eq!(SEARCH.k(), 1.5);
    /// ```
    pub fn new(k: f64, window: Duration) -> Self {
        assert!(
            k >= 1.0 && k.is_finite(),
            "AdaptiveThrottle::new: `k` must be at least 1 (below, it sheds healthy traffic)"
        );
        let slot = window.as_nanos() / SLOTS as u128;
        assert!(slot >= 1_000, "AdaptiveThrottle::new: `window` must be at least 8 µs");
        Self {
            k,
            window,
            slot_nanos: if slot > u64::MAX as u128 { u64::MAX } else { slot as u64 },
            slots: zeroed_atomics!(SLOTS as usize),
            anchor: Anchor::new(),
            in_flight: AtomicU64::new(0),
            latest: AtomicU64::new(0),
        }
    }
    }

    const_unless_loom! {
    /// K = 2 over 2 s.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::AdaptiveThrottle;
    /// static API: AdaptiveThrottle = AdaptiveThrottle::standard();
    /// assert_eq!(API.window(), std::time::Duration::from_secs(2));
    /// assert_eq!(API.k(), 2.0);
    /// ```
    pub fn standard() -> Self {
        Self::new(2.0, Duration::from_secs(2))
    }
    }

    /// K: how many requests per accept it lets through.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::AdaptiveThrottle;
    /// static STRICT: AdaptiveThrottle = AdaptiveThrottle::new(1.1, std::time::Duration::from_secs(2));
    /// assert_eq!(STRICT.k(), 1.1);
    /// ```
    pub const fn k(&self) -> f64 {
        self.k
    }

    /// The window requests and accepts are counted over.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::AdaptiveThrottle;
    /// static SLOW: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));
    /// assert_eq!(SLOW.window(), Duration::from_secs(60));
    /// ```
    pub const fn window(&self) -> Duration {
        self.window
    }

    fn epoch(&self, now: Instant) -> u64 {
        self.anchor.nanos(now.into()) / self.slot_nanos
    }

    /// Requests and accepts in the window ending at `now`'s slot.
    pub(crate) fn counts(&self, now: Instant) -> (u64, u64) {
        let epoch = self.epoch(now);
        // Nothing counted for a window or more (a slot's tag may have come
        // round again since); or counted at a clock half the tags' range
        // ahead of this caller's (a caller on a clock so far behind sees
        // nothing, rather than what a tag come round again would show).
        let latest = self.latest.load(Acquire);
        if epoch.saturating_sub(latest) >= SLOTS || latest.saturating_sub(epoch) >= 1 << 15 {
            return (0, 0);
        }
        self.slots.iter().fold((0, 0), |(r, a), slot| {
            let word = slot.load(Acquire);
            // A slot of this window has a tag within the last SLOTS epochs.
            let age = epoch.wrapping_sub(tag_of(word)) & TAG_MASK;
            if age < SLOTS {
                (r + requests_of(word), a + accepts_of(word))
            } else {
                (r, a)
            }
        })
    }

    /// Forgets every count, as a fresh one (racing counts may survive).
    pub(crate) fn clear(&self) {
        for slot in &self.slots {
            slot.store(0, Relaxed);
        }
    }

    /// Nothing counted in the window ending at `now`, and no attempt out:
    /// as a fresh one.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        self.counts(now) == (0, 0) && self.in_flight.load(Acquire) == 0
    }

    /// The probability that an attempt made now is shed, on the clock the
    /// retry loops of this thread read: virtual time under
    /// [`VirtualTime`](crate::testing::VirtualTime), else the timer set
    /// with [`set_timer`](crate::time::set_timer), else tokio's inside a
    /// tokio runtime (paused or not), else the system's; see
    /// [`rejection_probability_at`](Self::rejection_probability_at). A sync
    /// call reads the system's clock (or virtual time), not a timer set nor
    /// a paused runtime's: for sync calls made there, ask
    /// `rejection_probability_at` with the clock they read.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::AdaptiveThrottle;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// static USERS: AdaptiveThrottle = AdaptiveThrottle::standard();
    /// // An hour on, on the paused clock the calls read (the system's has
    /// // not moved): two hundred attempts refused.
    /// tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    /// let now = tokio::time::Instant::now().into_std();
    /// for _ in 0..200 {
    ///     USERS.requested(now);
    /// }
    /// assert!((USERS.rejection_probability() - 200.0 / 201.0).abs() < 1e-9);
    /// # }
    /// ```
    pub fn rejection_probability(&self) -> f64 {
        self.rejection_probability_at(crate::time::clock::loop_now())
    }

    /// The probability that an attempt made at `now` is shed.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::AdaptiveThrottle;
    /// let throttle = AdaptiveThrottle::standard();
    /// let now = Instant::now();
    /// for _ in 0..10 {
    ///     throttle.requested(now); // ten sent, none answered
    /// }
    /// // (10 − 2 × 0) / (10 + 1)
    /// assert!((throttle.rejection_probability_at(now) - 10.0 / 11.0).abs() < 1e-9);
    /// ```
    pub fn rejection_probability_at(&self, now: Instant) -> f64 {
        let (requests, accepts) = self.counts(now);
        let excess = requests as f64 - self.k * accepts as f64;
        if excess <= 0.0 {
            0.0
        } else {
            excess / (requests as f64 + 1.0)
        }
    }

    /// Adds one to a count of `now`'s slot, moving the slot to this epoch
    /// first if it holds an older one.
    pub(crate) fn add(&self, now: Instant, requests: u64, accepts: u64) {
        let epoch = self.epoch(now);
        let latest = self.latest.load(Acquire);
        if epoch > latest {
            if epoch / SWEEP_EPOCHS != latest / SWEEP_EPOCHS {
                self.sweep(epoch);
            }
            self.latest.fetch_max(epoch, AcqRel);
        }
        let slot = &self.slots[(epoch % SLOTS) as usize];
        let tag = epoch & TAG_MASK;
        let mut current = slot.load(Acquire);
        loop {
            let next = if tag_of(current) == tag {
                pack(
                    tag,
                    (requests_of(current) + requests).min(COUNT_MAX),
                    (accepts_of(current) + accepts).min(COUNT_MAX),
                )
            } else {
                // Another epoch: this slot starts over. Also when it holds a
                // *later* one, from a caller whose clock is ahead (a test's
                // paused clock beside real time): counted there, this
                // caller's traffic would stay invisible to its own window
                // until its clock caught up. Callers whose clocks disagree
                // wipe each other's counts: they see less, never more.
                pack(tag, requests, accepts)
            };
            match slot.compare_exchange_weak(current, next, AcqRel, Acquire) {
                Ok(_) => {
                    if tag_of(current) != tag {
                        self.sweep_behind(epoch);
                    }
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// A slot moved on to `epoch`: the others older than the window, on
    /// this caller's clock, start over at zero (those a window to three
    /// quarters of the tags' range behind: further is a caller's whose
    /// clock is ahead). On any one clock, slots are then swept as it moves,
    /// whatever clock moved `latest`, and none is left to come round again
    /// (a caller's clock far behind `latest` reads nothing meanwhile). A
    /// slot changed since it was read is left as it is.
    #[cold]
    fn sweep_behind(&self, epoch: u64) {
        for slot in &self.slots {
            let word = slot.load(Acquire);
            let age = epoch.wrapping_sub(tag_of(word)) & TAG_MASK;
            if word != 0 && (SLOTS..TAG_MASK + 1 - SWEEP_EPOCHS).contains(&age) {
                let _ = slot.compare_exchange(word, 0, AcqRel, Acquire);
            }
        }
    }

    /// Before the latest epoch counted in moves on to `epoch`, past a
    /// multiple of [`SWEEP_EPOCHS`]: every slot older than the window
    /// ending at `epoch` starts over at zero, so that no reader or writer
    /// that sees `latest` in `epoch`'s block finds a slot whose tag came
    /// round again (it is published after the sweep). The slots are seen
    /// first, then `latest` read again: every slot seen was written at it
    /// or before (each count moves `latest` before it counts), so its
    /// epoch is found from its tag and that `latest` (within 16 bits of
    /// it, as the sweeps keep every slot written on one clock), however
    /// its tag reads against `epoch`'s (after 65,536 slots they are
    /// alike). A slot written since it was seen (a racing caller's count)
    /// is left as it is: its compare-and-swap fails, and no count is lost.
    /// Callers racing past the same multiple each sweep; once one has
    /// moved `latest` on, the others find nothing to do.
    #[cold]
    fn sweep(&self, epoch: u64) {
        let seen: [u64; SLOTS as usize] =
            std::array::from_fn(|place| self.slots[place].load(Acquire));
        let before = self.latest.load(Acquire);
        if epoch <= before || epoch / SWEEP_EPOCHS == before / SWEEP_EPOCHS {
            return;
        }
        for (slot, &word) in self.slots.iter().zip(&seen) {
            if word == 0 {
                continue;
            }
            let written = before.wrapping_sub(before.wrapping_sub(tag_of(word)) & TAG_MASK);
            if epoch.wrapping_sub(written) >= SLOTS {
                let _ = slot.compare_exchange(word, 0, AcqRel, Acquire);
            }
        }
    }

    /// One more request: an attempt sent, whose outcome is known or which
    /// was dropped in flight (the retry loops count their own).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::AdaptiveThrottle;
    /// let throttle = AdaptiveThrottle::standard();
    /// let now = Instant::now();
    /// throttle.requested(now);
    /// throttle.requested(now);
    /// assert!(throttle.rejection_probability_at(now) > 0.0, "two sent, none accepted");
    /// ```
    pub fn requested(&self, now: Instant) {
        self.add(now, 1, 0);
    }

    /// An attempt sent has its outcome at `now` (or was dropped in flight,
    /// not `answered`): one more request, and one more accept if it was
    /// `answered`, in one step.
    pub(crate) fn sent(&self, now: Instant, answered: bool) {
        self.add(now, 1, u64::from(answered));
        // (Never below zero: a count given without its `sending`.)
        let _ = self
            .in_flight
            .fetch_update(AcqRel, Acquire, |out| out.checked_sub(1));
    }

    /// An attempt it admitted is sent: out until [`sent`](Self::sent)
    /// counts its outcome.
    pub(crate) fn sending(&self) {
        self.in_flight.fetch_add(1, AcqRel);
    }

    /// The dependency answered (a success, or a `Stop` verdict): one more
    /// accept.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::AdaptiveThrottle;
    /// let throttle = AdaptiveThrottle::standard();
    /// let now = Instant::now();
    /// throttle.requested(now);
    /// throttle.requested(now);
    /// throttle.accepted(now); // 2 requests ≤ K × 1 accept: nothing shed
    /// assert_eq!(throttle.rejection_probability_at(now), 0.0);
    /// ```
    pub fn accepted(&self, now: Instant) {
        self.add(now, 0, 1);
    }

    /// Before an attempt: sheds it if `draw` (uniform in `[0, 1)`, from the
    /// call's random stream) falls below the rejection probability. The
    /// retry loops count an attempt it admits once the attempt's outcome
    /// is known, as [`requested`](Self::requested) and, if it was
    /// answered, [`accepted`](Self::accepted), at that instant (or as
    /// requested when it is dropped in flight): a circuit breaker may
    /// still reject it, what was never sent was never refused, and an
    /// attempt still in flight has not been refused yet.
    ///
    /// # Errors
    ///
    /// [`Throttled`] when the attempt is shed.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::AdaptiveThrottle;
    /// let throttle = AdaptiveThrottle::standard();
    /// let now = Instant::now();
    /// assert!(throttle.admit(now, 0.0).is_ok(), "nothing refused yet");
    /// for _ in 0..99 {
    ///     throttle.requested(now); // 99 sent, none accepted
    /// }
    /// // Shed with probability 99/100: a draw below it is shed, one above is not.
    /// assert!(throttle.admit(now, 0.5).is_err());
    /// assert!(throttle.admit(now, 0.995).is_ok());
    /// ```
    pub fn admit(&self, now: Instant, draw: f64) -> Result<(), Throttled> {
        if draw < self.rejection_probability_at(now) {
            Err(Throttled::new())
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for AdaptiveThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveThrottle")
            .field("k", &self.k)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// [`standard`](AdaptiveThrottle::standard), as the budgets' defaults are
/// theirs.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::limit::AdaptiveThrottle;
/// assert_eq!(AdaptiveThrottle::default().k(), AdaptiveThrottle::standard().k());
/// ```
impl Default for AdaptiveThrottle {
    fn default() -> Self {
        Self::standard()
    }
}
