//! Model checking of the lock-free `CircuitBreaker` with loom: the
//! half-open probe race, a probe released by drop while others ask,
//! failures racing to open it, and an operator's hold and reset racing the
//! calls.
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
        // Asked while the probe was out, or after it was dropped, which
        // holds its slot for its time as if still out: turned away.
        assert_eq!(got, None, "let through within the probe's time");
        // Nobody is in flight: the breaker is not left half-open with
        // nobody probing; a cooldown after the probe went, the next caller
        // is the trial.
        assert!(breaker.try_acquire(later + COOLDOWN).unwrap().is_probe());
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
        assert_eq!(breaker.state_at(now), BreakerState::Open);
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
        assert_eq!(breaker.state_at(now), BreakerState::Open);
        late_a.failed(Verdict::Retry, now);
        let later = now + COOLDOWN;
        let probe = breaker.try_acquire(later).unwrap();
        let late_report = move || late_b.failed(Verdict::Retry, later);
        let late = thread::spawn(late_report);
        probe.succeeded(later);
        late.join().unwrap();
        assert_eq!(breaker.state_at(later), BreakerState::Closed);
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
        // Nobody is in flight: the breaker is not left shut (closed by
        // their trial, or open with the next caller a new trial a cooldown
        // after mine went, as if mine were still out).
        assert!(
            breaker.try_acquire(past + COOLDOWN).is_ok(),
            "left shut with nobody probing"
        );
    });
}

#[test]
fn a_hold_racing_a_probes_success_keeps_the_breaker_shut() {
    loom::model(|| {
        let breaker: &'static CircuitBreaker =
            Box::leak(Box::new(CircuitBreaker::new(1, COOLDOWN)));
        breaker
            .try_acquire(t0())
            .unwrap()
            .failed(Verdict::Retry, t0());
        let later = t0() + COOLDOWN;
        let probe = breaker.try_acquire(later).unwrap();
        assert!(probe.is_probe());
        let holding = thread::spawn(move || breaker.hold_open());
        probe.succeeded(later);
        holding.join().unwrap();
        // Whichever came first, the operator's hold is the last word.
        assert_eq!(breaker.state_at(later), BreakerState::HeldOpen);
        assert!(breaker.try_acquire(later + COOLDOWN).is_err());
        breaker.reset();
        assert_eq!(breaker.state_at(later), BreakerState::Closed);
    });
}

#[test]
fn a_failure_from_before_a_reset_racing_it_does_not_count_after() {
    loom::model(|| {
        // Threshold 1: a failure that counted after the reset would open it.
        let breaker: &'static CircuitBreaker =
            Box::leak(Box::new(CircuitBreaker::new(1, COOLDOWN)));
        let now = t0();
        let before = breaker.try_acquire(now).unwrap();
        let resetting = thread::spawn(move || breaker.reset());
        before.failed(Verdict::Retry, now);
        resetting.join().unwrap();
        // The failure reported before the reset opened it, and the reset
        // closed it; reported after, it was ignored: closed either way.
        assert_eq!(breaker.state_at(now), BreakerState::Closed);
        assert!(breaker.try_acquire(now).is_ok());
    });
}

/// Openings told, in the model running now.
static OPENINGS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn count_opening(change: &backstop_runtime::limit::BreakerChange) {
    if change.to == BreakerState::Open {
        OPENINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn failures_racing_at_a_ratio_open_it_once_and_a_racing_success_is_counted() {
    loom::model(|| {
        OPENINGS.store(0, std::sync::atomic::Ordering::SeqCst);
        // Half of at least 3 calls: one success, then a failure racing a
        // success and a failure. However they land, it opens once: at 2
        // of 3 or 2 of 4 (a call after that is turned away).
        let breaker = Arc::new(
            CircuitBreaker::ratio(0.5, 3, Duration::from_secs(60), COOLDOWN)
                .on_change(count_opening),
        );
        let now = t0();
        breaker.try_acquire(now).unwrap().succeeded(now);
        let other = Arc::clone(&breaker);
        let t = thread::spawn(move || {
            if let Ok(permit) = other.try_acquire(now) {
                permit.failed(Verdict::Retry, now);
            }
        });
        if let Ok(permit) = breaker.try_acquire(now) {
            permit.succeeded(now);
        }
        if let Ok(permit) = breaker.try_acquire(now) {
            permit.failed(Verdict::Retry, now);
        }
        t.join().unwrap();
        assert_eq!(breaker.state_at(now), BreakerState::Open);
        assert_eq!(OPENINGS.load(std::sync::atomic::Ordering::SeqCst), 1);
    });
}

#[test]
fn callers_racing_after_the_cooldown_get_exactly_the_trials() {
    loom::model(|| {
        // Two trials; three callers at once after the cooldown.
        let breaker = Arc::new(CircuitBreaker::new(1, COOLDOWN).trials(2));
        breaker
            .try_acquire(t0())
            .unwrap()
            .failed(Verdict::Retry, t0());
        let later = t0() + COOLDOWN;
        let spawn = |breaker: &Arc<CircuitBreaker>| {
            let breaker = Arc::clone(breaker);
            thread::spawn(move || {
                let permit = breaker.try_acquire(later).ok();
                let got = permit.is_some();
                // Held until the end of the thread: the trials are out.
                std::mem::forget(permit);
                got
            })
        };
        let (a, b) = (spawn(&breaker), spawn(&breaker));
        let mine = breaker.try_acquire(later).ok();
        let got = usize::from(mine.is_some());
        std::mem::forget(mine);
        let total = got + usize::from(a.join().unwrap()) + usize::from(b.join().unwrap());
        assert_eq!(total, 2, "exactly the trials");
    });
}

#[test]
fn trials_succeeding_at_once_close_it_once() {
    loom::model(|| {
        CLOSINGS.store(0, std::sync::atomic::Ordering::SeqCst);
        let breaker = Arc::new(
            CircuitBreaker::new(1, COOLDOWN)
                .trials(2)
                .on_change(count_closing),
        );
        breaker
            .try_acquire(t0())
            .unwrap()
            .failed(Verdict::Retry, t0());
        let later = t0() + COOLDOWN;
        let other = Arc::clone(&breaker);
        let first = breaker.try_acquire(later).unwrap();
        let t = thread::spawn(move || {
            if let Ok(second) = other.try_acquire(later) {
                second.succeeded(later);
            }
        });
        first.succeeded(later);
        t.join().unwrap();
        // The second trial may come after the first closed it (then it is
        // a plain call): closed either way, and told once.
        assert_eq!(breaker.state_at(later), BreakerState::Closed);
        assert_eq!(CLOSINGS.load(std::sync::atomic::Ordering::SeqCst), 1);
    });
}

/// Closings told, in the model running now.
static CLOSINGS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn count_closing(change: &backstop_runtime::limit::BreakerChange) {
    if change.to == BreakerState::Closed {
        CLOSINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
