//! `#[retry(breaker = ..)]`: fail fast while the dependency is down.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use backstop::limit::{BreakerState, CircuitBreaker};
use backstop::testing::VirtualTime;
use backstop::{CircuitOpen, Classify, Verdict, retry};

#[derive(Debug, PartialEq)]
enum ApiError {
    Unavailable,
    BadRequest,
    Open,
}

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        match self {
            ApiError::Unavailable => Verdict::Retry,
            ApiError::BadRequest | ApiError::Open => Verdict::Stop,
        }
    }
}

impl From<CircuitOpen> for ApiError {
    fn from(_: CircuitOpen) -> Self {
        ApiError::Open
    }
}

static DOWN: CircuitBreaker = CircuitBreaker::new(3, Duration::from_secs(30));

#[retry(attempts = 2, breaker = DOWN, budget = none, jitter = none)]
fn call_down(calls: &AtomicU32, answer: fn() -> Result<(), ApiError>) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    answer()
}

#[test]
fn opens_at_the_threshold_then_rejects_without_running_the_body() {
    let vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let down = || Err(ApiError::Unavailable);
    // Two attempts, then a third failure in the next call opens it, and
    // that call gives up at once rather than sleep for a rejection.
    assert_eq!(call_down(&calls, down), Err(ApiError::Unavailable));
    assert_eq!(call_down(&calls, down), Err(ApiError::Unavailable));
    assert_eq!(calls.load(Relaxed), 3);
    assert_eq!(DOWN.state(), BreakerState::Open);
    assert_eq!(
        vt.sleeps().len(),
        1,
        "no sleep for a retry the breaker would reject"
    );
    for _ in 0..10 {
        assert_eq!(call_down(&calls, down), Err(ApiError::Open));
    }
    assert_eq!(
        calls.load(Relaxed),
        3,
        "rejected calls never reach the dependency"
    );

    // After the cooldown: one probe, never retried; its failure reopens.
    vt.advance(Duration::from_secs(30));
    assert_eq!(call_down(&calls, down), Err(ApiError::Unavailable));
    assert_eq!(calls.load(Relaxed), 4, "the probe ran once");
    assert_eq!(DOWN.state(), BreakerState::Open);
    assert_eq!(call_down(&calls, down), Err(ApiError::Open));

    // Its success closes it.
    vt.advance(Duration::from_secs(30));
    assert_eq!(call_down(&calls, || Ok(())), Ok(()));
    assert_eq!(DOWN.state(), BreakerState::Closed);
}

static PICKY: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));

#[retry(breaker = PICKY, budget = none)]
fn bad_request() -> Result<(), ApiError> {
    Err(ApiError::BadRequest)
}

#[test]
fn client_errors_never_open_the_breaker() {
    let _vt = VirtualTime::start();
    for _ in 0..100 {
        assert_eq!(bad_request(), Err(ApiError::BadRequest));
    }
    assert_eq!(PICKY.state(), BreakerState::Closed);
}

static FLAKY: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(10));

#[retry(attempts = 3, breaker = FLAKY, budget = none, deadline = none)]
async fn slow_probe(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    tokio::time::sleep(Duration::from_secs(60)).await;
    Err(ApiError::Unavailable)
}

#[retry(attempts = 1, breaker = FLAKY, budget = none)]
async fn trip(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_the_half_open_slot_a_cooldown_after_it_went() {
    let calls = AtomicU32::new(0);
    let _ = trip(&calls).await;
    assert_eq!(FLAKY.state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(10)).await;
    // The probe is cancelled mid-attempt (a caller's timeout).
    let cancelled = tokio::time::timeout(Duration::from_secs(1), slow_probe(&calls)).await;
    assert!(cancelled.is_err());
    assert_eq!(calls.load(Relaxed), 2, "the probe started");
    // As if it were still out: the next trial goes a cooldown after it was
    // let through, not before (callers that time out would otherwise probe
    // a hung dependency one after another, the cooldown for nothing).
    assert_eq!(FLAKY.state(), BreakerState::Open, "its time is not over");
    assert_eq!(trip(&calls).await, Err(ApiError::Open));
    tokio::time::advance(Duration::from_secs(9)).await;
    // Not wedged with nobody probing: a trial may go, and the next caller
    // is it.
    assert_eq!(FLAKY.state(), BreakerState::HalfOpen, "a trial may go");
    let _ = trip(&calls).await;
    assert_eq!(calls.load(Relaxed), 3, "the next caller was let through");
}

static HUNG: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(1));

#[retry(attempts = 1, breaker = HUNG, budget = none, deadline = none)]
async fn hung(calls: &AtomicU32, answers: bool) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    if answers {
        return Err(ApiError::Unavailable);
    }
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn callers_that_time_out_on_a_hung_dependency_probe_it_once_per_cooldown() {
    let calls = AtomicU32::new(0);
    let _ = hung(&calls, true).await;
    let _ = hung(&calls, true).await;
    assert_eq!(HUNG.state(), BreakerState::Open);
    calls.store(0, Relaxed);
    // Five seconds of callers, one every 10 ms, each under a timeout of its
    // own (50 ms) around a dependency that never answers.
    for _ in 0..500 {
        let _ = tokio::time::timeout(Duration::from_millis(50), hung(&calls, false)).await;
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let probes = calls.load(Relaxed);
    assert!(
        (4..=6).contains(&probes),
        "one probe per cooldown, {probes} in 5 s"
    );
}

static GUARD: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

#[retry(attempts = 3, breaker = GUARD, budget = none, when = |_| true)]
async fn guarded(fail: bool) -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    let attempt = backstop::context().map_or(0, |cx| cx.attempt());
    tokio::task::yield_now().await;
    if fail {
        return Err("down".into());
    }
    Ok(u8::try_from(attempt).unwrap_or(u8::MAX))
}

fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_call_with_context_is_send_and_spawnable() {
    let handle = tokio::spawn(assert_send(guarded(false)));
    assert_eq!(handle.await.unwrap().unwrap(), 1);
}

static SHORT: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(1));

#[retry(attempts = 4, base = 2s, jitter = none, budget = none, breaker = SHORT)]
fn slow_backoff(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[test]
fn a_call_that_opened_the_breaker_stops_even_if_its_backoff_outlasts_the_cooldown() {
    // A 2 s backoff over a 1 s cooldown: sleeping would make the next
    // attempt the probe, and the probe would then be retried.
    let vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    assert_eq!(slow_backoff(&calls), Err(ApiError::Unavailable));
    assert_eq!(calls.load(Relaxed), 1);
    assert!(vt.sleeps().is_empty());
    vt.advance(Duration::from_secs(1));
    // The probe, once, not retried.
    assert_eq!(slow_backoff(&calls), Err(ApiError::Unavailable));
    assert_eq!(calls.load(Relaxed), 2);
    assert!(vt.sleeps().is_empty());
}

static GATE: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(60));
static GATE_BUDGET: backstop::limit::WindowBudget =
    backstop::limit::WindowBudget::new(1.0, 0, Duration::from_secs(10));

#[retry(attempts = 2, breaker = GATE, budget = GATE_BUDGET)]
fn gated() -> Result<(), ApiError> {
    Err(ApiError::Unavailable)
}

#[test]
fn calls_the_breaker_rejects_earn_no_retries() {
    let _vt = VirtualTime::start();
    for _ in 0..100 {
        let _ = gated();
    }
    assert_eq!(
        GATE_BUDGET.stats().calls,
        1,
        "only the call that reached the dependency"
    );
}

static REPORTED: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(60));

#[retry(attempts = 1, budget = none, breaker = REPORTED,
        on_give_up = |e| REJECTIONS.lock().unwrap().push((e.reason(), e.attempts(), e.error().is_some())))]
fn reported() -> Result<(), ApiError> {
    Err(ApiError::Unavailable)
}

static REJECTIONS: std::sync::Mutex<Vec<(backstop::GiveUp, u32, bool)>> =
    std::sync::Mutex::new(Vec::new());

#[test]
fn a_rejected_call_is_reported_to_on_give_up() {
    let _vt = VirtualTime::start();
    let _ = reported(); // fails, opens
    assert_eq!(reported(), Err(ApiError::Open));
    assert_eq!(
        *REJECTIONS.lock().unwrap(),
        [
            (backstop::GiveUp::Attempts, 1, true),
            (backstop::GiveUp::BreakerOpen, 0, true),
        ]
    );
}

static SHARED: CircuitBreaker = CircuitBreaker::new(1, Duration::from_millis(200));

#[retry(attempts = 1, breaker = SHARED, budget = none)]
async fn async_through_shared() -> Result<(), ApiError> {
    Err(ApiError::Unavailable)
}

#[retry(attempts = 1, breaker = SHARED, budget = none)]
fn sync_through_shared(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Ok(())
}

#[test]
fn a_paused_clock_an_hour_ahead_does_not_lock_real_time_callers_out() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(async_through_shared().await, Err(ApiError::Unavailable));
        assert_eq!(SHARED.state(), BreakerState::Open, "on the paused clock");
    });
    // On real time: an hour "before" the opening, and more than a cooldown
    // away from it. A trial may go: the call is the probe, and closes the
    // breaker.
    assert_eq!(SHARED.state(), BreakerState::HalfOpen, "on real time");
    let calls = AtomicU32::new(0);
    assert_eq!(sync_through_shared(&calls), Ok(()));
    assert_eq!(calls.load(Relaxed), 1);
    assert_eq!(SHARED.state(), BreakerState::Closed);
}

static WATCHED: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(30));

#[retry(attempts = 1, breaker = WATCHED, budget = none)]
fn watched() -> Result<(), ApiError> {
    Err(ApiError::Unavailable)
}

/// A sync test inside a runtime (a `#[tokio::test]` calling sync code):
/// the breaker's state is read on virtual time, which the sync calls read,
/// not on the runtime's clock.
#[test]
fn the_state_reads_virtual_time_inside_a_runtime_as_sync_calls_do() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let _inside = runtime.enter();
    let vt = VirtualTime::start();
    assert_eq!(watched(), Err(ApiError::Unavailable));
    assert_eq!(WATCHED.state(), BreakerState::Open);
    vt.advance(Duration::from_secs(30));
    assert_eq!(WATCHED.state(), BreakerState::HalfOpen, "a trial may go");
    assert_eq!(
        watched(),
        Err(ApiError::Unavailable),
        "and the next call is it"
    );
    assert_eq!(WATCHED.state(), BreakerState::Open);
}

// --- Kept per key ---------------------------------------------------------

static PER_SHARD: backstop::limit::Keyed<CircuitBreaker> =
    backstop::limit::Keyed::new(CircuitBreaker::new(2, Duration::from_secs(30)));

#[retry(attempts = 2, breaker = PER_SHARD, key = shard, budget = none, jitter = none)]
fn call_shard(shard: u32, calls: &AtomicU32, up: bool) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    if up {
        Ok(())
    } else {
        Err(ApiError::Unavailable)
    }
}

#[retry(attempts = 2, breaker = PER_SHARD, key = shard, budget = none, jitter = none)]
async fn call_shard_async(shard: u32, calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_breaker_kept_per_key_opens_for_the_failing_key_only() {
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    // Shard 10 is down: two failures open its breaker.
    assert_eq!(call_shard(10, &calls, false), Err(ApiError::Unavailable));
    assert_eq!(calls.load(Relaxed), 2);
    assert_eq!(call_shard(10, &calls, true), Err(ApiError::Open));
    assert_eq!(calls.load(Relaxed), 2, "rejected without running");
    assert_eq!(PER_SHARD.get(&10u32).state(), BreakerState::Open);
    // Shard 11 is not: its breaker is its own, closed.
    assert_eq!(call_shard(11, &calls, true), Ok(()));
    assert_eq!(call_shard_async(11, &calls).await, Ok(()));
    assert_eq!(calls.load(Relaxed), 4);
    assert_eq!(call_shard_async(10, &calls).await, Err(ApiError::Open));
    assert_eq!(calls.load(Relaxed), 4);
}

static SMALL_TABLE: backstop::limit::Keyed<CircuitBreaker> =
    backstop::limit::Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 4);

#[retry(attempts = 1, breaker = SMALL_TABLE, key = host, budget = none)]
fn call_host(host: u32, calls: &AtomicU32, up: bool) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    if up {
        Ok(())
    } else {
        Err(ApiError::Unavailable)
    }
}

#[retry(attempts = 1, breaker = SMALL_TABLE, key = host, budget = none)]
async fn call_host_async(host: u32, calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Ok(())
}

/// More hosts fail than the table holds: those that found no place do
/// not open a breaker shared with a healthy host that found none either
/// (it is let through on every call), and those with a place are turned
/// away by their own.
#[tokio::test(start_paused = true)]
async fn a_breaker_table_full_of_failing_hosts_turns_no_healthy_host_away() {
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    for host in 0..8 {
        for _ in 0..3 {
            let _ = call_host(host, &calls, false);
        }
    }
    assert_eq!(SMALL_TABLE.len(), 4);
    let before = calls.load(Relaxed);
    for _ in 0..5 {
        assert_eq!(call_host(99, &calls, true), Ok(()));
        assert_eq!(call_host_async(99, &calls).await, Ok(()));
    }
    assert_eq!(calls.load(Relaxed), before + 10, "never turned away");
    let placed = (0..8u32).find(|h| SMALL_TABLE.peek(h).is_some()).unwrap();
    assert_eq!(call_host_async(placed, &calls).await, Err(ApiError::Open));
}

thread_local! {
    static GAVE_UP: std::cell::Cell<Option<backstop::GiveUp>> = const { std::cell::Cell::new(None) };
}

static OPENED_IN_SYNC_SLEEP: CircuitBreaker = CircuitBreaker::new(100, Duration::from_secs(30));

/// An operator holds the breaker open while the call sleeps before its
/// retry (the hook runs just before the sleep).
#[retry(attempts = 3, breaker = OPENED_IN_SYNC_SLEEP, budget = none, jitter = none,
        on_retry = |_| OPENED_IN_SYNC_SLEEP.hold_open(),
        on_give_up = |e| GAVE_UP.with(|g| g.set(Some(e.reason()))))]
fn opened_in_sync_sleep(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

static OPENED_IN_ASYNC_SLEEP: CircuitBreaker = CircuitBreaker::new(100, Duration::from_secs(30));

#[retry(attempts = 3, breaker = OPENED_IN_ASYNC_SLEEP, budget = none, jitter = none,
        on_retry = |_| OPENED_IN_ASYNC_SLEEP.hold_open(),
        on_give_up = |e| GAVE_UP.with(|g| g.set(Some(e.reason()))))]
async fn opened_in_async_sleep(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

/// A breaker that opens while a call sleeps before its retry turns the
/// retry away: the call gives up with its last outcome (the error it kept
/// through the sleep, or, for an async call, which drops it before the
/// sleep, the rejection), for the reason `BreakerOpen`, without running
/// the body again.
#[test]
fn a_breaker_opened_during_a_sync_calls_sleep_returns_its_last_outcome() {
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let out = opened_in_sync_sleep(&calls);
    OPENED_IN_SYNC_SLEEP.reset();
    assert_eq!(out, Err(ApiError::Unavailable), "the outcome kept");
    assert_eq!(calls.load(Relaxed), 1);
    assert_eq!(
        GAVE_UP.with(std::cell::Cell::get),
        Some(backstop::GiveUp::BreakerOpen)
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_during_an_async_calls_sleep_gives_up_with_the_rejection() {
    let calls = AtomicU32::new(0);
    let out = opened_in_async_sleep(&calls).await;
    OPENED_IN_ASYNC_SLEEP.reset();
    assert_eq!(
        out,
        Err(ApiError::Open),
        "the outcome was dropped before the sleep"
    );
    assert_eq!(calls.load(Relaxed), 1);
    assert_eq!(
        GAVE_UP.with(std::cell::Cell::get),
        Some(backstop::GiveUp::BreakerOpen)
    );
}

static OPENED_BY_SYNC: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(60));
static OPENED_BY_ASYNC: CircuitBreaker = CircuitBreaker::new(1, Duration::from_secs(60));
static OPENING: std::sync::Mutex<Vec<(backstop::GiveUp, u32)>> = std::sync::Mutex::new(Vec::new());

#[retry(attempts = 3, budget = none, breaker = OPENED_BY_SYNC,
        on_give_up = |e| OPENING.lock().unwrap().push((e.reason(), e.attempts())))]
fn opens_its_breaker_sync(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[retry(attempts = 3, budget = none, breaker = OPENED_BY_ASYNC,
        on_give_up = |e| OPENING.lock().unwrap().push((e.reason(), e.attempts())))]
async fn opens_its_breaker_async(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_failure_opens_the_breaker_returns_that_failure() {
    // The failure that opens the breaker is the call's last: its retry
    // would be turned away, so it is not slept for. The call returns the
    // dependency's error, not the rejection, sync or async.
    let calls = AtomicU32::new(0);
    let vt = VirtualTime::start();
    assert_eq!(opens_its_breaker_sync(&calls), Err(ApiError::Unavailable));
    assert_eq!(vt.elapsed(), Duration::ZERO, "no sleep before giving up");
    let start = tokio::time::Instant::now();
    assert_eq!(
        opens_its_breaker_async(&calls).await,
        Err(ApiError::Unavailable)
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "no sleep before giving up");
    assert_eq!(calls.load(Relaxed), 2, "one attempt each");
    assert_eq!(
        *OPENING.lock().unwrap(),
        [
            (backstop::GiveUp::BreakerOpen, 1),
            (backstop::GiveUp::BreakerOpen, 1)
        ]
    );
}

/// Held open (as other callers' failures would open it) once the inner
/// call's second attempt has failed: its third is turned away.
static OPENED_AFTER_TWO: CircuitBreaker = CircuitBreaker::new(100, Duration::from_secs(30));

#[retry(attempts = 3, breaker = OPENED_AFTER_TWO, budget = none, jitter = none,
        on_retry = |event| if event.attempt() == 2 { OPENED_AFTER_TWO.hold_open() })]
fn turned_away_after_two(attempts: &AtomicU32) -> Result<(), ApiError> {
    attempts.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[retry(attempts = 3, budget = none, jitter = none)]
fn around_two(calls: &AtomicU32, attempts: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    turned_away_after_two(attempts)
}

/// The same, once the inner call's first attempt has failed.
static OPENED_AFTER_ONE: CircuitBreaker = CircuitBreaker::new(100, Duration::from_secs(30));

#[retry(attempts = 3, breaker = OPENED_AFTER_ONE, budget = none, jitter = none,
        on_retry = |event| if event.attempt() == 1 { OPENED_AFTER_ONE.hold_open() })]
fn turned_away_after_one(attempts: &AtomicU32) -> Result<(), ApiError> {
    attempts.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[retry(attempts = 3, budget = none, jitter = none)]
fn around_one(calls: &AtomicU32, attempts: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    turned_away_after_one(attempts)
}

/// Retries at one layer only, for a call the breaker turns away between
/// attempts: one that had retried is not retried around it; one that had
/// made a single attempt is (and its next call is turned away at once).
#[test]
fn a_nested_call_turned_away_by_its_breaker_after_retrying_is_not_retried_around_it() {
    let _vt = VirtualTime::start();
    let (calls, attempts) = (AtomicU32::new(0), AtomicU32::new(0));
    assert_eq!(around_two(&calls, &attempts), Err(ApiError::Unavailable));
    assert_eq!(
        (calls.load(Relaxed), attempts.load(Relaxed)),
        (1, 2),
        "the inner call retried: the outer does not"
    );
    let (calls, attempts) = (AtomicU32::new(0), AtomicU32::new(0));
    assert_eq!(around_one(&calls, &attempts), Err(ApiError::Open));
    assert_eq!(
        (calls.load(Relaxed), attempts.load(Relaxed)),
        (2, 1),
        "the inner call had not retried: the outer does, and is turned away"
    );
}

static DECLINED: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));
static DECLINED_AS_FAILURES: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));

/// Retries only timeouts: anything else, `false`, is `Stop`.
#[retry(when = |e: &std::io::Error| e.kind() == std::io::ErrorKind::TimedOut, breaker = DECLINED, budget = none)]
fn timeouts_only() -> Result<(), std::io::Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// Retries only timeouts; a failure of the dependency it does not retry
/// is still its failure: `StopOverloaded`.
#[retry(
    when = |e: &std::io::Error| match e.kind() {
        std::io::ErrorKind::TimedOut => Verdict::Retry,
        _ => Verdict::StopOverloaded,
    },
    breaker = DECLINED_AS_FAILURES,
    budget = none
)]
fn timeouts_only_counting_failures() -> Result<(), std::io::Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_when_answering_false_is_an_answer_and_stop_overloaded_a_failure() {
    let _vt = VirtualTime::start();
    // `false` is `Stop`: the dependency answered, with an error no retry
    // fixes. However many, the breaker stays closed.
    for _ in 0..5 {
        assert!(timeouts_only().is_err());
    }
    assert_eq!(DECLINED.state(), BreakerState::Closed);
    // `StopOverloaded`: not retried either, but the dependency's failure.
    for _ in 0..2 {
        let error = timeouts_only_counting_failures().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    }
    assert_eq!(DECLINED_AS_FAILURES.state(), BreakerState::Open);
}

/// One place: a second key takes it while the first key's first attempt
/// is still out (its breaker held nothing yet).
static ONE_PLACE: backstop::limit::Keyed<CircuitBreaker> =
    backstop::limit::Keyed::with_capacity(CircuitBreaker::new(2, Duration::from_secs(30)), 1);

#[retry(attempts = 3, base = 10ms, jitter = none, budget = none, key = tenant, breaker = ONE_PLACE)]
async fn for_tenant(tenant: &str, slow: bool, sent: &AtomicU32) -> Result<(), ApiError> {
    sent.fetch_add(1, Relaxed);
    if slow {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ApiError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_place_went_to_another_while_it_ran_is_not_turned_away_by_that_keys_breaker() {
    let (a_sent, b_sent) = (AtomicU32::new(0), AtomicU32::new(0));
    let a = for_tenant("a", true, &a_sent);
    let b = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        for_tenant("b", false, &b_sent).await
    };
    let (a, b) = tokio::join!(a, b);
    // "b" took the place and failed twice: its breaker opened.
    assert_eq!(b, Err(ApiError::Unavailable));
    assert_eq!(b_sent.load(Relaxed), 2);
    assert_eq!(
        ONE_PLACE.peek(&"b").map(CircuitBreaker::state),
        Some(BreakerState::Open)
    );
    // "a" never failed under that breaker: it retried, without one.
    assert_eq!(a, Err(ApiError::Unavailable));
    assert_eq!(a_sent.load(Relaxed), 3, "every attempt sent");
}
