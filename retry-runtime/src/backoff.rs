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

/// The shape of the delay schedule, before jitter.
///
/// ```
/// use std::time::Duration;
/// use retry_runtime::{Backoff, Policy};
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
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
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
/// use std::time::Duration;
/// use retry_runtime::{Jitter, Policy};
///
/// let policy = Policy::new().jitter(Jitter::Equal);
/// # let _ = policy;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
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

/// `lo + (hi - lo) · u` for `u` in `[0, 1)`, with `hi < lo` read as `lo`.
fn between(lo: Duration, hi: Duration, u: f64) -> Duration {
    lo.saturating_add(scale(hi.saturating_sub(lo), u))
}

/// The schedule's ceiling for retry number `n`, before jitter: saturating,
/// and never above `cap`.
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
        Backoff::Exponential => {
            // powi takes an i32; powf of a huge exponent is simply +inf,
            // which `scale` saturates.
            scale(base, factor.powf(f64::from(n)))
        }
    };
    raw.min(cap)
}

/// One jittered delay. `prev` is the previous delay (for `Decorrelated`),
/// `base` the policy's first delay.
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
        Jitter::Full => between(Duration::ZERO, ceil, rng.next_f64()),
        Jitter::Equal => {
            let half = ceil / 2;
            between(half, ceil, rng.next_f64())
        }
        Jitter::Decorrelated => {
            let hi = prev.saturating_mul(3).max(base);
            between(base, hi, rng.next_f64())
        }
    };
    // Jitter is drawn first and the result clamped after: adding jitter
    // after the cap is how peers break their own limit.
    d.min(cap)
}

/// A small, fast pseudo-random generator (wyrand) for jitter.
///
/// Not cryptographic. [`Rng::new`] gives each call its own stream from a
/// per-thread seed sequence: no lock, no allocation, no system call after
/// the first use on a thread. It is deliberately not `Clone`: two retry
/// loops sharing one sequence would jitter in lockstep, which is the herd
/// jitter exists to break.
///
/// ```
/// use retry_runtime::backoff::Rng;
///
/// let mut a = Rng::seeded(7);
/// let mut b = Rng::seeded(7);
/// assert_eq!(a.next_u64(), b.next_u64()); // seeded: reproducible
/// let x = Rng::new().next_f64();
/// assert!((0.0..1.0).contains(&x));
/// ```
#[derive(Debug)]
pub struct Rng {
    state: u64,
}

const WY_ADD: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

thread_local! {
    /// Next seed of this thread's seed sequence; 0 until first use.
    static SEEDS: Cell<u64> = const { Cell::new(0) };
}

impl Rng {
    /// A fresh stream, distinct from every other stream on every thread.
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
        // wyrand's state moves by a constant step, so seeds one step apart
        // would give the same stream shifted by one draw: mix the counter
        // (SplitMix64's finaliser) to land each call somewhere unrelated.
        let mut z = counter;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let seed = z ^ (z >> 31);
        Self::seeded(seed)
    }

    /// Restarts this thread's seed sequence from `seed`: the calls that
    /// draw a stream on this thread from now on draw the same streams as
    /// after any other `reseed_thread(seed)`.
    pub(crate) fn reseed_thread(seed: u64) {
        SEEDS.with(|s| s.set(seed | 1));
    }

    /// A reproducible stream, for tests.
    pub const fn seeded(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(WY_ADD);
        let t = u128::from(self.state) * u128::from(self.state ^ WY_XOR);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// A uniform draw from `[0, 1)`.
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
}
