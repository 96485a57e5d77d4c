//! The adaptive hedge delay: a percentile of recent latencies, estimated
//! within its bucket's width, following change, lock-free.

use std::time::{Duration, Instant};

use backstop_runtime::hedge::LatencyPercentile;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The exact `quantile` of `samples` (the smallest value with at least
/// that share of the samples at or below it).
fn exact(samples: &mut [u64], quantile: f64) -> u64 {
    samples.sort_unstable();
    let rank = (quantile * samples.len() as f64).ceil().max(1.0) as usize;
    samples[rank - 1]
}

#[test]
fn the_estimate_converges_to_the_percentile_of_a_known_distribution() {
    // Exponential latencies, mean 10 ms: p95 = 10 ms × ln 20 ≈ 29.96 ms.
    let p95 = LatencyPercentile::new(0.95, Duration::from_secs(10));
    let now = Instant::now();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut samples = Vec::new();
    for _ in 0..20_000 {
        let u: f64 = rng.random();
        let micros = (-10_000.0 * (1.0 - u).ln()) as u64;
        samples.push(micros);
        p95.record(Duration::from_micros(micros), now);
    }
    let estimate = p95.estimate(now).unwrap().as_micros() as f64;
    let truth = 10_000.0 * 20f64.ln();
    assert!(
        (estimate / truth - 1.0).abs() < 0.07,
        "estimate {estimate} µs, p95 {truth} µs"
    );
    let of_samples = exact(&mut samples, 0.95) as f64;
    assert!(
        estimate >= of_samples && estimate <= of_samples * 1.0625 + 1.0,
        "{estimate} vs {of_samples}"
    );
}

#[test]
fn the_estimate_follows_a_change_within_a_window() {
    let p95 = LatencyPercentile::new(0.95, Duration::from_secs(4));
    let start = Instant::now();
    for _ in 0..1000 {
        p95.record(Duration::from_millis(10), start);
    }
    let before = p95.estimate(start).unwrap();
    assert!(before >= Duration::from_millis(10) && before < Duration::from_millis(11));
    // The dependency slows down: a window later, only the new latencies count.
    let later = start + Duration::from_secs(5);
    for _ in 0..1000 {
        p95.record(Duration::from_millis(100), later);
    }
    let after = p95.estimate(later).unwrap();
    assert!(
        after >= Duration::from_millis(100) && after < Duration::from_millis(107),
        "{after:?}"
    );
    assert_eq!(
        p95.samples(later),
        1000,
        "the old quarter has left the window"
    );
    // And a window after that, with nothing new: no evidence, no estimate.
    assert_eq!(p95.estimate(later + Duration::from_secs(5)), None);
}

#[test]
fn racing_recorders_lose_no_latency() {
    static SHARED: LatencyPercentile = LatencyPercentile::new(0.5, Duration::from_secs(3600));
    let now = Instant::now();
    SHARED.record(Duration::from_millis(1), now); // opens the quarter
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..100_000u64 {
                    SHARED.record(Duration::from_micros(i % 5_000), now);
                }
            });
        }
    });
    assert_eq!(SHARED.samples(now), 200_001);
}

#[test]
fn extreme_latencies_neither_panic_nor_overflow() {
    let p99 = LatencyPercentile::new(0.99, Duration::from_secs(1));
    let now = Instant::now();
    for latency in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
    ] {
        for _ in 0..50 {
            p99.record(latency, now);
        }
    }
    let estimate = p99.estimate(now).unwrap();
    assert!(estimate >= Duration::from_secs(3600), "{estimate:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_estimate_is_the_exact_quantile_rounded_up_to_its_bucket(
        mut samples in proptest::collection::vec(0u64..4_000_000_000, 100..2_000),
        quantile in 0.01f64..0.99,
    ) {
        let estimator = LatencyPercentile::new(quantile, Duration::from_secs(60));
        let now = Instant::now();
        for &micros in &samples {
            estimator.record(Duration::from_micros(micros), now);
        }
        let estimate = estimator.estimate(now).unwrap().as_micros() as u64;
        let truth = exact(&mut samples, quantile).min(u64::from(u32::MAX) - 1);
        prop_assert!(estimate >= truth, "{} < {}", estimate, truth);
        prop_assert!(estimate <= truth + truth / 16 + 1, "{} > {} + 1/16", estimate, truth);
    }
}

#[test]
fn an_estimate_from_little_evidence_is_not_kept() {
    // The first latencies of a burst are its fastest: an estimate made
    // from them must give way as soon as the slow ones arrive, not a
    // sixteenth of the window later.
    let p95 = LatencyPercentile::new(0.95, Duration::from_secs(10));
    let now = Instant::now();
    for _ in 0..100 {
        p95.record(Duration::from_millis(1), now);
    }
    assert!(p95.estimate(now).unwrap() < Duration::from_millis(2));
    for _ in 0..100 {
        p95.record(Duration::from_millis(100), now);
    }
    assert!(p95.estimate(now).unwrap() >= Duration::from_millis(100));
}

#[test]
fn a_latency_from_a_clock_behind_its_quarter_is_not_counted() {
    let window = Duration::from_secs(8);
    let p50 = LatencyPercentile::new(0.5, window);
    let t0 = Instant::now();
    let later = t0 + window; // the same quarter's place, a window on
    p50.record(Duration::from_millis(5), later);
    // A caller whose clock is a window behind: its quarter's place holds
    // the later one now, which its latency must not join.
    p50.record(Duration::from_millis(5), t0);
    assert_eq!(p50.samples(later), 1);
}

#[test]
fn its_debug_says_its_quantile_and_window() {
    let text = format!("{:?}", LatencyPercentile::new(0.95, Duration::from_secs(8)));
    assert_eq!(text, "LatencyPercentile { quantile: 0.95, window: 8s, .. }");
}

/// `n` latencies of `micros` at `now`.
fn record_n(p: &LatencyPercentile, n: u32, micros: u64, now: Instant) {
    for _ in 0..n {
        p.record(Duration::from_micros(micros), now);
    }
}

#[test]
fn an_estimate_is_the_end_of_its_latencys_bucket() {
    let now = Instant::now();
    // 1,000 µs falls in the bucket 992..=1023 (16 per power of two);
    // 1,024 µs starts the next, 1024..=1087. Beyond 71 minutes the
    // estimate is held at u32::MAX − 1 µs (u32::MAX is kept for none).
    for (micros, end) in [
        (15, 15),
        (1_000, 1_023),
        (1_024, 1_087),
        (86_400_000_000, u64::from(u32::MAX) - 1),
    ] {
        let p50 = LatencyPercentile::new(0.5, Duration::from_secs(10));
        record_n(&p50, 100, micros, now);
        assert_eq!(
            p50.estimate(now),
            Some(Duration::from_micros(end)),
            "{micros} µs"
        );
    }
}

#[test]
fn a_latency_leaves_the_window_four_quarters_after_it_was_counted() {
    let window = Duration::from_secs(8);
    let quarter = window / 4;
    let p50 = LatencyPercentile::new(0.5, window);
    let t0 = Instant::now();
    record_n(&p50, 10, 5_000, t0);
    assert_eq!(p50.samples(t0 + quarter * 3), 10, "three quarters on");
    assert_eq!(p50.samples(t0 + window), 0, "four quarters on");
}

#[test]
fn an_estimate_from_a_thousand_latencies_is_kept_for_a_sixteenth_of_the_window() {
    // A window of 16 s: an estimate is kept for 1 s.
    let p50 = LatencyPercentile::new(0.5, Duration::from_secs(16));
    let t0 = Instant::now();
    record_n(&p50, 1_000, 1_000, t0);
    let kept = p50.estimate(t0);
    assert_eq!(kept, Some(Duration::from_micros(1_023)));
    // Slower latencies now make most of the window: the kept estimate
    // holds until the next sixteenth, then the new one is computed.
    record_n(&p50, 3_000, 50_000, t0);
    assert_eq!(p50.estimate(t0), kept, "kept");
    // The sixteenths follow the first latency's instant.
    assert_eq!(
        p50.estimate(t0 + Duration::from_millis(999)),
        kept,
        "999 ms on"
    );
    let next = p50.estimate(t0 + Duration::from_secs(1)).unwrap();
    assert!(next >= Duration::from_millis(50), "{next:?}");
}

#[test]
fn a_percentile_out_of_range_is_refused_by_name() {
    let refused = |quantile: f64, window: Duration| {
        let panic = std::panic::catch_unwind(|| LatencyPercentile::new(quantile, window))
            .expect_err("refused");
        panic
            .downcast_ref::<&str>()
            .copied()
            .unwrap_or_default()
            .to_owned()
    };
    // The 100th percentile, and a window under four microseconds.
    let message = refused(1.0, Duration::from_secs(1));
    assert!(
        message.starts_with("LatencyPercentile::new: `quantile`"),
        "{message}"
    );
    let message = refused(0.5, Duration::from_nanos(10));
    assert!(
        message.starts_with("LatencyPercentile::new: `window`"),
        "{message}"
    );
}
