//! `#[retry(attempt_timeout = ..)]` on async functions, in paused time.

use std::sync::Mutex;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use backstop::limit::CircuitBreaker;
use backstop::scope::IdempotencyKey;
use backstop::{CircuitOpen, Classify, Elapsed, Verdict, retry};
use tokio::time::Instant;

#[derive(Debug, PartialEq)]
enum ApiError {
    Unavailable,
    TimedOut,
    Open,
}

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        match self {
            // Whatever a type says of its timeouts, `attempt_timeout`'s own
            // are ambiguous.
            ApiError::Unavailable | ApiError::TimedOut => Verdict::Retry,
            ApiError::Open => Verdict::Stop,
        }
    }
}

impl From<Elapsed> for ApiError {
    fn from(_: Elapsed) -> Self {
        ApiError::TimedOut
    }
}

impl From<CircuitOpen> for ApiError {
    fn from(_: CircuitOpen) -> Self {
        ApiError::Open
    }
}

#[retry(attempts = 3, attempt_timeout = 1s, jitter = none, budget = none)]
async fn hangs(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// A duration read from somewhere, counted.
fn counted(reads: &AtomicU32, limit: Duration) -> Duration {
    reads.fetch_add(1, Relaxed);
    limit
}

#[retry(attempts = 3, attempt_timeout = counted(reads, Duration::from_secs(1)), base = 1ms, budget = none)]
async fn unavailable(reads: &AtomicU32, calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

/// An `attempt_timeout` expression is read once a call, before the first
/// attempt, as every option's is.
#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_expression_is_read_once_a_call() {
    let (reads, calls) = (AtomicU32::new(0), AtomicU32::new(0));
    let _ = unavailable(&reads, &calls).await;
    assert_eq!(calls.load(Relaxed), 3);
    assert_eq!(reads.load(Relaxed), 1);
}

#[retry(attempts = 3, attempt_timeout = 1s, idempotent, jitter = none, budget = none)]
async fn hangs_idempotent(calls: &AtomicU32) -> Result<(), ApiError> {
    calls.fetch_add(1, Relaxed);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_ambiguous() {
    let calls = AtomicU32::new(0);
    let t0 = Instant::now();
    assert_eq!(hangs(&calls).await, Err(ApiError::TimedOut));
    assert_eq!(calls.load(Relaxed), 1, "not idempotent: not retried");
    assert_eq!(t0.elapsed(), Duration::from_secs(1));

    calls.store(0, Relaxed);
    let t0 = Instant::now();
    assert_eq!(hangs_idempotent(&calls).await, Err(ApiError::TimedOut));
    assert_eq!(calls.load(Relaxed), 3);
    // Three attempts of 1 s, and sleeps of 100 and 200 ms.
    assert_eq!(t0.elapsed(), Duration::from_millis(3300));
}

#[retry(attempt_timeout = 2s, deadline = 2500ms, idempotent, jitter = none, budget = none)]
async fn hangs_under_a_deadline(
    starts: &Mutex<Vec<Duration>>,
    t0: Instant,
) -> Result<(), ApiError> {
    starts.lock().unwrap().push(t0.elapsed());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_attempt_never_runs_past_the_deadline() {
    let t0 = Instant::now();
    let starts = Mutex::new(Vec::new());
    assert_eq!(
        hangs_under_a_deadline(&starts, t0).await,
        Err(ApiError::TimedOut)
    );
    assert_eq!(
        *starts.lock().unwrap(),
        [Duration::ZERO, Duration::from_millis(2100)]
    );
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(2498),
        "the second attempt got the 400 ms left less the timer's 2 ms slack"
    );
}

#[retry(attempts = 2, attempt_timeout = 1s, idempotent, budget = none)]
async fn keyed(keys: &Mutex<Vec<IdempotencyKey>>) -> Result<(), ApiError> {
    keys.lock()
        .unwrap()
        .push(backstop::context().unwrap().idempotency_key());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_keeps_the_calls_idempotency_key() {
    let keys = Mutex::new(Vec::new());
    let _ = keyed(&keys).await;
    let keys = keys.into_inner().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "the server must see one key for the call");
}

#[retry(attempts = 2, attempt_timeout = 1s, budget = none)]
async fn quick(calls: &AtomicU32) -> Result<u32, ApiError> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(calls.fetch_add(1, Relaxed))
}

#[tokio::test(start_paused = true)]
async fn an_attempt_within_its_timeout_is_untouched() {
    let calls = AtomicU32::new(7);
    assert_eq!(quick(&calls).await, Ok(7));
}

static GUARD: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

#[retry(attempts = 3, attempt_timeout = 500ms, breaker = GUARD, idempotent, budget = none)]
async fn everything(fail: bool) -> Result<u32, ApiError> {
    let attempt = backstop::context().map_or(0, |cx| cx.attempt());
    tokio::task::yield_now().await;
    if fail {
        return Err(ApiError::Unavailable);
    }
    Ok(attempt)
}

fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_context_and_attempt_timeout_together_are_send() {
    let handle = tokio::spawn(assert_send(everything(false)));
    assert_eq!(handle.await.unwrap(), Ok(1));
}

static DEPENDENCY: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, budget = none)]
async fn inner_fails() -> Result<(), ApiError> {
    DEPENDENCY.fetch_add(1, Relaxed);
    Err(ApiError::Unavailable)
}

#[retry(attempts = 3, attempt_timeout = 1s, idempotent, budget = none)]
async fn outer_then_hangs() -> Result<(), ApiError> {
    let _ = inner_fails().await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_still_knows_a_nested_call_retried() {
    DEPENDENCY.store(0, Relaxed);
    assert_eq!(outer_then_hangs().await, Err(ApiError::TimedOut));
    assert_eq!(DEPENDENCY.load(Relaxed), 3, "3, not 3 × 3");
}

#[retry(attempts = 3, attempt_timeout = 10s, deadline = 1500us, idempotent, budget = none)]
async fn never_finishes() -> Result<(), ApiError> {
    std::future::pending().await
}

#[retry(attempts = 3, attempt_timeout = 10s, deadline = 1s, idempotent, budget = none)]
async fn never_finishes_in_a_second() -> Result<(), ApiError> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_attempt_returns_by_the_deadline_whatever_the_timers_phase() {
    // Off the timer's millisecond grid: a timeout would end on the next tick.
    for offset_us in [0, 300, 999] {
        tokio::time::advance(Duration::from_micros(offset_us)).await;
        let t0 = Instant::now();
        assert_eq!(never_finishes().await, Err(ApiError::TimedOut));
        assert!(
            t0.elapsed() <= Duration::from_micros(1500),
            "returned after {:?}, started {offset_us} µs after a tick",
            t0.elapsed()
        );
        let t0 = Instant::now();
        assert_eq!(never_finishes_in_a_second().await, Err(ApiError::TimedOut));
        assert!(
            t0.elapsed() <= Duration::from_secs(1),
            "returned after {:?}, started {offset_us} µs after a tick",
            t0.elapsed()
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(997),
            "{:?}",
            t0.elapsed()
        );
    }
}

/// An error that keeps what cut the attempt off, as an `io::Error` does.
fn said(outcome: std::io::Result<()>) -> String {
    outcome
        .unwrap_err()
        .into_inner()
        .expect("an `Elapsed`")
        .to_string()
}

#[retry(attempts = 2, attempt_timeout = 50ms, deadline = 10s, idempotent, budget = none)]
async fn hangs_past_its_timeout() -> std::io::Result<()> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[retry(attempts = 5, attempt_timeout = 5s, deadline = 200ms, idempotent, budget = none)]
async fn hangs_past_its_deadline() -> std::io::Result<()> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

static CONFIGURED: std::sync::LazyLock<backstop::Policy> = std::sync::LazyLock::new(|| {
    backstop::Policy::new()
        .attempts(2)
        .attempt_timeout(Some(Duration::from_millis(70)))
        .no_budget()
        .idempotent(true)
});

#[retry(policy = &*CONFIGURED)]
async fn hangs_past_its_configured_timeout() -> std::io::Result<()> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[retry(attempts = 2, attempt_timeout = 80ms, hedge = 10ms, idempotent, budget = none)]
async fn hedged_hangs_past_its_timeout() -> std::io::Result<()> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// Cut off by its timeout, seen late: its attempt moves the paused clock
/// on past the timer and within the timer's slack of the deadline.
#[retry(attempts = 1, attempt_timeout = 100ms, deadline = 130ms, budget = none)]
async fn seen_late() -> std::io::Result<()> {
    tokio::time::advance(Duration::from_millis(129)).await;
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_says_which_limit_ran_out() {
    // Its own limit, and how long it was.
    let by_timeout = "attempt timed out: its `attempt_timeout` of 50ms ran out";
    assert_eq!(said(hangs_past_its_timeout().await), by_timeout);
    assert_eq!(
        said(hangs_past_its_configured_timeout().await),
        "attempt timed out: its `attempt_timeout` of 70ms ran out"
    );
    assert_eq!(
        said(hedged_hangs_past_its_timeout().await),
        "attempt timed out: its `attempt_timeout` of 80ms ran out"
    );
    // Which limit was the attempt's is told as the limit is made: a timer
    // seen late is still its timeout's.
    assert_eq!(
        said(seen_late().await),
        "attempt timed out: its `attempt_timeout` of 100ms ran out"
    );
    // The call's deadline, sooner than the attempt's own limit.
    let at_deadline = "attempt cut off at its deadline (the call's, or one it runs within: an enclosing call's or attempt's, a scope's, a served request's)";
    assert_eq!(said(hangs_past_its_deadline().await), at_deadline);
    // The closure forms alike.
    let policy = backstop::Policy::new()
        .attempts(2)
        .deadline(Some(Duration::from_secs(10)))
        .idempotent(true)
        .no_budget();
    let hang = || async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        std::io::Result::Ok(())
    };
    let retry = backstop::Retry::new(&policy).attempt_timeout(Duration::from_millis(50));
    assert_eq!(said(retry.call_async(hang).await), by_timeout);
    // A limit under a millisecond, as it was given.
    let retry = backstop::Retry::new(&policy).attempt_timeout(Duration::from_micros(500));
    assert_eq!(
        said(retry.call_async(hang).await),
        "attempt timed out: its `attempt_timeout` of 500µs ran out"
    );
    let short = policy.deadline(Some(Duration::from_millis(200)));
    let retry = backstop::Retry::new(&short).attempt_timeout(Duration::from_secs(5));
    assert_eq!(said(retry.call_async(hang).await), at_deadline);
    // A scope's deadline.
    let scoped = backstop::scope::deadline(Duration::from_secs(3), hang()).await;
    assert_eq!(
        scoped.unwrap_err().to_string(),
        "`scope::deadline` of 3s ran out"
    );
}
