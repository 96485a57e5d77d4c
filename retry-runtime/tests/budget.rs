//! The retry budget: its bound, its window, and its behaviour under races.

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

use retry_runtime::testing::VirtualTime;
use retry_runtime::{Policy, RetryBudget, call};

#[test]
fn a_thousand_failing_calls_get_at_most_the_budget() {
    let vt = VirtualTime::start();
    let budget: &'static RetryBudget =
        Box::leak(Box::new(RetryBudget::new(0.1, 10, Duration::from_secs(10))));
    // Zero delays, so all thousand calls land inside one window.
    let policy = Policy::new()
        .attempts(3)
        .base(Duration::ZERO)
        .budget(budget);
    let mut attempts = 0u64;
    for _ in 0..1000 {
        let _: Result<(), Error> = call(&policy, || {
            attempts += 1;
            Err(ErrorKind::ConnectionRefused.into())
        });
    }
    let bound = 100 + 10 * 10; // ratio × calls + min_per_sec × ttl
    let stats = budget.stats();
    assert_eq!(stats.calls, 1000);
    assert_eq!(attempts, 1000 + stats.retries);
    assert!(stats.retries <= bound, "{stats:?}");
    // Demand far exceeds the budget, so the budget is what binds.
    assert_eq!(stats.retries, bound, "{stats:?}");
    // Each refusal ends one call's retrying.
    assert!(stats.refusals > 0 && stats.refusals <= 1000, "{stats:?}");
    assert!((stats.retry_ratio() - 0.2).abs() < 1e-9);
    assert_eq!(vt.elapsed(), Duration::ZERO);
}

#[test]
fn ratios_are_exact() {
    let budget = RetryBudget::new(0.3, 0, Duration::from_secs(10));
    let now = Instant::now();
    for _ in 0..10 {
        budget.record_call(now);
    }
    // 10 calls at 0.3 make exactly 3 retries, not 2 (0.29999…) nor 4.
    let granted = (0..10).filter(|_| budget.try_withdraw(now)).count();
    assert_eq!(granted, 3);
}

#[test]
fn after_ttl_without_traffic_the_floor_is_available_again() {
    let vt = VirtualTime::start();
    let ttl = Duration::from_secs(10);
    let budget = RetryBudget::new(0.1, 2, ttl);
    budget.record_call(vt.now());
    let floor = (0..100).filter(|_| budget.try_withdraw(vt.now())).count();
    assert_eq!(floor, 20, "min_per_sec × ttl");
    assert!(!budget.try_withdraw(vt.now()));
    vt.advance(ttl / 2);
    assert!(
        !budget.try_withdraw(vt.now()),
        "half a window later, still spent"
    );
    vt.advance(ttl);
    let again = (0..100).filter(|_| budget.try_withdraw(vt.now())).count();
    assert_eq!(again, 20);
}

#[test]
fn deposits_older_than_ttl_no_longer_pay_for_retries() {
    let vt = VirtualTime::start();
    let ttl = Duration::from_secs(10);
    let budget = RetryBudget::new(0.5, 0, ttl);
    for _ in 0..10 {
        budget.record_call(vt.now());
    }
    vt.advance(ttl + Duration::from_secs(1));
    budget.record_call(vt.now());
    assert!(
        !budget.try_withdraw(vt.now()),
        "the old calls' deposits expired"
    );
    budget.record_call(vt.now());
    assert!(
        budget.try_withdraw(vt.now()),
        "two fresh calls at 50% pay one retry"
    );
    assert_eq!(
        budget.stats().calls,
        12,
        "stats keep counting across windows"
    );
}

#[test]
fn the_window_slides_in_slots() {
    let vt = VirtualTime::start();
    let ttl = Duration::from_secs(10);
    let budget = RetryBudget::new(1.0, 0, ttl);
    budget.record_call(vt.now()); // t = 0
    vt.advance(Duration::from_secs(5));
    budget.record_call(vt.now()); // t = 5
    vt.advance(Duration::from_secs(6)); // t = 11: the first call has expired
    assert!(budget.try_withdraw(vt.now()));
    assert!(!budget.try_withdraw(vt.now()));
    vt.advance(Duration::from_secs(5)); // t = 16: the second call expired
    budget.record_call(vt.now());
    // The retry granted at t = 11 still counts against this window.
    assert!(!budget.try_withdraw(vt.now()));
    vt.advance(Duration::from_secs(6)); // t = 22: that retry has left the window
    assert!(
        budget.try_withdraw(vt.now()),
        "the t = 16 call pays for one"
    );
    assert!(!budget.try_withdraw(vt.now()));
}

#[test]
fn a_long_idle_period_costs_bounded_work_and_no_overflow() {
    let budget = RetryBudget::new(0.5, 1, Duration::from_nanos(1));
    let t0 = Instant::now();
    budget.record_call(t0);
    for hours in [1u64, 1_000, 1_000_000] {
        let t = t0 + Duration::from_secs(hours * 3600);
        budget.record_call(t);
        let _ = budget.try_withdraw(t);
    }
    assert_eq!(budget.stats().calls, 4);
}

#[test]
fn time_running_backwards_is_harmless() {
    let budget = RetryBudget::new(1.0, 0, Duration::from_secs(1));
    let t0 = Instant::now() + Duration::from_secs(100);
    budget.record_call(t0);
    budget.record_call(t0.checked_sub(Duration::from_secs(50)).unwrap()); // a clock far behind
    assert!(budget.try_withdraw(t0));
    assert!(budget.try_withdraw(t0));
    assert!(!budget.try_withdraw(t0));
}

static SHARED: RetryBudget = RetryBudget::new(0.1, 5, Duration::from_secs(10));

#[test]
fn a_static_budget_shared_by_two_threads_keeps_the_bound() {
    const CALLS: u64 = 20_000;
    let now = Instant::now();
    let worker = move || {
        let mut granted = 0u64;
        for _ in 0..CALLS {
            SHARED.record_call(now);
            // Every call wants two retries: demand is ten times the supply.
            granted += u64::from(SHARED.try_withdraw(now));
            granted += u64::from(SHARED.try_withdraw(now));
        }
        granted
    };
    let a = std::thread::spawn(worker);
    let b = std::thread::spawn(worker);
    let granted = a.join().unwrap() + b.join().unwrap();
    let bound = (0.1 * (2 * CALLS) as f64 + 5.0 * 10.0) as u64;
    let stats = SHARED.stats();
    assert_eq!(stats.retries, granted);
    assert_eq!(stats.calls, 2 * CALLS);
    assert_eq!(stats.refusals, 4 * CALLS - granted);
    assert!(granted <= bound, "overdrawn: {granted} > {bound}");
    assert!(
        granted + 2 >= bound,
        "the budget should be used: {granted} of {bound}"
    );
}

#[test]
#[should_panic(expected = "ratio")]
fn a_ratio_above_one_is_rejected() {
    let _ = RetryBudget::new(1.5, 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "ratio")]
fn a_zero_or_nan_ratio_is_rejected() {
    let _ = RetryBudget::new(f64::NAN, 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "ttl")]
fn a_zero_ttl_is_rejected() {
    let _ = RetryBudget::new(0.1, 10, Duration::ZERO);
}

#[test]
fn racing_callers_never_overdraw_the_last_tokens() {
    use std::sync::{Arc, Barrier};
    const THREADS: usize = 8;
    for round in 0..200 {
        // Exactly `round % 5 + 1` retries are available; eight threads
        // released together all try to take two each.
        let available = round % 5 + 1;
        let budget = Arc::new(RetryBudget::new(1.0, 0, Duration::from_secs(60)));
        let now = Instant::now();
        for _ in 0..available {
            budget.record_call(now);
        }
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (budget, barrier) = (Arc::clone(&budget), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    usize::from(budget.try_withdraw(now)) + usize::from(budget.try_withdraw(now))
                })
            })
            .collect();
        let granted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(granted, available, "round {round}");
        assert_eq!(budget.stats().refusals as usize, 2 * THREADS - available);
    }
}

#[test]
fn random_traffic_never_exceeds_the_windowed_bound() {
    use retry_runtime::backoff::Rng;
    // ratio 0.25 = 250_000 ppm, floor 2/s over ttl 10 s = 20 retries.
    let ttl = Duration::from_secs(10);
    let budget = RetryBudget::new(0.25, 2, ttl);
    let t0 = Instant::now();
    let mut rng = Rng::seeded(42);
    let mut calls: Vec<Duration> = Vec::new();
    let mut grants: Vec<Duration> = Vec::new();
    let mut at = Duration::ZERO;
    while at < Duration::from_secs(120) {
        // Bursty traffic: quiet stretches, then storms.
        let gap_ms = if (at.as_secs() / 15).is_multiple_of(2) {
            1 + rng.next_u64() % 20
        } else {
            200 + rng.next_u64() % 2000
        };
        at += Duration::from_millis(gap_ms);
        let now = t0 + at;
        budget.record_call(now);
        calls.push(at);
        for _ in 0..rng.next_u64() % 4 {
            if budget.try_withdraw(now) {
                grants.push(at);
                // Grants in the last 0.9 ttl never exceed what the last ttl
                // of calls paid for, plus the floor.
                let recent_grants = grants
                    .iter()
                    .filter(|g| at.saturating_sub(**g) < ttl * 9 / 10)
                    .count() as u64;
                let recent_calls = calls
                    .iter()
                    .filter(|c| at.saturating_sub(**c) < ttl)
                    .count() as u64;
                assert!(
                    recent_grants * 1_000_000 <= recent_calls * 250_000 + 20 * 1_000_000,
                    "at {at:?}: {recent_grants} grants for {recent_calls} calls"
                );
            }
        }
    }
    let stats = budget.stats();
    assert_eq!(stats.calls as usize, calls.len());
    assert_eq!(stats.retries as usize, grants.len());
    assert!(
        grants.len() > 100,
        "the budget granted something: {stats:?}"
    );
}
