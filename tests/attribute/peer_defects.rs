//! The defects other retry crates have shipped, each as a test showing that
//! backstop does not have it. Each test names the defect it guards.

use std::io::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::__private::{AttemptState, Attempted, Decision};
use backstop::backoff::Rng;
use backstop::limit::WindowBudget;
use backstop::testing::VirtualTime;
use backstop::time::SystemClock;
use backstop::{GiveUp, Jitter, Policy, Verdict, retry};

use crate::support;
use support::refused;

/// tower's `TpsBudget` checks the balance, then subtracts: two callers
/// racing for the last token both get it. Here the check and the take are
/// one compare-and-swap: 8 threads racing for 15 tokens get exactly 15. (A
/// race is caught here only when the threads happen to collide; the loom
/// models in retry-runtime/tests/loom/window.rs check every interleaving.)
#[test]
fn a_budget_is_never_overdrawn_by_racing_callers() {
    for _ in 0..200 {
        let budget = Arc::new(WindowBudget::new(0.1, 1, Duration::from_secs(10)));
        let now = Instant::now();
        for _ in 0..50 {
            budget.record_call(now); // 5 tokens, plus a reserve of 10
        }
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let granted: usize = (0..8)
            .map(|_| {
                let (budget, barrier) = (budget.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..10).filter(|_| budget.try_withdraw(now)).count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(granted, 15);
    }
}

/// tower's `TpsBudget::expire` clears one slot per elapsed window in a
/// loop: after a long idle period the first caller walks every window it
/// missed (a year of 100 ms windows is 3 × 10⁸ iterations). Here a caller
/// after a century of idleness moves at most two rings of slots.
#[test]
fn a_long_idle_period_does_not_walk_every_missed_window() {
    let budget = WindowBudget::new(1.0, 1, Duration::from_millis(1));
    let t0 = Instant::now();
    budget.record_call(t0);
    // A 1 ms window: a century is 3 × 10¹² missed windows, which a loop
    // over them would not finish.
    let later = t0 + Duration::from_secs(100 * 365 * 24 * 3600);
    budget.record_call(later);
    assert!(budget.try_withdraw(later));
    assert_eq!(budget.stats().calls, 2);
}

#[retry(attempts = 5, budget = none)]
fn reach_five_times() -> Result<(), Error> {
    Err(refused())
}

/// tower's `ExponentialBackoff` is `Clone` with its random state: every
/// clone of a policy jitters in lockstep with the others, the herd jitter
/// exists to break. Here every call draws its own stream.
#[test]
fn two_calls_never_share_a_random_sequence() {
    let reach = reach_five_times;
    let vt = VirtualTime::start();
    let _ = reach();
    let first = vt.sleeps();
    let _ = reach();
    let second = vt.sleeps()[first.len()..].to_vec();
    assert_eq!(first.len(), 4);
    assert_ne!(first, second, "two calls drew the same delays");
}

/// The herd forms across threads and processes: calls on threads started
/// alike (a thread pool) draw different delays too, each thread's seeds
/// coming from the process's random keys.
#[test]
fn calls_on_different_threads_never_share_a_random_sequence() {
    let delays = || {
        std::thread::spawn(|| {
            let vt = VirtualTime::start();
            let _ = reach_five_times();
            vt.sleeps()
        })
        .join()
        .unwrap()
    };
    let first = delays();
    for _ in 0..8 {
        assert_ne!(delays(), first, "two threads drew the same delays");
    }
}

/// `retrying` overflowed at retry 33 and `retry-if` panicked at 64
/// (`2^n` in a fixed-width integer). Here the schedule saturates at the cap
/// for every retry number, and a hundred attempts run to the end.
#[test]
fn no_panic_or_overflow_at_retry_33_64_or_any_other() {
    #[retry(attempts = 100, base = 1ms, cap = 1s, deadline = none, budget = none)]
    fn reach(calls: &AtomicU32) -> Result<(), Error> {
        calls.fetch_add(1, Ordering::Relaxed);
        Err(refused())
    }
    let policy = Policy::new()
        .base(Duration::from_secs(1))
        .cap(Duration::from_secs(60));
    for n in [31, 32, 33, 63, 64, 65, 127, 128, 1_000, u32::MAX] {
        assert_eq!(policy.ceiling(n), Duration::from_secs(60), "retry {n}");
    }
    let huge = Policy::new()
        .base(Duration::MAX)
        .cap(Duration::MAX)
        .factor(1e300);
    assert_eq!(huge.ceiling(u32::MAX), Duration::MAX);

    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let _ = reach(&calls);
    assert_eq!(calls.load(Ordering::Relaxed), 100);
}

/// backon and backoff add jitter after capping, so a delay can exceed the
/// cap. Here jitter is drawn below the ceiling and the result clamped.
#[test]
fn jitter_never_pushes_a_delay_past_the_cap() {
    let cap = Duration::from_secs(5);
    let mut rng = Rng::seeded(33);
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        let policy = Policy::new()
            .base(Duration::from_secs(1))
            .cap(cap)
            .jitter(jitter);
        let mut prev = Duration::from_secs(1);
        for n in 0..100_000u32 {
            let delay = policy.delay(n % 40, prev, &mut rng);
            assert!(delay <= cap, "{jitter:?}: {delay:?}");
            prev = delay;
        }
    }
}

/// backoff honours `retry_after` even when it runs past `max_elapsed_time`.
/// Here a `Retry-After` that would sleep past the deadline ends the call.
#[test]
fn retry_after_never_bypasses_the_deadline() {
    let _vt = VirtualTime::start();
    let policy = Policy::new()
        .deadline(Some(Duration::from_secs(10)))
        .no_budget();
    let mut state = AttemptState::new(&policy, SystemClock);
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::RetryAfter(Duration::from_secs(
            50
        )))),
        Decision::GiveUp(GiveUp::Deadline)
    );
}

/// tokio-retry2 (before 0.5.5) parsed `retry_after` and then slept its
/// strategy's own delay. Here the sleep is the server's value, spread only
/// upward.
#[test]
fn retry_after_is_the_delay_actually_slept() {
    struct Throttled;
    impl backstop::Classify for Throttled {
        fn classify(&self) -> Verdict {
            Verdict::RetryAfter(Duration::from_secs(7))
        }
    }
    #[retry(attempts = 2, base = 10ms, budget = none)]
    fn throttled() -> Result<(), Throttled> {
        Err(Throttled)
    }
    let vt = VirtualTime::start();
    let _ = throttled();
    let slept = vt.sleeps();
    assert_eq!(slept.len(), 1);
    assert!(slept[0] >= Duration::from_secs(7) && slept[0] < Duration::from_millis(8_400));
}

/// With `retrying` and `retryable`, a `?` in the body returned from the
/// function itself, skipping the retry. Here `?` ends only the attempt.
#[test]
fn a_question_mark_in_the_body_is_retried() {
    fn flaky(calls: &AtomicU32) -> Result<u32, Error> {
        if calls.fetch_add(1, Ordering::Relaxed) < 2 {
            Err(refused())
        } else {
            Ok(7)
        }
    }
    #[retry(attempts = 3, budget = none)]
    fn fetch(calls: &AtomicU32) -> Result<u32, Error> {
        let value = flaky(calls)?;
        Ok(value * 6)
    }
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    assert_eq!(fetch(&calls).unwrap(), 42);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

/// tenacity's `stop_after_delay` is checked after sleeping, so a call
/// overshoots its limit by up to a whole delay. Here no sleep runs into
/// the deadline and no attempt starts after it.
#[test]
fn a_deadline_is_never_overshot_by_a_sleep() {
    #[retry(attempts = 100, base = 300ms, factor = 2, jitter = none, deadline = 1s, budget = none)]
    fn reach(starts: &std::cell::RefCell<Vec<Duration>>, vt: &VirtualTime) -> Result<(), Error> {
        starts.borrow_mut().push(vt.elapsed());
        Err(refused())
    }
    let vt = VirtualTime::start();
    let starts = std::cell::RefCell::new(Vec::new());
    let _ = reach(&starts, &vt);
    // Attempts at 0 and 300 ms; the next sleep (600 ms) would end at 900 ms,
    // inside the deadline; the one after (1.2 s) would pass it.
    assert_eq!(*starts.borrow(), [0, 300, 900].map(Duration::from_millis));
    assert!(vt.elapsed() < Duration::from_secs(1));
}
