//! Hedged rounds through `Retry::hedge`: the invariants over arbitrary
//! latencies and verdicts, the adaptive delay under hedging, and the
//! budget and breaker granting hedges, in tokio's paused time.

use std::sync::Mutex;
use std::time::Duration;

use backstop_runtime::hedge::{Hedge, LatencyPercentile};
use backstop_runtime::limit::{AdaptiveThrottle, CircuitBreaker, TokenBudget, WindowBudget};
use backstop_runtime::{Classify, Policy, Retry, Verdict, context, testing};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

/// An attempt's error: which attempt, and whether a retry could fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failure {
    attempt: u32,
    stop: bool,
}

impl Classify for Failure {
    fn classify(&self) -> Verdict {
        if self.stop {
            Verdict::Stop
        } else {
            Verdict::Retry
        }
    }
}

impl From<backstop_runtime::Throttled> for Failure {
    fn from(_: backstop_runtime::Throttled) -> Self {
        Failure {
            attempt: 0,
            stop: true,
        }
    }
}

impl From<backstop_runtime::CircuitOpen> for Failure {
    fn from(_: backstop_runtime::CircuitOpen) -> Self {
        Failure {
            attempt: 0,
            stop: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ok,
    Retry,
    Stop,
}

/// One attempt as it went: its number, key, start, and end (`true`: ran
/// to its end, `false`: dropped).
#[derive(Debug)]
struct Seen {
    attempt: u32,
    key: u128,
    start: Duration,
    end: Option<(Duration, bool)>,
}

struct Guard<'a> {
    log: &'a Mutex<Vec<Seen>>,
    index: usize,
    origin: Instant,
    finished: bool,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let at = self.origin.elapsed();
        self.log.lock().unwrap()[self.index].end = Some((at, self.finished));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Runs one hedged call whose attempt number `n` takes `script[n - 1]`
/// (the last entry for later ones), logging every attempt.
async fn scripted(
    retry: &Retry<'_>,
    script: &[(u64, Kind)],
    log: &Mutex<Vec<Seen>>,
    origin: Instant,
) -> Result<u32, Failure> {
    retry
        .call_async(|| async {
            let cx = context().unwrap();
            let attempt = cx.attempt();
            let index = {
                let mut log = log.lock().unwrap();
                log.push(Seen {
                    attempt,
                    key: cx.idempotency_key().to_u128(),
                    start: origin.elapsed(),
                    end: None,
                });
                log.len() - 1
            };
            let mut guard = Guard {
                log,
                index,
                origin,
                finished: false,
            };
            let (ms, kind) = script[(attempt as usize - 1).min(script.len() - 1)];
            sleep(MS * ms as u32).await;
            guard.finished = true;
            match kind {
                Kind::Ok => Ok(attempt),
                Kind::Retry => Err(Failure {
                    attempt,
                    stop: false,
                }),
                Kind::Stop => Err(Failure {
                    attempt,
                    stop: true,
                }),
            }
        })
        .await
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Ok), Just(Kind::Retry), Just(Kind::Stop)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hedged_calls_keep_their_invariants(
        script in prop::collection::vec((0u64..300, kind()), 1..8),
        delay in 1u64..80,
        hedges in 1u32..4,
        attempts in 1u32..7,
        deadline in prop::option::of(20u64..500),
    ) {
        let policy = Policy::new()
            .idempotent(true)
            .attempts(attempts)
            .base(MS * 30)
            .deadline(deadline.map(|ms| MS * ms as u32))
            .no_budget();
        let retry = Retry::new(&policy).hedge(Hedge::after(MS * delay as u32).hedges(hedges));
        let log = Mutex::new(Vec::new());
        let (out, returned) = runtime().block_on(async {
            let origin = Instant::now();
            let out = scripted(&retry, &script, &log, origin).await;
            (out, origin.elapsed())
        });
        let log = log.into_inner().unwrap();

        // Numbered 1, 2, … in the order they started, within `attempts`.
        let numbers: Vec<u32> = log.iter().map(|s| s.attempt).collect();
        prop_assert_eq!(numbers, (1..=log.len() as u32).collect::<Vec<_>>());
        prop_assert!(log.len() as u32 <= attempts);
        // One idempotency key for the call.
        prop_assert!(log.iter().all(|s| s.key == log[0].key));
        // Nothing left running: every attempt ended by the return, and the
        // ones dropped were dropped at the return.
        for seen in &log {
            let (end, finished) = seen.end.expect("every attempt ended");
            prop_assert!(end <= returned);
            if !finished {
                prop_assert_eq!(end, returned, "dropped at once");
            }
        }
        // Never more in flight than the first and its hedges.
        for seen in &log {
            let at = seen.start;
            let live = log
                .iter()
                .filter(|s| s.start <= at && s.end.is_some_and(|(end, _)| end > at))
                .count();
            prop_assert!(live as u32 <= 1 + hedges, "{} in flight at {:?}", live, at);
        }
        // Only the first attempt may start without time left.
        if let Some(deadline) = deadline {
            for seen in &log[1..] {
                prop_assert!(seen.start < MS * deadline as u32, "{:?} started late", seen);
            }
        }
        // The first answer wins: what the call returns ended the call, and
        // every other attempt that ran to its end before was a retryable
        // failure.
        let winner = match out {
            Ok(n) => n,
            Err(Failure { attempt, .. }) => attempt,
        };
        let won = &log[winner as usize - 1];
        prop_assert_eq!(won.end, Some((returned, true)));
        for seen in log.iter().filter(|s| s.attempt != winner) {
            if let Some((_, true)) = seen.end {
                let kind = script[(seen.attempt as usize - 1).min(script.len() - 1)].1;
                prop_assert_eq!(kind, Kind::Retry, "attempt {} answered and lost", seen.attempt);
            }
        }
        if out.is_ok() {
            let kind = script[(winner as usize - 1).min(script.len() - 1)].1;
            prop_assert_eq!(kind, Kind::Ok);
        }
    }
}

#[test]
fn the_adaptive_delay_converges_to_its_percentile_while_hedging() {
    // Exponential latencies, mean 10 ms: p95 = 10 ms × ln 20 ≈ 29.96 ms.
    // Attempts overtaken by their hedge are learnt as what they took so
    // far (above the delay, as the slow attempts they stand for are).
    static P95: LatencyPercentile = LatencyPercentile::new(0.95, Duration::from_secs(10));
    let _isolated = testing::isolate();
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy).hedge(Hedge::at(&P95));
    let rng = Mutex::new(SmallRng::seed_from_u64(11));
    let (calls, sent, estimate) = runtime().block_on(async {
        let sent = std::sync::atomic::AtomicU32::new(0);
        let calls = 3_000;
        for _ in 0..calls {
            let out: Result<(), Failure> = retry
                .call_async(|| async {
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let u: f64 = rng.lock().unwrap().random();
                    let micros = (-10_000.0 * (1.0 - u).ln()) as u64;
                    sleep(Duration::from_micros(micros)).await;
                    Ok(())
                })
                .await;
            out.unwrap();
        }
        // (On the paused clock, ahead of the real one.)
        let estimate = P95.estimate(Instant::now().into_std());
        (calls, sent.into_inner(), estimate)
    });
    let estimate = estimate.unwrap();
    let truth = 10_000.0 * 20f64.ln();
    let ratio = estimate.as_micros() as f64 / truth;
    assert!(
        (0.93..1.07).contains(&ratio),
        "estimate {estimate:?}, p95 {truth} µs"
    );
    // About one call in twenty hedged, once there was evidence.
    let hedges = sent - calls;
    assert!(
        (60..=200).contains(&hedges),
        "{hedges} hedges in {calls} calls"
    );
}

#[test]
fn a_first_attempt_that_fails_fast_does_not_teach_the_adaptive_delay() {
    // Every call's first attempt fails at once (a 503 in no time), its
    // retry answers after 20 ms: the delay to hedge at is the answers'
    // latency, not the failures'. (Learnt from them, the median would be
    // nothing, and every call after an outage hedged at once.)
    static P50: LatencyPercentile = LatencyPercentile::new(0.5, Duration::from_secs(10));
    let _isolated = testing::isolate();
    let policy = Policy::new()
        .idempotent(true)
        .no_budget()
        .base(Duration::from_millis(1));
    let retry = Retry::new(&policy).hedge(Hedge::at(&P50));
    let estimate = runtime().block_on(async {
        for _ in 0..300 {
            let first = std::cell::Cell::new(true);
            let out: Result<(), Failure> = retry
                .call_async(|| async {
                    if first.replace(false) {
                        return Err(Failure {
                            attempt: 1,
                            stop: false,
                        });
                    }
                    sleep(Duration::from_millis(20)).await;
                    Ok(())
                })
                .await;
            out.unwrap();
        }
        P50.estimate(Instant::now().into_std())
    });
    let estimate = estimate.expect("an estimate from 300 answers");
    assert!(
        estimate >= Duration::from_millis(19),
        "the failures' latency learnt: {estimate:?}"
    );
}

#[test]
fn a_dependency_slow_without_failing_is_hedged_every_call_unless_a_windowed_budget_bounds_it() {
    // Every attempt takes 100 ms, none fails: a token budget, which only
    // failures drain, grants a hedge to every call (twice the load); a
    // windowed budget grants hedges as the retries of its share of calls.
    static TOKENS: TokenBudget = TokenBudget::standard();
    static SHARE: WindowBudget = WindowBudget::new(0.05, 1, Duration::from_secs(10));
    let _isolated = testing::isolate();
    let policy = Policy::new().idempotent(true);
    let load = |retry: Retry<'_>| {
        runtime().block_on(async {
            let sent = std::sync::atomic::AtomicU32::new(0);
            for _ in 0..200 {
                let out: Result<(), Failure> = retry
                    .call_async(|| async {
                        sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        sleep(MS * 100).await;
                        Ok(())
                    })
                    .await;
                out.unwrap();
            }
            f64::from(sent.into_inner()) / 200.0
        })
    };
    let hedge = Hedge::after(MS * 10);
    let tokens = load(Retry::new(&policy).budget(&TOKENS).hedge(hedge));
    assert!(tokens >= 1.99, "{tokens}× the calls");
    let share = load(Retry::new(&policy).budget(&SHARE).hedge(hedge));
    // 5% of the calls, and one a second over the 20 s they take.
    assert!(share <= 1.2, "{share}× the calls");
}

#[test]
fn a_windowed_budget_grants_hedges_as_retries_and_refuses_them_when_empty() {
    static FUNDED: WindowBudget = WindowBudget::new(0.5, 10, Duration::from_secs(10));
    static EMPTY: WindowBudget = WindowBudget::new(0.01, 0, Duration::from_secs(10));
    let policy = Policy::new().idempotent(true);
    let script = [(1_000, Kind::Ok), (10, Kind::Ok)];
    for (budget, hedged) in [(&FUNDED, true), (&EMPTY, false)] {
        let retry = Retry::new(&policy)
            .budget(budget)
            .hedge(Hedge::after(MS * 50));
        let log = Mutex::new(Vec::new());
        let out = runtime().block_on(scripted(&retry, &script, &log, Instant::now()));
        assert_eq!(out, Ok(if hedged { 2 } else { 1 }));
        assert_eq!(
            budget.stats().retries,
            u64::from(hedged),
            "a hedge is a retry"
        );
    }
}

#[test]
fn a_token_budget_grants_hedges_while_above_half_and_takes_nothing() {
    // gRFC A6: hedges are sent while tokens > max / 2. At 6 of 10 a
    // failure's retry is refused (it would leave 5), a hedge is not.
    let policy = Policy::new().idempotent(true);
    let script = [(1_000, Kind::Ok), (10, Kind::Ok)];
    for (failures, hedged) in [(4, true), (5, false)] {
        let throttle: &'static backstop_runtime::limit::TokenBudget =
            Box::leak(Box::new(backstop_runtime::limit::TokenBudget::standard()));
        let now = std::time::Instant::now();
        for _ in 0..failures {
            throttle.failed(now);
        }
        let before = throttle.tokens();
        let retry = Retry::new(&policy)
            .budget(throttle)
            .hedge(Hedge::after(MS * 50));
        let log = Mutex::new(Vec::new());
        let out = runtime().block_on(scripted(&retry, &script, &log, Instant::now()));
        assert_eq!(out, Ok(if hedged { 2 } else { 1 }), "at {before} tokens");
        assert!(
            (throttle.tokens() - (before + 0.1)).abs() < 1e-9,
            "the answer's tenth, and nothing taken for the hedge: {}",
            throttle.tokens()
        );
    }
}

#[test]
fn an_adaptive_throttle_that_sheds_sends_no_hedge() {
    // The throttle is idle when attempt 1 goes (it sheds nothing); while it runs, the
    // dependency is seen refusing everything (a hundred thousand requests,
    // no accept: nearly every attempt shed). The hedge due at 20 ms asks
    // the throttle as any attempt does, and is shed; attempt 1 answers.
    static SHEDDING: AdaptiveThrottle = AdaptiveThrottle::standard();
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy)
        .throttle(&SHEDDING)
        .hedge(Hedge::after(MS * 20));
    testing::seed_jitter(7);
    let log = Mutex::new(Vec::new());
    let out = runtime().block_on(retry.call_async(|| async {
        let attempt = context().unwrap().attempt();
        log.lock().unwrap().push(attempt);
        if attempt == 1 {
            let now = Instant::now().into_std();
            // (This attempt, in flight, counts for nothing yet.)
            assert!(SHEDDING.rejection_probability_at(now) < 1e-12);
            for _ in 0..100_000 {
                SHEDDING.requested(now);
            }
            assert!(SHEDDING.rejection_probability_at(now) > 0.9999);
        }
        sleep(MS * 100).await;
        Ok::<_, Failure>(attempt)
    }));
    assert_eq!(out, Ok(1));
    assert_eq!(*log.lock().unwrap(), [1], "the hedge was shed");
}

#[test]
fn a_breaker_probe_is_never_hedged_and_an_open_breaker_sends_no_hedge() {
    static BREAKER: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(1));
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy).hedge(Hedge::after(MS * 50));
    let rt = runtime();
    rt.block_on(async {
        let retry = retry.breaker(&BREAKER);
        let origin = Instant::now();
        // Closed: hedged.
        let log = Mutex::new(Vec::new());
        let out = retry
            .call_async(|| async {
                let attempt = context().unwrap().attempt();
                log.lock().unwrap().push(attempt);
                sleep(MS * if attempt == 1 { 1_000 } else { 10 }).await;
                Ok::<_, Failure>(attempt)
            })
            .await;
        assert_eq!(out, Ok(2));
        // Opened by a failure, then half-open after its cooldown: the
        // probe runs alone, however slow.
        let _ = retry
            .call_async(|| async {
                Err::<u32, _>(Failure {
                    attempt: 1,
                    stop: false,
                })
            })
            .await;
        sleep(Duration::from_secs(2)).await;
        let log = Mutex::new(Vec::new());
        let out = retry
            .call_async(|| async {
                let attempt = context().unwrap().attempt();
                log.lock().unwrap().push(attempt);
                sleep(MS * 1_000).await;
                Ok::<_, Failure>(attempt)
            })
            .await;
        assert_eq!(out, Ok(1));
        assert_eq!(*log.lock().unwrap(), [1], "a probe is not hedged");
        let _ = origin;
    });
}

/// One hedged round whose attempt 1 is told to come back in 5 s at
/// 30 ms, while its hedge (sent at 20 ms) fails at 70 ms with `hedge`
/// (`Interrupted` is told to come back in 2 s; anything else is a plain
/// failure); attempt 3 answers. What the call returned, and the retries'
/// (attempt, delay).
fn round_with_a_retry_after(hedge: std::io::ErrorKind) -> (u32, Vec<(u32, Duration)>) {
    let policy = Policy::new().idempotent(true).no_budget();
    let delays = Mutex::new(Vec::new());
    let retry = Retry::new(&policy)
        .hedge(Hedge::after(MS * 20))
        .when(|e: &std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock => Verdict::RetryAfter(Duration::from_secs(5)),
            std::io::ErrorKind::Interrupted => Verdict::RetryAfter(Duration::from_secs(2)),
            _ => Verdict::Retry,
        })
        .on_retry(|e| delays.lock().unwrap().push((e.attempt(), e.delay())));
    let out = runtime().block_on(retry.call_async(|| async {
        let attempt = context().unwrap().attempt();
        let (ms, kind) = match attempt {
            1 => (30, std::io::ErrorKind::WouldBlock),
            2 => (50, hedge),
            _ => return Ok::<u32, std::io::Error>(attempt),
        };
        sleep(MS * ms).await;
        Err(kind.into())
    }));
    (out.unwrap(), delays.into_inner().unwrap())
}

#[test]
fn a_retry_after_given_to_an_attempt_that_failed_beside_another_holds_for_the_retry() {
    // The hedge fails plainly: the round's retry waits attempt 1's 5 s
    // (and up to a fifth more: spread upward only).
    let (out, delays) = round_with_a_retry_after(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(out, 3);
    assert_eq!(delays.len(), 1);
    assert_eq!(delays[0].0, 2);
    assert!(
        (Duration::from_secs(5)..=Duration::from_secs(6)).contains(&delays[0].1),
        "{delays:?}"
    );
}

#[test]
fn a_failure_beside_another_attempt_takes_a_token_as_any_failure_does() {
    // Attempt 1 fails retryably at 30 ms while its hedge (sent at 20 ms)
    // is in flight; the hedge answers. The throttle hears of both: one
    // token taken by the failure, a tenth given back by the answer.
    static THROTTLE: backstop_runtime::limit::TokenBudget =
        backstop_runtime::limit::TokenBudget::standard();
    let policy = Policy::new().idempotent(true);
    let retry = Retry::new(&policy)
        .budget(&THROTTLE)
        .hedge(Hedge::after(MS * 20));
    let log = Mutex::new(Vec::new());
    let out = runtime().block_on(scripted(
        &retry,
        &[(30, Kind::Retry), (20, Kind::Ok)],
        &log,
        Instant::now(),
    ));
    assert_eq!(out, Ok(2));
    assert!(
        (THROTTLE.tokens() - 9.1).abs() < 1e-9,
        "{}",
        THROTTLE.tokens()
    );
}

#[test]
fn a_hedged_call_dropped_mid_round_drops_every_attempt_in_flight_at_once() {
    // Attempts take 1 s; hedges go at 20 ms and 40 ms. The caller gives
    // up at 50 ms (its own timeout drops the call): the three attempts in
    // flight end then, none having run to its end.
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy).hedge(Hedge::after(MS * 20).hedges(2));
    let log = Mutex::new(Vec::new());
    let dropped_at = runtime().block_on(async {
        let origin = Instant::now();
        let call = scripted(&retry, &[(1_000, Kind::Ok)], &log, origin);
        let out = tokio::time::timeout(MS * 50, call).await;
        assert!(out.is_err(), "the caller's timeout came first");
        origin.elapsed()
    });
    assert_eq!(dropped_at, MS * 50);
    let log = log.into_inner().unwrap();
    assert_eq!(log.len(), 3, "the first attempt and two hedges: {log:?}");
    for seen in &log {
        assert_eq!(seen.end, Some((dropped_at, false)), "{seen:?}");
    }
}

#[test]
fn a_hedged_call_that_gives_up_says_how_many_of_its_attempts_were_hedges() {
    // Two attempts: the first fails retryably at 100 ms, its hedge (sent
    // at 20 ms) at 120 ms. The round is over with no attempt left: the
    // call gives up, two attempts made, one of them a hedge.
    let policy = Policy::new().idempotent(true).attempts(2).no_budget();
    let told = Mutex::new(Vec::new());
    let retry = Retry::new(&policy).hedge(Hedge::after(MS * 20)).on_give_up(
        |event: &backstop_runtime::GiveUpEvent<'_, u32, Failure>| {
            told.lock()
                .unwrap()
                .push((event.attempts(), event.hedges(), event.reason()));
        },
    );
    let out = runtime().block_on(retry.call_async(|| async {
        let attempt = context().unwrap().attempt();
        sleep(MS * 100).await;
        Err::<u32, _>(Failure {
            attempt,
            stop: false,
        })
    }));
    assert_eq!(out.unwrap_err().attempt, 2, "the hedge failed last");
    assert_eq!(
        *told.lock().unwrap(),
        [(2, 1, backstop_runtime::GiveUp::Attempts)]
    );
}

#[test]
fn a_hedged_round_dropped_counts_its_attempts_in_flight_as_sent_and_not_answered() {
    // The first attempt and its hedge (sent at 20 ms) hang; the caller
    // gives up at 50 ms. Both were sent and neither answered: two
    // requests, no accept, (2 − 0) / (2 + 1).
    static DROPPED: AdaptiveThrottle = AdaptiveThrottle::standard();
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy)
        .throttle(&DROPPED)
        .hedge(Hedge::after(MS * 20));
    let started = Mutex::new(0);
    let p = runtime().block_on(async {
        let call = retry.call_async(|| async {
            *started.lock().unwrap() += 1;
            std::future::pending::<Result<u32, Failure>>().await
        });
        assert!(tokio::time::timeout(MS * 50, call).await.is_err());
        DROPPED.rejection_probability_at(Instant::now().into_std())
    });
    assert_eq!(*started.lock().unwrap(), 2);
    assert!((p - 2.0 / 3.0).abs() < 1e-12, "{p}");
}

#[test]
fn a_policy_not_idempotent_sends_no_hedge() {
    // Outside HTTP nothing says a call is idempotent but its policy: one
    // that does not say so sends no hedge, however slow the attempt.
    let policy = Policy::new().no_budget();
    let retry = Retry::new(&policy).hedge(Hedge::after(MS * 20));
    let log = Mutex::new(Vec::new());
    let out = runtime().block_on(scripted(&retry, &[(1_000, Kind::Ok)], &log, Instant::now()));
    assert_eq!(out, Ok(1));
    let started: Vec<u32> = log.lock().unwrap().iter().map(|s| s.attempt).collect();
    assert_eq!(started, [1], "no hedge beside the slow attempt");
}

#[test]
fn a_failure_beside_the_winning_attempt_counts_against_the_breaker() {
    // Attempt 1 fails retryably at 30 ms while its hedge (sent at 20 ms)
    // is in flight; the hedge answers at 40 ms. The failure is the
    // breaker's as any failure is: at a threshold of one, it opens it.
    static OPENED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    fn count(change: &backstop_runtime::limit::BreakerChange) {
        if change.to == backstop_runtime::limit::BreakerState::Open {
            OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    static BESIDE: CircuitBreaker =
        CircuitBreaker::new(1, Duration::from_secs(30)).on_change(count);
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy)
        .breaker(&BESIDE)
        .hedge(Hedge::after(MS * 20));
    let out = runtime().block_on(retry.call_async(|| async {
        let attempt = context().unwrap().attempt();
        if attempt == 1 {
            sleep(MS * 30).await;
            return Err(Failure {
                attempt,
                stop: false,
            });
        }
        sleep(MS * 20).await;
        Ok(attempt)
    }));
    assert_eq!(out, Ok(2));
    assert_eq!(
        OPENED.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the failure beside the winner opened the breaker"
    );
}

#[test]
fn a_round_honours_its_longest_retry_after() {
    // The hedge is told 2 s, later and shorter: the round's retry waits
    // the longest, 5 s (and up to a fifth more).
    let (out, delays) = round_with_a_retry_after(std::io::ErrorKind::Interrupted);
    assert_eq!(out, 3);
    assert_eq!(delays.len(), 1, "{delays:?}");
    assert!(
        (Duration::from_secs(5)..=Duration::from_secs(6)).contains(&delays[0].1),
        "{delays:?}"
    );
}

/// Retries at one layer only, through a hedged round: a nested call that
/// retried and gave up inside an attempt stops the hedged call's retries.
#[tokio::test(start_paused = true)]
async fn a_hedged_call_over_a_nested_call_that_retried_does_not_retry() {
    use std::cell::Cell;
    use std::io::{Error, ErrorKind};
    let quiet = || {
        Policy::new()
            .jitter(backstop_runtime::Jitter::None)
            .no_budget()
    };
    let policy = quiet().idempotent(true).attempts(3);
    let (outer, inner) = (Cell::new(0), Cell::new(0));
    // The hedge would go a second in: the nested call is over long before.
    let out: Result<(), Error> = Retry::new(&policy)
        .hedge(Hedge::after(MS * 1_000))
        .call_async(|| async {
            outer.set(outer.get() + 1);
            Retry::new(&quiet().attempts(2))
                .call_async(|| async {
                    inner.set(inner.get() + 1);
                    Err::<(), Error>(ErrorKind::ConnectionRefused.into())
                })
                .await
        })
        .await;
    assert!(out.is_err());
    assert_eq!((outer.get(), inner.get()), (1, 2), "the inner one retried");
}

/// A breaker that opened while a round's first attempt was out, and cooled
/// down by its hedge's time: the hedge is not sent, and does not take the
/// trial's place to give it back (no trial started nor abandoned).
#[test]
fn a_hedge_due_after_the_breaker_opened_leaves_its_trial_alone() {
    use backstop_runtime::limit::{BreakerChange, BreakerState};
    static CHANGES: Mutex<Vec<(BreakerState, BreakerState)>> = Mutex::new(Vec::new());
    fn told(change: &BreakerChange) {
        CHANGES.lock().unwrap().push((change.from, change.to));
    }
    static BREAKER: CircuitBreaker =
        CircuitBreaker::new(1, Duration::from_millis(100)).on_change(told);
    let policy = Policy::new().idempotent(true).no_budget();
    let retry = Retry::new(&policy)
        .breaker(&BREAKER)
        .hedge(Hedge::after(MS * 500));
    let log = Mutex::new(Vec::new());
    let out = runtime().block_on(async {
        let call = retry.call_async(|| async {
            let attempt = context().unwrap().attempt();
            log.lock().unwrap().push(attempt);
            sleep(MS * 1_000).await;
            Ok::<_, Failure>(attempt)
        });
        let open = async {
            // Another call fails 10 ms in: open, cooled down at 110 ms.
            sleep(MS * 10).await;
            let now = Instant::now().into_std();
            BREAKER
                .try_acquire(now)
                .unwrap()
                .failed(Verdict::Retry, now);
        };
        tokio::join!(call, open).0
    });
    assert_eq!(out, Ok(1));
    assert_eq!(*log.lock().unwrap(), [1], "no hedge");
    assert_eq!(
        *CHANGES.lock().unwrap(),
        [(BreakerState::Closed, BreakerState::Open)]
    );
}

#[test]
fn a_round_sends_at_most_max_hedges() {
    use backstop_runtime::hedge::MAX_HEDGES;
    let widest = Hedge::after(MS).hedges(MAX_HEDGES);
    assert_eq!(widest.get_hedges(), 10);
    let more = std::panic::catch_unwind(|| Hedge::after(MS).hedges(MAX_HEDGES + 1));
    let message = more.expect_err("one more hedge than a round sends");
    let message = message.downcast_ref::<&str>().copied().unwrap_or_default();
    assert!(
        message.contains("`MAX_HEDGES` (10) hedges at most"),
        "{message}"
    );
    // (The largest count too: refused, not a round polling billions.)
    assert!(std::panic::catch_unwind(|| Hedge::after(MS).hedges(u32::MAX)).is_err());
}
