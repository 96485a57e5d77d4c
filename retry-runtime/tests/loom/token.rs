//! Model checking of the lock-free `TokenBudget` with loom: racing
//! failures and answers never lose an update, and however many callers
//! race, a retry is allowed only while the tokens stay above half.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p backstop-runtime --no-default-features --release --test loom -- token::
//! ```
#![cfg(loom)]
// Tokens are whole thousandths: their `f64` values compare exactly.
#![allow(clippy::float_cmp)]

use std::time::Instant;

use backstop_runtime::limit::TokenBudget;
use loom::sync::Arc;
use loom::thread;

/// One instant for every operation: no refill in time.
fn now() -> Instant {
    static NOW: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *NOW.get_or_init(Instant::now)
}

/// A throttle of 10 tokens (ratio 1) drained to `tokens`, without races.
fn drained_to(tokens: u32) -> Arc<TokenBudget> {
    let throttle = TokenBudget::new(10, 1.0);
    for _ in tokens..10 {
        throttle.failed(now());
    }
    Arc::new(throttle)
}

#[test]
fn racing_failures_and_answers_lose_no_update() {
    loom::model(|| {
        // 7 tokens, far from both ends: the result is the same in every
        // order, 7 - 2 + 2.
        let throttle = drained_to(7);
        let other = Arc::clone(&throttle);
        let a = thread::spawn(move || {
            other.failed(now());
            other.answered(now());
        });
        throttle.answered(now());
        throttle.failed(now());
        a.join().unwrap();
        assert_eq!(throttle.tokens(), 7.0);
    });
}

#[test]
fn racing_failures_get_exactly_the_retries_above_half() {
    loom::model(|| {
        // 7 tokens: the failures leave 6, 5, 4 and 3 in whatever order they
        // land; only the one that leaves 6 may retry.
        let throttle = drained_to(7);
        let other = Arc::clone(&throttle);
        let a = thread::spawn(move || [other.failed(now()), other.failed(now())]);
        let mine = [throttle.failed(now()), throttle.failed(now())];
        let theirs = a.join().unwrap();
        let allowed = mine.iter().chain(&theirs).filter(|&&x| x).count();
        assert_eq!(allowed, 1);
        assert_eq!(throttle.tokens(), 3.0);
    });
}

/// Two calls held after refusals race for the one place a budget gives a
/// released call: exactly one goes; the other goes only once the first's
/// retry has been decided (an answer: the dependency is back).
#[test]
fn held_calls_racing_for_release_go_one_at_a_time() {
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    use backstop_runtime::time::SystemClock;
    use backstop_runtime::{Policy, Verdict};
    loom::model(|| {
        // (Leaked: a held call borrows them, and moves to a thread.)
        let policy: &'static Policy = Box::leak(Box::new(
            Policy::new().deadline(Some(std::time::Duration::from_secs(60))),
        ));
        // 4 tokens, ratio 1: the first refusal leaves 3 (a retry), the
        // second 2 (not above half): refused, so the calls hold.
        let budget: &'static TokenBudget = Box::leak(Box::new(TokenBudget::new(4, 1.0)));
        let hold = |budget: &'static TokenBudget, policy: &'static Policy| {
            let mut state = AttemptState::new(policy, SystemClock).budget(Some(budget));
            while let Decision::Retry(_) = state.decide(Attempted::Failed(Verdict::Refused)) {
                if state.held().is_some() {
                    return state;
                }
            }
            unreachable!("a refusal the budget refuses holds")
        };
        let mut mine = hold(budget, policy);
        let mut other_state = hold(budget, policy);
        assert!(mine.held().is_some() && other_state.held().is_some());
        // The dependency answers.
        budget.answered(now());
        let other = thread::spawn(move || {
            let released = other_state.held().is_none();
            (released, other_state)
        });
        let me_released = mine.held().is_none();
        let (other_released, mut other_state) = other.join().unwrap();
        assert!(me_released ^ other_released, "exactly one released");
        // The one released succeeds: the other may go now.
        let (released, waiting) = if me_released {
            (&mut mine, &mut other_state)
        } else {
            (&mut other_state, &mut mine)
        };
        assert_eq!(released.decide(Attempted::Succeeded), Decision::Return);
        assert_eq!(waiting.held(), None);
    });
}
