//! Model checking of the lock-free `CircuitBreaker` with loom: the
//! half-open probe race, a probe released by drop while others ask, and
//! failures racing to open it.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p backstop-runtime --no-default-features --release --test loom -- breaker::
//! ```
#![cfg(loom)]

use std::time::{Duration, Instant};

use backstop_runtime::Verdict;
use backstop_runtime::limit::{BreakerState, CircuitBreaker};
use loom::sync::Arc;
use loom::thread;

const COOLDOWN: Duration = Duration::from_secs(10);

fn t0() -> Instant {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(|| Instant::now() + Duration::from_secs(3600))
}

/// A breaker opened at `t0`, whose cooldown is over at `t0 + COOLDOWN`.
fn opened() -> Arc<CircuitBreaker> {
    let breaker = Arc::new(CircuitBreaker::new(1, COOLDOWN));
    breaker
        .try_acquire(t0())
        .unwrap()
        .failed(Verdict::Retry, t0());
    breaker
}

#[test]
fn two_callers_after_the_cooldown_make_one_probe() {
    loom::model(|| {
        let breaker = opened();
        let later = t0() + COOLDOWN;
        let other = Arc::clone(&breaker);
        let theirs = thread::spawn(move || {
            let permit = other.try_acquire(later).ok();
            let probe = permit.as_ref().is_some_and(|p| p.is_probe());
            // Report success while still holding it.
            if let Some(permit) = permit {
                permit.succeeded(later);
            }
            probe
        });
        let mine = breaker.try_acquire(later).ok();
        let my_probe = mine.as_ref().is_some_and(|p| p.is_probe());
        let their_probe = theirs.join().unwrap();
        drop(mine);
        // Both may be let through only if the first probe had already closed
        // the breaker; then the second is not a probe.
        assert!(!(my_probe && their_probe), "two probes at once");
        assert!(my_probe || their_probe, "nobody probed");
    });
}

#[test]
fn a_probe_dropped_while_another_caller_asks_never_wedges() {
    loom::model(|| {
        let breaker = opened();
        let later = t0() + COOLDOWN;
        let probe = breaker.try_acquire(later).unwrap();
        assert!(probe.is_probe());
        let other = Arc::clone(&breaker);
        let asking = thread::spawn(move || other.try_acquire(later).ok().map(|p| p.is_probe()));
        drop(probe); // its call was cancelled
        let got = asking.join().unwrap();
        // Either it asked too early (rejected) or got the freed slot; in any
        // case the breaker is not left half-open with nobody probing.
        match got {
            Some(true) | None => {}
            Some(false) => panic!("let through without probing while open"),
        }
        assert_ne!(breaker.state(), BreakerState::HalfOpen);
        assert!(breaker.try_acquire(later).unwrap().is_probe());
    });
}

#[test]
fn failures_racing_at_the_threshold_open_it_once() {
    loom::model(|| {
        let breaker = Arc::new(CircuitBreaker::new(2, COOLDOWN));
        let other = Arc::clone(&breaker);
        let now = t0();
        let theirs = thread::spawn(move || {
            if let Ok(permit) = other.try_acquire(now) {
                permit.failed(Verdict::Retry, now);
            }
        });
        if let Ok(permit) = breaker.try_acquire(now) {
            permit.failed(Verdict::Retry, now);
        }
        theirs.join().unwrap();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(breaker.try_acquire(now).is_err());
    });
}

#[test]
fn a_late_failure_racing_the_probes_success_cannot_reopen_it() {
    loom::model(|| {
        // Threshold 2. Two calls let through while closed fail after the
        // breaker opened; then the probe succeeds while the second of them
        // reports: one failure after the close is not two in a row.
        // Leaked, so that a permit can move to another thread.
        let breaker: &'static CircuitBreaker =
            Box::leak(Box::new(CircuitBreaker::new(2, COOLDOWN)));
        let now = t0();
        let late_a = breaker.try_acquire(now).unwrap();
        let late_b = breaker.try_acquire(now).unwrap();
        breaker
            .try_acquire(now)
            .unwrap()
            .failed(Verdict::Retry, now);
        breaker
            .try_acquire(now)
            .unwrap()
            .failed(Verdict::Retry, now);
        assert_eq!(breaker.state(), BreakerState::Open);
        late_a.failed(Verdict::Retry, now);
        let later = now + COOLDOWN;
        let probe = breaker.try_acquire(later).unwrap();
        let late_report = move || late_b.failed(Verdict::Retry, later);
        let late = thread::spawn(late_report);
        probe.succeeded(later);
        late.join().unwrap();
        assert_eq!(breaker.state(), BreakerState::Closed);
    });
}

#[test]
fn a_probe_past_its_time_lets_exactly_one_new_trial_through() {
    loom::model(|| {
        let breaker = opened();
        let half_open = t0() + COOLDOWN;
        let hung = breaker.try_acquire(half_open).unwrap();
        assert!(hung.is_probe());
        let past = half_open + COOLDOWN;
        let other = Arc::clone(&breaker);
        let theirs = thread::spawn(move || {
            let permit = other.try_acquire(past).ok();
            let probe = permit.as_ref().is_some_and(|p| p.is_probe());
            if let Some(permit) = permit {
                permit.succeeded(past);
            }
            probe
        });
        let mine = breaker.try_acquire(past).ok();
        let my_probe = mine.as_ref().is_some_and(|p| p.is_probe());
        // The hung probe is dropped at last, while the others race: it
        // frees nothing it no longer holds.
        drop(hung);
        let their_probe = theirs.join().unwrap();
        assert!(!(my_probe && their_probe), "two new trials at once");
        assert!(
            my_probe || their_probe,
            "the hung probe held the breaker shut"
        );
        drop(mine);
        assert_ne!(breaker.state(), BreakerState::HalfOpen, "nobody is probing");
    });
}
