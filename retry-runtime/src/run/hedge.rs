//! Hedged attempts: for calls that are slow rather than failing.
//!
//! A hedge is another copy of a slow attempt, sent after a delay beside
//! it; the first answer wins and the others are dropped. Sent after the
//! 95th percentile of recent latencies, a hedge goes out for no more than
//! one call in twenty or so, and cuts the tail that the slowest calls
//! make. [`Hedge`] says when (a fixed delay, or a percentile of the
//! function's own latencies) and how many; [`LatencyPercentile`] is the
//! estimate behind the adaptive delay: it follows the dependency as it
//! changes, costs a call almost nothing to keep, and gives no delay (so
//! no hedge) on too little evidence.
//!
//! Every hedge is extra load, so it is granted like a retry: only for an
//! idempotent operation, before the deadline, by the call's budget or
//! token budget, the circuit breaker and the adaptive throttle; when the
//! dependency is failing, they stop hedges first.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use crate::time::clock::Anchor;

/// Sub-buckets per power of two: a latency lands in a bucket at most
/// 1/16 (6.25%) wider than itself.
const SUB: u64 = 16;
/// Powers of two covered above the exact range: microseconds up to 2^40
/// (about twelve days); longer latencies count in the last bucket.
const POWERS: u64 = 37;
/// Buckets: 0..16 µs exactly, then 16 per power of two.
const BUCKETS: usize = (SUB + POWERS * SUB) as usize;
/// Slots of the rotating window: each holds a quarter of it.
const SLOTS: usize = 4;
/// Samples a window needs before it gives an estimate.
const MIN_SAMPLES: u64 = 100;
/// Cached estimates are recomputed this many times per window.
const REFRESHES: u64 = 16;
/// Samples a window needs before its estimate is kept between refreshes.
const CACHED_SAMPLES: u64 = 1_000;
/// No estimate.
const NONE: u64 = u64::MAX;

/// A percentile of recent latencies (say the 95th), estimated over a
/// rotating window: lock-free (recording a latency is one atomic add, and
/// a read of the slot's tag), in bounded memory (a log-linear histogram per
/// quarter of the window, within 6.25% of the true value), following
/// change within a window, and giving no estimate until the window holds
/// at least 100 latencies.
///
/// `const`: a `static` per function or dependency.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::{Duration, Instant};
/// use backstop::hedge::LatencyPercentile;
///
/// static USERS_API: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
///
/// let now = Instant::now();
/// assert_eq!(USERS_API.estimate(now), None, "no evidence yet");
/// for ms in 1..=200 {
///     USERS_API.record(Duration::from_millis(ms), now);
/// }
/// let p95 = USERS_API.estimate(now).unwrap();
/// assert!(p95 >= Duration::from_millis(190) && p95 <= Duration::from_millis(203), "{p95:?}");
/// ```
pub struct LatencyPercentile {
    quantile: f64,
    /// A quarter of the window, in nanoseconds.
    slot_nanos: u64,
    anchor: Anchor,
    /// Each quarter's epoch (the quarter it counts, plus one: 0 is none).
    tags: [AtomicU64; SLOTS],
    counts: [[AtomicU32; BUCKETS]; SLOTS],
    /// The last estimate (microseconds, or `NONE`) and the refresh it was
    /// made in: `refresh << 32 | min(estimate, u32::MAX - 1)`.
    cache: AtomicU64,
}

/// The most hedges a round sends ([`Hedge::hedges`], `#[retry(hedges = ..)]`):
/// each is one more request to a dependency that is already slow, and a
/// round of many polls every attempt at each wake. Two or three are
/// plenty; Polly and gRPC's hedging policy cap a round likewise.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::hedge::{Hedge, MAX_HEDGES};
/// let widest = Hedge::after(Duration::from_millis(50)).hedges(MAX_HEDGES);
/// assert_eq!(widest.get_hedges(), 10);
/// ```
pub const MAX_HEDGES: u32 = 10;

/// When a call sends hedges, and how many: `#[retry(hedge = 50ms)]`,
/// `#[retry(hedge = p95, hedges = 2)]`, or [`Retry::hedge`](crate::Retry::hedge).
///
/// After the delay, if the attempt has not answered, another copy starts
/// beside it (and after the delay again, another, up to
/// [`hedges`](Self::hedges) extra attempts in flight); the first answer
/// (a success, or an error no retry can fix) wins and the others are
/// dropped. A retryable failure of one attempt does not end the others;
/// when all have failed, the call retries as usual. Hedges count as
/// attempts (`attempts` bounds them with the retries), share the call's
/// idempotency key and deadline, and each has its own attempt number.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::hedge::{Hedge, LatencyPercentile};
///
/// // A fixed delay: hedge an attempt slower than 50 ms.
/// let fixed = Hedge::after(Duration::from_millis(50));
/// assert_eq!(fixed.get_hedges(), 1);
///
/// // The function's own 95th percentile over the last 10 s: no hedge
/// // until 100 latencies have been seen.
/// static USERS: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
/// let adaptive = Hedge::at(&USERS).hedges(2);
/// assert_eq!(adaptive.delay(std::time::Instant::now()), None);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Hedge {
    delay: Delay,
    hedges: u32,
}

#[derive(Clone, Copy, Debug)]
enum Delay {
    After(Duration),
    Percentile(&'static LatencyPercentile),
}

impl Hedge {
    /// Hedge an attempt that has not answered after `delay` (zero sends
    /// every copy at once: each call then costs `1 + hedges` requests).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::hedge::Hedge;
    /// let fixed = Hedge::after(Duration::from_millis(50));
    /// assert_eq!(fixed.delay(Instant::now()), Some(Duration::from_millis(50)));
    /// assert_eq!(fixed.get_hedges(), 1);
    /// ```
    #[must_use]
    pub const fn after(delay: Duration) -> Self {
        Self {
            delay: Delay::After(delay),
            hedges: 1,
        }
    }

    /// Hedge an attempt slower than `latency`'s estimate (say, the 95th
    /// percentile of the function's recent latencies): each round's first
    /// attempt that answers (success, or an error no retry can fix) or is
    /// cut off is recorded in it, and one overtaken by its hedge as what it
    /// took so far; one that fails retryably is not (a failure's latency,
    /// at once for a 503 or a refused connection, is not an answer's). No
    /// hedge while it has no estimate.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::hedge::{Hedge, LatencyPercentile};
    /// static P95: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
    /// let adaptive = Hedge::at(&P95);
    /// assert_eq!(adaptive.delay(Instant::now()), None, "no estimate yet: no hedge");
    /// ```
    #[must_use]
    pub const fn at(latency: &'static LatencyPercentile) -> Self {
        Self {
            delay: Delay::Percentile(latency),
            hedges: 1,
        }
    }

    /// At most `hedges` extra attempts per round (1 by default, up to
    /// [`MAX_HEDGES`]), each started a delay after the one before.
    ///
    /// # Panics
    ///
    /// If `hedges` is 0 or above [`MAX_HEDGES`] (a compile error in a
    /// `const`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::hedge::Hedge;
    /// assert_eq!(Hedge::after(Duration::from_millis(10)).hedges(3).get_hedges(), 3);
    /// ```
    #[must_use]
    pub const fn hedges(mut self, hedges: u32) -> Self {
        assert!(hedges >= 1, "Hedge::hedges: `hedges` must be at least 1");
        assert!(
            hedges <= MAX_HEDGES,
            "Hedge::hedges: a round sends `MAX_HEDGES` (10) hedges at most"
        );
        self.hedges = hedges;
        self
    }

    /// The most extra attempts in flight beside the first.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::hedge::Hedge;
    /// assert_eq!(Hedge::after(Duration::from_millis(50)).get_hedges(), 1);
    /// ```
    pub const fn get_hedges(&self) -> u32 {
        self.hedges
    }

    /// The delay after which an attempt started now is hedged, if any
    /// (an adaptive delay without enough evidence gives none).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::{Duration, Instant}; use backstop::hedge::Hedge;
    /// let hedge = Hedge::after(Duration::from_millis(10));
    /// assert_eq!(hedge.delay(Instant::now()), Some(Duration::from_millis(10)));
    /// ```
    pub fn delay(&self, now: Instant) -> Option<Duration> {
        match self.delay {
            Delay::After(delay) => Some(delay),
            Delay::Percentile(latency) => latency.estimate(now),
        }
    }

    /// An attempt ended (or was dropped) `latency` after it started: the
    /// adaptive delay learns it.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn record(&self, latency: Duration, now: Instant) {
        if let Delay::Percentile(estimate) = self.delay {
            estimate.record(latency, now);
        }
    }
}

impl std::fmt::Debug for LatencyPercentile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyPercentile")
            .field("quantile", &self.quantile)
            .field("window", &self.window())
            .finish_non_exhaustive()
    }
}

impl LatencyPercentile {
    /// The `quantile` (in `(0, 1)`: `0.95` for the 95th percentile) of the
    /// latencies recorded over the last `window` (at least four
    /// microseconds; ten seconds is a good start).
    ///
    /// # Panics
    ///
    /// If `quantile` is not strictly between 0 and 1, or `window` is under
    /// four microseconds: a compile error in a `static`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::hedge::LatencyPercentile;
    /// static P99: LatencyPercentile = LatencyPercentile::new(0.99, Duration::from_secs(30));
    /// assert_eq!(P99.quantile(), 0.99);
    /// ```
    pub const fn new(quantile: f64, window: Duration) -> Self {
        assert!(
            quantile > 0.0 && quantile < 1.0,
            "LatencyPercentile::new: `quantile` must be strictly between 0 and 1"
        );
        let nanos = window.as_nanos();
        assert!(
            nanos >= 4_000,
            "LatencyPercentile::new: `window` must be at least four microseconds"
        );
        let slot_nanos = if nanos / 4 > u64::MAX as u128 {
            u64::MAX
        } else {
            (nanos / 4) as u64
        };
        Self {
            quantile,
            slot_nanos,
            anchor: Anchor::new(),
            tags: [const { AtomicU64::new(0) }; SLOTS],
            counts: [const { [const { AtomicU32::new(0) }; BUCKETS] }; SLOTS],
            cache: AtomicU64::new(NONE),
        }
    }

    /// The quantile estimated.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::hedge::LatencyPercentile;
    /// static P95: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
    /// assert_eq!(P95.quantile(), 0.95);
    /// ```
    pub const fn quantile(&self) -> f64 {
        self.quantile
    }

    /// The window the estimate is made over.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::hedge::LatencyPercentile;
    /// static P95: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
    /// assert_eq!(P95.window(), Duration::from_secs(10));
    /// ```
    pub const fn window(&self) -> Duration {
        Duration::from_nanos(self.slot_nanos.saturating_mul(4))
    }

    /// The quarter of the window `now` falls in.
    fn epoch(&self, now: Instant) -> u64 {
        self.anchor.nanos(now.into()) / self.slot_nanos
    }

    /// Counts `latency`, observed at `now`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::{Duration, Instant};
    /// # use backstop::hedge::LatencyPercentile;
    /// let p50 = LatencyPercentile::new(0.5, Duration::from_secs(10));
    /// p50.record(Duration::from_millis(20), Instant::now());
    /// assert_eq!(p50.samples(Instant::now()), 1);
    /// ```
    pub fn record(&self, latency: Duration, now: Instant) {
        let epoch = self.epoch(now);
        let slot = (epoch % SLOTS as u64) as usize;
        let tag = epoch + 1;
        let current = self.tags[slot].load(Relaxed);
        if current != tag {
            // A quarter from an older round: start it over. Two callers may
            // both clear it, and a latency counted meanwhile may be lost:
            // an estimate can miss a few samples, never count one twice.
            if current < tag
                && self.tags[slot]
                    .compare_exchange(current, tag, Relaxed, Relaxed)
                    .is_ok()
            {
                for count in &self.counts[slot] {
                    count.store(0, Relaxed);
                }
            } else if self.tags[slot].load(Relaxed) != tag {
                // A caller whose clock is behind the quarter's: not counted.
                return;
            }
        }
        self.counts[slot][bucket(latency)].fetch_add(1, Relaxed);
    }

    /// Latencies counted in the window ending at `now`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::hedge::LatencyPercentile;
    /// let p95 = LatencyPercentile::new(0.95, Duration::from_secs(10));
    /// let now = Instant::now();
    /// for ms in [10, 20, 30] {
    ///     p95.record(Duration::from_millis(ms), now);
    /// }
    /// assert_eq!(p95.samples(now), 3);
    /// assert_eq!(p95.samples(now + Duration::from_secs(60)), 0, "out of the window");
    /// ```
    pub fn samples(&self, now: Instant) -> u64 {
        let epoch = self.epoch(now);
        (0..SLOTS)
            .filter(|&slot| self.live(slot, epoch))
            .map(|slot| {
                self.counts[slot]
                    .iter()
                    .map(|c| u64::from(c.load(Relaxed)))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Whether `slot` counts a quarter of the window ending in `epoch`.
    fn live(&self, slot: usize, epoch: u64) -> bool {
        let tag = self.tags[slot].load(Relaxed);
        tag != 0 && tag <= epoch + 1 && epoch + 1 - tag < SLOTS as u64
    }

    /// The estimate at `now`: the quantile of the latencies of the window
    /// ending then, rounded up to its bucket's end (at most 6.25% above);
    /// `None` with fewer than 100 of them. Once the window holds a
    /// thousand, an estimate is kept for a sixteenth of the window between
    /// two computations (with fewer, each call computes it: the first
    /// latencies of a burst are its fastest, and an estimate kept from
    /// them would be too low for long).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::{Duration, Instant};
    /// # use backstop::hedge::LatencyPercentile;
    /// let p90 = LatencyPercentile::new(0.9, Duration::from_secs(10));
    /// let now = Instant::now();
    /// for _ in 0..99 {
    ///     p90.record(Duration::from_millis(5), now);
    /// }
    /// assert_eq!(p90.estimate(now), None, "99 latencies are not enough");
    /// ```
    pub fn estimate(&self, now: Instant) -> Option<Duration> {
        let nanos = self.anchor.nanos(now.into());
        let refresh = nanos / (self.slot_nanos.saturating_mul(SLOTS as u64) / REFRESHES).max(1);
        let refresh = refresh & u64::from(u32::MAX);
        let cached = self.cache.load(Relaxed);
        if cached != NONE && cached >> 32 == refresh {
            return decode(cached & u64::from(u32::MAX));
        }
        let (micros, samples) = self.compute(now);
        // An estimate from little evidence is not kept: more may arrive
        // any moment, and the first latencies of a burst of calls are its
        // fastest (the slow ones have not ended yet): kept for a sixteenth
        // of the window, such an estimate would hedge far too often. While
        // there is little evidence, a computation costs little.
        if samples >= CACHED_SAMPLES {
            self.cache.store(refresh << 32 | micros, Relaxed);
        }
        decode(micros)
    }

    /// The quantile now, in microseconds, or `u32::MAX` for none.
    fn compute(&self, now: Instant) -> (u64, u64) {
        let epoch = self.epoch(now);
        let mut totals = [0u64; BUCKETS];
        for slot in (0..SLOTS).filter(|&slot| self.live(slot, epoch)) {
            for (total, count) in totals.iter_mut().zip(&self.counts[slot]) {
                *total += u64::from(count.load(Relaxed));
            }
        }
        let samples: u64 = totals.iter().sum();
        if samples < MIN_SAMPLES {
            return (u64::from(u32::MAX), samples);
        }
        // The smallest bucket whose running count reaches the quantile's
        // share of the samples.
        let rank = (self.quantile * samples as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, total) in totals.iter().enumerate() {
            seen += total;
            if seen >= rank {
                return (upper(index).min(u64::from(u32::MAX) - 1), samples);
            }
        }
        (upper(BUCKETS - 1).min(u64::from(u32::MAX) - 1), samples)
    }
}

/// A cached estimate, in microseconds (`u32::MAX`: none).
fn decode(micros: u64) -> Option<Duration> {
    (micros != u64::from(u32::MAX)).then(|| Duration::from_micros(micros))
}

/// The bucket of a latency: exact below 16 µs, then 16 per power of two.
fn bucket(latency: Duration) -> usize {
    let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    if micros < SUB {
        return micros as usize;
    }
    let power = u64::from(micros.ilog2()); // 4..=63
    let shift = power - 4;
    if shift >= POWERS {
        return BUCKETS - 1;
    }
    let sub = (micros >> shift) & (SUB - 1);
    (SUB + shift * SUB + sub) as usize
}

/// The largest latency, in microseconds, that falls in `index`.
fn upper(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let shift = (index - SUB) / SUB;
    let sub = (index - SUB) % SUB;
    ((SUB + sub) << shift) + (1 << shift) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_latencies_within_a_sixteenth_of_its_end() {
        for micros in (0..100_000u64).chain([u64::from(u32::MAX), 1 << 39, (1 << 40) - 1]) {
            let index = bucket(Duration::from_micros(micros));
            let end = upper(index);
            assert!(end >= micros, "{micros} in bucket {index} ending at {end}");
            assert!(
                end - micros <= micros / 16 + 1,
                "{micros}: bucket ends at {end}"
            );
            if index > 0 {
                assert!(upper(index - 1) < micros, "{micros}: in the bucket before");
            }
        }
        assert_eq!(bucket(Duration::MAX), BUCKETS - 1);
    }
}
