//! Faults and bad input: a panicking body, a dropped future, a clock that
//! stands still, a deadline already past, the largest values every option
//! takes. Each is handled, and loses nothing. (A probe that panics frees
//! the half-open slot: `a_panicking_probe_frees_the_half_open_slot_a_cooldown_after_it_went` in
//! tests/attribute/hooks.rs.)

use std::io::{Error, ErrorKind};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::__private::{AttemptState, Attempted, Decision};
use backstop::limit::{BreakerState, CircuitBreaker, WindowBudget};
use backstop::testing::VirtualTime;
use backstop::time::Clock;
use backstop::{CircuitOpen, GiveUp, Policy, Verdict, context, retry};

#[derive(Debug)]
enum Failure {
    Reset,
    Open,
}

impl backstop::Classify for Failure {
    fn classify(&self) -> Verdict {
        match self {
            Self::Reset => Verdict::Retry,
            Self::Open => Verdict::Stop,
        }
    }
}

impl From<CircuitOpen> for Failure {
    fn from(_: CircuitOpen) -> Self {
        Self::Open
    }
}

static PANIC_BUDGET: WindowBudget = WindowBudget::new(0.5, 1, Duration::from_secs(10));
static PANIC_BREAKER: CircuitBreaker = CircuitBreaker::new(10, Duration::from_secs(1));

#[retry(attempts = 3, budget = PANIC_BUDGET, breaker = PANIC_BREAKER)]
fn panics_on_the_second_attempt(calls: &AtomicU32) -> Result<u32, Failure> {
    match calls.fetch_add(1, Ordering::Relaxed) {
        0 => Err(Failure::Reset),
        1 => panic!("the body panicked"),
        _ => Ok(7),
    }
}

#[test]
fn a_panicking_body_propagates_and_leaves_budget_breaker_and_context_consistent() {
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let panic = catch_unwind(AssertUnwindSafe(|| panics_on_the_second_attempt(&calls)))
        .expect_err("the panic reaches the caller");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"the body panicked"));
    assert!(context().is_none(), "no attempt's context is left behind");
    let stats = PANIC_BUDGET.stats();
    assert_eq!(
        (stats.calls, stats.retries),
        (1, 1),
        "one call, one retry: as it happened"
    );
    assert_eq!(PANIC_BREAKER.state(), BreakerState::Closed);
    // The next call runs normally.
    assert_eq!(panics_on_the_second_attempt(&calls).unwrap(), 7);
    assert_eq!(PANIC_BUDGET.stats().calls, 2);
}

#[retry(attempts = 5, base = 1s, jitter = none, budget = none)]
async fn fails_then_sleeps(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    Err(ErrorKind::ConnectionRefused.into())
}

#[tokio::test(start_paused = true)]
async fn an_async_call_dropped_mid_sleep_makes_no_more_attempts() {
    let calls = AtomicU32::new(0);
    // The first attempt fails at once; the call then sleeps 1 s.
    let dropped = tokio::time::timeout(Duration::from_millis(500), fails_then_sleeps(&calls)).await;
    assert!(dropped.is_err(), "cancelled while sleeping");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert!(context().is_none());
}

#[retry(attempts = 5, budget = none)]
async fn hangs(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_async_call_dropped_mid_attempt_makes_no_more_attempts() {
    let calls = AtomicU32::new(0);
    let dropped = tokio::time::timeout(Duration::from_secs(1), hangs(&calls)).await;
    assert!(dropped.is_err());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert!(context().is_none(), "the attempt's context went with it");
}

/// A clock that never moves: the deadline never comes, so the attempt
/// count and the budget are what end the call.
#[derive(Clone, Copy)]
struct Frozen(Instant);

impl Clock for Frozen {
    fn now(&self) -> Instant {
        self.0
    }
}

#[test]
fn a_clock_that_never_advances_still_ends_the_call() {
    let clock = Frozen(Instant::now());
    let policy = Policy::new().no_budget();
    let mut state = AttemptState::new(&policy, clock);
    let mut decisions = Vec::new();
    loop {
        match state.decide(Attempted::Failed(Verdict::Retry)) {
            Decision::Retry(d) => decisions.push(d),
            Decision::GiveUp(reason) => {
                assert_eq!(reason, GiveUp::Attempts);
                break;
            }
            Decision::Return => unreachable!(),
        }
    }
    assert_eq!(decisions.len(), 2);

    // No attempt limit to speak of: the budget ends it.
    let budget = WindowBudget::new(0.1, 1, Duration::from_secs(10));
    let policy = Policy::new().attempts(u32::MAX);
    let mut state = AttemptState::new(&policy, clock).budget(Some(&budget));
    let mut retries = 0;
    while let Decision::Retry(_) = state.decide(Attempted::Failed(Verdict::Retry)) {
        retries += 1;
    }
    assert_eq!(retries, 10, "the reserve of 1 × 10 s, and nothing more");
}

#[test]
fn a_deadline_already_past_on_entry_allows_the_first_attempt_only() {
    #[retry(attempts = 5, budget = none)]
    fn inner(calls: &AtomicU32) -> Result<(), Error> {
        calls.fetch_add(1, Ordering::Relaxed);
        Err(ErrorKind::ConnectionRefused.into())
    }

    #[retry(attempts = 1, deadline = 1s, budget = none)]
    fn outer(calls: &AtomicU32, vt: &VirtualTime) -> Result<(), Error> {
        vt.advance(Duration::from_secs(2)); // past the outer deadline
        inner(calls)
    }

    let vt = VirtualTime::start();
    let inner_calls = AtomicU32::new(0);
    assert!(outer(&inner_calls, &vt).is_err());
    assert_eq!(
        inner_calls.load(Ordering::Relaxed),
        1,
        "no retry past the deadline"
    );
    assert_eq!(vt.sleeps(), [], "and no sleep");

    // A zero deadline: the first attempt, then nothing.
    let policy = Policy::new().deadline(Some(Duration::ZERO)).no_budget();
    let calls = AtomicU32::new(0);
    let out: Result<(), Error> = backstop::call(&policy, || {
        calls.fetch_add(1, Ordering::Relaxed);
        Err(ErrorKind::ConnectionRefused.into())
    });
    assert!(out.is_err());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[test]
fn the_largest_values_of_every_option_neither_panic_nor_overflow() {
    // The attribute's largest values: the deadline (ten million hours) is
    // what ends the call, after a few sleeps of up to the cap.
    #[retry(attempts = 4294967295, base = 1s, cap = 10000000h, deadline = 10000000h, retry_after_max = 10000000h, factor = 1000000, budget = none)]
    fn everything_at_the_top(calls: &AtomicU32) -> Result<(), Error> {
        calls.fetch_add(1, Ordering::Relaxed);
        Err(ErrorKind::ConnectionRefused.into())
    }
    let vt = VirtualTime::start();
    let policy = Policy::new()
        .attempts(u32::MAX)
        .deadline(Some(Duration::MAX))
        .base(Duration::MAX)
        .cap(Duration::MAX)
        .factor(f64::MAX)
        .retry_after_max(Duration::MAX)
        .no_budget();
    let calls = AtomicU32::new(0);
    let out: Result<u32, Error> = backstop::call(&policy, || {
        if calls.fetch_add(1, Ordering::Relaxed) < 3 {
            Err(ErrorKind::ConnectionRefused.into())
        } else {
            Ok(1)
        }
    });
    // A deadline of `Duration::MAX` lies beyond any clock: none. The
    // delays saturate, and so does the virtual clock.
    assert_eq!(out.unwrap(), 1);
    assert_eq!(vt.sleeps().len(), 3);
    drop(vt);

    let vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    assert!(everything_at_the_top(&calls).is_err());
    assert!(calls.load(Ordering::Relaxed) >= 2);
    assert!(vt.elapsed() < Duration::from_secs(10_000_000 * 3600));
}

#[test]
#[should_panic(expected = "WindowBudget::new: `ratio` must be in (0, 1]")]
fn a_budget_with_a_bad_ratio_is_a_clear_panic_at_run_time() {
    let ratio = std::hint::black_box(2.0);
    let _ = WindowBudget::new(ratio, 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "CircuitBreaker::new: `failure_threshold` must be at least 1")]
fn a_breaker_with_a_zero_threshold_is_a_clear_panic_at_run_time() {
    let _ = CircuitBreaker::new(std::hint::black_box(0), Duration::from_secs(1));
}

#[test]
#[should_panic(expected = "WindowBudget::new: `ratio` must be in (0, 1]")]
fn a_budget_with_a_zero_ratio_is_a_clear_panic_at_run_time() {
    let _ = WindowBudget::new(std::hint::black_box(0.0), 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "WindowBudget::new: `ratio` must be in (0, 1]")]
fn a_budget_with_a_nan_ratio_is_a_clear_panic_at_run_time() {
    let _ = WindowBudget::new(std::hint::black_box(f64::NAN), 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "WindowBudget::new: `ttl` must be greater than zero")]
fn a_budget_with_a_zero_ttl_is_a_clear_panic_at_run_time() {
    let _ = WindowBudget::new(0.1, 10, std::hint::black_box(Duration::ZERO));
}
