//! `#[retry(hedge = ..)]`: attempts side by side for calls that are slow
//! rather than failing, in tokio's paused time.

use std::io::{Error, ErrorKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::limit::{BreakerState, CircuitBreaker, TokenBudget};
use backstop::{context, retry};
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

/// What each attempt does, by its number (1-based; the last entry for
/// later ones): how long it takes, then what it answers.
#[derive(Clone, Copy, Debug)]
enum Then {
    Ok,
    /// A failure a retry can fix.
    Reset,
    /// A failure no retry can fix.
    Denied,
}

fn script(table: &[(u64, Then)]) -> (Duration, Then) {
    let attempt = context().expect("inside an attempt").attempt() as usize;
    let (ms, then) = table[(attempt - 1).min(table.len() - 1)];
    (MS * ms as u32, then)
}

/// What the attempts of one call did.
#[derive(Default)]
struct Log {
    /// Attempt numbers, as they started.
    started: Vec<u32>,
    /// Attempt numbers, as they ran to their end.
    finished: Vec<u32>,
    /// Attempt numbers, as they were dropped midway.
    dropped: Vec<u32>,
    keys: Vec<u128>,
    /// When each attempt started, since the test's start.
    at: Vec<Duration>,
}

/// Notes an attempt dropped before its end.
struct Guard<'a>(&'a Mutex<Log>, u32, bool);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !self.2 {
            self.0.lock().unwrap().dropped.push(self.1);
        }
    }
}

async fn attempt(log: &Mutex<Log>, start: Instant, table: &[(u64, Then)]) -> Result<u32, Error> {
    let cx = context().unwrap();
    let n = cx.attempt();
    {
        let mut log = log.lock().unwrap();
        log.started.push(n);
        log.keys.push(cx.idempotency_key().to_u128());
        log.at.push(start.elapsed());
    }
    let mut guard = Guard(log, n, false);
    let (took, then) = script(table);
    sleep(took).await;
    guard.2 = true;
    log.lock().unwrap().finished.push(n);
    match then {
        Then::Ok => Ok(n),
        Then::Reset => Err(ErrorKind::ConnectionRefused.into()),
        Then::Denied => Err(ErrorKind::PermissionDenied.into()),
    }
}

#[retry(hedge = 50ms, idempotent, budget = none, base = 100ms, jitter = none)]
async fn hedged(log: &Mutex<Log>, start: Instant, table: &[(u64, Then)]) -> Result<u32, Error> {
    attempt(log, start, table).await
}

async fn run(table: &[(u64, Then)]) -> (Result<u32, Error>, Duration, Log) {
    let log = Mutex::new(Log::default());
    let start = Instant::now();
    let out = hedged(&log, start, table).await;
    let took = start.elapsed();
    (out, took, log.into_inner().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_attempt_is_overtaken_by_its_hedge_and_dropped() {
    let (out, took, log) = run(&[(1_000, Then::Ok), (10, Then::Ok)]).await;
    assert_eq!(out.unwrap(), 2, "the hedge answered first");
    assert_eq!(took, MS * 60, "sent at 50 ms, answered 10 ms later");
    assert_eq!(log.started, [1, 2]);
    assert_eq!(log.at, [Duration::ZERO, MS * 50]);
    assert_eq!(log.finished, [2]);
    assert_eq!(log.dropped, [1], "the slow attempt is cancelled at once");
    assert_eq!(log.keys[0], log.keys[1], "one idempotency key for the call");
}

/// The first attempt asks for the call's key only after its hedge went
/// out (asking draws it); the hedge asks at once.
#[retry(hedge = 50ms, idempotent, budget = none)]
async fn asks_late(started: &AtomicU32, keys: &Mutex<Vec<(u32, u128)>>) -> Result<u32, Error> {
    let first = started.fetch_add(1, Ordering::Relaxed) == 0;
    if first {
        sleep(MS * 100).await;
    }
    let cx = context().unwrap();
    keys.lock()
        .unwrap()
        .push((cx.attempt(), cx.idempotency_key().to_u128()));
    sleep(if first { MS * 10 } else { MS * 1_000 }).await;
    Ok(cx.attempt())
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_asking_for_its_key_after_the_hedge_went_out_shares_the_hedges() {
    let (started, keys) = (AtomicU32::new(0), Mutex::new(Vec::new()));
    assert_eq!(asks_late(&started, &keys).await.unwrap(), 1);
    let keys = keys.into_inner().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!((keys[0].0, keys[1].0), (2, 1), "the hedge asked first");
    assert_eq!(keys[0].1, keys[1].1, "one idempotency key for the call");
}

#[tokio::test(start_paused = true)]
async fn a_fast_first_attempt_sends_no_hedge() {
    let (out, took, log) = run(&[(49, Then::Ok)]).await;
    assert_eq!(out.unwrap(), 1);
    assert_eq!(took, MS * 49);
    assert_eq!(log.started, [1]);
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_may_still_win_after_the_hedge_is_sent() {
    let (out, took, log) = run(&[(70, Then::Ok), (100, Then::Ok)]).await;
    assert_eq!(out.unwrap(), 1);
    assert_eq!(took, MS * 70);
    assert_eq!(log.dropped, [2]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_from_the_first_attempt_ends_the_call() {
    let (out, took, log) = run(&[(80, Then::Denied), (1_000, Then::Ok)]).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(took, MS * 80);
    assert_eq!(log.dropped, [2]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_from_the_hedge_ends_the_call() {
    let (out, took, log) = run(&[(1_000, Then::Ok), (10, Then::Denied)]).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(took, MS * 60);
    assert_eq!(log.dropped, [1]);
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_of_one_attempt_does_not_end_the_others() {
    let (out, took, log) = run(&[(60, Then::Reset), (50, Then::Ok)]).await;
    assert_eq!(out.unwrap(), 2);
    assert_eq!(took, MS * 100);
    assert_eq!(log.finished, [1, 2]);
    assert!(log.dropped.is_empty());
}

#[tokio::test(start_paused = true)]
async fn retries_apply_after_every_attempt_in_flight_failed() {
    // 1 fails at 60 ms, its hedge (sent at 50) at 80: all failed, so the
    // call sleeps its backoff (100 ms, no jitter) and attempts again: the
    // third attempt of the call (hedges are attempts).
    let (out, took, log) = run(&[(60, Then::Reset), (30, Then::Reset), (5, Then::Ok)]).await;
    assert_eq!(out.unwrap(), 3);
    assert_eq!(log.started, [1, 2, 3]);
    assert_eq!(log.at[2], MS * 180);
    assert_eq!(took, MS * 185);
}

#[tokio::test(start_paused = true)]
async fn hedges_count_as_attempts() {
    // attempts = 3 (the default): 1 and its hedge fail, 3 fails alone
    // (its hedge would be a fourth attempt), and the call gives up.
    let (out, _, log) = run(&[(60, Then::Reset), (30, Then::Reset), (1_000, Then::Reset)]).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!(log.started, [1, 2, 3]);
}

#[retry(hedge = 20ms, hedges = 2, attempts = 5, idempotent, budget = none)]
async fn two_hedges(log: &Mutex<Log>, start: Instant, table: &[(u64, Then)]) -> Result<u32, Error> {
    attempt(log, start, table).await
}

#[tokio::test(start_paused = true)]
async fn hedges_go_out_a_delay_apart_up_to_their_number() {
    let log = Mutex::new(Log::default());
    let start = Instant::now();
    let out = two_hedges(
        &log,
        start,
        &[(1_000, Then::Ok), (1_000, Then::Ok), (30, Then::Ok)],
    )
    .await;
    assert_eq!(out.unwrap(), 3);
    let log = log.into_inner().unwrap();
    assert_eq!(
        log.at,
        [Duration::ZERO, MS * 20, MS * 40],
        "no fourth: two hedges at most"
    );
    assert_eq!(start.elapsed(), MS * 70);
    let mut dropped = log.dropped;
    dropped.sort_unstable();
    assert_eq!(dropped, [1, 2]);
}

static DRAINED: TokenBudget = TokenBudget::standard();

#[retry(hedge = 50ms, idempotent, budget = DRAINED)]
async fn on_a_drained_token_budget(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(log, start, &[(1_000, Then::Ok), (10, Then::Ok)]).await
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_sends_no_hedge() {
    // Half the tokens gone: a retry would not be granted, nor is a hedge.
    for _ in 0..5 {
        DRAINED.failed(std::time::Instant::now());
    }
    let log = Mutex::new(Log::default());
    let start = Instant::now();
    assert_eq!(on_a_drained_token_budget(&log, start).await.unwrap(), 1);
    assert_eq!(start.elapsed(), MS * 1_000, "the slow attempt ran alone");
    assert_eq!(log.into_inner().unwrap().started, [1]);
}

static ONSET: TokenBudget = TokenBudget::standard();

/// Every attempt fails after 30 ms: a dependency that has just gone down.
#[retry(hedge = 20ms, idempotent, budget = ONSET, attempts = 2)]
async fn at_an_outages_onset(sent: &AtomicU32) -> Result<u32, Error> {
    sent.fetch_add(1, Ordering::Relaxed);
    sleep(MS * 30).await;
    Err(Error::from(ErrorKind::ConnectionReset))
}

/// `calls` calls side by side: how many attempts they sent.
async fn side_by_side(calls: u32) -> u32 {
    let sent = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let sent = Arc::clone(&sent);
        tasks.spawn(async move { at_an_outages_onset(&sent).await.unwrap_err() });
    }
    tasks.join_all().await;
    sent.load(Ordering::Relaxed)
}

#[tokio::test(start_paused = true)]
async fn at_an_outages_onset_the_calls_in_flight_hedge_then_the_budget_stops_hedges() {
    // Each of 30 calls' hedges falls due before any failure came back: the
    // token budget (10 tokens) grants each, by a check that takes nothing.
    assert_eq!(side_by_side(30).await, 60);
    // The failures took it below half: none now.
    assert_eq!(side_by_side(30).await, 30);
}

// (The deadline an expression: as literals, a hedge not before the
// deadline is a compile error.)
#[retry(hedge = 50ms, idempotent, budget = none, deadline = Duration::from_millis(50))]
async fn deadline_at_the_hedge(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(log, start, &[(200, Then::Ok), (10, Then::Ok)]).await
}

#[retry(hedge = 50ms, idempotent, budget = none, deadline = 70ms)]
async fn deadline_after_the_hedge(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(log, start, &[(200, Then::Ok), (10, Then::Ok)]).await
}

#[tokio::test(start_paused = true)]
async fn a_hedge_never_starts_at_or_after_the_deadline() {
    let log = Mutex::new(Log::default());
    let start = Instant::now();
    assert_eq!(deadline_at_the_hedge(&log, start).await.unwrap(), 1);
    assert_eq!(
        log.into_inner().unwrap().started,
        [1],
        "no time left at 50 ms"
    );

    let log = Mutex::new(Log::default());
    let start = Instant::now();
    assert_eq!(deadline_after_the_hedge(&log, start).await.unwrap(), 2);
    let log = log.into_inner().unwrap();
    assert_eq!(log.at, [Duration::ZERO, MS * 50]);
}

#[retry(hedge = 50ms, idempotent, budget = none, attempt_timeout = 80ms)]
async fn timed(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(
        log,
        start,
        &[(1_000, Then::Ok), (1_000, Then::Ok), (10, Then::Ok)],
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn each_attempt_has_its_own_timeout() {
    // 1 is cut at 80 ms, 2 (sent at 50) at 130: both timed out, retried
    // (idempotent) after the backoff; 3 answers.
    let log = Mutex::new(Log::default());
    let start = Instant::now();
    assert_eq!(timed(&log, start).await.unwrap(), 3);
    let log = log.into_inner().unwrap();
    assert_eq!(log.dropped, [1, 2]);
    assert!(log.at[2] > MS * 130, "{:?}", log.at);
}

struct Client {
    base: String,
    sent: AtomicU32,
}

impl Client {
    #[retry(hedge = 10ms, idempotent, budget = none)]
    async fn get(&self, path: &str) -> Result<String, Error> {
        let n = self.sent.fetch_add(1, Ordering::Relaxed);
        sleep(if n == 0 { MS * 100 } else { MS }).await;
        Ok(format!("{}{path}", self.base))
    }
}

fn is_send<T: Send>(t: T) -> T {
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_taking_self_and_references_is_hedged_and_send() {
    let client = Arc::new(Client {
        base: "https://api/".to_owned(),
        sent: AtomicU32::new(0),
    });
    let task = tokio::spawn({
        let client = Arc::clone(&client);
        async move { is_send(client.get("users")).await }
    });
    assert_eq!(task.await.unwrap().unwrap(), "https://api/users");
    assert_eq!(client.sent.load(Ordering::Relaxed), 2);
}

#[retry(hedge = p95, idempotent, budget = none)]
async fn adaptive(sent: &AtomicU32, latency: Duration) -> Result<(), Error> {
    sent.fetch_add(1, Ordering::Relaxed);
    sleep(latency).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_delay_hedges_the_slowest_twentieth() {
    // Latencies 1..=100 ms, spread evenly: p95 is 95 ms (the estimate up
    // to a bucket above). No hedge before 100 latencies are known; then
    // about one call in twenty is hedged.
    let sent = AtomicU32::new(0);
    let mut order: Vec<u64> = (1..=100).collect();
    let mut state = 0x9e37_79b9_u64;
    let mut shuffle = |v: &mut Vec<u64>| {
        for i in (1..v.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            v.swap(i, (state % (i as u64 + 1)) as usize);
        }
    };
    for ms in &order {
        adaptive(&sent, MS * *ms as u32).await.unwrap();
    }
    assert_eq!(
        sent.load(Ordering::Relaxed),
        100,
        "no hedge without evidence"
    );
    let calls = 2_000;
    sent.store(0, Ordering::Relaxed);
    for _ in 0..calls / 100 {
        shuffle(&mut order);
        for ms in &order {
            adaptive(&sent, MS * *ms as u32).await.unwrap();
        }
    }
    let hedges = sent.load(Ordering::Relaxed) - calls;
    // Latencies above the delay are hedged: 5 in 100 at p95 exactly, fewer
    // as the estimate rounds up to its bucket's end (95 ms reads 98.3: two
    // in 100 here); never more than the twentieth.
    assert!(
        (20..=100).contains(&hedges),
        "{hedges} hedges in {calls} calls"
    );
}

#[retry(hedge = p95, idempotent, budget = none, key = shard)]
async fn per_shard(shard: &str, took: Duration) -> Result<u32, Error> {
    let attempt = context().expect("inside an attempt").attempt();
    // A first attempt told to stall stalls; its hedge answers at once.
    sleep(if attempt == 1 { took } else { Duration::ZERO }).await;
    Ok(attempt)
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_delay_is_the_functions_whatever_the_key() {
    // The slow shard answers in 50 ms; the fast one has made no call.
    for _ in 0..200 {
        assert_eq!(per_shard("slow", MS * 50).await.unwrap(), 1);
    }
    // A fast shard's stalled call is hedged after the slow one's p95:
    // one estimate for the function, learnt from every key's calls.
    let start = Instant::now();
    assert_eq!(per_shard("fast", Duration::from_secs(5)).await.unwrap(), 2);
    let hedged_after = start.elapsed();
    assert!(
        (MS * 50..=MS * 55).contains(&hedged_after),
        "{hedged_after:?}"
    );
}

static BESIDE_A_FAILING_REPLICA: CircuitBreaker = CircuitBreaker::new(3, Duration::from_secs(30));

/// Attempt 1 answers in 60 ms; its hedge, sent at 20 ms, fails at once.
#[retry(hedge = 20ms, idempotent, budget = none, breaker = BESIDE_A_FAILING_REPLICA)]
async fn beside_a_failing_replica() -> Result<u32, Error> {
    let attempt = context().expect("inside an attempt").attempt();
    if attempt == 1 {
        sleep(MS * 60).await;
        return Ok(attempt);
    }
    Err(Error::from(ErrorKind::ConnectionReset))
}

#[tokio::test(start_paused = true)]
async fn hedges_that_fail_side_by_side_can_open_a_breaker_though_every_call_succeeds() {
    // One after another, each call's success ends the run of failures.
    for _ in 0..3 {
        assert_eq!(beside_a_failing_replica().await.unwrap(), 1);
    }
    assert_eq!(BESIDE_A_FAILING_REPLICA.state(), BreakerState::Closed);
    // Side by side, three hedges fail in a row before any answer comes.
    let (a, b, c) = tokio::join!(
        beside_a_failing_replica(),
        beside_a_failing_replica(),
        beside_a_failing_replica()
    );
    assert_eq!((a.unwrap(), b.unwrap(), c.unwrap()), (1, 1, 1));
    assert_eq!(BESIDE_A_FAILING_REPLICA.state(), BreakerState::Open);
}

#[retry(hedge = p95, idempotent, budget = none)]
async fn learns(sent: &AtomicU32, slow: bool) -> Result<(), Error> {
    sent.fetch_add(1, Ordering::Relaxed);
    sleep(if slow { MS * 50 } else { MS * 10 }).await;
    Ok(())
}

/// 400 calls, one in 25 slow, in a paused runtime of their own: how many
/// hedges went out.
fn hedges_in_a_runtime_of_its_own(idle: Duration) -> u32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let sent = AtomicU32::new(0);
    runtime.block_on(async {
        for i in 0..400 {
            learns(&sent, i % 25 == 24).await.unwrap();
        }
        sleep(idle).await;
    });
    sent.load(Ordering::Relaxed) - 400
}

#[test]
fn under_isolate_each_test_learns_latencies_afresh_on_its_own_clock() {
    // The first runtime's paused clock ends seconds ahead of the real
    // one (more than the window of 10 s: 60 s); the second starts at the real now, behind the latencies the
    // function learnt. Under `isolate()` it learns afresh, and hedges.
    let first = {
        let _fresh = backstop::testing::isolate();
        hedges_in_a_runtime_of_its_own(Duration::from_secs(60))
    };
    assert!(first > 0);
    let _fresh = backstop::testing::isolate();
    assert_eq!(
        hedges_in_a_runtime_of_its_own(Duration::ZERO),
        first,
        "the same as a fresh process"
    );
}

// One layer hedges: a hedge copies the whole attempt, nested calls and
// all, so hedges at two layers would send 2 × 2 requests for a slow call.
// The dependency at the bottom notes the number of the attempt of the
// call that sends it each request: [1, 1] when an outer call hedged (each
// copy's inner call sends its first attempt), [1, 2] when the inner one
// did.

/// Seen by the dependency: the number of each request's attempt.
type Seen = Arc<Mutex<Vec<u32>>>;

/// The dependency at the bottom: notes each request's attempt, and
/// answers after `took` ms.
async fn dependency(seen: &Seen, took: u64) -> Result<u32, Error> {
    let attempt = context().expect("inside an attempt").attempt();
    seen.lock().unwrap().push(attempt);
    sleep(MS * took as u32).await;
    Ok(1)
}

fn seen(seen: &Seen) -> Vec<u32> {
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    seen
}

#[retry(hedge = 20ms, idempotent, budget = none)]
async fn inner_at_20ms(seen: &Seen) -> Result<u32, Error> {
    dependency(seen, 300).await
}

#[retry(hedge = 10ms, idempotent, budget = none)]
async fn inner_at_10ms(seen: &Seen) -> Result<u32, Error> {
    dependency(seen, 300).await
}

/// Hedges before the call inside it would.
#[retry(hedge = 10ms, idempotent, budget = none)]
async fn outer_first(seen: &Seen) -> Result<u32, Error> {
    inner_at_20ms(seen).await
}

/// Hedges after the call inside it would.
#[retry(hedge = 20ms, idempotent, budget = none)]
async fn inner_first(seen: &Seen) -> Result<u32, Error> {
    inner_at_10ms(seen).await
}

/// A call that does not hedge, between two that do.
#[retry(idempotent, budget = none)]
async fn plain_middle(seen: &Seen, inner_hedges_first: bool) -> Result<u32, Error> {
    if inner_hedges_first {
        inner_at_10ms(seen).await
    } else {
        inner_at_20ms(seen).await
    }
}

#[retry(hedge = 15ms, idempotent, budget = none)]
async fn outer_of_a_plain_middle(seen: &Seen, inner_hedges_first: bool) -> Result<u32, Error> {
    plain_middle(seen, inner_hedges_first).await
}

#[tokio::test(start_paused = true)]
async fn a_call_nested_in_a_hedged_attempt_sends_no_hedge_of_its_own() {
    // The outer call hedges at 10 ms: the inner calls, in its two
    // attempts, send their first attempt each.
    let log = Seen::default();
    let start = Instant::now();
    assert_eq!(outer_first(&log).await.unwrap(), 1);
    assert_eq!(
        seen(&log),
        [1, 1],
        "2 requests, not 2 × 2: the outer call's copy"
    );
    assert_eq!(start.elapsed(), MS * 300, "the first request answered");
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_attempt_holds_a_hedged_call_sends_no_hedge_of_its_own() {
    // The inner call hedges at 10 ms: the outer one, at 20 ms, would copy
    // both its attempts.
    let log = Seen::default();
    let start = Instant::now();
    assert_eq!(inner_first(&log).await.unwrap(), 1);
    assert_eq!(
        seen(&log),
        [1, 2],
        "2 requests, not 2 × 2: the inner call's hedge"
    );
    assert_eq!(start.elapsed(), MS * 300, "the first request answered");
}

#[tokio::test(start_paused = true)]
async fn one_layer_hedges_through_a_call_between_that_does_not() {
    for (inner_hedges_first, expected) in [(false, [1, 1]), (true, [1, 2])] {
        let log = Seen::default();
        assert_eq!(
            outer_of_a_plain_middle(&log, inner_hedges_first)
                .await
                .unwrap(),
            1
        );
        assert_eq!(seen(&log), expected, "inner first: {inner_hedges_first}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_closure_call_nested_in_a_hedged_attempt_sends_no_hedge_of_its_own() {
    use backstop::{Policy, Retry, hedge::Hedge};
    let policy = Policy::new().idempotent(true).no_budget();
    for (outer_delay, inner_hedges_first, expected) in [(10, false, [1, 1]), (20, true, [1, 2])] {
        let retry = Retry::new(&policy).hedge(Hedge::after(MS * outer_delay));
        let log = Seen::default();
        let out = retry
            .call_async(|| async {
                if inner_hedges_first {
                    inner_at_10ms(&log).await
                } else {
                    inner_at_20ms(&log).await
                }
            })
            .await;
        assert_eq!(out.unwrap(), 1);
        assert_eq!(seen(&log), expected, "inner first: {inner_hedges_first}");
    }
}

#[retry(hedge = 10ms, idempotent, budget = none)]
async fn carried_inner_at_10ms(seen: Seen) -> Result<u32, Error> {
    dependency(&seen, 300).await
}

#[retry(hedge = 30ms, idempotent, budget = none)]
async fn carried_inner_at_30ms(seen: Seen) -> Result<u32, Error> {
    dependency(&seen, 300).await
}

/// Hedges at 20 ms an attempt that runs its call in a task of its own,
/// carried along.
#[retry(hedge = 20ms, idempotent, budget = none)]
async fn outer_of_a_carried_call(seen: &Seen, inner_hedges_first: bool) -> Result<u32, Error> {
    use backstop::scope::InCurrentCall;
    let seen = Arc::clone(seen);
    let task = if inner_hedges_first {
        tokio::spawn(carried_inner_at_10ms(seen).in_current_call())
    } else {
        tokio::spawn(carried_inner_at_30ms(seen).in_current_call())
    };
    task.await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn one_layer_hedges_through_work_carried_to_a_task() {
    for (inner_hedges_first, expected) in [(false, [1, 1]), (true, [1, 2])] {
        let log = Seen::default();
        assert_eq!(
            outer_of_a_carried_call(&log, inner_hedges_first)
                .await
                .unwrap(),
            1
        );
        // (The losing copy's task runs on: let it show what it would send.)
        sleep(MS * 1_000).await;
        assert_eq!(seen(&log), expected, "inner first: {inner_hedges_first}");
    }
}

#[retry(hedge = 100ms, idempotent, budget = none)]
async fn slow_after_a_hedged_call(seen: &Seen) -> Result<u32, Error> {
    let first = inner_quick(seen).await?;
    sleep(MS * 500).await;
    Ok(first)
}

#[retry(hedge = 10ms, idempotent, budget = none)]
async fn inner_quick(seen: &Seen) -> Result<u32, Error> {
    dependency(seen, 30).await
}

#[tokio::test(start_paused = true)]
async fn an_attempt_whose_nested_call_hedged_is_not_hedged_for_the_rest_of_it() {
    // The nested call hedged at 10 ms and answered at 30 ms; the attempt
    // is still slow at 100 ms, but a hedge would send the nested call's
    // request a third time.
    let log = Seen::default();
    let start = Instant::now();
    assert_eq!(slow_after_a_hedged_call(&log).await.unwrap(), 1);
    assert_eq!(seen(&log), [1, 2]);
    assert_eq!(start.elapsed(), MS * 530);
}

#[retry(idempotent, budget = none)]
async fn siblings(seen: &Seen) -> Result<u32, Error> {
    inner_at_10ms(seen).await?;
    let (a, b) = tokio::join!(inner_at_10ms(seen), inner_at_20ms(seen));
    Ok(a? + b?)
}

#[tokio::test(start_paused = true)]
async fn hedged_calls_side_by_side_or_one_after_another_each_hedge() {
    // Inside an attempt that no round copies, no call's hedge copies
    // another's.
    let log = Seen::default();
    assert_eq!(siblings(&log).await.unwrap(), 2);
    assert_eq!(seen(&log), [1, 1, 1, 2, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn calls_after_a_nested_hedged_call_hedge_as_before() {
    // What the nested calls said of each other stays with them: a call
    // made later on the same thread, at the top or in a deadline scope,
    // hedges.
    let log = Seen::default();
    inner_first(&log).await.unwrap();
    outer_first(&log).await.unwrap();
    let log = Seen::default();
    inner_at_20ms(&log).await.unwrap();
    assert_eq!(seen(&log), [1, 2], "hedged at the top");
    let log = Seen::default();
    let out = backstop::scope::deadline(Duration::from_secs(5), inner_at_20ms(&log)).await;
    assert_eq!(out.unwrap().unwrap(), 1);
    assert_eq!(seen(&log), [1, 2], "hedged in a deadline scope");
}

/// Hedges past `hedge::MAX_HEDGES`, given by an expression (a literal is
/// a compile error): a panic when the function runs, before its request
/// goes out.
fn too_many_hedges() -> u32 {
    backstop::hedge::MAX_HEDGES + 1
}

static SENT_TOO_WIDELY: AtomicU32 = AtomicU32::new(0);

#[retry(hedge = 10ms, hedges = too_many_hedges(), attempts = 20, idempotent, budget = none)]
async fn hedged_too_widely() -> Result<u32, std::io::Error> {
    SENT_TOO_WIDELY.fetch_add(1, Ordering::Relaxed);
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn a_hedges_expression_past_max_hedges_panics_when_the_function_runs() {
    let panic = tokio::spawn(hedged_too_widely())
        .await
        .expect_err("it panicked")
        .into_panic();
    let message = panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap();
    assert!(
        message.contains("`MAX_HEDGES` (10) hedges at most"),
        "{message}"
    );
    assert_eq!(SENT_TOO_WIDELY.load(Ordering::Relaxed), 0, "nothing sent");
}

#[retry(hedge = 50ms, attempts = 2, idempotent, budget = none)]
async fn hedged_twice(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(log, start, &[(100, Then::Reset)]).await
}

#[retry(attempts = 3, budget = none, on_give_up = |e| OUTER_GAVE_UP.lock().unwrap().push(e.reason()))]
async fn around_hedged_twice(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    hedged_twice(log, start).await
}

static OUTER_GAVE_UP: Mutex<Vec<backstop::GiveUp>> = Mutex::new(Vec::new());

/// A nested call that sent a hedge and gave up counts as one that retried:
/// its request went out twice, and the call around it does not repeat
/// that (two requests, not 2 × 3).
#[tokio::test(start_paused = true)]
async fn a_nested_call_that_hedged_and_gave_up_is_not_retried_around() {
    let log = Mutex::new(Log::default());
    let out = around_hedged_twice(&log, Instant::now()).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!(
        log.into_inner().unwrap().started,
        [1, 2],
        "one round of the nested call"
    );
    assert_eq!(
        *OUTER_GAVE_UP.lock().unwrap(),
        [backstop::GiveUp::RetriedBelow]
    );
}

#[retry(hedge = 50ms, attempts = 3, idempotent, budget = none)]
async fn hedged_denied(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    attempt(log, start, &[(100, Then::Denied)]).await
}

// (An enclosing call that would retry any error: only the rule keeps it
// from retrying this one.)
#[retry(
    attempts = 3,
    budget = none,
    when = |_: &Error| backstop::Verdict::Retry,
    on_give_up = |e| OUTER_GAVE_UP_ON_STOP.lock().unwrap().push(e.reason()),
)]
async fn around_hedged_denied(log: &Mutex<Log>, start: Instant) -> Result<u32, Error> {
    hedged_denied(log, start).await
}

static OUTER_GAVE_UP_ON_STOP: Mutex<Vec<backstop::GiveUp>> = Mutex::new(Vec::new());

/// A nested call whose first round (its attempt and a hedge beside it)
/// ended in an error no retry can fix is told `not retried`, but its
/// request went out twice: the call around it does not repeat that.
#[tokio::test(start_paused = true)]
async fn a_nested_hedged_round_that_stopped_is_not_retried_around() {
    let log = Mutex::new(Log::default());
    let out = around_hedged_denied(&log, Instant::now()).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(
        log.into_inner().unwrap().started,
        [1, 2],
        "one round of the nested call"
    );
    assert_eq!(
        *OUTER_GAVE_UP_ON_STOP.lock().unwrap(),
        [backstop::GiveUp::RetriedBelow]
    );
}

#[retry(hedge = 10ms, idempotent, budget = none)]
async fn hedged_slow(sent: &AtomicU32) -> Result<u32, Error> {
    sent.fetch_add(1, Ordering::Relaxed);
    sleep(MS * 1000).await;
    Ok(1)
}

/// Its attempt cuts the nested hedged call off with a timeout of its own,
/// once its hedge has gone.
#[retry(attempts = 3, base = 1ms, idempotent, budget = none)]
async fn around_cutting_off_a_hedged_call(sent: &AtomicU32) -> Result<u32, Error> {
    match tokio::time::timeout(MS * 50, hedged_slow(sent)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ErrorKind::TimedOut.into()),
    }
}

/// A nested call dropped midway after its hedge went (a timeout of the
/// caller's own around it) counts as one that retried: its request went
/// out twice, and the call around it does not repeat that (2 requests,
/// not 2 × 3).
#[tokio::test(start_paused = true)]
async fn a_nested_call_dropped_after_it_hedged_is_not_retried_around() {
    let sent = AtomicU32::new(0);
    let out = around_cutting_off_a_hedged_call(&sent).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::TimedOut);
    assert_eq!(
        sent.load(Ordering::Relaxed),
        2,
        "one round of the nested call"
    );
}

#[retry(attempts = 5, base = 10ms, jitter = none, budget = none)]
async fn failing_every_10ms(sent: &AtomicU32) -> Result<u32, Error> {
    sent.fetch_add(1, Ordering::Relaxed);
    Err(ErrorKind::ConnectionRefused.into())
}

/// Its first attempt waits on a call that retries every 10 ms; its hedge,
/// at 20 ms, answers at once.
#[retry(hedge = 20ms, idempotent, budget = none)]
async fn hedged_over_a_retrying_call(sent: &AtomicU32) -> Result<u32, Error> {
    if context().is_some_and(|cx| cx.attempt() == 1) {
        return failing_every_10ms(sent).await;
    }
    Ok(2)
}

/// Fails by itself after the hedged call answers, every time.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn around_a_hedged_call_that_answered(
    sent: &AtomicU32,
    runs: &AtomicU32,
) -> Result<u32, Error> {
    runs.fetch_add(1, Ordering::Relaxed);
    hedged_over_a_retrying_call(sent).await?;
    Err(ErrorKind::ConnectionRefused.into())
}

/// A hedged round's losing attempt is dropped, when the hedge answers, in
/// its own frame: a call nested in it that retried and is dropped midway
/// retried in the call's attempt, as one that gave up before the round
/// ended did, and the call around the round does not retry that attempt,
/// though it failed otherwise (the rule holds for the whole attempt). The
/// nested call's 2 requests are not sent 3 times.
#[tokio::test(start_paused = true)]
async fn a_losing_attempts_nested_retry_counts_as_the_rounds() {
    let (sent, runs) = (AtomicU32::new(0), AtomicU32::new(0));
    let out = around_a_hedged_call_that_answered(&sent, &runs).await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!(
        (sent.load(Ordering::Relaxed), runs.load(Ordering::Relaxed)),
        (2, 1)
    );
}

/// The dependency of [`carried_below`]: slow, its attempts logged with
/// when they were sent.
async fn carried_dependency(log: &Mutex<Vec<u64>>, start: Instant) -> Result<u32, Error> {
    log.lock().unwrap().push(start.elapsed().as_millis() as u64);
    sleep(MS * 300).await;
    Ok(1)
}

#[retry(hedge = 100ms, idempotent, budget = none)]
async fn carried_below(log: Arc<Mutex<Vec<u64>>>, start: Instant) -> Result<u32, Error> {
    carried_dependency(&log, start).await
}

/// A call between, with no hedge of its own: its attempt carries
/// `carried_below` into a task, and is polled again at 70 ms while it
/// waits for it.
#[retry(attempts = 1, idempotent, budget = none)]
async fn between_carrying(log: &Arc<Mutex<Vec<u64>>>, start: Instant) -> Result<u32, Error> {
    use backstop::scope::InCurrentCall;
    let task = tokio::spawn(carried_below(Arc::clone(log), start).in_current_call());
    let mut task = std::pin::pin!(task);
    tokio::select! {
        out = &mut task => return out.unwrap(),
        () = tokio::time::sleep_until(start + MS * 70) => {}
    }
    task.await.unwrap()
}

#[retry(hedge = 50ms, idempotent, budget = none)]
async fn above_between_carrying(log: &Arc<Mutex<Vec<u64>>>, start: Instant) -> Result<u32, Error> {
    between_carrying(log, start).await
}

/// Work carried out of a call between's attempt learns of a hedge above
/// once that attempt is polled again: the call in it sends no hedge of its
/// own (the outer's at 50 ms is the one; 2 requests, not 3).
#[tokio::test(start_paused = true)]
async fn work_carried_out_of_a_call_between_learns_of_a_hedge_above_when_polled_again() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    assert_eq!(above_between_carrying(&log, start).await.unwrap(), 1);
    sleep(MS * 2_000).await;
    let mut sent = log.lock().unwrap().clone();
    sent.sort_unstable();
    assert_eq!(sent, [0, 50], "the first attempt and the outer's hedge");
}
