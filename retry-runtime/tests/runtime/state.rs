//! The attempt state machine, rule by rule, in virtual time.

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

use backstop_runtime::backoff::Rng;
use backstop_runtime::limit::WindowBudget;
use backstop_runtime::macro_support::{AttemptState, Attempted, Decision, sleep};
use backstop_runtime::testing::VirtualTime;
use backstop_runtime::time::SystemClock;
use backstop_runtime::{GiveUp, Jitter, Policy, Verdict, call};

const MS: Duration = Duration::from_millis(1);

/// What one retry loop did.
#[derive(Debug)]
struct Run {
    attempts: u32,
    /// When each attempt started, relative to the call's start.
    starts: Vec<Duration>,
    end: Decision,
}

/// Drives a loop whose every attempt is classified `verdict(attempt)`,
/// sleeping in virtual time, and reports what happened.
fn drive(
    vt: &VirtualTime,
    policy: &Policy,
    budget: Option<&WindowBudget>,
    mut verdict: impl FnMut(u32) -> Option<Verdict>,
) -> Run {
    let t0 = vt.now();
    let mut state = AttemptState::new(policy, SystemClock).budget(budget);
    let mut starts = Vec::new();
    loop {
        starts.push(vt.now() - t0);
        let v = verdict(state.attempt());
        match state.decide(v.map_or(Attempted::Succeeded, Attempted::Failed)) {
            Decision::Retry(d) => sleep(d),
            end => {
                return Run {
                    attempts: starts.len() as u32,
                    starts,
                    end,
                };
            }
        }
    }
}

fn always(v: Verdict) -> impl FnMut(u32) -> Option<Verdict> {
    move |_| Some(v)
}

fn quiet() -> Policy {
    Policy::new().jitter(Jitter::None).no_budget()
}

/// What `seeds` callers told `Retry-After: asked` after a first failed
/// attempt sleep, one seed each, each on a fresh virtual clock; a caller
/// that would not retry fails the test.
fn retry_after_delays(policy: &Policy, asked: Duration, seeds: u64) -> Vec<Duration> {
    (0..seeds)
        .map(|seed| {
            let _vt = VirtualTime::start();
            let mut state = AttemptState::new(policy, SystemClock).rng(Rng::seeded(seed));
            match state.decide(Attempted::Failed(Verdict::RetryAfter(asked))) {
                Decision::Retry(d) => d,
                other => panic!("seed {seed}: `Retry-After` {asked:?} not retried: {other:?}"),
            }
        })
        .collect()
}

#[test]
fn success_returns_at_once() {
    let vt = VirtualTime::start();
    let run = drive(&vt, &quiet(), None, |_| None);
    assert_eq!((run.attempts, run.end), (1, Decision::Return));
    assert!(vt.sleeps().is_empty());
}

#[test]
fn stop_error_is_attempted_exactly_once() {
    let vt = VirtualTime::start();
    let run = drive(&vt, &quiet().attempts(10), None, always(Verdict::Stop));
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Stopped))
    );

    let mut attempts = 0;
    let out: Result<(), Error> = call(&Policy::new().attempts(10), || {
        attempts += 1;
        Err(ErrorKind::PermissionDenied.into())
    });
    assert_eq!(out.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(attempts, 1);
    assert!(vt.sleeps().is_empty());
}

#[test]
fn ambiguous_failure_is_retried_only_when_idempotent() {
    let vt = VirtualTime::start();
    let run = drive(
        &vt,
        &quiet().attempts(4),
        None,
        always(Verdict::RetryIfIdempotent),
    );
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::NotIdempotent))
    );

    let run = drive(
        &vt,
        &quiet().attempts(4).idempotent(true),
        None,
        always(Verdict::RetryIfIdempotent),
    );
    assert_eq!(
        (run.attempts, run.end),
        (4, Decision::GiveUp(GiveUp::Attempts))
    );

    // The io::Error classification reaches the same rule through `call`.
    let mut attempts = 0;
    let _ = call(&quiet().attempts(4), || {
        attempts += 1;
        Err::<(), _>(Error::from(ErrorKind::TimedOut))
    });
    assert_eq!(attempts, 1);
}

#[test]
fn gives_up_when_attempts_are_used_up() {
    let vt = VirtualTime::start();
    let run = drive(&vt, &quiet().attempts(5), None, always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (5, Decision::GiveUp(GiveUp::Attempts))
    );
    assert_eq!(vt.sleeps(), [100, 200, 400, 800].map(|ms| ms * MS));
}

#[test]
fn one_attempt_policy_never_sleeps() {
    let vt = VirtualTime::start();
    let run = drive(&vt, &quiet().attempts(0), None, always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Attempts))
    );
    assert!(vt.sleeps().is_empty());
}

#[test]
fn huge_attempt_count_is_bounded_by_the_deadline() {
    let vt = VirtualTime::start();
    let policy = quiet()
        .attempts(u32::MAX)
        .cap(Duration::from_secs(1))
        .deadline(Some(Duration::from_secs(60)));
    let run = drive(&vt, &policy, None, always(Verdict::Retry));
    assert_eq!(run.end, Decision::GiveUp(GiveUp::Deadline));
    assert!(run.attempts < 70, "{} attempts", run.attempts);
    assert!(vt.elapsed() < Duration::from_secs(60));
}

#[test]
fn gives_up_when_delay_would_pass_deadline() {
    let vt = VirtualTime::start();
    let policy = quiet()
        .attempts(10)
        .base(400 * MS)
        .deadline(Some(Duration::from_secs(1)));
    let run = drive(&vt, &policy, None, always(Verdict::Retry));
    // t=0 fails, sleeps 400ms; t=400ms fails, 800ms more would end at 1.2s.
    assert_eq!(
        (run.attempts, run.end),
        (2, Decision::GiveUp(GiveUp::Deadline))
    );
    assert_eq!(vt.sleeps(), [400 * MS]);
}

#[test]
fn delay_reaching_the_deadline_exactly_gives_up() {
    let vt = VirtualTime::start();
    let policy = quiet()
        .attempts(10)
        .backoff(backstop_runtime::Backoff::Fixed)
        .base(500 * MS)
        .deadline(Some(Duration::from_secs(1)));
    let run = drive(&vt, &policy, None, always(Verdict::Retry));
    // Attempt 2 starts at 500ms; a second 500ms sleep would wake at the
    // deadline itself, with no time left to succeed.
    assert_eq!(
        (run.attempts, run.end),
        (2, Decision::GiveUp(GiveUp::Deadline))
    );
}

#[test]
fn no_attempt_ever_starts_after_the_deadline() {
    let deadline = Duration::from_secs(3);
    let policy = Policy::new()
        .attempts(1000)
        .base(50 * MS)
        .cap(Duration::from_secs(2))
        .deadline(Some(deadline))
        .no_budget();
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        let policy = policy.jitter(jitter);
        for _ in 0..200 {
            let vt = VirtualTime::start();
            let run = drive(&vt, &policy, None, |_| {
                vt.advance(7 * MS); // every attempt takes a little time
                Some(Verdict::Retry)
            });
            assert_eq!(run.end, Decision::GiveUp(GiveUp::Deadline), "{jitter:?}");
            assert!(
                run.starts.iter().all(|s| *s < deadline),
                "{jitter:?}: {run:?}"
            );
            // And no sleep ran into it.
            assert!(vt.elapsed().saturating_sub(7 * MS) < deadline, "{jitter:?}");
        }
    }
}

#[test]
fn slow_first_attempt_eats_the_deadline() {
    let vt = VirtualTime::start();
    let policy = quiet().attempts(5).deadline(Some(Duration::from_secs(1)));
    let run = drive(&vt, &policy, None, |_| {
        vt.advance(1500 * MS);
        Some(Verdict::Retry)
    });
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Deadline))
    );
    assert!(vt.sleeps().is_empty());
}

#[test]
fn no_deadline_means_only_attempts_bound_the_call() {
    let vt = VirtualTime::start();
    let policy = quiet()
        .attempts(30)
        .cap(Duration::from_secs(3600))
        .deadline(None);
    let run = drive(&vt, &policy, None, always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (30, Decision::GiveUp(GiveUp::Attempts))
    );
    assert!(vt.elapsed() > Duration::from_secs(3600));
}

#[test]
fn retry_after_is_honoured_and_jittered_upward_only() {
    let asked = Duration::from_secs(2);
    let policy = quiet().attempts(2).cap(100 * MS); // cap applies to backoff, not to the server
    let slept = retry_after_delays(&policy, asked, 2000);
    let (min, max) = (slept.iter().min().unwrap(), slept.iter().max().unwrap());
    assert!(*min >= asked, "never earlier than asked: {min:?}");
    assert!(*max <= asked * 6 / 5, "at most 20% later: {max:?}");
    // Spread over the range, not a constant.
    assert!(
        max.saturating_sub(*min) > Duration::from_millis(300),
        "{min:?}..{max:?}"
    );
}

/// The order of the steps after an attempt, where two apply at once: an
/// ambiguous failure of a call not declared idempotent (1) and a call
/// nested in the attempt that gave up after retrying (2) are told before
/// the attempts used up (3), which is told before a `Retry-After` too
/// long (4) or the deadline (5).
#[test]
fn where_two_steps_apply_the_earlier_one_is_told() {
    let vt = VirtualTime::start();
    let one = quiet().attempts(1);
    let run = drive(&vt, &one, None, always(Verdict::RetryIfIdempotent));
    assert_eq!(run.end, Decision::GiveUp(GiveUp::NotIdempotent));
    let mut state = AttemptState::new(&one, SystemClock);
    state.run_attempt(|| {
        let nested: Result<(), Error> = call(&quiet(), || Err(ErrorKind::ConnectionRefused.into()));
        assert!(nested.is_err());
    });
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::GiveUp(GiveUp::RetriedBelow)
    );
    let run = drive(
        &vt,
        &one.deadline(Some(Duration::from_secs(1))),
        None,
        always(Verdict::RetryAfter(Duration::from_secs(3600))),
    );
    assert_eq!(run.end, Decision::GiveUp(GiveUp::Attempts));
}

#[test]
fn retry_after_above_the_max_gives_up_at_once() {
    let vt = VirtualTime::start();
    let policy = quiet().attempts(5).retry_after_max(Duration::from_secs(60));
    let run = drive(
        &vt,
        &policy,
        None,
        always(Verdict::RetryAfter(Duration::from_secs(61))),
    );
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::RetryAfterTooLong))
    );
    // Exactly the max is still honoured, if the deadline allows it.
    let policy = policy.deadline(Some(Duration::from_secs(120)));
    let run = drive(&vt, &policy, None, |n| {
        (n == 1).then_some(Verdict::RetryAfter(Duration::from_secs(60)))
    });
    assert_eq!((run.attempts, run.end), (2, Decision::Return));
}

#[test]
fn retry_after_past_the_deadline_gives_up() {
    let vt = VirtualTime::start();
    let policy = quiet().attempts(5).deadline(Some(Duration::from_secs(10)));
    let run = drive(
        &vt,
        &policy,
        None,
        always(Verdict::RetryAfter(Duration::from_secs(20))),
    );
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Deadline))
    );
}

#[test]
fn a_retry_after_that_fits_is_never_refused_for_its_jitter() {
    // 9 s asked, 10 s left: the upward spread (up to 10.8 s) must shrink to
    // fit, never below the server's 9 s, rather than give up.
    let asked = Duration::from_secs(9);
    let policy = quiet().attempts(2).deadline(Some(Duration::from_secs(10)));
    for (seed, d) in retry_after_delays(&policy, asked, 500)
        .into_iter()
        .enumerate()
    {
        assert!(
            d >= asked && d < Duration::from_secs(10),
            "seed {seed}: {d:?}"
        );
    }
}

#[test]
fn a_retry_after_of_zero_still_spreads_the_callers() {
    // `Retry-After: 0`, or a date already past (a server's clock behind
    // the client's): callers told the same come back spread over a base
    // delay (100 ms), not together at once; a value of several base
    // delays is spread by a fifth of itself, as before.
    let policy = quiet().attempts(2);
    let base = Duration::from_millis(100);
    for (asked, width) in [
        (Duration::ZERO, base),
        (Duration::from_millis(30), base),
        (Duration::from_secs(2), Duration::from_millis(400)),
    ] {
        let delays = retry_after_delays(&policy, asked, 500);
        assert!(
            delays.iter().all(|d| *d >= asked && *d <= asked + width),
            "{asked:?}: {delays:?}"
        );
        let late_half = delays.iter().filter(|d| **d > asked + width / 2).count();
        assert!(
            (150..=350).contains(&late_half),
            "{asked:?}: {late_half} of 500"
        );
    }
}

#[test]
fn a_retry_after_spread_that_must_shrink_still_spreads_the_callers() {
    // 9.5 s asked, 10 s left: callers told the same come back spread over
    // the half second that is left, not together at its last instant.
    let asked = Duration::from_millis(9_500);
    let policy = quiet().attempts(2).deadline(Some(Duration::from_secs(10)));
    let delays = retry_after_delays(&policy, asked, 500);
    let latest = *delays.iter().max().unwrap();
    let at_the_latest = delays.iter().filter(|d| **d == latest).count();
    assert!(at_the_latest <= 5, "{at_the_latest} of 500 at {latest:?}");
    let below_the_middle = delays
        .iter()
        .filter(|d| **d < asked + Duration::from_millis(250))
        .count();
    assert!(
        (150..=350).contains(&below_the_middle),
        "{below_the_middle} of 500 in the first half of what is left"
    );
    assert!(
        delays
            .iter()
            .all(|d| *d >= asked && *d < Duration::from_secs(10))
    );
}

#[test]
fn a_retry_after_that_does_not_fit_gives_up_with_the_deadline() {
    let _vt = VirtualTime::start();
    let policy = quiet().attempts(2).deadline(Some(Duration::from_secs(10)));
    let mut state = AttemptState::new(&policy, SystemClock);
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::RetryAfter(Duration::from_secs(
            10
        )))),
        Decision::GiveUp(GiveUp::Deadline)
    );
}

#[test]
fn gives_up_when_the_budget_is_empty() {
    let vt = VirtualTime::start();
    let budget = WindowBudget::new(0.5, 0, Duration::from_secs(10));
    let policy = quiet().attempts(5);
    // The first call alone has deposited half a retry: not enough.
    let run = drive(&vt, &policy, Some(&budget), always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Budget))
    );
    // A second call makes a whole retry; it spends it, then runs out again.
    let run = drive(&vt, &policy, Some(&budget), always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (2, Decision::GiveUp(GiveUp::Budget))
    );
    let stats = budget.stats();
    assert_eq!((stats.calls, stats.retries, stats.refusals), (2, 1, 2));
}

#[test]
fn budget_is_not_spent_on_retries_refused_for_other_reasons() {
    let vt = VirtualTime::start();
    let budget = WindowBudget::new(1.0, 0, Duration::from_secs(10));
    let policy = quiet().attempts(2);
    let _ = drive(&vt, &policy, Some(&budget), always(Verdict::Stop));
    let _ = drive(
        &vt,
        &policy,
        Some(&budget),
        always(Verdict::RetryIfIdempotent),
    );
    let _ = drive(
        &vt,
        &policy,
        Some(&budget),
        always(Verdict::RetryAfter(Duration::from_secs(3600))),
    );
    let _ = drive(
        &vt,
        &policy.deadline(Some(50 * MS)),
        Some(&budget),
        always(Verdict::Retry),
    );
    let stats = budget.stats();
    assert_eq!((stats.calls, stats.retries, stats.refusals), (4, 0, 0));
}

#[test]
fn first_attempt_runs_even_with_a_zero_deadline() {
    let vt = VirtualTime::start();
    let run = drive(
        &vt,
        &quiet().deadline(Some(Duration::ZERO)),
        None,
        always(Verdict::Retry),
    );
    assert_eq!(
        (run.attempts, run.end),
        (1, Decision::GiveUp(GiveUp::Deadline))
    );
}

#[test]
fn an_ok_value_is_retried_only_when_asked() {
    use backstop_runtime::classify::{ByClassify, NeverRetry, When};
    let _vt = VirtualTime::start();
    let policy = quiet();
    let mut state = AttemptState::new(&policy, SystemClock);
    let ok: Result<u16, Error> = Ok(503);
    assert_eq!(
        state.decide_result(&ok, &ByClassify, &NeverRetry),
        Decision::Return
    );
    let mut state = AttemptState::new(&policy, SystemClock);
    let when_ok = When(|s: &u16| *s == 503);
    assert!(matches!(
        state.decide_result(&ok, &ByClassify, &when_ok),
        Decision::Retry(_)
    ));
}

#[test]
fn huge_deadline_does_not_overflow() {
    let vt = VirtualTime::start();
    let policy = quiet().attempts(3).deadline(Some(Duration::MAX));
    let run = drive(&vt, &policy, None, always(Verdict::Retry));
    assert_eq!(
        (run.attempts, run.end),
        (3, Decision::GiveUp(GiveUp::Attempts))
    );
    let state = AttemptState::new(&policy, SystemClock);
    assert!(state.deadline().is_none_or(|d| d > Instant::now()));
}

#[test]
fn panicking_attempt_leaves_nothing_broken() {
    let vt = VirtualTime::start();
    let budget: &'static WindowBudget =
        Box::leak(Box::new(WindowBudget::new(0.5, 1, Duration::from_secs(10))));
    let policy = quiet().window_budget(budget);
    let panicked = std::panic::catch_unwind(|| {
        call(&policy, || -> Result<(), Error> {
            panic!("attempt blew up")
        })
    });
    assert!(panicked.is_err());
    // The budget saw the call and is still usable; virtual time is intact.
    assert_eq!(budget.stats().calls, 1);
    let mut attempts = 0;
    let out = call(&policy, || {
        attempts += 1;
        if attempts < 2 {
            Err(Error::from(ErrorKind::ConnectionRefused))
        } else {
            Ok(7)
        }
    });
    assert_eq!(out.unwrap(), 7);
    assert_eq!(vt.sleeps(), [100 * MS]);
}

#[test]
fn random_policies_keep_every_invariant() {
    use backstop_runtime::Backoff;
    let mut rng = Rng::seeded(0xB0B);
    let pick = |rng: &mut Rng, n: u64| rng.next_u64() % n;
    let (mut by_attempts, mut by_deadline) = (0, 0);
    for case in 0..3000 {
        let base = Duration::from_millis(1 + pick(&mut rng, 500));
        let cap = base + Duration::from_millis(pick(&mut rng, 5000));
        let deadline = Duration::from_millis(1 + pick(&mut rng, 20_000));
        let attempts = 1 + pick(&mut rng, 12) as u32;
        let backoff =
            [Backoff::Exponential, Backoff::Linear, Backoff::Fixed][pick(&mut rng, 3) as usize];
        let jitter = [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ][pick(&mut rng, 4) as usize];
        let policy = Policy::new()
            .attempts(attempts)
            .base(base)
            .cap(cap)
            .factor(1.0 + pick(&mut rng, 40) as f64 / 10.0)
            .backoff(backoff)
            .jitter(jitter)
            .deadline(Some(deadline))
            .no_budget();
        let work = Duration::from_millis(pick(&mut rng, 300));
        let retry_after =
            (pick(&mut rng, 4) == 0).then(|| Duration::from_millis(pick(&mut rng, 3000)));

        let vt = VirtualTime::start();
        let run = drive(&vt, &policy, None, |_| {
            vt.advance(work);
            Some(retry_after.map_or(Verdict::Retry, Verdict::RetryAfter))
        });
        let ctx =
            format!("case {case}: {policy:?} work={work:?} retry_after={retry_after:?} {run:?}");
        assert!(run.attempts >= 1 && run.attempts <= attempts, "{ctx}");
        assert!(run.starts.iter().skip(1).all(|s| *s < deadline), "{ctx}");
        for d in vt.sleeps() {
            match retry_after {
                // (Spread over a fifth of the value, or a base delay.)
                Some(asked) => assert!(
                    d >= asked && d <= asked + (asked / 5).max(base) + Duration::from_nanos(1),
                    "{ctx}"
                ),
                None => assert!(d <= cap, "{ctx}"),
            }
        }
        let expected = matches!(
            run.end,
            Decision::GiveUp(GiveUp::Attempts | GiveUp::Deadline | GiveUp::RetryAfterTooLong)
        );
        assert!(expected, "{ctx}");
        if run.end == Decision::GiveUp(GiveUp::Attempts) {
            assert_eq!(run.attempts, attempts, "{ctx}");
            by_attempts += 1;
        } else {
            by_deadline += 1;
        }
    }
    // Both limits were exercised, not one of them 3000 times.
    assert!(
        by_attempts > 300 && by_deadline > 300,
        "{by_attempts} / {by_deadline}"
    );
}

/// Real time, on purpose (20 × 10 ms): the thread oversleeps by the timer
/// slack, which virtual time cannot show.
#[test]
fn the_sync_runner_never_starts_an_attempt_after_waking_late() {
    let policy = quiet()
        .attempts(2)
        .base(10 * MS)
        .deadline(Some(Duration::from_micros(10_030)));
    for _ in 0..20 {
        let mut starts = Vec::new();
        let _: Result<(), Error> = call(&policy, || {
            starts.push(Instant::now());
            Err(ErrorKind::ConnectionRefused.into())
        });
        if let [first, second] = starts[..] {
            assert!(
                second - first < Duration::from_micros(10_030),
                "{:?}",
                second - first
            );
        }
    }
}

#[test]
fn virtual_time_advanced_by_duration_max_saturates() {
    let vt = VirtualTime::start();
    let t0 = vt.now();
    vt.advance(Duration::from_secs(1));
    vt.advance(Duration::MAX);
    assert!(
        vt.now() > t0 + Duration::from_secs(1),
        "the clock went back to its start"
    );
    let before = vt.now();
    vt.advance(Duration::from_secs(1));
    assert!(vt.now() >= before, "never backwards");
}

/// A clock whose coarse reading trails its precise one by 900 ms (far
/// more than a kernel tick): the precise one is virtual time.
#[derive(Clone, Copy)]
struct Trailing;

impl backstop_runtime::time::Clock for Trailing {
    fn now(&self) -> Instant {
        SystemClock.now()
    }

    fn start_now(&self) -> Instant {
        let now = SystemClock.now();
        now.checked_sub(Duration::from_millis(900)).unwrap_or(now)
    }
}

/// Near the deadline, the decision reads the precise clock: a coarse
/// reading that trails would let the next attempt start after it.
#[test]
fn near_the_deadline_a_trailing_coarse_clock_does_not_decide() {
    use backstop_runtime::time::Clock as _;
    let vt = VirtualTime::start();
    let policy = Policy::new()
        .jitter(Jitter::None)
        .deadline(Some(Duration::from_secs(2)))
        .attempts(10)
        .no_budget();
    // (The deadline counts from the coarse start: 2 s from 900 ms ago.)
    let mut state = AttemptState::new(&policy, Trailing);
    let deadline = state.deadline().expect("a deadline");
    assert_eq!(deadline, SystemClock.now() + Duration::from_millis(1100));
    vt.advance(Duration::from_millis(950));
    // 950 ms + 100 ms would end at 1050 ms: still before it.
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::Retry(100 * MS)
    );
    vt.advance(Duration::from_millis(100));
    assert_eq!(state.may_resume(), Ok(()));
    // 1050 ms + 200 ms is past it, though the coarse reading (150 ms)
    // says there is time.
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::GiveUp(GiveUp::Deadline)
    );
    // Woken at the deadline: the coarse reading says 200 ms are left.
    let mut state = AttemptState::new(&policy, Trailing);
    assert!(matches!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::Retry(_)
    ));
    vt.advance(Duration::from_millis(1100));
    assert!(Trailing.start_now() < state.deadline().unwrap());
    assert_eq!(state.may_resume(), Err(GiveUp::Deadline));
}

/// An async attempt the state machine runs keeps a nested call's retrying
/// through its later polls (the nested call gave up in one poll, the
/// attempt went on in the next): the call gives up rather than retry on
/// top. An attempt whose nested call did not retry is retried.
#[tokio::test(start_paused = true)]
async fn an_async_attempt_keeps_a_nested_calls_retrying_through_its_later_polls() {
    let policy = Policy::new().jitter(Jitter::None).no_budget();
    let nested = Policy::new().attempts(2).jitter(Jitter::None).no_budget();

    let mut state = AttemptState::new(&policy, SystemClock);
    let out: Result<(), Error> = state
        .run_attempt_async(async {
            let out = backstop_runtime::call_async(&nested, || async {
                Err::<(), Error>(ErrorKind::ConnectionRefused.into())
            })
            .await;
            tokio::task::yield_now().await;
            out
        })
        .await;
    assert!(out.is_err());
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::GiveUp(GiveUp::RetriedBelow)
    );

    let mut state = AttemptState::new(&policy, SystemClock);
    let out: Result<(), Error> = state
        .run_attempt_async(async {
            tokio::task::yield_now().await;
            Err(ErrorKind::ConnectionRefused.into())
        })
        .await;
    assert!(out.is_err());
    assert_eq!(
        state.decide(Attempted::Failed(Verdict::Retry)),
        Decision::Retry(Duration::from_millis(100))
    );
}
