//! Model checking of the lock-free `WindowBudget` with loom: every
//! interleaving (up to loom's preemption bound) of racing callers, window
//! rotation and disagreeing clocks keeps the budget's promises.
//!
//! Under `cfg(loom)` the window has two slots (`ttl / 2` each; retries are
//! kept three), not ten: the algorithm is the same, and the model stays
//! small enough to explore.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p backstop-runtime --no-default-features --release --test loom -- window::
//! ```
#![cfg(loom)]

use std::time::{Duration, Instant};

use backstop_runtime::limit::WindowBudget;
use loom::sync::Arc;
use loom::thread;

/// One instant for every model run, so that runs are alike.
fn t0() -> Instant {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(|| Instant::now() + Duration::from_secs(3600))
}

fn ms(n: u64) -> Instant {
    t0() + Duration::from_millis(n)
}

/// Runs `a` on a second thread and `b` on this one, returns both results.
fn both<A, B>(a: impl FnOnce() -> A + Send + 'static, b: impl FnOnce() -> B) -> (A, B)
where
    A: Send + 'static,
{
    let other = thread::spawn(a);
    let mine = b();
    (other.join().unwrap(), mine)
}

#[test]
fn racing_for_the_only_token_of_a_fresh_budget() {
    loom::model(|| {
        // A reserve of exactly one retry (1/s over 1 s), no calls: both
        // callers race to open the first window, then for the token.
        let budget = Arc::new(WindowBudget::new(0.1, 1, Duration::from_secs(1)));
        let other = Arc::clone(&budget);
        let (a, b) = both(
            move || other.try_withdraw(ms(0)),
            || budget.try_withdraw(ms(0)),
        );
        assert_eq!(u8::from(a) + u8::from(b), 1, "exactly one grant");
        let stats = budget.stats();
        assert_eq!((stats.retries, stats.refusals), (1, 1));
    });
}

#[test]
fn a_withdrawal_racing_the_rotation_never_overdraws() {
    loom::model(|| {
        // ttl 10 ms in slots of 5 ms (slot edges fall wherever the budget's
        // origin puts them), one retry per call. The call at 0 ms is spent
        // at once; the call at 11 ms pays for one more retry. At 16 ms,
        // exactly a slot later, the window moves on and the first call and
        // its retry have left it: two callers race to move the window and
        // for that one token.
        let budget = Arc::new(WindowBudget::new(1.0, 0, Duration::from_millis(10)));
        budget.record_call(ms(0));
        assert!(budget.try_withdraw(ms(0)));
        budget.record_call(ms(11));
        let other = Arc::clone(&budget);
        let (a, b) = both(
            move || other.try_withdraw(ms(16)),
            || budget.try_withdraw(ms(16)),
        );
        assert_eq!(u8::from(a) + u8::from(b), 1, "one token, one grant");
        let stats = budget.stats();
        assert_eq!((stats.calls, stats.retries, stats.refusals), (2, 2, 1));
    });
}

#[test]
fn a_call_racing_a_rotation_is_counted_once() {
    loom::model(|| {
        // One caller records a call in the current slot while another
        // moves the window on: the call is neither lost nor counted twice,
        // and pays for a retry while it is in the window.
        let budget = Arc::new(WindowBudget::new(1.0, 0, Duration::from_millis(10)));
        budget.record_call(ms(0));
        let other = Arc::clone(&budget);
        // 5 ms is exactly one slot: one of them moves the window.
        let ((), ()) = both(
            move || other.record_call(ms(5)),
            || budget.record_call(ms(5)),
        );
        assert_eq!(budget.stats().calls, 3);
        let granted = (0..4).filter(|_| budget.try_withdraw(ms(5))).count();
        assert_eq!(granted, 3, "every call in the window pays");
    });
}

#[test]
fn clocks_that_disagree_never_wedge_or_lose_counts() {
    loom::model(|| {
        // One caller an hour ahead (a test's virtual time), one on real
        // time, on one budget: each starts its own window, neither wedges,
        // and the totals add up.
        let budget = Arc::new(WindowBudget::new(1.0, 1, Duration::from_secs(1)));
        let other = Arc::clone(&budget);
        let ahead = ms(3_600_000);
        let (a, b) = both(
            move || {
                other.record_call(ahead);
                other.try_withdraw(ahead)
            },
            || {
                budget.record_call(ms(0));
                budget.try_withdraw(ms(0))
            },
        );
        let stats = budget.stats();
        assert_eq!(stats.calls, 2);
        assert_eq!(stats.retries + stats.refusals, 2);
        assert_eq!(stats.retries, u64::from(a) + u64::from(b));
        // Whatever happened, a caller on either clock still gets retries
        // once a ttl has passed on its own clock.
        assert!(budget.try_withdraw(ms(5_000)));
    });
}

#[test]
fn a_call_racing_a_withdrawal_in_one_window_never_overdraws() {
    loom::model(|| {
        // One retry per call, no reserve, one call already made: a second
        // call races two withdrawals, all in one window. Whatever the
        // interleaving, the grants never exceed the calls the budget had
        // seen, and every call and withdrawal is counted once.
        let budget = Arc::new(WindowBudget::new(1.0, 0, Duration::from_secs(1)));
        budget.record_call(ms(0));
        let other = Arc::clone(&budget);
        let ((), (a, b)) = both(
            move || other.record_call(ms(1)),
            || (budget.try_withdraw(ms(1)), budget.try_withdraw(ms(1))),
        );
        assert!(a, "the call made before the race pays for one retry");
        let stats = budget.stats();
        assert_eq!(stats.calls, 2);
        assert_eq!(stats.retries, 1 + u64::from(b));
        assert_eq!(stats.retries + stats.refusals, 2);
    });
}
