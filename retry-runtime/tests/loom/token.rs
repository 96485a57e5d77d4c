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
