//! Model checking of the lock-free `AdaptiveThrottle` with loom: counts
//! racing in one slot, the first callers racing to anchor its slots, and
//! callers racing to move a slot on to a new window lose nothing the
//! window holds and never show a count of an older window.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p backstop-runtime --no-default-features --release --test loom -- adaptive::
//! ```
#![cfg(loom)]

use std::time::{Duration, Instant};

use backstop_runtime::limit::AdaptiveThrottle;
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

/// K = 1 over 8 s, in slots of 1 s: `ms(0)` and `ms(8000)` fall in one
/// slot, a window apart.
fn throttle() -> Arc<AdaptiveThrottle> {
    Arc::new(AdaptiveThrottle::new(1.0, Duration::from_secs(8)))
}

/// `(requests − accepts) / (requests + 1)`, at least 0: what the throttle
/// must say of `requests` and `accepts` at K = 1.
fn expected(requests: u32, accepts: u32) -> f64 {
    (f64::from(requests) - f64::from(accepts)).max(0.0) / (f64::from(requests) + 1.0)
}

fn says(throttle: &AdaptiveThrottle, now: Instant, requests: u32, accepts: u32) -> bool {
    (throttle.rejection_probability_at(now) - expected(requests, accepts)).abs() < 1e-12
}

#[test]
fn counts_racing_in_one_slot_of_a_fresh_throttle_are_all_kept() {
    loom::model(|| {
        // Fresh: the callers race to anchor its slots as well.
        let throttle = throttle();
        let other = Arc::clone(&throttle);
        let handle = thread::spawn(move || other.requested(ms(0)));
        throttle.requested(ms(0));
        throttle.accepted(ms(0));
        handle.join().unwrap();
        // Two requests and one accept: a lost one would say 0 or 2/3.
        assert!(
            says(&throttle, ms(0), 2, 1),
            "{}",
            throttle.rejection_probability_at(ms(0))
        );
    });
}

/// Five requests at `ms(0)`, then two callers racing to count one each
/// at `ms(later)`, more than a window on: the five are gone, and neither
/// of theirs is lost.
fn two_callers_race_after(later: u64) {
    loom::model(move || {
        let throttle = throttle();
        for _ in 0..5 {
            throttle.requested(ms(0));
        }
        let other = Arc::clone(&throttle);
        let handle = thread::spawn(move || other.requested(ms(later)));
        throttle.requested(ms(later));
        handle.join().unwrap();
        assert!(
            says(&throttle, ms(later), 2, 0),
            "{}",
            throttle.rejection_probability_at(ms(later))
        );
    });
}

#[test]
fn callers_racing_to_move_a_slot_on_to_a_new_window_count_theirs_alone() {
    // A window later: the same slot moves on.
    two_callers_race_after(8000);
}

#[test]
fn callers_whose_clocks_disagree_by_a_window_see_less_never_more() {
    loom::model(|| {
        let throttle = throttle();
        for _ in 0..5 {
            throttle.requested(ms(0));
        }
        // One caller's clock a window behind the other's, on one slot:
        // they may wipe each other's count, and the later window never
        // shows the earlier one's.
        let other = Arc::clone(&throttle);
        let handle = thread::spawn(move || other.requested(ms(0)));
        throttle.requested(ms(8000));
        handle.join().unwrap();
        assert!(
            says(&throttle, ms(8000), 1, 0) || says(&throttle, ms(8000), 0, 0),
            "{}",
            throttle.rejection_probability_at(ms(8000))
        );
    });
}

#[test]
fn callers_racing_past_a_long_quiet_spell_keep_theirs_and_none_of_before() {
    // Over 16,384 slots later: past a sweep of the slots.
    two_callers_race_after(20_000_000);
}

#[test]
fn a_reader_racing_the_first_count_after_the_tags_came_round_sees_no_old_count() {
    loom::model(|| {
        let throttle = throttle();
        for _ in 0..5 {
            throttle.requested(ms(0));
        }
        // 65,536 slots of 1 s later: the same place, the same 16-bit tag.
        let later = 65_536_000;
        let other = Arc::clone(&throttle);
        let handle = thread::spawn(move || other.requested(ms(later)));
        let seen = throttle.rejection_probability_at(ms(later));
        handle.join().unwrap();
        assert!(
            (seen - expected(0, 0)).abs() < 1e-12 || (seen - expected(1, 0)).abs() < 1e-12,
            "{seen}"
        );
        assert!(says(&throttle, ms(later), 1, 0));
    });
}

#[test]
fn counts_racing_past_the_tags_coming_round_are_all_kept_and_none_of_before() {
    // 65,536 slots of 1 s later: the same place, the same 16-bit tag.
    two_callers_race_after(65_536_000);
}
