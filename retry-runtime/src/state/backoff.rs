//! Backoff schedules, jitter, and the random numbers behind them.
//!
//! `n` is the number of retries made so far: 0 for the first delay. The
//! schedule gives a ceiling, `ceil = min(cap, schedule(n))`; jitter draws
//! below it. Every step saturates, so a retry number of `u32::MAX`, a cap of
//! `Duration::MAX` or a huge factor neither panics nor wraps.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// The shape of the delay schedule, before jitter.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Backoff, Policy};
///
/// let policy = Policy::new()
///     .backoff(Backoff::Linear)
///     .base(Duration::from_millis(100))
///     .cap(Duration::from_secs(1));
/// assert_eq!(policy.ceiling(0), Duration::from_millis(100));
/// assert_eq!(policy.ceiling(2), Duration::from_millis(300));
/// assert_eq!(policy.ceiling(50), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum Backoff {
    /// `base · factor^n`: each wait longer than the last by `factor`, so a
    /// dependency under stress gets geometrically more room to recover.
    #[default]
    Exponential,
    /// `base · (n + 1)`.
    Linear,
    /// `base`, every time. Predictable, and without jitter a synchronised
    /// pile-on at scale: prefer exponential for remote calls.
    Fixed,
}

/// How the delay is randomised below its ceiling.
///
/// Jitter is half the mechanism: clients that failed together and wait the
/// same time come back together, as a thundering herd. The jittered value is
/// always clamped, so no delay exceeds the policy's `cap`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Jitter, Policy};
///
/// let policy = Policy::new().jitter(Jitter::Equal);
/// // Equal jitter: half the ceiling (100 ms for the first retry), plus up
/// // to half again at random.
/// let mut rng = backstop::backoff::Rng::seeded(7);
/// let delay = policy.delay(0, Duration::ZERO, &mut rng);
/// assert!(delay >= Duration::from_millis(50) && delay <= Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum Jitter {
    /// `ceil`: no randomness. Only for tests and single clients.
    None,
    /// `uniform(0, ceil)`: the widest spread, the least total load.
    #[default]
    Full,
    /// `ceil/2 + uniform(0, ceil/2)`: never shorter than half the ceiling.
    Equal,
    /// `min(cap, uniform(base, prev · 3))`, `prev` starting at `base`: each
    /// delay drawn from the previous one rather than from the retry number.
    Decorrelated,
}

/// Multiplies a duration by a non-negative factor, saturating at
/// `Duration::MAX` (where `Duration::mul_f64` would panic).
pub(crate) fn scale(d: Duration, by: f64) -> Duration {
    let secs = d.as_secs_f64() * by;
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// A whole number of nanoseconds as a duration, saturating.
fn from_nanos(n: u128) -> Duration {
    match u64::try_from(n) {
        Ok(n) => Duration::from_nanos(n),
        Err(_) => u64::try_from(n / 1_000_000_000).map_or(Duration::MAX, |secs| {
            Duration::new(secs, (n % 1_000_000_000) as u32)
        }),
    }
}

/// A duration in whole nanoseconds, if that fits 64 bits (584 years).
fn nanos_u64(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

/// A uniform draw from `[lo, hi)` (`lo` when `hi <= lo`), in integer
/// nanoseconds: 64 random bits scale the span by a multiplication, with no
/// float conversion.
#[inline]
fn between(lo: Duration, hi: Duration, rng: &mut Rng) -> Duration {
    let span = hi.saturating_sub(lo);
    let r = u128::from(rng.next_u64());
    // span · r / 2⁶⁴: one 64-bit multiplication for any span below 584
    // years, and without overflow beyond.
    let offset = match nanos_u64(span) {
        Some(span) => Duration::from_nanos(((u128::from(span) * r) >> 64) as u64),
        None => {
            let span = span.as_nanos();
            from_nanos((span >> 64) * r + (((span & u128::from(u64::MAX)) * r) >> 64))
        }
    };
    lo.saturating_add(offset)
}

/// `base · factor^n`, saturating. An integral factor (2, the default)
/// takes integer arithmetic: exact, and no `powf`.
#[inline]
fn exponential(base: Duration, factor: f64, n: u32) -> Duration {
    // The default, doubling, in 64-bit nanoseconds while they fit.
    #[allow(clippy::float_cmp)] // exactly 2, as the user wrote it
    if factor == 2.0
        && n < 64
        && let Some(grown) = nanos_u64(base).and_then(|nanos| nanos.checked_mul(1 << n))
    {
        return Duration::from_nanos(grown);
    }
    if factor.fract() == 0.0 && (1.0..=f64::from(u32::MAX)).contains(&factor) {
        // In range and integral: the conversion is exact.
        let grown = match factor as u32 {
            1 => Some(1),
            // 2^128 and above overflow: saturate without looping.
            _ if n >= 128 => None,
            2 => Some(1u128 << n),
            factor => u128::from(factor).checked_pow(n),
        };
        return match grown.and_then(|g| base.as_nanos().checked_mul(g)) {
            Some(nanos) => from_nanos(nanos),
            None if base.is_zero() => Duration::ZERO,
            None => Duration::MAX,
        };
    }
    // powi of a huge exponent is simply +inf, which `scale` saturates.
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    scale(base, factor.powi(n))
}

/// The schedule's ceiling for retry number `n`, before jitter: saturating,
/// and never above `cap`.
#[inline]
pub(crate) fn ceiling(
    backoff: Backoff,
    base: Duration,
    factor: f64,
    cap: Duration,
    n: u32,
) -> Duration {
    let raw = match backoff {
        Backoff::Fixed => base,
        Backoff::Linear => base.saturating_mul(n.saturating_add(1)),
        Backoff::Exponential => exponential(base, factor, n),
    };
    raw.min(cap)
}

/// One jittered delay. `prev` is the previous delay (for `Decorrelated`),
/// `base` the policy's first delay.
#[inline]
pub(crate) fn jittered(
    jitter: Jitter,
    ceil: Duration,
    base: Duration,
    prev: Duration,
    cap: Duration,
    rng: &mut Rng,
) -> Duration {
    let d = match jitter {
        Jitter::None => ceil,
        Jitter::Full => between(Duration::ZERO, ceil, rng),
        Jitter::Equal => between(ceil / 2, ceil, rng),
        Jitter::Decorrelated => {
            let hi = prev.saturating_mul(3).max(base);
            between(base, hi, rng)
        }
    };
    // Jitter is drawn first and the result clamped after: adding jitter
    // after the cap is how peers break their own limit.
    d.min(cap)
}

/// The random numbers behind jitter: `rand`'s small, fast generator
/// (`SmallRng`), one stream per call.
///
/// Not cryptographic. [`Rng::new`] gives each call its own stream from a
/// per-thread seed sequence: no lock, no allocation, no system call after
/// the first use on a thread. It is deliberately not `Clone`: two retry
/// loops sharing one sequence would jitter in lockstep, which is the herd
/// jitter exists to break.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::backoff::Rng;
///
/// let mut a = Rng::seeded(7);
/// let mut b = Rng::seeded(7);
/// assert_eq!(a.next_u64(), b.next_u64()); // seeded: reproducible
/// let x = Rng::new().next_f64();
/// assert!((0.0..1.0).contains(&x));
/// ```
#[derive(Debug)]
pub struct Rng {
    inner: SmallRng,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

thread_local! {
    /// Next seed of this thread's seed sequence; 0 until first use.
    static SEEDS: Cell<u64> = const { Cell::new(0) };
}

impl Rng {
    /// A fresh stream, distinct from every other stream on every thread.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::backoff::Rng;
    /// let (mut a, mut b) = (Rng::new(), Rng::new());
    /// assert_ne!(a.next_u64(), b.next_u64(), "streams of their own");
    /// ```
    pub fn new() -> Self {
        let counter = SEEDS.with(|s| {
            let mut cur = s.get();
            if cur == 0 {
                // RandomState carries per-thread random keys: a different
                // starting point for every thread and every process.
                cur = RandomState::new().hash_one(0x5eed_u64) | 1;
            }
            s.set(cur.wrapping_add(GOLDEN_GAMMA) | 1);
            cur
        });
        Self::seeded(counter)
    }

    /// Restarts this thread's seed sequence from `seed`: the calls that
    /// draw a stream on this thread from now on draw the same streams as
    /// after any other `reseed_thread(seed)`.
    pub(crate) fn reseed_thread(seed: u64) {
        // SplitMix64's finaliser: neighbouring seeds start unrelated
        // sequences (and 0, which means "not seeded yet", is never stored).
        let mut z = seed.wrapping_add(GOLDEN_GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        SEEDS.with(|s| s.set((z ^ (z >> 31)).max(1)));
    }

    /// A reproducible stream, for tests. Nearby seeds give unrelated
    /// streams (the seed is expanded by `SmallRng::seed_from_u64`). The
    /// same seed gives the same stream on one platform and one version of
    /// `rand`: `SmallRng` is another generator on a 32-bit target, and
    /// may change in a `rand` release.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::backoff::Rng;
    /// assert_eq!(Rng::seeded(7).next_u64(), Rng::seeded(7).next_u64());
    /// ```
    pub fn seeded(seed: u64) -> Self {
        Self {
            inner: SmallRng::seed_from_u64(seed),
        }
    }

    /// The stream that starts from these 256 bits.
    pub(crate) fn from_state(state: [u64; 4]) -> Self {
        let mut seed = [0; 32];
        for (bytes, word) in seed.chunks_exact_mut(8).zip(state) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        Self {
            inner: SmallRng::from_seed(seed),
        }
    }

    /// The next 64 random bits.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::backoff::Rng;
    /// let mut rng = Rng::seeded(1);
    /// assert_ne!(rng.next_u64(), rng.next_u64());
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A uniform draw from `[0, 1)`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::backoff::Rng;
    /// let mut rng = Rng::seeded(1);
    /// assert!((0..1000).map(|_| rng.next_f64()).all(|x| (0.0..1.0).contains(&x)));
    /// ```
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

impl Default for Rng {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_saturates_instead_of_overflowing() {
        for n in [0, 1, 63, 64, 1000, u32::MAX] {
            let c = ceiling(Backoff::Exponential, MS, 10.0, Duration::MAX, n);
            assert!(c >= MS);
            let c = ceiling(Backoff::Linear, MS, 10.0, Duration::MAX, n);
            assert!(c >= MS);
        }
        assert_eq!(
            ceiling(Backoff::Exponential, MS, 10.0, Duration::MAX, 1000),
            Duration::MAX
        );
        assert_eq!(
            ceiling(Backoff::Linear, Duration::MAX, 2.0, Duration::MAX, 7),
            Duration::MAX
        );
    }

    #[test]
    fn schedules_follow_their_formulas() {
        let cap = Duration::from_secs(100);
        assert_eq!(ceiling(Backoff::Exponential, MS, 2.0, cap, 3), 8 * MS);
        assert_eq!(ceiling(Backoff::Exponential, MS, 3.0, cap, 2), 9 * MS);
        assert_eq!(ceiling(Backoff::Linear, MS, 2.0, cap, 3), 4 * MS);
        assert_eq!(ceiling(Backoff::Fixed, MS, 2.0, cap, 3), MS);
        assert_eq!(ceiling(Backoff::Exponential, MS, 2.0, 5 * MS, 30), 5 * MS);
    }

    #[test]
    fn integral_factors_are_exact_and_agree_with_the_float_formula() {
        let cap = Duration::MAX;
        let mut rng = Rng::seeded(5);
        for _ in 0..20_000 {
            let base = Duration::from_nanos(rng.next_u64() % 10_000_000_000);
            let factor = 2 + rng.next_u64() % 6;
            let n = (rng.next_u64() % 70) as u32;
            let got = ceiling(Backoff::Exponential, base, factor as f64, cap, n);
            let exact = u128::from(factor)
                .checked_pow(n)
                .and_then(|g| base.as_nanos().checked_mul(g));
            match exact.and_then(|e| u64::try_from(e / 1_000_000_000).ok().map(|s| (s, e))) {
                Some((secs, e)) => {
                    assert_eq!(got, Duration::new(secs, (e % 1_000_000_000) as u32));
                    let float = base.as_secs_f64() * (factor as f64).powf(f64::from(n));
                    assert!((got.as_secs_f64() - float).abs() <= float * 1e-9 + 1e-9);
                }
                None => assert_eq!(got, Duration::MAX, "{base:?} {factor} {n}"),
            }
        }
    }

    #[test]
    fn jitter_spans_its_range_and_never_leaves_it() {
        let mut rng = Rng::seeded(11);
        let ceil = Duration::from_millis(800);
        let (mut low, mut high) = (0, 0);
        for _ in 0..10_000 {
            let d = jittered(Jitter::Full, ceil, MS, MS, ceil, &mut rng);
            assert!(d < ceil);
            low += usize::from(d < ceil / 10);
            high += usize::from(d > ceil * 9 / 10);
            let e = jittered(Jitter::Equal, ceil, MS, MS, ceil, &mut rng);
            assert!(e >= ceil / 2 && e < ceil);
        }
        // A tenth of the draws at each end, give or take.
        assert!(
            (800..1200).contains(&low) && (800..1200).contains(&high),
            "{low} {high}"
        );
        let huge = jittered(Jitter::Full, Duration::MAX, MS, MS, Duration::MAX, &mut rng);
        assert!(
            huge > Duration::from_secs(1 << 40),
            "spans beyond 2^64 ns draw from all of them"
        );
    }

    #[test]
    fn zero_base_gives_zero_delays() {
        assert_eq!(
            ceiling(
                Backoff::Exponential,
                Duration::ZERO,
                2.0,
                Duration::MAX,
                u32::MAX
            ),
            Duration::ZERO
        );
    }

    #[test]
    fn streams_differ_between_calls() {
        let mut a = Rng::new();
        let mut b = Rng::new();
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_ne!(xs, ys);
    }

    #[test]
    fn a_draw_over_a_span_beyond_584_years_is_uniform_and_in_range() {
        // Spans whose nanoseconds do not fit 64 bits take the 128-bit path.
        let mut rng = Rng::seeded(11);
        let (lo, hi) = (Duration::from_secs(1), Duration::MAX);
        let draws: Vec<Duration> = (0..4_000).map(|_| between(lo, hi, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d >= lo && *d < hi));
        let mean = draws.iter().map(Duration::as_secs_f64).sum::<f64>() / draws.len() as f64;
        let half = hi.as_secs_f64() / 2.0;
        assert!((mean - half).abs() < half * 0.05, "{mean} against {half}");
        // Below and above the middle alike.
        let below = draws.iter().filter(|d| d.as_secs_f64() < half).count();
        assert!((1_800..=2_200).contains(&below), "{below}");
        // Exact to the nanosecond: over 1.5 × 2^64 ns, a draw of `r` is
        // 1.5 r ns.
        let span = from_nanos((1 << 64) + (1 << 63));
        for seed in 0..100 {
            let r = u128::from(Rng::seeded(seed).next_u64());
            let got = between(Duration::ZERO, span, &mut Rng::seeded(seed));
            assert_eq!(got.as_nanos(), r + r / 2, "{seed}");
        }
    }

    #[test]
    fn scaling_by_nothing_a_nan_or_a_negative_factor_is_no_delay() {
        for by in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            assert_eq!(scale(Duration::from_secs(3), by), Duration::ZERO, "{by}");
        }
        assert_eq!(scale(Duration::from_secs(3), f64::INFINITY), Duration::MAX);
        assert_eq!(
            scale(Duration::from_secs(3), 0.5),
            Duration::from_millis(1_500)
        );
    }

    #[test]
    fn doubling_saturates_past_64_doublings() {
        // 2^n nanoseconds, exact while a `Duration` holds it (up to 2^94).
        for n in [63, 64, 65, 93] {
            let exact = 1u128 << n;
            let secs = u64::try_from(exact / 1_000_000_000).unwrap();
            let nanos = (exact % 1_000_000_000) as u32;
            assert_eq!(
                exponential(Duration::from_nanos(1), 2.0, n),
                Duration::new(secs, nanos),
                "{n}"
            );
        }
        for n in [95, 127, 128, 1_000, u32::MAX] {
            assert_eq!(
                exponential(Duration::from_nanos(1), 2.0, n),
                Duration::MAX,
                "{n}"
            );
        }
    }
}
