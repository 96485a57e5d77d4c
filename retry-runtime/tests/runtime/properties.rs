//! Properties that hold for every input, checked with proptest: the
//! backoff schedule, the attempt state machine under arbitrary outcomes,
//! delays and clock jumps, and the budget under arbitrary traffic.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use backstop_runtime::backoff::Rng;
use backstop_runtime::limit::{TokenBudget, WindowBudget};
use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
use backstop_runtime::testing::VirtualTime;
use backstop_runtime::time::SystemClock;
use backstop_runtime::{Backoff, GiveUp, Jitter, Policy, Verdict};
use proptest::prelude::*;

fn any_backoff() -> impl Strategy<Value = Backoff> {
    prop_oneof![
        Just(Backoff::Exponential),
        Just(Backoff::Linear),
        Just(Backoff::Fixed)
    ]
}

fn any_jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated)
    ]
}

/// Durations across the whole range: zero, nanoseconds, hours, and
/// `Duration::MAX`.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..1_000_000).prop_map(Duration::from_nanos),
        (0u64..100_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Factors a user can write (`factor` must be above 1): integral and
/// fractional, small and absurd.
fn any_factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(2.0),
        (2u32..20).prop_map(f64::from),
        1.0001f64..10.0,
        Just(1e300),
        Just(f64::from(u32::MAX)),
        Just(f64::from(u32::MAX) + 1.0),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_delay_never_exceeds_the_cap_nor_panics(
        backoff in any_backoff(),
        jitter in any_jitter(),
        base in any_duration(),
        cap in any_duration(),
        factor in any_factor(),
        n in any::<u32>(),
        prev in any_duration(),
        seed in any::<u64>(),
    ) {
        let policy = Policy::new().backoff(backoff).jitter(jitter).base(base).cap(cap).factor(factor);
        let delay = policy.delay(n, prev, &mut Rng::seeded(seed));
        prop_assert!(delay <= cap, "{delay:?} > cap {cap:?}");
        prop_assert!(policy.ceiling(n) <= cap);
    }

    #[test]
    fn ceilings_never_decrease_with_the_retry_number(
        backoff in any_backoff(),
        base in any_duration(),
        cap in any_duration(),
        factor in any_factor(),
        n in any::<u32>(),
    ) {
        let policy = Policy::new().backoff(backoff).base(base).cap(cap).factor(factor);
        let next = n.saturating_add(1);
        prop_assert!(policy.ceiling(n) <= policy.ceiling(next), "{n}: {:?} > {:?}", policy.ceiling(n), policy.ceiling(next));
    }

    #[test]
    fn jitter_stays_within_its_formula(
        base in (1u64..10_000).prop_map(Duration::from_millis),
        n in 0u32..40,
        prev in (0u64..100_000).prop_map(Duration::from_millis),
        seed in any::<u64>(),
    ) {
        let cap = Duration::from_secs(3600);
        let ceil = Policy::new().base(base).cap(cap).ceiling(n);
        let mut rng = Rng::seeded(seed);
        let full = Policy::new().base(base).cap(cap).jitter(Jitter::Full).delay(n, prev, &mut rng);
        prop_assert!(full <= ceil);
        let equal = Policy::new().base(base).cap(cap).jitter(Jitter::Equal).delay(n, prev, &mut rng);
        prop_assert!(equal >= ceil / 2 && equal <= ceil);
        let decorrelated = Policy::new().base(base).cap(cap).jitter(Jitter::Decorrelated).delay(n, prev, &mut rng);
        prop_assert!(decorrelated >= base.min(cap) && decorrelated <= (prev * 3).max(base).min(cap));
    }
}

/// One attempt's fate in a generated run: its verdict, and how late the
/// thread wakes from the sleep after it.
#[derive(Clone, Debug)]
struct Step {
    verdict: Option<Verdict>,
    oversleep: Duration,
    /// How long the attempt itself takes.
    runs_for: Duration,
}

fn any_verdict() -> impl Strategy<Value = Option<Verdict>> {
    prop_oneof![
        3 => Just(Some(Verdict::Retry)),
        1 => Just(None),
        1 => Just(Some(Verdict::Stop)),
        1 => Just(Some(Verdict::StopOverloaded)),
        1 => Just(Some(Verdict::RetryIfIdempotent)),
        1 => (0u64..20_000).prop_map(|ms| Some(Verdict::RetryAfter(Duration::from_millis(ms)))),
    ]
}

fn any_step() -> impl Strategy<Value = Step> {
    let jump = prop_oneof![
        4 => Just(Duration::ZERO),
        2 => (0u64..5_000).prop_map(Duration::from_millis),
        1 => Just(Duration::from_secs(3600)),
    ];
    (any_verdict(), jump.clone(), jump).prop_map(|(verdict, oversleep, runs_for)| Step {
        verdict,
        oversleep,
        runs_for,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// Drives the state machine as the sync loop does, in virtual time,
    /// through arbitrary outcomes, attempt durations and oversleeps, with a
    /// budget of a few retries.
    #[test]
    fn the_state_machine_keeps_every_rule(
        steps in prop::collection::vec(any_step(), 1..12),
        attempts in 1u32..8,
        deadline_ms in prop::option::of(0u64..30_000),
        idempotent in any::<bool>(),
        jitter in any_jitter(),
        seed in any::<u64>(),
        retry_after_max_ms in 0u64..30_000,
        reserve in 0u32..4,
    ) {
        let vt = VirtualTime::start();
        let policy = Policy::new()
            .attempts(attempts)
            .deadline(deadline_ms.map(Duration::from_millis))
            .idempotent(idempotent)
            .jitter(jitter)
            .retry_after_max(Duration::from_millis(retry_after_max_ms));
        // A budget with a reserve of `reserve` retries a second and nothing
        // from calls: every retry decided must be one it granted.
        let budget = WindowBudget::new(0.000_001, reserve, Duration::from_secs(1));
        let start = vt.now();
        let deadline = deadline_ms.map(|ms| start + Duration::from_millis(ms));
        let mut state = AttemptState::new(&policy, SystemClock)
            .budget(Some(&budget))
            .rng(Rng::seeded(seed));
        let mut made = 0u32;
        let mut granted_at: Vec<Instant> = Vec::new();
        for step in &steps {
            made += 1;
            if made > 1 {
                // Every attempt but the first starts before the deadline.
                if let Some(deadline) = deadline {
                    prop_assert!(vt.now() < deadline, "attempt {made} at {:?}", vt.now() - start);
                }
            }
            prop_assert!(made <= attempts, "attempt {made} of {attempts}");
            vt.advance(step.runs_for);
            match state.decide(step.verdict.map_or(Attempted::Succeeded, Attempted::Failed)) {
                Decision::Return => {
                    prop_assert!(step.verdict.is_none());
                    break;
                }
                Decision::GiveUp(reason) => {
                    match step.verdict {
                        Some(Verdict::Stop | Verdict::StopOverloaded) => {
                            prop_assert_eq!(reason, GiveUp::Stopped);
                        }
                        Some(Verdict::RetryIfIdempotent) if !idempotent => {
                            prop_assert_eq!(reason, GiveUp::NotIdempotent);
                        }
                        _ => {}
                    }
                    break;
                }
                Decision::Retry(delay) => {
                    granted_at.push(vt.now());
                    prop_assert!(step.verdict.is_some(), "a success was retried");
                    prop_assert_ne!(step.verdict, Some(Verdict::Stop), "a Stop was retried");
                    prop_assert_ne!(step.verdict, Some(Verdict::StopOverloaded), "a pushback was retried");
                    if step.verdict == Some(Verdict::RetryIfIdempotent) {
                        prop_assert!(idempotent, "an ambiguous failure of a non-idempotent call was retried");
                    }
                    if let Some(Verdict::RetryAfter(asked)) = step.verdict {
                        prop_assert!(delay >= asked, "slept {delay:?}, the server asked {asked:?}");
                        prop_assert!(asked <= Duration::from_millis(retry_after_max_ms));
                    }
                    if let Some(deadline) = deadline {
                        prop_assert!(vt.now() + delay < deadline, "the sleep runs into the deadline");
                    }
                    vt.advance(delay + step.oversleep);
                    if state.may_resume().is_err() {
                        // Woke at or past the deadline: the loop returns.
                        prop_assert!(deadline.is_some_and(|d| vt.now() >= d));
                        break;
                    }
                }
            }
        }
        // Every retry was a grant of the budget, and in no second did it
        // grant more than its reserve (the one call pays for almost
        // nothing).
        prop_assert_eq!(budget.stats().retries, granted_at.len() as u64);
        for &at in &granted_at {
            let in_window = granted_at
                .iter()
                .filter(|&&t| t <= at && at.duration_since(t) < Duration::from_secs(1))
                .count();
            prop_assert!(in_window <= reserve as usize, "{in_window} retries in a second, reserve {reserve}");
        }
    }
}

/// One event of generated budget traffic.
#[derive(Clone, Debug)]
enum Event {
    Call,
    Retry,
    /// The clock moves on by this many milliseconds.
    Wait(u64),
}

fn any_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Call),
        4 => Just(Event::Retry),
        2 => (0u64..3_000).prop_map(Event::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// At every grant, the retries granted in the `ttl` before it (that one
    /// included) are at most `ratio` × the calls of that `ttl` plus the
    /// reserve.
    #[test]
    fn the_budget_never_grants_more_than_it_allows(
        events in prop::collection::vec(any_event(), 1..400),
        ratio_pct in 1u32..=100,
        min_per_sec in 0u32..5,
        ttl_s in 1u64..20,
    ) {
        let ratio = f64::from(ratio_pct) / 100.0;
        let ttl = Duration::from_secs(ttl_s);
        let budget = WindowBudget::new(ratio, min_per_sec, ttl);
        let reserve = f64::from(min_per_sec) * ttl.as_secs_f64();
        let start = Instant::now();
        let mut now = start;
        let mut calls: VecDeque<Instant> = VecDeque::new();
        let mut grants: VecDeque<Instant> = VecDeque::new();
        for event in events {
            match event {
                Event::Call => {
                    budget.record_call(now);
                    calls.push_back(now);
                }
                Event::Retry => {
                    if budget.try_withdraw(now) {
                        grants.push_back(now);
                        let since = now.checked_sub(ttl).unwrap_or(start);
                        let in_window = |t: &&Instant| **t > since || (now - start) < ttl;
                        let c = calls.iter().filter(in_window).count();
                        let g = grants.iter().filter(in_window).count();
                        prop_assert!(
                            g as f64 <= ratio * c as f64 + reserve + 1e-9,
                            "{g} retries for {c} calls (reserve {reserve}) in the ttl before {:?}",
                            now - start
                        );
                    }
                }
                Event::Wait(ms) => now += Duration::from_millis(ms),
            }
        }
        let stats = budget.stats();
        prop_assert_eq!(stats.calls, calls.len() as u64, "every call is counted");
        prop_assert_eq!(stats.retries, grants.len() as u64, "every grant is counted");
    }
}

/// What a token budget hears.
#[derive(Clone, Copy, Debug)]
enum Outcome {
    /// A call answered (success or `Stop`).
    Answer,
    /// An attempt failed retryably; a retry follows if allowed.
    Failure,
    /// The clock moves on by this many milliseconds.
    Wait(u64),
}

fn any_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Answer),
        5 => Just(Outcome::Failure),
        1 => (0u64..30_000).prop_map(Outcome::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// The throttle's bound: at every retry it allows, the retries allowed
    /// so far are fewer than `max_tokens / 2 + token_ratio × answers + time
    /// / refill` (each retry follows a failure that took a token, and none
    /// is allowed at or below half); and the tokens stay in `[0, max]`.
    /// Counted in the throttle's own thousandths, exactly.
    #[test]
    fn the_token_budget_never_allows_more_than_its_bound(
        outcomes in prop::collection::vec(any_outcome(), 1..400),
        max_tokens in 1u32..50,
        ratio_milli in 1u64..2_000,
        refill_s in prop::option::of(1u64..60),
    ) {
        prop_assume!(ratio_milli <= u64::from(max_tokens) * 1000);
        let ratio = ratio_milli as f64 / 1000.0;
        let throttle = TokenBudget::new(max_tokens, ratio)
            .refill(refill_s.map_or(Duration::ZERO, Duration::from_secs));
        // Milli-tokens refilled per 100 ms tick.
        let per_tick = refill_s.map_or(0, |s| 100 / s);
        let start = Instant::now();
        let mut now = start;
        let (mut answers, mut allowed) = (0u64, 0u64);
        for outcome in outcomes {
            match outcome {
                Outcome::Answer => {
                    throttle.answered(now);
                    answers += 1;
                }
                Outcome::Failure => {
                    if throttle.failed(now) {
                        allowed += 1;
                        // The ticks elapsed, one more for the tick's phase.
                        let ticks = (now - start).as_millis() as u64 / 100 + 1;
                        let bound = u64::from(max_tokens) * 500 + ratio_milli * answers + ticks * per_tick;
                        prop_assert!(
                            allowed * 1000 < bound,
                            "{allowed} retries allowed, bound {bound} milli ({answers} answers, {:?})",
                            now - start
                        );
                    }
                }
                Outcome::Wait(ms) => now += Duration::from_millis(ms),
            }
            let tokens = throttle.tokens();
            prop_assert!((0.0..=f64::from(max_tokens)).contains(&tokens), "{tokens}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A breaker that judges ratios opens exactly when a retryable failure
    /// leaves at least `failure_ratio` of the window's calls failed, the
    /// window holding at least `minimum_throughput` calls; a success or a
    /// `Stop` is a call and never opens it. (All at one instant: the
    /// window holds every call.)
    #[test]
    fn a_ratio_breaker_opens_exactly_by_its_rule(
        ratio_percent in 1u32..=100,
        minimum in 1u32..30,
        outcomes in prop::collection::vec(0u8..3, 0..120),
    ) {
        use backstop_runtime::limit::{BreakerState, CircuitBreaker};
        let ratio = f64::from(ratio_percent) / 100.0;
        let breaker = CircuitBreaker::ratio(
            ratio, minimum, Duration::from_secs(60), Duration::from_secs(5));
        let now = Instant::now();
        let (mut calls, mut failures) = (0u64, 0u64);
        for outcome in outcomes {
            let permit = breaker.try_acquire(now).expect("closed until the rule opens it");
            calls += 1;
            let failed = outcome == 0;
            match outcome {
                0 => { failures += 1; permit.failed(Verdict::Retry, now) }
                1 => permit.failed(Verdict::Stop, now),
                _ => permit.succeeded(now),
            }
            let opens = failed
                && calls >= u64::from(minimum)
                && failures as f64 >= ratio * calls as f64;
            let state = breaker.state_at(now);
            if opens {
                prop_assert_eq!(state, BreakerState::Open, "{} of {}", failures, calls);
                break;
            }
            prop_assert_eq!(state, BreakerState::Closed, "{} of {}", failures, calls);
        }
    }
}
