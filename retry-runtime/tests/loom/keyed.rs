//! Model checking of the table of limiters kept per key with loom: callers
//! racing to bring a new key get one limiter, a failure racing the
//! eviction of its key's place is never lost, and a breaker's never
//! opens the new key's.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p backstop-runtime --no-default-features --release --test loom -- keyed::
//! ```
#![cfg(loom)]
// Tokens are whole thousandths: their `f64` values compare exactly.
#![allow(clippy::float_cmp)]

use std::time::Instant;

use backstop_runtime::limit::{Keyed, TokenBudget};
use loom::sync::Arc;
use loom::thread;

fn now() -> Instant {
    static NOW: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *NOW.get_or_init(Instant::now)
}

/// The address of a limiter, to compare across threads.
fn at(budget: &TokenBudget) -> usize {
    std::ptr::from_ref(budget) as usize
}

#[test]
fn callers_racing_to_bring_a_new_key_get_one_limiter() {
    loom::model(|| {
        let table = Arc::new(Keyed::with_capacity(TokenBudget::standard(), 2));
        let other = Arc::clone(&table);
        let a = thread::spawn(move || at(other.get_at(&7u8, now())));
        let mine = at(table.get_at(&7u8, now()));
        assert_eq!(a.join().unwrap(), mine);
        assert_ne!(mine, at(table.shared()), "the key has a place");
        assert_eq!(table.len(), 1, "one place taken");
    });
}

#[test]
fn callers_racing_for_the_place_of_a_forgotten_key_get_one_limiter() {
    loom::model(|| {
        // One place, held by a key whose budget is full: it may go.
        let table = Arc::new(Keyed::with_capacity(TokenBudget::standard(), 1));
        let place = at(table.get_at(&1u8, now()));
        let other = Arc::clone(&table);
        let a = thread::spawn(move || at(other.get_at(&2u8, now())));
        let mine = at(table.get_at(&2u8, now()));
        assert_eq!(a.join().unwrap(), mine);
        assert_eq!(mine, place, "the new key took the place");
    });
}

#[test]
fn callers_racing_for_one_of_two_places_that_may_go_take_the_same() {
    loom::model(|| {
        // Two places, each held by a key whose budget is full, the first
        // used since (its second chance): either may go.
        let table = Arc::new(Keyed::with_capacity(TokenBudget::standard(), 2));
        table.get_at(&1u8, now());
        table.get_at(&2u8, now());
        let other = Arc::clone(&table);
        let a = thread::spawn(move || at(other.get_at(&3u8, now())));
        let mine = at(table.get_at(&3u8, now()));
        assert_eq!(a.join().unwrap(), mine, "one place for the new key");
        assert_ne!(mine, at(table.shared()));
    });
}

#[test]
fn a_failure_racing_the_eviction_of_its_place_is_never_lost() {
    loom::model(|| {
        let table = Arc::new(Keyed::with_capacity(TokenBudget::standard(), 1));
        let failing = table.get_at(&1u8, now());
        let place = at(failing);
        let failed = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (other, seen) = (Arc::clone(&table), Arc::clone(&failed));
        let newcomer = thread::spawn(move || {
            let after = seen.load(std::sync::atomic::Ordering::SeqCst);
            (after, at(other.get_at(&2u8, now())))
        });
        failing.failed(now());
        failed.store(true, std::sync::atomic::Ordering::SeqCst);
        let (after_the_failure, got) = newcomer.join().unwrap();
        if after_the_failure {
            assert_eq!(got, at(table.shared()), "a failing key is never forgotten");
        }
        assert_eq!(failing.tokens(), 9.0, "the failure is in the place");
        if got == place {
            // The newcomer took the place while it held nothing, before the
            // failure: the place is the newcomer's now, failure and all,
            // and key 1, gone, draws on the shared budget.
            assert_eq!(at(table.get_at(&2u8, now())), place);
            assert_eq!(at(table.get_at(&1u8, now())), at(table.shared()));
        } else {
            // The failure came first: key 1 kept its place.
            assert_eq!(got, at(table.shared()));
            assert_eq!(at(table.get_at(&1u8, now())), place);
        }
        assert_eq!(
            table.shared().tokens(),
            10.0,
            "the shared budget took nothing"
        );
    });
}

/// A key's failure racing the place going to a new key: whichever comes
/// first, the new key's breaker starts as a fresh one (closed, nothing
/// counted), never opened by the old key's failure.
#[test]
fn a_failure_of_the_key_before_never_opens_the_new_keys_breaker() {
    use backstop_runtime::Verdict;
    use backstop_runtime::limit::CircuitBreaker;
    loom::model(|| {
        let table = Arc::new(Keyed::with_capacity(
            CircuitBreaker::new(1, std::time::Duration::from_secs(30)),
            1,
        ));
        // Key 1's call is let through while its breaker holds nothing.
        let old = table.get_at(&1u8, now());
        let permit = old.try_acquire(now()).unwrap();
        let other = Arc::clone(&table);
        let newcomer = thread::spawn(move || {
            let breaker = other.get_at(&2u8, now());
            std::ptr::from_ref(breaker) as usize
        });
        // Its attempt fails (threshold 1: it would open the breaker).
        permit.failed(Verdict::Retry, now());
        let got = newcomer.join().unwrap();
        if got == std::ptr::from_ref(old) as usize {
            // Key 2 took the place: before the failure or after it (the
            // failure opened key 1's breaker, which was then stale or not:
            // the place went only if it was fresh, so before it).
            assert!(
                table.get_at(&2u8, now()).try_acquire(now()).is_ok(),
                "key 2's breaker is closed: key 1's failure is not its"
            );
        } else {
            // The failure came first: key 1 kept its place, opened.
            assert_eq!(got, std::ptr::from_ref(table.shared()) as usize);
            assert!(old.try_acquire(now()).is_err());
        }
    });
}
