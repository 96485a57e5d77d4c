//! The adaptive throttle (Google SRE client-side throttling): exactly 0
//! with healthy traffic, shedding in proportion to refusals, forgetting an
//! outage a window after it ends, and callers whose clocks disagree.
// A probability of exactly 0 is the promise: compared exactly.
#![allow(clippy::float_cmp)]

use std::time::{Duration, Instant};

use backstop_runtime::limit::AdaptiveThrottle;

#[test]
fn healthy_traffic_is_never_shed() {
    let throttle = AdaptiveThrottle::standard();
    let t0 = Instant::now();
    // 10,000 attempts over 20 s, each counted as a request and, answered,
    // an accept (one in 50 with an error no retry can fix: still an
    // answer, as the loops count a `Stop`).
    for i in 0..10_000u64 {
        let now = t0 + Duration::from_millis(i * 2);
        assert_eq!(throttle.rejection_probability_at(now), 0.0);
        throttle
            .admit(now, 0.0)
            .expect("a draw of 0 is shed by any p > 0");
        throttle.requested(now);
        throttle.accepted(now);
    }
}

#[test]
fn refusals_are_shed_in_proportion_and_forgotten_a_window_later() {
    let throttle = AdaptiveThrottle::new(2.0, Duration::from_secs(2));
    let t0 = Instant::now();
    // 100 answered, then 300 refused (no accept).
    for _ in 0..100 {
        throttle.requested(t0);
        throttle.accepted(t0);
    }
    for _ in 0..300 {
        throttle.requested(t0);
    }
    let p = throttle.rejection_probability_at(t0);
    assert!((p - 200.0 / 401.0).abs() < 1e-12, "{p}");
    // A draw below p is shed, above it admitted; neither is a request
    // until it is sent.
    assert!(throttle.admit(t0, p / 2.0).is_err());
    assert!(throttle.admit(t0, f64::midpoint(1.0, p)).is_ok());
    assert!((throttle.rejection_probability_at(t0) - p).abs() < 1e-12);
    throttle.requested(t0);
    assert!(throttle.rejection_probability_at(t0) > p);
    // A window later, the outage is forgotten.
    assert_eq!(
        throttle.rejection_probability_at(t0 + Duration::from_millis(2_300)),
        0.0
    );
}

#[test]
fn a_count_leaves_the_window_a_window_after_it_was_made() {
    // A window of 8 s, counted in slots of 1 s: a count is in it through
    // the seventh slot after its own, and out of it at the eighth.
    let throttle = AdaptiveThrottle::new(2.0, Duration::from_secs(8));
    let t0 = Instant::now();
    throttle.requested(t0); // refused: 1 request, no accept
    let at = |s| t0 + Duration::from_secs(s);
    assert_eq!(throttle.rejection_probability_at(at(7)), 0.5, "7 s on");
    assert_eq!(throttle.rejection_probability_at(at(8)), 0.0, "8 s on");
}

#[test]
fn k_sets_how_much_more_than_gets_through_may_be_sent() {
    let lenient = AdaptiveThrottle::new(3.0, Duration::from_secs(10));
    let now = Instant::now();
    for _ in 0..100 {
        lenient.requested(now);
    }
    for _ in 0..34 {
        lenient.accepted(now);
    }
    assert_eq!(lenient.rejection_probability_at(now), 0.0, "100 ≤ 3 × 34");
}

#[test]
fn callers_whose_clocks_disagree_never_wedge_it() {
    let throttle = AdaptiveThrottle::standard();
    let now = Instant::now();
    let hour = Duration::from_secs(3600);
    // A caller an hour ahead sees nothing but refusals.
    for _ in 0..1000 {
        throttle.requested(now + hour);
    }
    // Callers on real time are not shed for it.
    assert_eq!(throttle.rejection_probability_at(now), 0.0);
    assert!(throttle.admit(now, 0.0).is_ok());
}

#[test]
#[should_panic(expected = "`k` must be at least 1")]
fn a_k_below_one_is_rejected() {
    let _ = AdaptiveThrottle::new(0.5, Duration::from_secs(2));
}

#[test]
#[should_panic(expected = "`window`")]
fn a_window_of_nothing_is_rejected() {
    let _ = AdaptiveThrottle::new(2.0, Duration::ZERO);
}

#[test]
fn its_debug_says_its_settings() {
    let text = format!("{:?}", AdaptiveThrottle::new(1.5, Duration::from_secs(60)));
    assert_eq!(text, "AdaptiveThrottle { k: 1.5, window: 60s, .. }");
}

/// A slot is stamped with its epoch's low bits: after 65,536 slots of
/// quiet (4 h 33 min at the standard window) a forgotten count must not
/// come back as this window's.
#[test]
fn a_count_never_comes_back_after_a_long_quiet_spell() {
    let throttle = AdaptiveThrottle::standard();
    let t0 = Instant::now();
    for _ in 0..100 {
        throttle.requested(t0); // refused
    }
    for gap in [3, 16_384, 2 * 16_384, 3 * 16_384, 40_000, 1_000_000] {
        let later = t0 + Duration::from_secs(gap);
        assert_eq!(
            throttle.rejection_probability_at(later),
            0.0,
            "{gap} s later"
        );
    }
    // Healthy calls after it count alone.
    let later = t0 + Duration::from_secs(16_384);
    for _ in 0..10 {
        throttle.requested(later);
        throttle.accepted(later);
    }
    assert_eq!(throttle.rejection_probability_at(later), 0.0);
}

/// 100 refusals counted 250 ms after `t0`, then a healthy call every 1 s
/// (every fourth slot of 250 ms, so the slots between are never written)
/// for 5 hours, past the 65,536 slots a slot's stamp holds: from a window
/// on, the refusals stay forgotten.
fn refusals_stay_forgotten_beside_a_call_a_second(throttle: &AdaptiveThrottle, t0: Instant) {
    for _ in 0..100 {
        throttle.requested(t0 + Duration::from_millis(250)); // refused
    }
    for second in 0..5 * 3600 {
        let now = t0 + Duration::from_secs(second);
        throttle.requested(now);
        throttle.accepted(now);
        if second >= 3 {
            assert_eq!(throttle.rejection_probability_at(now), 0.0, "{second} s on");
        }
    }
}

#[test]
fn a_slot_left_unwritten_for_hours_is_not_read_as_this_windows() {
    refusals_stay_forgotten_beside_a_call_a_second(&AdaptiveThrottle::standard(), Instant::now());
}

/// A count made on a clock hours ahead (a paused runtime's, moved on)
/// does not bring back, for callers on the real clock, a slot whose tag
/// came round again: they see less, never a stale window.
#[test]
fn a_caller_hours_ahead_brings_back_no_old_count() {
    let throttle = AdaptiveThrottle::standard();
    let t0 = Instant::now();
    throttle.requested(t0 + Duration::from_secs(6 * 3600));
    refusals_stay_forgotten_beside_a_call_a_second(&throttle, t0);
}
