//! The circuit breaker: its transitions, one probe among racing callers,
//! probes that never report, and an operator's hold and reset.

use std::time::{Duration, Instant};

use backstop_runtime::Verdict;
use backstop_runtime::limit::{BreakerChange, BreakerState, ChangeReason, CircuitBreaker};

const COOLDOWN: Duration = Duration::from_secs(10);

fn fail(breaker: &CircuitBreaker, now: Instant, verdict: Verdict) {
    breaker.try_acquire(now).unwrap().failed(verdict, now);
}

#[test]
fn opens_after_the_threshold_of_consecutive_retryable_failures() {
    let breaker = CircuitBreaker::new(3, COOLDOWN);
    let now = Instant::now();
    fail(&breaker, now, Verdict::Retry);
    fail(&breaker, now, Verdict::RetryAfter(Duration::from_secs(1)));
    assert_eq!(breaker.state_at(now), BreakerState::Closed);
    fail(&breaker, now, Verdict::RetryIfIdempotent);
    assert_eq!(breaker.state_at(now), BreakerState::Open);
    assert!(breaker.try_acquire(now).is_err());
    assert!(breaker.try_acquire(now + COOLDOWN / 2).is_err());
}

#[test]
fn a_success_resets_the_count_and_stop_failures_never_count() {
    let breaker = CircuitBreaker::new(3, COOLDOWN);
    let now = Instant::now();
    for _ in 0..10 {
        fail(&breaker, now, Verdict::Retry);
        fail(&breaker, now, Verdict::Retry);
        breaker.try_acquire(now).unwrap().succeeded(now); // a success
    }
    for _ in 0..100 {
        fail(&breaker, now, Verdict::Stop); // a 400: the caller's fault
    }
    assert_eq!(breaker.state_at(now), BreakerState::Closed);
}

#[test]
fn an_overloaded_dependencys_pushback_counts_as_a_failure() {
    // Not retried, but the dependency's fault: gRPC's "do not retry".
    let breaker = CircuitBreaker::new(3, COOLDOWN);
    let now = Instant::now();
    for _ in 0..3 {
        fail(&breaker, now, Verdict::StopOverloaded);
    }
    assert_eq!(breaker.state_at(now), BreakerState::Open);
}

#[test]
fn after_the_cooldown_one_probe_closes_or_reopens() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let t1 = t0 + COOLDOWN;
    let probe = breaker.try_acquire(t1).unwrap();
    assert!(probe.is_probe());
    assert_eq!(breaker.state_at(t1), BreakerState::HalfOpen);
    assert!(breaker.try_acquire(t1).is_err(), "one probe at a time");
    probe.failed(Verdict::Retry, t1);
    assert_eq!(
        breaker.state_at(t1),
        BreakerState::Open,
        "a failed probe reopens"
    );
    assert!(
        breaker.try_acquire(t1 + COOLDOWN / 2).is_err(),
        "for a whole cooldown"
    );
    let t2 = t1 + COOLDOWN;
    breaker.try_acquire(t2).unwrap().succeeded(t2);
    assert_eq!(
        breaker.state_at(t2),
        BreakerState::Closed,
        "a successful probe closes"
    );
    assert!(!breaker.try_acquire(t2).unwrap().is_probe());
}

#[test]
fn exactly_one_of_a_hundred_concurrent_callers_probes() {
    use std::sync::Barrier;
    for round in 0..50 {
        let breaker = CircuitBreaker::new(1, COOLDOWN);
        let t0 = Instant::now();
        fail(&breaker, t0, Verdict::Retry);
        let after = t0 + COOLDOWN;
        let barrier = Barrier::new(100);
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..100)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        // Hold the permit until every caller has tried.
                        let permit = breaker.try_acquire(after).ok();
                        barrier.wait();
                        usize::from(permit.is_some())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 1, "round {round}");
    }
}

#[test]
fn a_probe_that_never_reports_frees_the_half_open_slot_a_cooldown_after_it_went() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let after = t0 + COOLDOWN;
    drop(breaker.try_acquire(after).unwrap()); // its future was dropped
    // As if it were still out: no second trial within its time.
    assert!(breaker.try_acquire(after).is_err());
    let almost = after + COOLDOWN.checked_sub(Duration::from_millis(1)).unwrap();
    assert!(breaker.try_acquire(almost).is_err());
    assert_eq!(breaker.state_at(almost), BreakerState::Open);
    let later = after + COOLDOWN;
    let next = breaker.try_acquire(later).expect("the slot was freed");
    assert!(next.is_probe());
    // A probe whose call panics is released by unwinding, likewise; one
    // that was out longer than a cooldown frees the slot at once.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _probe = next;
        panic!("the probe's call panicked");
    }));
    assert!(caught.is_err());
    assert!(breaker.try_acquire(later).is_err());
    let long = breaker.try_acquire(later + COOLDOWN).unwrap();
    assert!(long.is_probe());
    drop(long);
    let at_last = later + 2 * COOLDOWN;
    drop(breaker.try_acquire(at_last).unwrap()); // only let through now
    assert!(breaker.try_acquire(at_last).is_err());
    let hung = breaker.try_acquire(at_last + COOLDOWN).unwrap();
    let dropped_late = at_last + 3 * COOLDOWN;
    drop(hung); // out three cooldowns (no other caller came meanwhile)
    assert!(breaker.try_acquire(dropped_late).unwrap().is_probe());
}

#[test]
fn a_probe_still_out_a_cooldown_after_it_was_let_through_does_not_hold_the_breaker_shut() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let half_open = t0 + COOLDOWN;
    let hung = breaker.try_acquire(half_open).unwrap();
    assert!(hung.is_probe());
    let almost = half_open + COOLDOWN.checked_sub(Duration::from_millis(1)).unwrap();
    assert!(
        breaker.try_acquire(almost).is_err(),
        "within its time, the probe holds the slot"
    );
    let trial = breaker.try_acquire(half_open + COOLDOWN).unwrap();
    assert!(trial.is_probe(), "a new trial, a cooldown after the first");
    assert!(
        breaker.try_acquire(half_open + COOLDOWN).is_err(),
        "one new trial per cooldown"
    );
    trial.succeeded(half_open + COOLDOWN);
    assert_eq!(breaker.state_at(half_open + COOLDOWN), BreakerState::Closed);
    // The hung probe reports at last: the breaker was decided since.
    hung.failed(Verdict::Retry, half_open + 2 * COOLDOWN);
    assert_eq!(
        breaker.state_at(half_open + 2 * COOLDOWN),
        BreakerState::Closed
    );
}

#[test]
fn a_late_probe_that_fails_reopens_no_earlier_than_the_trial_still_out() {
    // The hung probe's caller reads a clock behind the new trial's (or
    // reports the time it started): its failure must not date the opening
    // before the trial in flight, or a third caller gets a trial beside it.
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let hung_at = t0 + COOLDOWN;
    let hung = breaker.try_acquire(hung_at).unwrap();
    let trial_at = hung_at + COOLDOWN;
    let trial = breaker.try_acquire(trial_at).unwrap();
    assert!(hung.is_probe() && trial.is_probe());
    hung.failed(Verdict::Retry, hung_at);
    assert_eq!(breaker.state_at(trial_at), BreakerState::Open);
    assert!(
        breaker.try_acquire(trial_at).is_err(),
        "no trial beside the one let through a moment ago"
    );
    let almost = trial_at + COOLDOWN.checked_sub(Duration::from_millis(1)).unwrap();
    assert!(breaker.try_acquire(almost).is_err());
    drop(trial);
    assert!(breaker.try_acquire(trial_at + COOLDOWN).unwrap().is_probe());
}

#[test]
fn a_late_probe_that_succeeds_closes_the_breaker_its_successor_finds_decided() {
    // A dependency slower than the cooldown still closes the breaker: the
    // first trial to report decides the half-open breaker.
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let slow = breaker.try_acquire(t0 + COOLDOWN).unwrap();
    let next = breaker.try_acquire(t0 + 2 * COOLDOWN).unwrap();
    assert!(slow.is_probe() && next.is_probe());
    slow.succeeded(t0 + 2 * COOLDOWN);
    assert_eq!(breaker.state_at(t0 + 2 * COOLDOWN), BreakerState::Closed);
    next.failed(Verdict::Retry, t0 + 2 * COOLDOWN);
    assert_eq!(
        breaker.state_at(t0 + 2 * COOLDOWN),
        BreakerState::Closed,
        "a trial's failure after the breaker closed is not a closed call's"
    );
    // A superseded probe dropped without a report frees nothing it no
    // longer holds.
    fail(&breaker, t0 + 3 * COOLDOWN, Verdict::Retry);
    let first = breaker.try_acquire(t0 + 4 * COOLDOWN).unwrap();
    let second = breaker.try_acquire(t0 + 5 * COOLDOWN).unwrap();
    drop(first);
    assert_eq!(breaker.state_at(t0 + 5 * COOLDOWN), BreakerState::HalfOpen);
    assert!(
        breaker.try_acquire(t0 + 5 * COOLDOWN).is_err(),
        "the second trial still holds the slot"
    );
    second.failed(Verdict::Retry, t0 + 5 * COOLDOWN);
    assert_eq!(breaker.state_at(t0 + 5 * COOLDOWN), BreakerState::Open);
}

#[test]
#[should_panic(expected = "failure_threshold")]
fn a_zero_threshold_is_rejected() {
    let _ = CircuitBreaker::new(0, COOLDOWN);
}

// A breaker that cools down at once lets every call through: no breaker.
#[test]
#[should_panic(expected = "`cooldown` must be above zero")]
fn a_zero_cooldown_is_rejected() {
    let _ = CircuitBreaker::new(1, Duration::ZERO);
}

#[test]
#[should_panic(expected = "`break_for` must be above zero")]
fn a_ratio_breakers_zero_break_is_rejected() {
    let _ = CircuitBreaker::ratio(0.5, 10, Duration::from_secs(10), Duration::ZERO);
}

#[test]
fn a_failure_from_before_the_breaker_opened_does_not_count_after_it_closes() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    let stale = breaker.try_acquire(t0).unwrap(); // admitted while closed
    fail(&breaker, t0, Verdict::Retry); // opens it
    let later = t0 + COOLDOWN;
    breaker.try_acquire(later).unwrap().succeeded(later); // the probe closes it
    stale.failed(Verdict::Retry, later); // an old call reports late
    assert_eq!(
        breaker.state_at(later),
        BreakerState::Closed,
        "the old failure is not news"
    );

    // Threshold 3: two stale failures and one fresh one are not three in a row.
    let breaker = CircuitBreaker::new(3, COOLDOWN);
    let stale: Vec<_> = (0..2).map(|_| breaker.try_acquire(t0).unwrap()).collect();
    for _ in 0..3 {
        fail(&breaker, t0, Verdict::Retry);
    }
    breaker.try_acquire(later).unwrap().succeeded(later);
    for permit in stale {
        permit.failed(Verdict::Retry, later);
    }
    fail(&breaker, later, Verdict::Retry);
    assert_eq!(breaker.state_at(later), BreakerState::Closed);
}

#[test]
fn a_caller_whose_clock_is_far_ahead_does_not_wedge_the_others() {
    // A test's paused clock an hour ahead opens a shared breaker; callers
    // on real time must not wait an hour for its cooldown.
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let now = Instant::now();
    fail(&breaker, now + Duration::from_secs(3600), Verdict::Retry);
    assert_eq!(
        breaker.state_at(now + Duration::from_secs(3600)),
        BreakerState::Open
    );
    let probe = breaker
        .try_acquire(now)
        .expect("not locked out for an hour");
    assert!(probe.is_probe(), "one probe, as after any cooldown");
    assert!(breaker.try_acquire(now).is_err(), "still one at a time");
    probe.succeeded(now);
    assert_eq!(breaker.state_at(now), BreakerState::Closed);
}

#[test]
fn a_caller_a_little_behind_waits_out_the_cooldown_on_its_own_clock() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let now = Instant::now();
    // Opened by a caller 4 s ahead: less than a cooldown apart.
    fail(&breaker, now + Duration::from_secs(4), Verdict::Retry);
    assert!(breaker.try_acquire(now).is_err(), "within a cooldown: open");
    assert!(breaker.try_acquire(now + COOLDOWN).is_err());
    assert!(breaker.try_acquire(now + Duration::from_secs(14)).is_ok());
}

#[test]
fn a_caller_whose_clock_is_far_behind_does_not_wedge_the_others() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let behind = Instant::now();
    let later = behind + Duration::from_secs(3600);
    // Opened by a caller an hour behind; then a reopen by a caller on time.
    fail(&breaker, behind, Verdict::Retry);
    let probe = breaker.try_acquire(later).unwrap();
    probe.failed(Verdict::Retry, later);
    assert!(
        breaker.try_acquire(later + COOLDOWN / 2).is_err(),
        "reopened for a cooldown"
    );
    assert!(breaker.try_acquire(later + COOLDOWN).is_ok());
}

#[test]
fn the_state_is_half_open_as_soon_as_a_trial_may_go() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    fail(&breaker, t0, Verdict::Retry);
    let almost = t0 + COOLDOWN.checked_sub(Duration::from_millis(1)).unwrap();
    assert_eq!(breaker.state_at(almost), BreakerState::Open);
    assert!(breaker.try_acquire(almost).is_err());
    let t1 = t0 + COOLDOWN;
    assert_eq!(
        breaker.state_at(t1),
        BreakerState::HalfOpen,
        "a trial may go"
    );
    let probe = breaker.try_acquire(t1).unwrap();
    assert!(probe.is_probe(), "and the next caller is it");
    assert_eq!(breaker.state_at(t1), BreakerState::HalfOpen, "in flight");
    probe.succeeded(t1);
    assert_eq!(breaker.state_at(t1), BreakerState::Closed);
}

#[test]
fn held_open_it_rejects_every_call_until_reset_whatever_the_calls_report() {
    let breaker = CircuitBreaker::new(1, COOLDOWN);
    let t0 = Instant::now();
    let before = breaker.try_acquire(t0).unwrap();
    breaker.hold_open();
    assert_eq!(breaker.state_at(t0), BreakerState::HeldOpen);
    for later in [t0, t0 + COOLDOWN, t0 + 100 * COOLDOWN] {
        assert!(
            breaker.try_acquire(later).is_err(),
            "no cooldown ends a hold"
        );
        assert_eq!(breaker.state_at(later), BreakerState::HeldOpen);
    }
    // A call let through before the hold succeeds: the hold stands.
    before.succeeded(t0);
    assert_eq!(breaker.state_at(t0), BreakerState::HeldOpen);
    breaker.reset();
    assert_eq!(breaker.state_at(t0), BreakerState::Closed);
    assert!(
        !breaker.try_acquire(t0).unwrap().is_probe(),
        "closed: no trial"
    );
}

#[test]
fn a_reset_closes_an_open_breaker_and_forgets_what_came_before() {
    let breaker = CircuitBreaker::new(2, COOLDOWN);
    let t0 = Instant::now();
    let late = breaker.try_acquire(t0).unwrap();
    fail(&breaker, t0, Verdict::Retry);
    breaker.reset();
    assert_eq!(breaker.state_at(t0), BreakerState::Closed);
    // One failure counted before the reset and one from a call let
    // through before it: neither counts now.
    late.failed(Verdict::Retry, t0);
    fail(&breaker, t0, Verdict::Retry);
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Closed,
        "one failure since the reset"
    );
    fail(&breaker, t0, Verdict::Retry);
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Open,
        "two in a row open it"
    );
    // Reset from open: calls go through at once, no cooldown waited.
    breaker.reset();
    assert!(breaker.try_acquire(t0).is_ok());
}

static CHANGES: std::sync::Mutex<Vec<BreakerChange>> = std::sync::Mutex::new(Vec::new());

fn record_change(change: &BreakerChange) {
    CHANGES.lock().unwrap().push(*change);
}

static TOLD: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(10))
    .named("told")
    .on_change(record_change);

#[test]
fn every_change_of_state_is_told_with_its_reason_and_nothing_else() {
    use BreakerState::{Closed, HalfOpen, HeldOpen, Open};
    use ChangeReason::{
        Failures, Reset, TrialAbandoned, TrialFailed, TrialStarted, TrialSucceeded,
    };
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Opened by a failure; a success while open changes nothing.
    TOLD.try_acquire(at(0))
        .unwrap()
        .failed(Verdict::Retry, at(0));
    assert!(TOLD.try_acquire(at(1)).is_err());
    // A trial that fails, a trial dropped without a report, one that
    // succeeds.
    TOLD.try_acquire(at(10))
        .unwrap()
        .failed(Verdict::Retry, at(10));
    drop(TOLD.try_acquire(at(20)).unwrap());
    // (The next trial a cooldown after the one dropped.)
    TOLD.try_acquire(at(30)).unwrap().succeeded(at(30));
    // A success and a `Stop` failure while closed: no change.
    TOLD.try_acquire(at(31)).unwrap().succeeded(at(31));
    TOLD.try_acquire(at(31))
        .unwrap()
        .failed(Verdict::Stop, at(31));
    // An operator holds it open, and closes it.
    TOLD.hold_open();
    TOLD.reset();
    TOLD.reset(); // closed already: no change
    let told: Vec<_> = CHANGES
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.breaker, c.from, c.to, c.reason))
        .collect();
    assert_eq!(
        told,
        [
            ("told", Closed, Open, Failures),
            ("told", Open, HalfOpen, TrialStarted),
            ("told", HalfOpen, Open, TrialFailed),
            ("told", Open, HalfOpen, TrialStarted),
            ("told", HalfOpen, Open, TrialAbandoned),
            ("told", Open, HalfOpen, TrialStarted),
            ("told", HalfOpen, Closed, TrialSucceeded),
            ("told", Closed, HeldOpen, ChangeReason::HeldOpen),
            ("told", HeldOpen, Closed, Reset),
        ]
    );
}

#[test]
fn a_keyed_breakers_instances_keep_its_name_and_hook() {
    let table = backstop_runtime::limit::Keyed::new(
        CircuitBreaker::new(3, Duration::from_secs(1)).named("per-shard"),
    );
    assert_eq!(table.get(&1u8).name(), "per-shard");
}

// --- The ratio rule -------------------------------------------------------

/// `n` calls at `now`, `failed` of them failing retryably (the last ones).
fn calls(breaker: &CircuitBreaker, n: u32, failed: u32, now: Instant) {
    for call in 0..n {
        let permit = breaker.try_acquire(now).unwrap();
        if call >= n - failed {
            permit.failed(Verdict::Retry, now);
        } else {
            permit.succeeded(now);
        }
    }
}

#[test]
fn a_ratio_breaker_opens_at_the_ratio_once_the_window_saw_the_minimum_throughput() {
    let t0 = Instant::now();
    // 50% of at least 10 calls over 10 s.
    let breaker = CircuitBreaker::ratio(0.5, 10, Duration::from_secs(10), Duration::from_secs(5));
    // 8 failures of 8 calls: below the minimum throughput, closed.
    calls(&breaker, 8, 8, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Closed);
    // The 10th call: 9 of 10 failed.
    calls(&breaker, 1, 0, t0);
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Closed,
        "a success opens nothing"
    );
    calls(&breaker, 1, 1, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Open);
    // Half-open after the break; the trial's success closes it, the window
    // emptied.
    let later = t0 + Duration::from_secs(5);
    breaker.try_acquire(later).unwrap().succeeded(later);
    assert_eq!(breaker.state_at(later), BreakerState::Closed);
    calls(&breaker, 9, 9, later);
    assert_eq!(
        breaker.state_at(later),
        BreakerState::Closed,
        "9 calls since it closed"
    );
}

#[test]
fn a_ratio_breaker_forgets_calls_older_than_its_window_and_counts_a_stop_as_a_call() {
    let t0 = Instant::now();
    let breaker = CircuitBreaker::ratio(0.5, 4, Duration::from_secs(8), Duration::from_secs(5));
    calls(&breaker, 3, 3, t0);
    // 9 s on, those three have left the window: one failure of one call.
    let later = t0 + Duration::from_secs(9);
    calls(&breaker, 1, 1, later);
    assert_eq!(breaker.state_at(later), BreakerState::Closed);
    // Three answers that are not successes (a 400 is the caller's fault):
    // calls, not failures. 1 failure of 4.
    for _ in 0..3 {
        breaker
            .try_acquire(later)
            .unwrap()
            .failed(Verdict::Stop, later);
    }
    assert_eq!(breaker.state_at(later), BreakerState::Closed);
    // 2 of 5, then 3 of 6: open.
    calls(&breaker, 1, 1, later);
    assert_eq!(breaker.state_at(later), BreakerState::Closed);
    calls(&breaker, 1, 1, later);
    assert_eq!(breaker.state_at(later), BreakerState::Open);
}

#[test]
fn a_growing_break_grows_after_each_failed_trial_up_to_its_longest_and_starts_over_on_a_success() {
    let breaker =
        CircuitBreaker::new(1, Duration::from_secs(1)).growing(3, Duration::from_secs(10));
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    fail(&breaker, at(0), Verdict::Retry);
    // Breaks of 1 s, then 3, 9, and 10 (the longest), each trial failing.
    let mut now = 0;
    for expected in [1_000, 3_000, 9_000, 10_000, 10_000] {
        assert!(
            breaker.try_acquire(at(now + expected - 1)).is_err(),
            "{expected}"
        );
        now += expected;
        breaker
            .try_acquire(at(now))
            .unwrap()
            .failed(Verdict::Retry, at(now));
    }
    // A trial that succeeds closes it; the next opening breaks for 1 s.
    now += 10_000;
    breaker.try_acquire(at(now)).unwrap().succeeded(at(now));
    breaker
        .try_acquire(at(now))
        .unwrap()
        .failed(Verdict::Retry, at(now));
    assert!(breaker.try_acquire(at(now + 999)).is_err());
    assert!(breaker.try_acquire(at(now + 1_000)).is_ok());
}

// --- Several trials -------------------------------------------------------

#[test]
fn a_breaker_with_several_trials_closes_when_all_succeed_and_opens_at_one_failure() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let breaker = CircuitBreaker::new(1, Duration::from_secs(10)).trials(3);
    fail(&breaker, at(0), Verdict::Retry);
    // Three trials go, a fourth does not.
    let mut trials: Vec<_> = (0..3)
        .map(|_| breaker.try_acquire(at(10)).unwrap())
        .collect();
    assert!(trials.iter().all(backstop_runtime::limit::Permit::is_probe));
    assert!(breaker.try_acquire(at(10)).is_err());
    // Two succeed: still half-open. The third fails: open again.
    trials.pop().unwrap().succeeded(at(10));
    trials.pop().unwrap().succeeded(at(10));
    assert_eq!(breaker.state_at(at(10)), BreakerState::HalfOpen);
    trials.pop().unwrap().failed(Verdict::Retry, at(10));
    assert_eq!(breaker.state_at(at(11)), BreakerState::Open);
    // The next round: three successes close it.
    let trials: Vec<_> = (0..3)
        .map(|_| breaker.try_acquire(at(20)).unwrap())
        .collect();
    for trial in trials {
        assert_ne!(breaker.state_at(at(20)), BreakerState::Closed);
        trial.succeeded(at(20));
    }
    assert_eq!(breaker.state_at(at(20)), BreakerState::Closed);
    assert!(breaker.try_acquire(at(20)).is_ok());
}

#[test]
fn a_trial_of_an_earlier_round_counts_for_nothing() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Whatever the earlier round's trial reports, late: a success or a
    // failure.
    for hung_fails in [false, true] {
        let breaker = CircuitBreaker::new(1, Duration::from_secs(10)).trials(2);
        fail(&breaker, at(0), Verdict::Retry);
        // A trial that hangs past its time: a cooldown later, a new round.
        let hung = breaker.try_acquire(at(10)).unwrap();
        let fresh: Vec<_> = (0..2)
            .map(|_| breaker.try_acquire(at(20)).unwrap())
            .collect();
        if hung_fails {
            hung.failed(Verdict::Retry, at(21));
        } else {
            hung.succeeded(at(21));
        }
        assert_eq!(
            breaker.state_at(at(21)),
            BreakerState::HalfOpen,
            "not this round's (failed: {hung_fails})"
        );
        for trial in fresh {
            trial.succeeded(at(21));
        }
        assert_eq!(breaker.state_at(at(21)), BreakerState::Closed);
    }
}

#[test]
fn a_trial_dropped_starts_a_new_round_a_cooldown_after_its_own() {
    let t0 = Instant::now();
    let breaker = CircuitBreaker::new(1, Duration::from_secs(1)).trials(2);
    breaker.try_acquire(t0).unwrap().failed(Verdict::Retry, t0);
    let later = t0 + Duration::from_secs(1);
    let (a, b) = (
        breaker.try_acquire(later).unwrap(),
        breaker.try_acquire(later).unwrap(),
    );
    drop(a);
    assert!(breaker.try_acquire(later).is_err(), "the round's time runs");
    b.succeeded(later); // the dropped round's: counts for nothing
    assert_eq!(breaker.state_at(later), BreakerState::Open);
    // A new round a cooldown after the dropped one went: two trials again.
    let next = later + Duration::from_secs(1);
    let (c, d) = (
        breaker.try_acquire(next).unwrap(),
        breaker.try_acquire(next).unwrap(),
    );
    assert!(breaker.try_acquire(next).is_err());
    assert_eq!(breaker.state_at(next), BreakerState::HalfOpen);
    c.succeeded(next);
    d.succeeded(next);
    assert_eq!(breaker.state_at(next), BreakerState::Closed);
}

#[test]
fn a_success_of_a_call_let_through_before_the_breaker_opened_does_not_close_it() {
    let breaker = CircuitBreaker::new(2, COOLDOWN);
    let t0 = Instant::now();
    let slow = breaker.try_acquire(t0).unwrap(); // admitted while closed
    fail(&breaker, t0, Verdict::Retry);
    fail(&breaker, t0, Verdict::Retry); // opens it
    slow.succeeded(t0); // an old call answers late
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Open,
        "not a trial's word"
    );
    assert!(breaker.try_acquire(t0).is_err());
}

#[test]
fn a_success_from_before_a_reset_does_not_clear_the_failures_counted_since() {
    let breaker = CircuitBreaker::new(2, COOLDOWN);
    let t0 = Instant::now();
    let stale = breaker.try_acquire(t0).unwrap();
    breaker.reset();
    fail(&breaker, t0, Verdict::Retry); // one since the reset
    stale.succeeded(t0); // from before it: not news
    fail(&breaker, t0, Verdict::Retry);
    assert_eq!(breaker.state_at(t0), BreakerState::Open, "two in a row");
}

#[test]
fn a_ratio_breaker_counts_nothing_a_call_from_before_a_reset_reports() {
    let t0 = Instant::now();
    // Half of at least 2 calls.
    let fresh = || CircuitBreaker::ratio(0.5, 2, Duration::from_secs(10), Duration::from_secs(5));
    // A failure from before the reset: had it counted, one more would be
    // 2 of 2.
    let breaker = fresh();
    let stale = breaker.try_acquire(t0).unwrap();
    breaker.reset();
    stale.failed(Verdict::Retry, t0);
    calls(&breaker, 1, 1, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Closed, "one call since");
    calls(&breaker, 1, 1, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Open, "2 of 2");
    // A success from before it: had it counted, one failure would be 1 of 2.
    let breaker = fresh();
    let stale = breaker.try_acquire(t0).unwrap();
    breaker.reset();
    stale.succeeded(t0);
    calls(&breaker, 1, 1, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Closed, "one call since");
}

#[test]
fn a_reset_of_a_closed_ratio_breaker_forgets_the_calls_its_window_counted() {
    let t0 = Instant::now();
    // Half of at least 10 calls: 9 calls, 5 failed, closed (below the
    // minimum). Reset, one failure is 1 call of the 10 needed.
    let breaker = CircuitBreaker::ratio(0.5, 10, Duration::from_secs(30), Duration::from_secs(5));
    calls(&breaker, 9, 5, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Closed);
    breaker.reset();
    calls(&breaker, 1, 1, t0);
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Closed,
        "one call since the reset"
    );
    // A counting breaker reset while closed forgets its failures too.
    let breaker = CircuitBreaker::new(2, COOLDOWN);
    fail(&breaker, t0, Verdict::Retry);
    breaker.reset();
    fail(&breaker, t0, Verdict::Retry);
    assert_eq!(
        breaker.state_at(t0),
        BreakerState::Closed,
        "one failure since the reset"
    );
}

#[test]
fn a_ratio_breaker_says_its_ratio_and_a_counting_one_none() {
    let ratio = CircuitBreaker::ratio(0.25, 2, Duration::from_secs(10), Duration::from_secs(5));
    assert_eq!(ratio.failure_ratio(), Some(0.25));
    assert_eq!(ratio.failure_threshold(), u32::MAX);
    assert_eq!(CircuitBreaker::new(3, COOLDOWN).failure_ratio(), None);
}

/// Its `Debug` says how it is set and where it stands; a permit's, whether
/// it is a trial.
#[test]
fn its_debug_says_its_settings_and_state() {
    let breaker = CircuitBreaker::new(1, COOLDOWN).named("db");
    let t0 = Instant::now();
    let permit = breaker.try_acquire(t0).unwrap();
    assert_eq!(format!("{permit:?}"), "Permit { probe: false, .. }");
    permit.failed(Verdict::Retry, t0);
    let text = format!("{breaker:?}");
    for part in [
        "CircuitBreaker {",
        "name: \"db\"",
        "failure_threshold: 1",
        "failure_ratio: None",
        "cooldown: 10s",
        "state: Open",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
}

#[test]
fn trials_let_through_after_earlier_ones_succeeded_must_all_succeed_too() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let breaker = CircuitBreaker::new(1, Duration::from_secs(10)).trials(3);
    fail(&breaker, at(0), Verdict::Retry);
    // One at a time: each succeeds before the next is let through.
    for n in 1..=3 {
        assert_eq!(breaker.state_at(at(10)), BreakerState::HalfOpen, "{n}");
        let trial = breaker.try_acquire(at(10)).expect("a trial of three");
        trial.succeeded(at(10));
    }
    assert_eq!(breaker.state_at(at(10)), BreakerState::Closed);
    // Again, one in flight while the next goes.
    fail(&breaker, at(10), Verdict::Retry);
    let first = breaker.try_acquire(at(20)).unwrap();
    let second = breaker.try_acquire(at(20)).unwrap();
    first.succeeded(at(20));
    let third = breaker.try_acquire(at(20)).expect("the third trial");
    assert!(
        breaker.try_acquire(at(20)).is_err(),
        "three were let through"
    );
    second.succeeded(at(20));
    assert_eq!(
        breaker.state_at(at(20)),
        BreakerState::HalfOpen,
        "one still out"
    );
    third.succeeded(at(20));
    assert_eq!(breaker.state_at(at(20)), BreakerState::Closed);
}
