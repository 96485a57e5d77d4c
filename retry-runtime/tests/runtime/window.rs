//! The retry budget: its bound, its window, and its behaviour under races.

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

use backstop_runtime::limit::WindowBudget;
use backstop_runtime::testing::VirtualTime;
use backstop_runtime::{Policy, call};

#[test]
fn a_thousand_failing_calls_get_at_most_the_budget() {
    let vt = VirtualTime::start();
    let budget: &'static WindowBudget = Box::leak(Box::new(WindowBudget::new(
        0.1,
        10,
        Duration::from_secs(10),
    )));
    // Zero delays, so all thousand calls land inside one window.
    let policy = Policy::new()
        .attempts(3)
        .base(Duration::ZERO)
        .window_budget(budget);
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
    let budget = WindowBudget::new(0.3, 0, Duration::from_secs(10));
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
    let budget = WindowBudget::new(0.1, 2, ttl);
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
    let budget = WindowBudget::new(0.5, 0, ttl);
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
    let budget = WindowBudget::new(1.0, 0, ttl);
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
    let budget = WindowBudget::new(0.5, 1, Duration::from_nanos(1));
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
fn a_call_far_behind_the_window_starts_a_new_one() {
    let budget = WindowBudget::new(1.0, 0, Duration::from_secs(1));
    let t0 = Instant::now() + Duration::from_secs(100);
    budget.record_call(t0);
    // A clock 50 s behind: nothing in the window applies to it.
    let behind = t0.checked_sub(Duration::from_secs(50)).unwrap();
    budget.record_call(behind);
    assert!(budget.try_withdraw(behind), "its own call pays for a retry");
    assert!(!budget.try_withdraw(behind));
    assert_eq!(budget.stats().calls, 2, "nothing lost from the totals");
    // Back on the first clock: a new window again, working as before.
    budget.record_call(t0);
    assert!(budget.try_withdraw(t0));
    assert!(!budget.try_withdraw(t0));
}

static SHARED: WindowBudget = WindowBudget::new(0.1, 5, Duration::from_secs(10));

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
    let _ = WindowBudget::new(1.5, 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "ratio")]
fn a_zero_or_nan_ratio_is_rejected() {
    let _ = WindowBudget::new(f64::NAN, 10, Duration::from_secs(10));
}

#[test]
#[should_panic(expected = "ttl")]
fn a_zero_ttl_is_rejected() {
    let _ = WindowBudget::new(0.1, 10, Duration::ZERO);
}

#[test]
fn racing_callers_never_overdraw_the_last_tokens() {
    use std::sync::{Arc, Barrier};
    const THREADS: usize = 8;
    for round in 0..200 {
        // Exactly `round % 5 + 1` retries are available; eight threads
        // released together all try to take two each.
        let available = round % 5 + 1;
        let budget = Arc::new(WindowBudget::new(1.0, 0, Duration::from_secs(60)));
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
    use backstop_runtime::backoff::Rng;
    // ratio 0.25 = 250_000 ppm, floor 2/s over ttl 10 s = 20 retries.
    let ttl = Duration::from_secs(10);
    let budget = WindowBudget::new(0.25, 2, ttl);
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
                // The whole ttl before this grant, the grant included, holds
                // no more retries than the calls of that ttl paid for, plus
                // the reserve: no slack for slot edges.
                let recent_grants = grants
                    .iter()
                    .filter(|g| at.saturating_sub(**g) <= ttl)
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
    // And any window of length ttl, wherever it starts, holds no more than
    // the reserve plus what the calls of that window and the ttl before it
    // paid for.
    for start in (0..120_000).step_by(50).map(Duration::from_millis) {
        let inside = |t: &&Duration| **t > start && **t <= start + ttl;
        let paying = |t: &&Duration| **t + ttl > start && **t <= start + ttl;
        let in_window = grants.iter().filter(inside).count() as u64;
        let paid = calls.iter().filter(paying).count() as u64;
        assert!(
            in_window * 4 <= paid + 80,
            "window from {start:?}: {in_window} grants, {paid} calls"
        );
    }
    let stats = budget.stats();
    assert_eq!(stats.calls as usize, calls.len());
    assert_eq!(stats.retries as usize, grants.len());
    assert!(
        grants.len() > 100,
        "the budget granted something: {stats:?}"
    );
}

/// Runs `rounds` rounds of `threads` threads released together by a
/// barrier; in round `r` each thread calls `work(r)`. Returns, per round,
/// the sum of what the threads returned.
fn race(threads: usize, rounds: usize, work: impl Fn(usize) -> usize + Sync) -> Vec<usize> {
    use std::sync::Barrier;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::Relaxed;
    let barrier = Barrier::new(threads);
    let totals: Vec<AtomicUsize> = (0..rounds).map(|_| AtomicUsize::new(0)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for (round, total) in totals.iter().enumerate() {
                    barrier.wait();
                    total.fetch_add(work(round), Relaxed);
                }
            });
        }
    });
    totals.into_iter().map(AtomicUsize::into_inner).collect()
}

#[test]
fn racing_callers_on_a_fresh_budget_never_overdraw() {
    // A reserve of 10 retries (1/s over 10 s), no calls: every thread's
    // first withdrawal races to open the window.
    const ROUNDS: usize = 3000;
    let budgets: Vec<WindowBudget> = (0..ROUNDS)
        .map(|_| WindowBudget::new(0.1, 1, Duration::from_secs(10)))
        .collect();
    let now = Instant::now();
    let granted = race(16, ROUNDS, |round| {
        (0..2)
            .map(|_| usize::from(budgets[round].try_withdraw(now)))
            .sum()
    });
    let overdrawn: Vec<_> = granted
        .iter()
        .enumerate()
        .filter(|(_, g)| **g != 10)
        .collect();
    assert!(
        overdrawn.is_empty(),
        "(round, granted) != 10: {overdrawn:?}"
    );
    for budget in &budgets {
        let stats = budget.stats();
        assert_eq!((stats.retries, stats.refusals), (10, 22), "{stats:?}");
    }
}

#[test]
fn racing_callers_across_a_slot_boundary_never_overdraw() {
    // ttl 100 ms in slots of 10 ms, one retry per call. 10 calls at t = 0
    // are all spent at once; 10 more at t = 50 ms. At t = 115 ms the t = 0
    // calls and their retries have left the window: exactly 10 retries are
    // available to threads that, half of them still reading t = 109 ms,
    // race to open the new slot.
    const ROUNDS: usize = 2000;
    let ms = Duration::from_millis(1);
    let t0 = Instant::now();
    let budgets: Vec<WindowBudget> = (0..ROUNDS)
        .map(|_| {
            let b = WindowBudget::new(1.0, 0, 100 * ms);
            for _ in 0..10 {
                b.record_call(t0);
            }
            for _ in 0..10 {
                assert!(b.try_withdraw(t0));
            }
            for _ in 0..10 {
                b.record_call(t0 + 50 * ms);
            }
            b
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let granted = race(8, ROUNDS, |round| {
        let late = next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(2);
        let now = t0 + if late { 115 * ms } else { 109 * ms };
        (0..4)
            .map(|_| usize::from(budgets[round].try_withdraw(now)))
            .sum()
    });
    for (round, g) in granted.iter().enumerate() {
        assert!(*g <= 10, "round {round}: {g} retries granted, 10 available");
    }
    assert!(granted.iter().filter(|g| **g == 10).count() > ROUNDS / 2);
}

#[test]
fn no_window_of_ttl_grants_more_than_the_reserve() {
    // A reserve of 100 retries per 10 s window and no calls: spending it at
    // t = 0.95 s must keep it spent until t = 10.95 s, not only until a
    // slot boundary at 10 s.
    let ttl = Duration::from_secs(10);
    let budget = WindowBudget::new(0.1, 10, ttl);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let first = (0..200).filter(|_| budget.try_withdraw(at(950))).count();
    assert_eq!(first, 100);
    for ms in [1_000, 5_000, 9_999, 10_000, 10_500, 10_940] {
        assert!(
            !budget.try_withdraw(at(ms)),
            "granted at {ms} ms: more than 100 retries within {:?}",
            Duration::from_millis(ms - 950)
        );
    }
    // Slots start at multiples of ttl / 10 from the budget's origin, not at
    // t0: a retry leaves the window between ttl and ttl + ttl / 10 after it.
    let later = (0..200).filter(|_| budget.try_withdraw(at(12_000))).count();
    assert_eq!(later, 100, "a ttl and a slot after, the reserve is back");
}

#[test]
fn a_caller_whose_clock_is_far_ahead_does_not_wedge_the_others() {
    // A shared budget, and one caller on a clock an hour ahead (a test's
    // virtual time): real-time callers must still get their reserve back
    // once a ttl has passed on their own clock.
    let budget = WindowBudget::new(0.1, 1, Duration::from_secs(10));
    let t0 = Instant::now();
    let ahead = t0 + Duration::from_secs(3600);
    budget.record_call(ahead);
    assert!(budget.try_withdraw(ahead));
    for minute in 0..3u64 {
        let now = t0 + Duration::from_secs(60 * minute);
        let granted = (0..20).filter(|_| budget.try_withdraw(now)).count();
        assert!(
            granted >= 9,
            "minute {minute}: {granted} retries granted to real-time callers"
        );
    }
    // And the caller ahead keeps working too.
    assert!(budget.try_withdraw(ahead + Duration::from_secs(60)));
}

#[test]
fn a_clock_going_backwards_never_wedges_the_budget() {
    let budget = WindowBudget::new(0.5, 1, Duration::from_secs(1));
    let t0 = Instant::now() + Duration::from_secs(3600);
    for step in 0..20u64 {
        // Forward a minute, back half an hour, forward again…
        let now = if step % 2 == 0 {
            t0 + Duration::from_secs(60 * step)
        } else {
            t0.checked_sub(Duration::from_secs(1800)).unwrap()
        };
        assert!(budget.try_withdraw(now), "step {step}: refused");
    }
}

#[test]
fn a_caller_behind_the_window_cannot_spend_the_reserve_twice() {
    // One caller's clock runs `skew` ahead (less than a ttl): it moves the
    // window. A caller on real time, behind the window, must still see each
    // of its retries counted for a whole ttl of its own time.
    let ttl = Duration::from_secs(10);
    for skew_ms in [2_000u64, 5_000, 9_500] {
        let budget = WindowBudget::new(0.1, 1, ttl); // a reserve of 10
        let t0 = Instant::now();
        let skew = Duration::from_millis(skew_ms);
        let mut grants: Vec<Duration> = Vec::new();
        let mut at = Duration::ZERO;
        while at < Duration::from_secs(60) {
            if at.subsec_millis() == 0 {
                budget.record_call(t0 + at + skew); // one call a second
            }
            if budget.try_withdraw(t0 + at) {
                grants.push(at);
            }
            at += Duration::from_millis(10);
        }
        for g in &grants {
            let in_ttl = grants
                .iter()
                .filter(|x| **x <= *g && g.saturating_sub(**x) <= ttl)
                .count();
            // 0.1 × the ten calls of a ttl, plus the reserve of 10.
            assert!(
                in_ttl <= 11,
                "skew {skew:?}: {in_ttl} retries in the ttl before {g:?}"
            );
        }
    }
}

/// Two runs of the same traffic in virtual time, started at different real
/// moments (a paused tokio runtime starts at the real now), get the same
/// answers: the slot edges follow the callers' clock from the first call,
/// not the moment the process started.
#[test]
fn the_same_traffic_gets_the_same_answers_whenever_it_starts() {
    let run = |t0: Instant| {
        let budget = WindowBudget::new(0.1, 1, Duration::from_secs(10));
        (0..3_000u64)
            .map(|i| {
                let now = t0 + Duration::from_millis(i * 37);
                budget.record_call(now);
                budget.try_withdraw(now)
            })
            .collect::<Vec<bool>>()
    };
    let t0 = Instant::now();
    let first = run(t0);
    for shift_ns in [1, 123_000_000, 987_654_321, 4_500_000_000] {
        assert_eq!(
            run(t0 + Duration::from_nanos(shift_ns)),
            first,
            "shifted {shift_ns} ns"
        );
    }
}

/// The slots follow the first caller's instant: its call counts until
/// `ttl` after it (to the microseconds of the slot arithmetic), where a
/// later call may leave up to a slot earlier.
#[test]
fn a_budgets_first_call_counts_until_ttl_after_it() {
    let ttl = Duration::from_secs(10);
    let t0 = Instant::now();
    let paid_for_at = |later: Duration| {
        let budget = WindowBudget::new(1.0, 0, ttl);
        budget.record_call(t0);
        budget.try_withdraw(t0 + later)
    };
    assert!(paid_for_at(Duration::from_millis(9_999)), "1 ms before ttl");
    assert!(!paid_for_at(ttl), "at ttl");
}

#[test]
fn callers_hours_behind_the_first_count_in_slots_of_their_own() {
    // Up to half a day behind the caller that anchored the slots, a caller
    // counts in its own time's slot, not in one shared by every caller
    // that far behind.
    let budget = WindowBudget::new(1.0, 0, Duration::from_secs(10));
    let t0 = Instant::now() + Duration::from_secs(4 * 3600);
    let hours_before = |h: u64| t0.checked_sub(Duration::from_secs(h * 3600)).unwrap();
    budget.record_call(t0);
    budget.record_call(hours_before(3));
    assert!(
        !budget.try_withdraw(hours_before(2)),
        "a call an hour earlier pays for nothing"
    );
}

/// A refusal whose retry a windowed budget refuses gives up for the
/// budget at once: only a token budget holds a refused call.
#[test]
fn a_refusal_a_windowed_budget_refuses_gives_up_for_the_budget_without_holding() {
    use backstop_runtime::{GiveUp, GiveUpEvent, Retry};
    let vt = VirtualTime::start();
    // No grant at all: a ratio of a tenth of no calls, and no floor.
    let budget: &'static WindowBudget =
        Box::leak(Box::new(WindowBudget::new(0.1, 0, Duration::from_secs(10))));
    let policy = Policy::new()
        .attempts(5)
        .deadline(Some(Duration::from_secs(5)))
        .window_budget(budget);
    let reason = std::cell::Cell::new(None);
    let mut attempts = 0;
    let out: Result<(), Error> = Retry::new(&policy)
        .on_give_up(|event: &GiveUpEvent<'_, (), Error>| reason.set(Some(event.reason())))
        .call(|| {
            attempts += 1;
            Err(ErrorKind::ConnectionRefused.into())
        });
    assert_eq!(out.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!((attempts, reason.get()), (1, Some(GiveUp::Budget)));
    assert!(vt.sleeps().is_empty(), "held: {:?}", vt.sleeps());
}
