//! The token budget: gRPC's retry throttling (gRFC A6) with a refill in
//! time, its bound, and callers whose clocks disagree.
// Tokens are whole thousandths: their `f64` values compare exactly.
#![allow(clippy::float_cmp)]

use std::time::{Duration, Instant};

use backstop_runtime::limit::TokenBudget;

#[test]
fn failures_take_a_token_answers_give_back_the_ratio_and_retries_stop_at_half() {
    let throttle = TokenBudget::new(10, 0.1);
    let now = Instant::now();
    assert_eq!(throttle.tokens(), 10.0, "it starts full");
    let allowed: Vec<bool> = (0..7).map(|_| throttle.failed(now)).collect();
    assert_eq!(allowed, [true, true, true, true, false, false, false]);
    assert_eq!(throttle.tokens(), 3.0);
    // 0.1 per answer: 30 answers to get back to 6.
    for _ in 0..30 {
        throttle.answered(now);
    }
    assert!(
        (throttle.tokens() - 6.0).abs() < 1e-9,
        "{}",
        throttle.tokens()
    );
    assert!(!throttle.allows_retry(now), "6: a failure would leave 5");
    assert!(!throttle.failed(now), "5 left after it: not above half");
    // Never above max, never below zero.
    for _ in 0..1000 {
        throttle.answered(now);
    }
    assert_eq!(throttle.tokens(), 10.0);
    for _ in 0..1000 {
        throttle.failed(now);
    }
    assert_eq!(throttle.tokens(), 0.0);
}

#[test]
fn a_quiet_function_gets_its_retries_back_in_time_not_after_sixty_answers() {
    let throttle = TokenBudget::standard();
    let t0 = Instant::now();
    for _ in 0..20 {
        throttle.failed(t0);
    }
    assert_eq!(throttle.tokens(), 0.0);
    // gRPC's bucket alone: a call a minute would need 60 answers (an
    // hour) before a failure could be retried again. With one token every
    // 10 s: more than 6 tokens (one taken, more than half left) one tick
    // after a minute.
    assert!(!throttle.allows_retry(t0 + Duration::from_secs(60)));
    assert!(throttle.allows_retry(t0 + Duration::from_millis(60_100)));
    assert!(throttle.allows_retry(t0 + Duration::from_secs(70)));
    // A three-attempt call's two retries: more than 7 tokens, one tick
    // after 70 s.
    let second = |at: Duration| {
        let b = TokenBudget::standard();
        for _ in 0..20 {
            b.failed(t0);
        }
        b.failed(t0 + at) && b.failed(t0 + at)
    };
    assert!(!second(Duration::from_secs(70)));
    assert!(second(Duration::from_millis(70_100)));
    // Without the refill, as gRPC: still no retry an hour on.
    let grpc = TokenBudget::new(10, 0.1).refill(Duration::ZERO);
    for _ in 0..20 {
        grpc.failed(t0);
    }
    assert!(!grpc.allows_retry(t0 + Duration::from_secs(3600)));
    assert_eq!(grpc.get_refill(), None);
}

#[test]
fn the_refill_keeps_a_systemic_outage_to_one_retry_per_refill() {
    let throttle = TokenBudget::standard();
    let t0 = Instant::now();
    // A dependency failing every call, 100 calls a second for a minute:
    // one retry is attempted per failure that is allowed one.
    let mut retries = 0;
    for tick in 0..6000u64 {
        let now = t0 + Duration::from_millis(tick * 10);
        if throttle.failed(now) {
            retries += 1;
            // The retry fails too.
            throttle.failed(now);
        }
    }
    // The bound: max/2 + t / refill = 5 + 60 / 10 = 11, whatever the rate.
    // Here far fewer: each retry fails too (two tokens a retry), and a
    // hundred failures a second drain the refill long before it gets back
    // above half. Two retries in a minute, out of 6000 wanted.
    assert!(retries <= 11, "{retries}");
    assert_eq!(retries, 2);
}

#[test]
fn callers_whose_clocks_disagree_never_wedge_it() {
    let throttle = TokenBudget::standard();
    let now = Instant::now();
    let hour = Duration::from_secs(3600);
    // A caller an hour ahead spends it.
    for _ in 0..10 {
        throttle.failed(now + hour);
    }
    // A caller on real time: its answers still count (never "behind").
    for _ in 0..70 {
        throttle.answered(now);
    }
    assert!(throttle.allows_retry(now), "{}", throttle.tokens());
    // And a caller behind does not move the bucket's clock back: the one
    // ahead gets no refill for an hour that did not pass.
    let throttle = TokenBudget::standard();
    for _ in 0..10 {
        throttle.failed(now + hour);
    }
    for _ in 0..10 {
        throttle.failed(now);
    }
    assert!(!throttle.allows_retry(now + hour));
}

#[test]
fn ratios_are_truncated_to_three_decimal_places_as_grpc_keeps_them() {
    let throttle = TokenBudget::new(3, 0.0004);
    assert_eq!(throttle.token_ratio(), 0.001, "at least a thousandth");
    assert_eq!(TokenBudget::new(3, 0.2345).token_ratio(), 0.234);
    assert_eq!(TokenBudget::new(3, 0.2349).token_ratio(), 0.234);
    // Written with three decimals, kept whatever its binary value.
    for ratio in [0.1, 0.3, 0.7, 1.1, 4.35, 2.675] {
        assert_eq!(TokenBudget::new(10, ratio).token_ratio(), ratio);
    }
}

#[test]
#[should_panic(expected = "max_tokens")]
fn zero_tokens_are_rejected() {
    let _ = TokenBudget::new(0, 0.1);
}

#[test]
#[should_panic(expected = "token_ratio")]
fn a_ratio_of_nothing_is_rejected() {
    let _ = TokenBudget::new(10, f64::NAN);
}

/// Through a total outage (nothing answers) for a minute, calls at `rate`
/// a second, three attempts each: the requests sent per call.
fn amplification_through_an_outage(rate: u64) -> f64 {
    let throttle = TokenBudget::standard();
    let t0 = Instant::now();
    let calls = rate * 60;
    let mut sent = 0u64;
    for call in 0..calls {
        let now = t0 + Duration::from_nanos(call * 1_000_000_000 / rate);
        for _attempt in 0..3 {
            sent += 1;
            if !throttle.failed(now) {
                break;
            }
        }
    }
    sent as f64 / calls as f64
}

#[test]
fn a_total_outage_costs_at_most_the_stated_amplification() {
    // The figures of docs/why.md: 1.04× at 5 calls a second, 1.004× at 50,
    // 1.0004× at 500 (fewer than 5 + 60 s / 10 s = 11 retries a minute).
    for (rate, bound) in [(5, 1.04), (50, 1.004), (500, 1.0004)] {
        let amplification = amplification_through_an_outage(rate);
        assert!(amplification <= bound, "{rate}/s: {amplification}");
        assert!(amplification > 1.0, "{rate}/s: some retries");
    }
}

/// A windowed budget (10%, a reserve of 10 a second over 10 s) through the
/// same outage.
fn windowed_amplification_through_an_outage(rate: u64) -> f64 {
    let budget = backstop_runtime::limit::WindowBudget::standard();
    let t0 = Instant::now();
    let calls = rate * 60;
    let mut sent = 0u64;
    for call in 0..calls {
        let now = t0 + Duration::from_nanos(call * 1_000_000_000 / rate);
        budget.record_call(now);
        sent += 1;
        for _retry in 0..2 {
            if !budget.try_withdraw(now) {
                break;
            }
            sent += 1;
        }
    }
    sent as f64 / calls as f64
}

#[test]
fn a_windowed_budget_costs_what_the_docs_say_through_the_same_outage() {
    // docs/why.md: 2.92× at 5 calls a second, 1.29× at 50, 1.11× at 500.
    for (rate, expected) in [(5, 2.92), (50, 1.29), (500, 1.11)] {
        let amplification = windowed_amplification_through_an_outage(rate);
        assert!(
            (amplification - expected).abs() < 0.005,
            "{rate}/s: {amplification}"
        );
    }
}

/// A dependency failing one call in `every` (the rest answered), 10,000
/// calls in a row, three attempts each: the share of the retries wanted
/// that the throttle allows.
fn share_of_retries_allowed(every: u64) -> f64 {
    let throttle = TokenBudget::new(10, 0.1).refill(Duration::ZERO);
    let now = Instant::now();
    let (mut wanted, mut allowed) = (0u64, 0u64);
    for call in 0..10_000u64 {
        if call % every == 0 {
            // The first attempt fails; its retry succeeds.
            wanted += 1;
            if throttle.failed(now) {
                allowed += 1;
                throttle.answered(now);
            }
        } else {
            throttle.answered(now);
        }
    }
    allowed as f64 / wanted as f64
}

#[test]
fn isolated_failures_get_all_their_retries_and_frequent_ones_fewer() {
    // docs/manual.md: all retries up to about 9% of calls failing, fewer above.
    assert_eq!(share_of_retries_allowed(100), 1.0, "1%");
    assert_eq!(share_of_retries_allowed(20), 1.0, "5%");
    assert_eq!(share_of_retries_allowed(12), 1.0, "8.3%");
    assert!(
        share_of_retries_allowed(5) < 0.9,
        "20%: {}",
        share_of_retries_allowed(5)
    );
    assert!(
        share_of_retries_allowed(2) < 0.3,
        "50%: {}",
        share_of_retries_allowed(2)
    );
}

/// A dependency whose attempts each fail independently with probability
/// `rate` (seeded), 50 calls a second for 10 minutes of the throttle's
/// clock (30,000 calls), three attempts a call, a retry 100 ms after the
/// failure it follows, on the default throttle (its refill included): the
/// share of the retries wanted that the throttle refuses.
fn share_refused_at_random(rate: f64, seed: u64) -> f64 {
    let throttle = TokenBudget::standard();
    let mut rng = backstop_runtime::backoff::Rng::seeded(seed);
    let t0 = Instant::now();
    let (mut wanted, mut refused) = (0u64, 0u64);
    for call in 0..30_000u32 {
        let start = t0 + Duration::from_millis(20) * call;
        for attempt in 0..3u32 {
            let now = start + Duration::from_millis(100) * attempt;
            if rng.next_f64() >= rate {
                throttle.answered(now);
                break;
            }
            let allowed = throttle.failed(now);
            if attempt == 2 {
                break; // the last attempt: no retry wanted
            }
            wanted += 1;
            if !allowed {
                refused += 1;
                break;
            }
        }
    }
    refused as f64 / wanted as f64
}

#[test]
fn failures_at_random_get_their_retries_below_the_stated_rate() {
    // docs/manual.md: with each attempt failing at random, at most 1% of the
    // retries are refused while 4% of attempts fail or fewer (on every
    // one of 20 seeds), and refusals grow fast above: on average 0.7% at
    // 5%, about 10% at 7%, about 26% at 8% (the bucket's level is a
    // random walk, which touches half long before its drift would take
    // it there).
    let mean = |rate: f64, each: &dyn Fn(f64)| {
        let shares: Vec<f64> = (1..=20)
            .map(|seed| share_refused_at_random(rate, seed))
            .collect();
        shares.iter().copied().for_each(each);
        shares.iter().sum::<f64>() / shares.len() as f64
    };
    let at_4 = mean(0.04, &|share| assert!(share <= 0.01, "4%: {share}"));
    assert!(at_4 < 0.003, "4%: {at_4}");
    let at_5 = mean(0.05, &|_| {});
    assert!((0.004..0.01).contains(&at_5), "5%: {at_5}");
    let at_7 = mean(0.07, &|_| {});
    assert!((0.07..0.13).contains(&at_7), "7%: {at_7}");
    let at_8 = mean(0.08, &|_| {});
    assert!((0.2..0.32).contains(&at_8), "8%: {at_8}");
}

/// The dependency answers a call on `budget`, now (in virtual time).
fn answer(budget: &TokenBudget) {
    budget.answered(backstop_runtime::time::Clock::now(
        &backstop_runtime::time::SystemClock,
    ));
}

/// A policy whose calls hold: a deadline a minute away, attempts enough.
fn holding() -> backstop_runtime::Policy {
    backstop_runtime::Policy::new()
        .attempts(10)
        .deadline(Some(Duration::from_secs(60)))
}

/// A call held after a refusal, on `budget`, under `policy`.
fn held_on<'a>(
    budget: &'a TokenBudget,
    policy: &'a backstop_runtime::Policy,
) -> backstop_runtime::macro_support::AttemptState<'a, backstop_runtime::time::SystemClock> {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    let mut state =
        AttemptState::new(policy, backstop_runtime::time::SystemClock).budget(Some(budget));
    loop {
        match state.decide(Attempted::Failed(Verdict::Refused)) {
            Decision::Retry(_) if state.held().is_some() => return state,
            Decision::Retry(_) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_released_call_dropped_before_its_retry_is_decided_frees_its_place() {
    let _vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001);
    let mut first = held_on(&budget, &policy);
    let mut second = held_on(&budget, &policy);
    answer(&budget);
    assert_eq!(first.held(), None, "released");
    assert!(second.held().is_some(), "one at a time");
    // The caller drops the first call (a cancelled future) mid-retry.
    drop(first);
    assert_eq!(second.held(), None, "the place is free again");
}

#[test]
fn a_released_call_refused_again_sends_the_others_back_to_waiting_for_an_answer() {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::Attempted;
    let _vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001);
    let mut first = held_on(&budget, &policy);
    let mut second = held_on(&budget, &policy);
    answer(&budget);
    assert_eq!(first.held(), None, "released");
    let _ = first.decide(Attempted::Failed(Verdict::Refused));
    assert!(second.held().is_some(), "refused again: wait for an answer");
    answer(&budget);
    assert_eq!(second.held(), None, "a new answer: the next goes");
}

#[test]
fn the_ride_out_counts_from_the_dependencys_last_answer() {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::Attempted;
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001);
    let mut first = held_on(&budget, &policy);
    let mut second = held_on(&budget, &policy);
    // Nine seconds into the refusal the dependency answers once (the
    // bucket stays low); the call it releases is refused again.
    vt.advance(Duration::from_secs(9));
    answer(&budget);
    assert_eq!(first.held(), None, "released by the answer");
    let _ = first.decide(Attempted::Failed(Verdict::Refused));
    // Twelve seconds after the budget began refusing, but three after the
    // last answer: still riding it out.
    vt.advance(Duration::from_secs(3));
    match second.held() {
        // Let go as a probe (the way is closed, and none went for 3 s):
        // refused, it holds again.
        None => {
            let _ = second.decide(Attempted::Failed(Verdict::Refused));
        }
        Some(Ok(_)) => {}
        Some(Err(reason)) => panic!("gave up: {reason:?}"),
    }
    // Ten seconds after the last answer: down, not restarting.
    vt.advance(Duration::from_secs(8));
    assert_eq!(second.held(), Some(Err(backstop_runtime::GiveUp::Budget)));
}

/// The ride-out ends on its tick: a call held 100 ms short of it still
/// holds; at it, the call gives up.
#[test]
fn the_ride_out_ends_on_its_tick() {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::Attempted;
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001).ride_out(Duration::from_secs(2));
    let mut call = held_on(&budget, &policy);
    vt.advance(Duration::from_millis(1_900));
    match call.held() {
        // Let go as a probe: refused, it holds again.
        None => {
            let _ = call.decide(Attempted::Failed(Verdict::Refused));
            assert!(call.held().is_some_and(|held| held.is_ok()), "held again");
        }
        Some(Ok(_)) => {}
        Some(Err(reason)) => panic!("gave up 100 ms early: {reason:?}"),
    }
    vt.advance(Duration::from_millis(100));
    assert_eq!(call.held(), Some(Err(backstop_runtime::GiveUp::Budget)));
}

/// `call`, held, asked again: `Ok` if still held (a probe let go is
/// refused, and must then be held again), or why it gave up.
fn still_held(
    call: &mut backstop_runtime::macro_support::AttemptState<
        '_,
        backstop_runtime::time::SystemClock,
    >,
) -> Result<(), backstop_runtime::GiveUp> {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::Attempted;
    match call.held() {
        None => {
            let _ = call.decide(Attempted::Failed(Verdict::Refused));
            assert!(call.held().is_some_and(|held| held.is_ok()), "held again");
            Ok(())
        }
        Some(held) => held.map(drop),
    }
}

/// The ride-out counted from the dependency's last answer ends on its
/// tick too; an answer that leaves the bucket at half (retries still
/// refused) does not end the refusal.
#[test]
fn the_ride_out_from_an_answer_ends_on_its_tick() {
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    // A whole token an answer, none back in time: held at 2 tokens.
    let budget = TokenBudget::new(4, 1.0)
        .refill(Duration::ZERO)
        .ride_out(Duration::from_secs(2));
    let mut call = held_on(&budget, &policy);
    vt.advance(Duration::from_secs(1));
    // 3 tokens: a failure would leave 2, half: refusing still, but the
    // dependency is not down.
    answer(&budget);
    assert!(!budget.allows_retry(Instant::now()));
    vt.advance(Duration::from_secs(1));
    assert_eq!(still_held(&mut call), Ok(()), "a second after the answer");
    vt.advance(Duration::from_millis(900));
    assert_eq!(still_held(&mut call), Ok(()), "100 ms short of it");
    vt.advance(Duration::from_millis(100));
    assert_eq!(call.held(), Some(Err(backstop_runtime::GiveUp::Budget)));
}

/// A refusal that answers ended (retries allowed again) is over: a call
/// still held is let go, not given up at the ride-out, and the next
/// refusal's ride-out counts from when it began.
#[test]
fn a_refusal_that_ended_does_not_count_toward_the_next_ride_out() {
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 1.0)
        .refill(Duration::ZERO)
        .ride_out(Duration::from_secs(2));
    let mut old = held_on(&budget, &policy);
    vt.advance(Duration::from_secs(1));
    answer(&budget);
    answer(&budget);
    assert!(budget.allows_retry(Instant::now()), "{budget:?}");
    vt.advance(Duration::from_millis(2_500));
    assert_eq!(old.held(), None, "the refusal is over: let go");
    drop(old);
    // A new refusal, and a call held in it.
    vt.advance(Duration::from_secs(2));
    let mut call = held_on(&budget, &policy);
    vt.advance(Duration::from_millis(1_500));
    assert_eq!(still_held(&mut call), Ok(()), "1.5 s into the refusal");
    vt.advance(Duration::from_millis(500));
    assert_eq!(call.held(), Some(Err(backstop_runtime::GiveUp::Budget)));
}

/// The ride-out counts from the failure the budget refused, not from an
/// earlier one it let retry, nor from an answer before it.
#[test]
fn the_ride_out_counts_from_the_first_failure_refused() {
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.5)
        .refill(Duration::ZERO)
        .ride_out(Duration::from_secs(2));
    assert!(budget.failed(Instant::now()), "3 left: allowed");
    answer(&budget);
    assert!(budget.failed(Instant::now()), "2.5 left: allowed");
    // 3 tokens: the next failure will be refused, but none has been.
    answer(&budget);
    assert!(!budget.allows_retry(Instant::now()));
    vt.advance(Duration::from_millis(1_500));
    let mut call = held_on(&budget, &policy);
    vt.advance(Duration::from_secs(1));
    assert_eq!(still_held(&mut call), Ok(()), "1 s into the refusal");
    vt.advance(Duration::from_secs(1));
    assert_eq!(call.held(), Some(Err(backstop_runtime::GiveUp::Budget)));
}

/// With nothing answering, one held call goes as a probe two ticks
/// (200 ms) after the refusal began or the last probe went, not sooner.
#[test]
fn a_held_call_goes_as_a_probe_every_200_ms_when_nothing_answers() {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    let vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001);
    let mut call =
        AttemptState::new(&policy, backstop_runtime::time::SystemClock).budget(Some(&budget));
    let refused = |call: &mut AttemptState<'_, _>| {
        assert!(matches!(
            call.decide(Attempted::Failed(Verdict::Refused)),
            Decision::Retry(_)
        ));
    };
    refused(&mut call);
    assert_eq!(call.held(), None, "3 tokens left: the retry goes");
    refused(&mut call);
    assert!(
        call.held().is_some_and(|held| held.is_ok()),
        "refused: held, no probe at once"
    );
    for probe in 0..3 {
        vt.advance(Duration::from_millis(100));
        assert!(
            call.held().is_some_and(|held| held.is_ok()),
            "probe {probe}: 100 ms after the last, held"
        );
        vt.advance(Duration::from_millis(100));
        assert_eq!(call.held(), None, "probe {probe}: 200 ms after, let go");
        refused(&mut call);
    }
}

/// Its `Debug` says how it is set and what it holds.
#[test]
fn its_debug_says_its_settings_and_tokens() {
    let budget = TokenBudget::new(4, 0.5);
    budget.failed(Instant::now());
    assert_eq!(
        format!("{budget:?}"),
        "TokenBudget { max_tokens: 4, token_ratio: 0.5, refill: Some(10s), tokens: 3.0 }"
    );
}

#[test]
fn an_answer_from_a_caller_whose_clock_is_ahead_does_not_end_the_ride_out() {
    use backstop_runtime::Verdict;
    use backstop_runtime::macro_support::{Attempted, Decision};
    let _vt = backstop_runtime::testing::VirtualTime::start();
    let policy = holding();
    let budget = TokenBudget::new(4, 0.001);
    let mut first = held_on(&budget, &policy);
    // Another caller, its clock a second ahead, gets an answer.
    let ahead = backstop_runtime::time::Clock::now(&backstop_runtime::time::SystemClock)
        + Duration::from_secs(1);
    budget.answered(ahead);
    assert_eq!(first.held(), None, "released by the answer");
    // Refused again: on this caller's clock the refusal is not years old.
    assert!(
        matches!(
            first.decide(Attempted::Failed(Verdict::Refused)),
            Decision::Retry(_)
        ),
        "held again"
    );
}

/// A refusal the token budget will not hold for (its `ride_out` of zero,
/// or one run out) is decided as any failure: a delay past the deadline
/// gives up for the deadline (step 5) before the budget is asked, as a
/// `Retry` failure does, not for the budget nor for a breaker it opened.
#[test]
fn a_refusal_the_budget_does_not_hold_for_gives_up_at_the_deadline_before_the_budget() {
    use backstop_runtime::limit::{BreakerState, CircuitBreaker};
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    use backstop_runtime::{GiveUp, Jitter, Policy, Verdict};
    let vt = backstop_runtime::testing::VirtualTime::start();
    // A first delay of 100 ms against a deadline of 50 ms.
    let policy = Policy::new()
        .base(Duration::from_millis(100))
        .jitter(Jitter::None)
        .deadline(Some(Duration::from_millis(50)));
    let decide = |budget: &TokenBudget, breaker: Option<&'static CircuitBreaker>, verdict| {
        let mut state = AttemptState::new(&policy, backstop_runtime::time::SystemClock)
            .budget(Some(budget))
            .breaker(breaker);
        // The breaker hears of the attempt through its admission.
        state.admit().expect("a closed breaker admits");
        // A budget of 2: the failure leaves 1 token, not above half.
        state.decide(Attempted::Failed(verdict))
    };
    for verdict in [Verdict::Retry, Verdict::Refused] {
        let never = TokenBudget::new(2, 0.1).ride_out(Duration::ZERO);
        assert_eq!(
            decide(&never, None, verdict),
            Decision::GiveUp(GiveUp::Deadline),
            "{verdict:?}, no ride-out"
        );
        // The budget has refused for longer than its ride-out.
        let over = TokenBudget::new(2, 0.1).ride_out(Duration::from_secs(1));
        assert!(!over.failed(backstop_runtime::time::Clock::now(
            &backstop_runtime::time::SystemClock
        )));
        vt.advance(Duration::from_secs(2));
        assert_eq!(
            decide(&over, None, verdict),
            Decision::GiveUp(GiveUp::Deadline),
            "{verdict:?}, ride-out over"
        );
        // This failure opens the breaker (one failure in a row).
        let breaker: &'static CircuitBreaker =
            Box::leak(Box::new(CircuitBreaker::new(1, Duration::from_secs(30))));
        let never = TokenBudget::new(2, 0.1).ride_out(Duration::ZERO);
        assert_eq!(
            decide(&never, Some(breaker), verdict),
            Decision::GiveUp(GiveUp::Deadline),
            "{verdict:?}, breaker opened"
        );
        assert_ne!(
            breaker.state(),
            BreakerState::Closed,
            "the failure opened it"
        );
    }
    // Where the budget holds (a ride-out left), a refusal holds within the
    // deadline rather than give up.
    let holds = TokenBudget::new(2, 0.1);
    assert!(matches!(
        decide(&holds, None, Verdict::Refused),
        Decision::Retry(_)
    ));
}
