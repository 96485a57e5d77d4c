//! Every jitter, against its formula: bounds on every draw, and the mean.

use std::time::Duration;

use backstop_runtime::backoff::Rng;
use backstop_runtime::{Backoff, Jitter, Policy};

const DRAWS: u32 = 10_000;
const BASE: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(5);

fn policy(jitter: Jitter) -> Policy {
    Policy::new().base(BASE).cap(CAP).factor(2.0).jitter(jitter)
}

/// For retry numbers 0..10 (the ceiling reaches the cap at n = 6), draws
/// 10,000 delays from a seeded stream, checks each against `bounds(n)` and
/// the mean against `mean(n)` within 3%.
fn check(
    jitter: Jitter,
    prev: impl Fn(u32) -> Duration,
    bounds: impl Fn(u32) -> (f64, f64),
    mean: impl Fn(u32) -> f64,
) {
    let p = policy(jitter);
    for n in 0..10 {
        let mut rng = Rng::seeded(0x00C0_FFEE + u64::from(n));
        let (lo, hi) = bounds(n);
        let mut sum = 0.0;
        for _ in 0..DRAWS {
            let d = p.delay(n, prev(n), &mut rng).as_secs_f64();
            assert!(
                d >= lo - 1e-9 && d <= hi + 1e-9,
                "{jitter:?} n={n}: {d} outside [{lo}, {hi}]"
            );
            sum += d;
        }
        let got = sum / f64::from(DRAWS);
        let want = mean(n);
        assert!(
            (got - want).abs() <= 0.03 * want,
            "{jitter:?} n={n}: mean {got} vs {want}"
        );
    }
}

fn ceil(n: u32) -> f64 {
    (BASE.as_secs_f64() * 2f64.powf(f64::from(n))).min(CAP.as_secs_f64())
}

#[test]
fn no_jitter_is_the_ceiling() {
    check(Jitter::None, |_| BASE, |n| (ceil(n), ceil(n)), ceil);
}

#[test]
fn full_jitter_is_uniform_below_the_ceiling() {
    check(
        Jitter::Full,
        |_| BASE,
        |n| (0.0, ceil(n)),
        |n| ceil(n) / 2.0,
    );
}

#[test]
fn equal_jitter_keeps_half_the_ceiling() {
    check(
        Jitter::Equal,
        |_| BASE,
        |n| (ceil(n) / 2.0, ceil(n)),
        |n| ceil(n) * 0.75,
    );
}

#[test]
fn decorrelated_jitter_draws_from_base_to_three_times_the_previous_delay() {
    // The previous delay grows with n and passes the cap, to cover the clamp.
    let prev = |n: u32| BASE * 2u32.pow(n);
    let (a, c) = (BASE.as_secs_f64(), CAP.as_secs_f64());
    check(
        Jitter::Decorrelated,
        prev,
        |n| (a.min(c), (3.0 * prev(n).as_secs_f64()).min(c)),
        |n| {
            // E[min(c, U(a, b))]
            let b = 3.0 * prev(n).as_secs_f64();
            if c >= b {
                f64::midpoint(a, b)
            } else {
                ((c * c - a * a) / 2.0 + c * (b - c)) / (b - a)
            }
        },
    );
}

#[test]
fn linear_and_fixed_schedules_follow_their_formulas() {
    let mut rng = Rng::seeded(1);
    let linear = policy(Jitter::None).backoff(Backoff::Linear);
    let fixed = policy(Jitter::None).backoff(Backoff::Fixed);
    for n in 0..100 {
        let want = (BASE * (n + 1)).min(CAP);
        assert_eq!(linear.delay(n, BASE, &mut rng), want);
        assert_eq!(fixed.delay(n, BASE, &mut rng), BASE);
    }
}

#[test]
fn no_jitter_ever_breaks_the_cap() {
    // Peers add jitter after the cap; here the cap is the last word.
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        let p = policy(jitter).cap(Duration::from_millis(150));
        let mut rng = Rng::seeded(9);
        let mut prev = BASE;
        for n in 0..1000 {
            let d = p.delay(n, prev, &mut rng);
            assert!(d <= Duration::from_millis(150), "{jitter:?} n={n}: {d:?}");
            prev = d;
        }
    }
}

#[test]
fn saturates_at_absurd_inputs() {
    // Peers panic on exponent overflow at attempt 64, or wrap at 33.
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        let p = Policy::new().factor(10.0).cap(Duration::MAX).jitter(jitter);
        let mut rng = Rng::seeded(3);
        let mut prev = Duration::from_millis(100);
        for n in [0, 32, 33, 63, 64, 1000, u32::MAX - 1, u32::MAX] {
            prev = p.delay(n, prev, &mut rng);
        }
        assert_eq!(p.ceiling(1000), Duration::MAX);
        assert_eq!(p.ceiling(u32::MAX), Duration::MAX);
        let _ = prev;
    }
    let p = Policy::new()
        .factor(f64::NAN)
        .base(Duration::MAX)
        .cap(Duration::MAX);
    assert_eq!(p.ceiling(5), Duration::MAX); // NaN factor read as 1
}

#[test]
fn two_calls_never_share_a_random_sequence() {
    // tower once cloned its RNG into every request: identical "jitter".
    let p = policy(Jitter::Full);
    let draws = |rng: &mut Rng| (0..8).map(|n| p.delay(n, BASE, rng)).collect::<Vec<_>>();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        assert!(seen.insert(draws(&mut Rng::new())), "two streams repeated");
    }
}
