//! Stress: two threads hammer one budget, breaker and throttle, a million
//! operations each in release builds (`cargo test --release --test
//! stress`, or `RUSTFLAGS="--cfg backstop_stress"` before it to build
//! none of the dev-dependencies it does not use, as CI does; a tenth of
//! that in debug builds), then the invariants are
//! checked: nothing lost, the counts add up, not one retry beyond the
//! budget (in fresh windows and in a sliding one), never two probes at
//! once. A thread that fails makes the others fail too, never hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use backstop_runtime::Verdict;
use backstop_runtime::backoff::Rng;
use backstop_runtime::limit::{
    AdaptiveThrottle, BreakerState, CircuitBreaker, TokenBudget, WindowBudget,
};

const THREADS: usize = 2;

/// A barrier that a failing thread cannot turn into a hang: a thread that
/// panics marks it broken on the way out, and the others stop waiting and
/// panic too, so the test fails instead of waiting forever.
#[derive(Default)]
struct Lockstep {
    arrived: AtomicUsize,
    broken: AtomicBool,
}

/// One thread's place in a [`Lockstep`].
struct Meet<'a> {
    lockstep: &'a Lockstep,
    rounds: usize,
}

impl Meet<'_> {
    /// Waits until every thread has met as often as this one.
    fn wait(&mut self) {
        self.rounds += 1;
        let lockstep = self.lockstep;
        lockstep.arrived.fetch_add(1, Ordering::AcqRel);
        while lockstep.arrived.load(Ordering::Acquire) < THREADS * self.rounds {
            assert!(
                !lockstep.broken.load(Ordering::Acquire),
                "another thread failed"
            );
            std::thread::yield_now();
        }
    }
}

impl Drop for Meet<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.lockstep.broken.store(true, Ordering::Release);
        }
    }
}

/// Runs `job(thread, meet)` on `THREADS` threads at once and returns what
/// each returned, in thread order.
fn on_threads<T, F>(job: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, &mut Meet<'_>) -> T + Send + Sync + 'static,
{
    let lockstep = Arc::new(Lockstep::default());
    let job = Arc::new(job);
    (0..THREADS)
        .map(|t| {
            let (lockstep, job) = (lockstep.clone(), job.clone());
            std::thread::spawn(move || {
                let mut meet = Meet {
                    lockstep: &lockstep,
                    rounds: 0,
                };
                job(t, &mut meet)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .collect()
}

/// Operations per thread.
const OPS: usize = if cfg!(debug_assertions) {
    100_000
} else {
    1_000_000
};

/// The threads meet at a barrier every `LOCKSTEP` operations, so their
/// clocks (each thread's own count of operations) never drift apart by
/// more than `LOCKSTEP` steps: the budget's bound is a promise among
/// callers on one clock.
const LOCKSTEP: usize = 1_000;

/// Virtual time per operation: a million operations span 10 s, ten
/// windows of the budget's 1 s `ttl`.
const STEP: Duration = Duration::from_micros(10);

/// The breaker's threads meet more often: their clocks stay within 2 ms,
/// less than its 5 ms cooldown. (With `LOCKSTEP`, 10 ms apart, a probe's
/// failure reported on a clock behind the others reopened the breaker
/// with a cooldown the others' clocks had already passed, and a probe of
/// the new opening went out beside one of the earlier round, as the
/// breaker allows: a trial of an earlier round counts for nothing. The
/// one-probe rule is a promise among callers on one clock.)
const BREAKER_LOCKSTEP: usize = 200;

/// One withdrawal or one call, as a thread saw it.
#[derive(Clone, Copy)]
struct Event {
    call: bool,
    granted: bool,
}

#[test]
fn a_hammered_budget_loses_nothing() {
    let ttl = Duration::from_secs(1);
    let budget = Arc::new(WindowBudget::new(0.1, 5, ttl));
    let base = Instant::now();
    let logs: Vec<Vec<Event>> = on_threads({
        let budget = budget.clone();
        move |t, meet| {
            let mut rng = Rng::seeded(t as u64);
            let mut log = Vec::with_capacity(OPS);
            for i in 0..OPS {
                if i % LOCKSTEP == 0 {
                    meet.wait();
                }
                let at = STEP * i as u32;
                // Three calls for every retry asked: a failure rate far
                // above the budget's 10%, so it refuses most of them.
                if rng.next_u64().is_multiple_of(4) {
                    let granted = budget.try_withdraw(base + at);
                    log.push(Event {
                        call: false,
                        granted,
                    });
                } else {
                    budget.record_call(base + at);
                    log.push(Event {
                        call: true,
                        granted: false,
                    });
                }
            }
            log
        }
    });

    let events: Vec<Event> = logs.into_iter().flatten().collect();
    let calls = events.iter().filter(|e| e.call).count() as u64;
    let asked = events.len() as u64 - calls;
    let granted = events.iter().filter(|e| e.granted).count() as u64;
    let stats = budget.stats();
    assert_eq!(stats.calls, calls, "every call counted");
    assert_eq!(stats.retries, granted, "every grant counted");
    assert_eq!(
        stats.retries + stats.refusals,
        asked,
        "every withdrawal answered once"
    );
    assert!(granted > 0 && stats.refusals > 0);
}

/// Rounds of the strict test: in each, both threads record their calls,
/// then race to withdraw, all at one instant, in a fresh window.
const ROUNDS: usize = 10;

#[test]
fn racing_withdrawals_get_exactly_what_the_calls_paid_for() {
    let ttl = Duration::from_secs(1);
    let budget = Arc::new(WindowBudget::new(0.1, 5, ttl));
    let base = Instant::now();
    // Per thread and round: 3/4 of the operations record calls, 1/4 ask.
    let per_round = OPS / ROUNDS;
    let (calls, asks) = (per_round * 3 / 4, per_round / 4);
    let granted: Vec<Vec<u64>> = on_threads({
        let budget = budget.clone();
        move |_, meet| {
            (0..ROUNDS)
                .map(|round| {
                    // Rounds 2 ttl apart: each starts a fresh window.
                    let now = base + ttl * 2 * round as u32;
                    for _ in 0..calls {
                        budget.record_call(now);
                    }
                    meet.wait();
                    let got = (0..asks).filter(|_| budget.try_withdraw(now)).count() as u64;
                    meet.wait();
                    got
                })
                .collect()
        }
    });
    let allowed = (THREADS * calls) as u64 / 10 + 5;
    for round in 0..ROUNDS {
        let got: u64 = granted.iter().map(|g| g[round]).sum();
        assert_eq!(
            got, allowed,
            "round {round}: not one retry more, not one less"
        );
    }
    let stats = budget.stats();
    assert_eq!(stats.calls, (THREADS * calls * ROUNDS) as u64);
    assert_eq!(stats.retries, allowed * ROUNDS as u64);
    assert_eq!(
        stats.refusals,
        (THREADS * asks * ROUNDS) as u64 - stats.retries
    );
}

/// Like the test above, but with rounds a quarter of a `ttl` apart, so the
/// window slides over them: in every window, the grants of the rounds in it
/// stay within 10% of their calls plus the reserve.
#[test]
fn racing_rounds_in_a_sliding_window_keep_the_bound() {
    let ttl = Duration::from_secs(1);
    let budget = Arc::new(WindowBudget::new(0.1, 5, ttl));
    let base = Instant::now();
    let rounds_total = 4 * ROUNDS;
    let half = OPS / rounds_total / 2;
    // Traffic that varies from round to round, so the window's edges matter.
    let calls_of = move |round: usize, thread: usize| half >> ((round + thread) % 3);
    let granted: Vec<Vec<u64>> = on_threads({
        let budget = budget.clone();
        move |t, meet| {
            (0..rounds_total)
                .map(|round| {
                    let now = base + ttl / 4 * round as u32;
                    for _ in 0..calls_of(round, t) {
                        budget.record_call(now);
                    }
                    meet.wait();
                    let got = (0..half).filter(|_| budget.try_withdraw(now)).count() as u64;
                    meet.wait();
                    got
                })
                .collect()
        }
    });
    let calls_in = |round: usize| -> u64 { (0..THREADS).map(|t| calls_of(round, t) as u64).sum() };
    let grants_in = |round: usize| -> u64 { granted.iter().map(|g| g[round]).sum() };
    // The ttl ending at round `r` holds rounds r-3 ..= r (a quarter apart).
    for r in 0..rounds_total {
        let window = r.saturating_sub(3)..=r;
        let c: u64 = window.clone().map(calls_in).sum();
        let g: u64 = window.map(grants_in).sum();
        assert!(g * 10 <= c + 10 * 5, "round {r}: {g} retries for {c} calls");
    }
    let total: u64 = (0..rounds_total).map(grants_in).sum();
    assert!(total > 0, "the budget granted something");
    assert_eq!(budget.stats().retries, total);
}

#[test]
fn a_hammered_breaker_lets_a_second_probe_out_only_past_the_first_ones_time() {
    let breaker = Arc::new(CircuitBreaker::new(3, Duration::from_millis(5)));
    let probes_out = Arc::new(AtomicUsize::new(0));
    let base = Instant::now();
    let counts: Vec<(u64, u64, u64)> = on_threads({
        let (breaker, probes_out) = (breaker.clone(), probes_out.clone());
        move |t, meet| {
            let mut rng = Rng::seeded(100 + t as u64);
            let (mut admitted, mut rejected, mut probes) = (0, 0, 0);
            for i in 0..OPS {
                if i % BREAKER_LOCKSTEP == 0 {
                    meet.wait();
                }
                let now = base + STEP * i as u32;
                match breaker.try_acquire(now) {
                    Ok(permit) => {
                        admitted += 1;
                        if permit.is_probe() {
                            probes += 1;
                            // When the probe out (if any) was let through,
                            // in microseconds after `base`, plus one.
                            let mine = (now - base).as_micros() as usize + 1;
                            let out = probes_out.swap(mine, Ordering::SeqCst);
                            // A second trial only once the first is past
                            // its time: a cooldown on the breaker's
                            // millisecond clock.
                            assert!(
                                out == 0 || out.abs_diff(mine) >= 4_000,
                                "a second probe while one is out: {out} and {mine}"
                            );
                            // Hold it a while, as a real probe does: a
                            // second probe would be seen meanwhile.
                            std::thread::yield_now();
                            // Released before the permit is: the next
                            // probe may start the instant it reports. A
                            // probe let through beside this one (this one
                            // past its time) is released too: the first
                            // trial to report decides the half-open
                            // breaker, and the next probe belongs to the
                            // next opening.
                            probes_out.store(0, Ordering::SeqCst);
                        }
                        // Failures in bursts, successes, a Stop now and
                        // then, and a permit dropped unreported (a
                        // cancelled or panicking attempt).
                        match rng.next_u64() % 10 {
                            0..=3 => permit.failed(Verdict::Retry, now),
                            4 => permit.failed(Verdict::Stop, now),
                            5 => drop(permit),
                            _ => permit.succeeded(now),
                        }
                    }
                    Err(_) => rejected += 1,
                }
            }
            (admitted, rejected, probes)
        }
    });

    let admitted: u64 = counts.iter().map(|c| c.0).sum();
    let rejected: u64 = counts.iter().map(|c| c.1).sum();
    let probes: u64 = counts.iter().map(|c| c.2).sum();
    assert!(
        admitted > 0 && rejected > 0 && probes > 0,
        "the breaker closed, opened and probed"
    );
    assert_eq!(probes_out.load(Ordering::SeqCst), 0);

    // Quiescent, it still works: after a cooldown a probe goes through,
    // and its success closes the breaker.
    let later = base + STEP * OPS as u32 + Duration::from_secs(1);
    let permit = breaker
        .try_acquire(later)
        .expect("a probe after the cooldown");
    permit.succeeded(later);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn a_hammered_token_budget_loses_no_update() {
    // 4,000,000 tokens, a ratio of 1, drained to half without races: one
    // thread fails OPS times while the other answers OPS times, never near
    // either end, so a sequential replay in any order ends where it began.
    // A lost update (a store where a compare-and-swap belongs) would not.
    let throttle = Arc::new(TokenBudget::new(4_000_000, 1.0));
    let now = std::time::Instant::now();
    for _ in 0..2_000_000 {
        throttle.failed(now);
    }
    let shared = Arc::clone(&throttle);
    on_threads(move |t, meet| {
        meet.wait();
        for _ in 0..OPS {
            if t % 2 == 0 {
                shared.failed(now);
            } else {
                shared.answered(now);
            }
        }
    });
    assert!(
        (throttle.tokens() - 2_000_000.0).abs() < f64::EPSILON,
        "{}",
        throttle.tokens()
    );
}

#[test]
fn a_hammered_adaptive_throttle_loses_no_count() {
    // One instant, one slot: one thread counts OPS requests, the other OPS
    // requests and OPS accepts. K = 1: the rejection probability says
    // exactly how many of each were counted (a lost update, a store where
    // a compare-and-swap belongs, would change it).
    let throttle = Arc::new(AdaptiveThrottle::new(1.0, Duration::from_secs(60)));
    let now = Instant::now();
    let shared = Arc::clone(&throttle);
    on_threads(move |t, meet| {
        meet.wait();
        for _ in 0..OPS {
            shared.requested(now);
            if t % 2 == 1 {
                shared.accepted(now);
            }
        }
    });
    let (requests, accepts) = (2.0 * OPS as f64, OPS as f64);
    let expected = (requests - accepts) / (requests + 1.0);
    let said = throttle.rejection_probability_at(now);
    assert!((said - expected).abs() < 1e-12, "{said} for {expected}");
}

/// Rounds in which both threads bring the same new key at once.
const KEY_ROUNDS: usize = if cfg!(debug_assertions) {
    2_000
} else {
    20_000
};

#[test]
fn a_hammered_table_per_key_gives_racing_callers_one_limiter_and_keeps_failing_keys() {
    use backstop_runtime::limit::Keyed;
    let now = Instant::now();
    // While there are empty places, callers racing to bring one new key
    // always get one limiter.
    let roomy: &'static Keyed<TokenBudget> = Box::leak(Box::new(Keyed::with_capacity(
        TokenBudget::standard(),
        4 * KEY_ROUNDS,
    )));
    let seen = on_threads(move |_, meet| {
        (0..KEY_ROUNDS)
            .map(|round| {
                meet.wait();
                std::ptr::from_ref(roomy.get_at(&round, now)) as usize
            })
            .collect::<Vec<_>>()
    });
    for (round, (a, b)) in seen[0].iter().zip(&seen[1]).enumerate() {
        assert_eq!(a, b, "round {round}: two limiters for one key");
    }
    // A full table, churning: 32 keys that failed once hold their places
    // throughout, and a new key brought by both callers at once gets one
    // limiter, whatever other keys look for places meanwhile.
    let table: &'static Keyed<TokenBudget> =
        Box::leak(Box::new(Keyed::with_capacity(TokenBudget::standard(), 64)));
    let failing: Vec<usize> = (0..32u32)
        .map(|k| {
            let budget = table.get_at(&k, now);
            budget.failed(now);
            std::ptr::from_ref(budget) as usize
        })
        .collect();
    let seen = on_threads(move |_, meet| {
        let mut got = Vec::with_capacity(KEY_ROUNDS);
        for round in 0..KEY_ROUNDS {
            meet.wait();
            let key = 1_000_000 + round as u64;
            got.push(std::ptr::from_ref(table.get_at(&key, now)) as usize);
            // Once both have it, other keys, old and new (which may take
            // its place: it holds nothing to forget).
            meet.wait();
            for k in 0..8u64 {
                let _ = table.get_at(&(key.wrapping_mul(31) % 5_000 + k), now);
            }
        }
        got
    });
    let shared = std::ptr::from_ref(table.shared()) as usize;
    let mut placed = 0;
    for (round, (a, b)) in seen[0].iter().zip(&seen[1]).enumerate() {
        assert_eq!(
            a, b,
            "round {round}: two limiters for one key (shared {shared})"
        );
        placed += usize::from(*a != shared);
    }
    assert!(
        placed > KEY_ROUNDS / 2,
        "{placed} of {KEY_ROUNDS} new keys found a place"
    );
    for (k, place) in (0..32u32).zip(&failing) {
        let budget = table.get_at(&k, now);
        assert_eq!(
            std::ptr::from_ref(budget) as usize,
            *place,
            "key {k} lost its place"
        );
        assert!(budget.tokens() < 10.0, "and its failure");
    }
    assert_eq!(table.len(), 64);
}

#[test]
fn a_hammered_ratio_breaker_opens_only_above_its_ratio() {
    // Half of at least 100 calls over 1 s. Two threads, one all
    // successes, one failing 3 calls in 10: 15% failed, never open. Then
    // the second fails 9 in 10: 45% of all calls... and the first fails
    // too, 2 in 10: 55%, open.
    let run = |fail_a: usize, fail_b: usize| {
        let breaker = Arc::new(CircuitBreaker::ratio(
            0.5,
            100,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        ));
        let t0 = Instant::now();
        let shared = Arc::clone(&breaker);
        on_threads(move |t, meet| {
            let fail = if t == 0 { fail_a } else { fail_b };
            for i in 0..OPS {
                if i % LOCKSTEP == 0 {
                    meet.wait();
                }
                let now = t0 + STEP * i as u32;
                let Ok(permit) = shared.try_acquire(now) else {
                    continue;
                };
                if i % 10 < fail {
                    permit.failed(Verdict::Retry, now);
                } else {
                    permit.succeeded(now);
                }
            }
        });
        breaker.state_at(t0)
    };
    assert_eq!(run(0, 3), BreakerState::Closed, "15% failed");
    assert_ne!(run(2, 9), BreakerState::Closed, "55% failed");
}

/// Held calls (refused, the budget refusing their retries) on two threads
/// race for release while the dependency answers now and then: never two
/// released at once, and every release is followed by the next one only
/// after the released call's retry was decided.
#[test]
fn hammered_held_calls_are_released_one_at_a_time() {
    use backstop_runtime::Policy;
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    use backstop_runtime::time::SystemClock;
    // A tiny ratio: answers reopen the gate, never the bucket; a ride-out
    // longer than the test.
    static BUDGET: TokenBudget = TokenBudget::new(4, 0.001).ride_out(Duration::from_secs(3600));
    static OUT: AtomicUsize = AtomicUsize::new(0);
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let policy: &'static Policy = Box::leak(Box::new(
        Policy::new()
            .attempts(u32::MAX)
            .deadline(Some(Duration::from_secs(3600))),
    ));
    let rounds = OPS / 20;
    on_threads(move |_, meet| {
        for round in 0..rounds {
            if round % LOCKSTEP == 0 {
                meet.wait();
            }
            let mut state = AttemptState::new(policy, SystemClock).budget(Some(&BUDGET));
            // Refused until the budget holds the call.
            loop {
                match state.decide(Attempted::Failed(Verdict::Refused)) {
                    Decision::Retry(_) if state.held().is_some() => break,
                    Decision::Retry(_) => {}
                    other => panic!("{other:?}"),
                }
            }
            BUDGET.answered(Instant::now());
            loop {
                match state.held() {
                    None => {
                        assert_eq!(
                            OUT.fetch_add(1, Ordering::AcqRel),
                            0,
                            "two released at once"
                        );
                        RELEASED.fetch_add(1, Ordering::Relaxed);
                        OUT.fetch_sub(1, Ordering::AcqRel);
                        // Refused again: the gate closes until an answer.
                        let _ = state.decide(Attempted::Failed(Verdict::Refused));
                        break;
                    }
                    Some(Ok(_)) => BUDGET.answered(Instant::now()),
                    Some(Err(reason)) => panic!("{reason:?}"),
                }
            }
        }
    });
    assert_eq!(RELEASED.load(Ordering::Relaxed), THREADS * rounds);
}
