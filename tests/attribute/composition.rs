//! Composition: the attempt context, deadline propagation to nested calls,
//! and one retry layer per failure domain (step 2 of a call).

use std::io::Error;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use backstop::scope::IdempotencyKey;
use backstop::testing::VirtualTime;
use backstop::{context, retry};

use crate::support;
use support::refused;

// --- context -------------------------------------------------------------

#[retry(attempts = 3, deadline = 5s, jitter = none, budget = none)]
fn observed(
    seen: &mut Vec<(u32, IdempotencyKey, Option<Duration>, Option<Instant>)>,
) -> Result<(), Error> {
    let cx = context().expect("inside an attempt");
    seen.push((
        cx.attempt(),
        cx.idempotency_key(),
        cx.remaining(),
        cx.deadline(),
    ));
    Err(refused())
}

#[test]
fn the_context_numbers_attempts_keeps_one_key_and_counts_down() {
    let _vt = VirtualTime::start();
    assert!(context().is_none(), "outside every attempt");
    let mut seen = Vec::new();
    let started = backstop::time::Clock::now(&backstop::time::SystemClock);
    let _ = observed(&mut seen);
    let attempts: Vec<u32> = seen.iter().map(|s| s.0).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(seen.iter().all(|s| s.1 == seen[0].1), "one key per call");
    let remaining: Vec<Option<Duration>> = seen.iter().map(|s| s.2).collect();
    let ms = Duration::from_millis;
    assert_eq!(remaining, [Some(ms(5000)), Some(ms(4900)), Some(ms(4700))]);
    let deadline = Some(started + Duration::from_secs(5));
    assert!(
        seen.iter().all(|s| s.3 == deadline),
        "one deadline, 5 s after the start: {seen:?}"
    );
    assert!(context().is_none(), "restored after the call");

    let mut again = Vec::new();
    let _ = observed(&mut again);
    assert_ne!(again[0].1, seen[0].1, "a new call, a new key");
}

#[test]
fn an_idempotency_key_is_a_version_4_uuid() {
    let _vt = VirtualTime::start();
    let mut seen = Vec::new();
    let _ = observed(&mut seen);
    let text = seen[0].1.to_string();
    let groups: Vec<&str> = text.split('-').collect();
    assert_eq!(
        groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{text}"
    );
    assert!(
        text.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "{text}"
    );
    assert!(groups[2].starts_with('4'), "version 4: {text}");
    assert!("89ab".contains(&groups[3][..1]), "RFC 9562 variant: {text}");
}

#[test]
fn idempotency_keys_are_unique_across_threads() {
    use backstop::scope::IdempotencyKey;
    // Each thread's generator is seeded by the operating system: threads
    // started alike draw different keys, the first ones included.
    let per_thread: Vec<Vec<u128>> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                (0..1000)
                    .map(|_| IdempotencyKey::random().to_u128())
                    .collect()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect();
    let firsts: std::collections::HashSet<u128> = per_thread.iter().map(|keys| keys[0]).collect();
    assert_eq!(firsts.len(), 8, "every thread starts elsewhere");
    let all: std::collections::HashSet<u128> = per_thread.into_iter().flatten().collect();
    assert_eq!(all.len(), 8000, "no key drawn twice");
}

#[test]
fn idempotency_keys_are_version_4_uuids_random_in_both_halves() {
    let keys: Vec<u128> = (0..1000)
        .map(|_| IdempotencyKey::random().to_u128())
        .collect();
    // Version 4 (random), variant RFC 9562 (`10`), every one.
    assert!(
        keys.iter()
            .all(|k| (k >> 76) & 0xf == 4 && (k >> 62) & 0b11 == 0b10)
    );
    // 122 random bits: each half of the key differs from key to key.
    let highs: std::collections::HashSet<u64> = keys.iter().map(|k| (k >> 64) as u64).collect();
    let lows: std::collections::HashSet<u64> = keys.iter().map(|k| *k as u64).collect();
    assert_eq!((highs.len(), lows.len()), (1000, 1000));
}

#[retry(attempts = 1, deadline = 5s, budget = none)]
fn described() -> Result<String, Error> {
    let cx = context().expect("inside an attempt");
    Ok(format!("{cx:?} {}", cx.idempotency_key()))
}

#[test]
fn a_context_debugs_as_its_attempt_key_and_deadline() {
    let text = described().unwrap();
    let (debug, key) = text.rsplit_once(' ').unwrap();
    assert!(
        debug.starts_with("Context { attempt: 1, idempotency_key: ")
            && debug.contains(key)
            && debug.contains("deadline: Some(")
            && debug.ends_with(", .. }"),
        "{debug}"
    );
}

#[retry(attempts = 1, deadline = none, budget = none)]
fn nested_without_a_deadline() -> Result<(), Error> {
    Ok(())
}

/// Its context before and after a nested call, neither with a deadline.
#[retry(attempts = 1, deadline = none, budget = none)]
fn reads_around_a_nested_call() -> Result<[Option<(u32, IdempotencyKey)>; 2], Error> {
    let read = || context().map(|cx| (cx.attempt(), cx.idempotency_key()));
    let before = read();
    nested_without_a_deadline()?;
    Ok([before, read()])
}

#[test]
fn a_nested_call_leaves_the_enclosing_attempts_context_as_it_found_it() {
    let [before, after] = reads_around_a_nested_call().unwrap();
    assert!(before.is_some_and(|(attempt, _)| attempt == 1));
    assert_eq!(after, before);
}

#[retry(attempts = 2, budget = none)]
fn panics_inside() -> Result<(), Error> {
    panic!("boom");
}

#[test]
fn a_panicking_attempt_leaves_no_context_behind() {
    let caught = std::panic::catch_unwind(panics_inside);
    assert!(caught.is_err());
    assert!(context().is_none());
}

#[retry(attempts = 3, deadline = none, base = 1ms, jitter = none, budget = none)]
async fn hops(reads: &std::sync::Mutex<Vec<(IdempotencyKey, u32)>>) -> Result<(), Error> {
    for _ in 0..20 {
        tokio::task::yield_now().await;
        let cx = context().expect("inside an attempt, after an .await");
        reads
            .lock()
            .unwrap()
            .push((cx.idempotency_key(), cx.attempt()));
    }
    Err(refused())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_context_follows_the_task_across_awaits_and_threads() {
    // Many calls at once on four workers: tasks move between threads
    // between polls; each must always read its own call's context.
    let handles: Vec<_> = (0..64)
        .map(|_| {
            tokio::spawn(async {
                let reads = std::sync::Mutex::new(Vec::new());
                let _ = hops(&reads).await;
                assert!(context().is_none(), "outside the call's attempts");
                reads.into_inner().unwrap()
            })
        })
        .collect();
    let mut keys = std::collections::HashSet::new();
    for handle in handles {
        let reads = handle.await.unwrap();
        assert_eq!(reads.len(), 60);
        assert!(reads.iter().all(|r| r.0 == reads[0].0), "one key per call");
        let attempts: Vec<u32> = reads.chunks(20).map(|c| c[0].1).collect();
        assert_eq!(attempts, [1, 2, 3]);
        assert!(reads.chunks(20).all(|c| c.iter().all(|r| r.1 == c[0].1)));
        keys.insert(reads[0].0);
    }
    assert_eq!(keys.len(), 64, "every call its own key");
}

// --- one layer retries ------------------------------------------------------

static DEPENDENCY_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, budget = none)]
fn inner() -> Result<(), Error> {
    DEPENDENCY_CALLS.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, budget = none)]
fn outer() -> Result<(), Error> {
    inner()
}

#[retry(attempts = 3, budget = none)]
fn outermost() -> Result<(), Error> {
    outer()
}

#[test]
fn nested_retries_retry_at_one_layer_only() {
    let _vt = VirtualTime::start();
    DEPENDENCY_CALLS.store(0, Relaxed);
    assert!(outer().is_err());
    assert_eq!(DEPENDENCY_CALLS.load(Relaxed), 3, "3, not 3 × 3");
    DEPENDENCY_CALLS.store(0, Relaxed);
    assert!(outermost().is_err());
    assert_eq!(DEPENDENCY_CALLS.load(Relaxed), 3, "3, not 3 × 3 × 3");
}

static THROUGH_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, budget = none)]
fn innermost_through() -> Result<(), Error> {
    THROUGH_CALLS.fetch_add(1, Relaxed);
    Err(refused())
}

/// Handles the innermost call's give-up: as an answer (`Ok(false)`), or
/// as an error no retry of its own can fix.
#[retry(attempts = 3, budget = none)]
fn middle_handling(as_error: bool) -> Result<bool, Error> {
    match innermost_through() {
        Ok(()) => Ok(true),
        Err(_) if as_error => Err(std::io::ErrorKind::InvalidData.into()),
        Err(_) => Ok(false),
    }
}

/// Would retry any answer but `Ok(true)`.
#[retry(attempts = 3, budget = none)]
fn outermost_through(as_error: bool) -> Result<(), Error> {
    match middle_handling(as_error) {
        Ok(true) => Ok(()),
        _ => Err(refused()),
    }
}

/// A call between that did not retry, and returned what it made of a
/// nested call's give-up (an answer, or an error it does not retry),
/// passes the give-up on: the call around it does not retry on top, as it
/// would not with a plain function between (3 calls, not 3 × 3).
#[test]
fn a_give_up_below_passes_through_a_call_between_that_did_not_retry() {
    let _vt = VirtualTime::start();
    for as_error in [false, true] {
        THROUGH_CALLS.store(0, Relaxed);
        assert!(outermost_through(as_error).is_err());
        assert_eq!(THROUGH_CALLS.load(Relaxed), 3, "as_error: {as_error}");
    }
}

static ASYNC_THROUGH_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, budget = none)]
async fn innermost_through_async() -> Result<(), Error> {
    tokio::task::yield_now().await;
    ASYNC_THROUGH_CALLS.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, budget = none)]
async fn middle_handling_async(as_error: bool) -> Result<bool, Error> {
    match innermost_through_async().await {
        Ok(()) => Ok(true),
        Err(_) if as_error => Err(std::io::ErrorKind::InvalidData.into()),
        Err(_) => Ok(false),
    }
}

#[retry(attempts = 3, budget = none)]
async fn outermost_through_async(as_error: bool) -> Result<(), Error> {
    match middle_handling_async(as_error).await {
        Ok(true) => Ok(()),
        _ => Err(refused()),
    }
}

/// Async, as `a_give_up_below_passes_through_a_call_between_that_did_not_retry`.
#[tokio::test(start_paused = true)]
async fn a_give_up_below_passes_through_an_async_call_between_that_did_not_retry() {
    for as_error in [false, true] {
        ASYNC_THROUGH_CALLS.store(0, Relaxed);
        assert!(outermost_through_async(as_error).await.is_err());
        assert_eq!(ASYNC_THROUGH_CALLS.load(Relaxed), 3, "as_error: {as_error}");
    }
}

#[retry(attempts = 1, budget = none)]
fn inner_without_retries(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, budget = none)]
fn outer_over_a_single_attempt(calls: &AtomicU32) -> Result<(), Error> {
    inner_without_retries(calls)
}

#[test]
fn an_outer_call_retries_when_the_inner_one_did_not() {
    let _vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let _ = outer_over_a_single_attempt(&calls);
    assert_eq!(
        calls.load(Relaxed),
        3,
        "the inner call gave up without retrying"
    );
}

static ASYNC_DEPENDENCY_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, budget = none)]
async fn inner_async() -> Result<(), Error> {
    tokio::task::yield_now().await;
    ASYNC_DEPENDENCY_CALLS.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, budget = none)]
async fn outer_async() -> Result<(), Error> {
    tokio::task::yield_now().await;
    inner_async().await
}

#[tokio::test(start_paused = true)]
async fn nested_async_retries_retry_at_one_layer_only() {
    ASYNC_DEPENDENCY_CALLS.store(0, Relaxed);
    assert!(outer_async().await.is_err());
    assert_eq!(ASYNC_DEPENDENCY_CALLS.load(Relaxed), 3, "3, not 3 × 3");
}

#[retry(attempts = 1, budget = none)]
async fn inner_async_once(calls: &AtomicU32) -> Result<(), Error> {
    tokio::task::yield_now().await;
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, budget = none)]
async fn outer_async_over_a_single_attempt(calls: &AtomicU32) -> Result<(), Error> {
    tokio::task::yield_now().await;
    inner_async_once(calls).await
}

/// Async, as `an_outer_call_retries_when_the_inner_one_did_not`: every
/// attempt of the outer call, the later ones too, is retried.
#[tokio::test(start_paused = true)]
async fn an_outer_async_call_retries_when_the_inner_one_did_not() {
    let calls = AtomicU32::new(0);
    assert!(outer_async_over_a_single_attempt(&calls).await.is_err());
    assert_eq!(calls.load(Relaxed), 3);
}

#[retry(attempts = 3, budget = none)]
async fn inner_async_retrying(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

/// Its first attempt fails by itself; its second calls a nested call that
/// retries and gives up, then awaits once more (the attempt is polled
/// again after the nested call is over).
#[retry(attempts = 4, budget = none)]
async fn outer_async_second_attempt_nested(
    outer: &AtomicU32,
    inner: &AtomicU32,
) -> Result<(), Error> {
    if outer.fetch_add(1, Relaxed) == 0 {
        return Err(refused());
    }
    let nested = inner_async_retrying(inner).await;
    tokio::task::yield_now().await;
    nested
}

/// A nested call's retrying is kept through the later polls of the
/// attempt it ran in, in any attempt of the enclosing call.
#[tokio::test(start_paused = true)]
async fn a_nested_async_call_that_retried_stops_a_later_attempt_polled_again() {
    let (outer, inner) = (AtomicU32::new(0), AtomicU32::new(0));
    assert!(
        outer_async_second_attempt_nested(&outer, &inner)
            .await
            .is_err()
    );
    assert_eq!((outer.load(Relaxed), inner.load(Relaxed)), (2, 3));
}

#[retry(attempts = 5, base = 1s, jitter = none, budget = none)]
async fn inner_slow_retrying(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

/// Its attempt cuts the nested call off with a timeout of its own (as a
/// service's code often does), `after` this long: at 1.5 s the nested
/// call has retried once, at 0.5 s not yet.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn outer_timing_out_the_nested_call(calls: &AtomicU32, after: Duration) -> Result<(), Error> {
    match tokio::time::timeout(after, inner_slow_retrying(calls)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(refused()),
    }
}

/// A nested call dropped midway after it retried (cut off by a timeout
/// of the caller's own) counts as one that retried: its request went out
/// twice, and the call around it does not repeat that (2 requests, not
/// 3 × 2). Dropped before it retried, it does not: the call around it
/// retries (the next test).
#[tokio::test(start_paused = true)]
async fn a_nested_call_dropped_after_it_retried_is_not_retried_around() {
    let calls = AtomicU32::new(0);
    let after = Duration::from_millis(1500);
    assert!(
        outer_timing_out_the_nested_call(&calls, after)
            .await
            .is_err()
    );
    assert_eq!(calls.load(Relaxed), 2, "one nested call's two attempts");
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_dropped_before_it_retried_is_retried_around() {
    let calls = AtomicU32::new(0);
    let after = Duration::from_millis(500);
    assert!(
        outer_timing_out_the_nested_call(&calls, after)
            .await
            .is_err()
    );
    assert_eq!(calls.load(Relaxed), 3, "one attempt in each of 3");
}

/// Fails until its attempt `panics_at`, which panics.
#[retry(attempts = 3, base = 1ms, budget = none)]
fn inner_panicking_at(calls: &AtomicU32, panics_at: u32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    let attempt = context().expect("inside an attempt").attempt();
    assert_ne!(attempt, panics_at, "the nested call's attempt panics");
    Err(refused())
}

/// Catches the nested call's panic and fails as a refusal would.
#[retry(attempts = 3, base = 1ms, budget = none)]
fn outer_catching_the_nested_panic(
    outer: &AtomicU32,
    inner: &AtomicU32,
    panics_at: u32,
) -> Result<(), Error> {
    outer.fetch_add(1, Relaxed);
    let caught = std::panic::catch_unwind(|| inner_panicking_at(inner, panics_at));
    assert!(caught.is_err(), "the nested call panicked");
    Err(refused())
}

/// A nested call that panics after it retried counts as one that
/// retried, as one dropped midway does: the call around it, which caught
/// the panic, does not repeat its two requests. One that panics in its
/// first attempt did not retry: the call around it retries.
#[test]
fn a_nested_call_panicking_after_it_retried_is_not_retried_around() {
    let (outer, inner) = (AtomicU32::new(0), AtomicU32::new(0));
    assert!(outer_catching_the_nested_panic(&outer, &inner, 2).is_err());
    assert_eq!((outer.load(Relaxed), inner.load(Relaxed)), (1, 2));
    let (outer, inner) = (AtomicU32::new(0), AtomicU32::new(0));
    assert!(outer_catching_the_nested_panic(&outer, &inner, 1).is_err());
    assert_eq!((outer.load(Relaxed), inner.load(Relaxed)), (3, 3));
}

/// Fails at once, then hangs for 10 s in its second attempt.
#[retry(attempts = 3, base = 1s, jitter = none, budget = none)]
async fn innermost_failing_twice(calls: &AtomicU32) -> Result<(), Error> {
    match calls.fetch_add(1, Relaxed) {
        0 => Err(refused()),
        1 => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Err(refused())
        }
        _ => Ok(()),
    }
}

/// Its attempts are cut off at 1.5 s: the nested call's first attempt
/// fails at once, its second starts at 1 s and runs past the cut-off.
#[retry(attempts = 3, base = 1ms, attempt_timeout = 1500ms, idempotent, budget = none)]
async fn middle_cutting_off(calls: &AtomicU32) -> Result<(), Error> {
    innermost_failing_twice(calls).await
}

/// Fails by itself after the middle call, every time.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn outer_around_a_cut_off(calls: &AtomicU32, runs: &AtomicU32) -> Result<(), Error> {
    runs.fetch_add(1, Relaxed);
    middle_cutting_off(calls).await?;
    Err(refused())
}

/// A nested call that retried and was then cut off by the attempt timeout
/// of the call it runs in is that call's to hear of, not the outer one's:
/// the middle call stops (its nested call retried), and gives up so, and
/// the outer call does not retry it. (Dropped outside the middle call's
/// attempt, it told the outer call instead: the middle call repeated it,
/// and the outer call later refused to retry a failure of its own.)
#[tokio::test(start_paused = true)]
async fn a_nested_call_cut_off_by_an_attempt_timeout_tells_the_call_it_ran_in() {
    let (calls, runs) = (AtomicU32::new(0), AtomicU32::new(0));
    let error = outer_around_a_cut_off(&calls, &runs).await.unwrap_err();
    let cut_off = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<backstop::Elapsed>());
    assert!(cut_off.is_some(), "{error}");
    assert_eq!(
        (calls.load(Relaxed), runs.load(Relaxed)),
        (2, 1),
        "the nested call's two attempts, one of each call around it"
    );
}

/// Two tokens: the first failure leaves one, not above half, so a refusal
/// holds at once.
static HOLDS_AT_ONCE: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(2, 1.0);

#[retry(attempts = 5, deadline = 10s, budget = HOLDS_AT_ONCE)]
async fn inner_holding(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

/// Cuts the nested call off with a timeout of its own while it holds.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn outer_timing_out_a_held_call(calls: &AtomicU32, runs: &AtomicU32) -> Result<(), Error> {
    runs.fetch_add(1, Relaxed);
    match tokio::time::timeout(Duration::from_millis(30), inner_holding(calls)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(refused()),
    }
}

/// Holding after a refusal is a nested call's retry: dropped while it
/// holds, it is not retried around (one call, one request).
#[tokio::test(start_paused = true)]
async fn a_nested_call_dropped_while_it_holds_is_not_retried_around() {
    let _isolated = backstop::testing::isolate();
    let (calls, runs) = (AtomicU32::new(0), AtomicU32::new(0));
    assert!(outer_timing_out_a_held_call(&calls, &runs).await.is_err());
    assert_eq!((calls.load(Relaxed), runs.load(Relaxed)), (1, 1));
}

static MIDDLE_BREAKER: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(100, Duration::from_secs(30));

/// A call between, behind a breaker (so its state machine runs from its
/// first attempt): its nested call gives up after retrying, then the
/// attempt hangs until the caller's own timeout drops it.
#[retry(attempts = 3, base = 1ms, budget = none, breaker = MIDDLE_BREAKER)]
async fn between_hanging_after_a_retried_call(calls: &AtomicU32) -> Result<(), Error> {
    let _ = inner_async_retrying(calls).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

/// The same without a breaker: its first attempt runs lean, before its
/// state machine is made.
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn between_lean_hanging_after_a_retried_call(calls: &AtomicU32) -> Result<(), Error> {
    let _ = inner_async_retrying(calls).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[retry(attempts = 3, base = 1ms, budget = none)]
async fn outer_timing_out_a_call_between(
    calls: &AtomicU32,
    runs: &AtomicU32,
    lean: bool,
) -> Result<(), Error> {
    runs.fetch_add(1, Relaxed);
    let between = async {
        if lean {
            between_lean_hanging_after_a_retried_call(calls).await
        } else {
            between_hanging_after_a_retried_call(calls).await
        }
    };
    match tokio::time::timeout(Duration::from_secs(1), between).await {
        Ok(outcome) => outcome,
        Err(_) => Err(refused()),
    }
}

/// A call between dropped midway passes on what a call nested in its
/// attempt did, as it would have when it ended, in its first attempt run
/// lean as well: the outer call does not retry (3 requests, not 9).
#[tokio::test(start_paused = true)]
async fn a_call_between_dropped_midway_passes_on_a_retry_below() {
    for lean in [false, true] {
        let (calls, runs) = (AtomicU32::new(0), AtomicU32::new(0));
        assert!(
            outer_timing_out_a_call_between(&calls, &runs, lean)
                .await
                .is_err()
        );
        assert_eq!(
            (calls.load(Relaxed), runs.load(Relaxed)),
            (3, 1),
            "lean: {lean}"
        );
    }
}

// --- deadline propagation ---------------------------------------------------

#[retry(attempts = 2, deadline = 10s, attempt_timeout = 500ms, idempotent, jitter = none, budget = none)]
async fn timed_observing(seen: &std::sync::Mutex<Vec<Option<Duration>>>) -> Result<(), Error> {
    seen.lock()
        .unwrap()
        .push(context().and_then(|cx| cx.remaining()));
    Err(refused())
}

/// An attempt cut off after its `attempt_timeout` has that long, not the
/// call's time left: what it gives its operation as a timeout
/// (`context()`'s `remaining()`, a `within_attempt` header) is no longer
/// than the time it is given.
#[tokio::test(start_paused = true)]
async fn an_attempts_context_says_the_time_its_attempt_timeout_leaves_it() {
    let seen = std::sync::Mutex::default();
    assert!(timed_observing(&seen).await.is_err());
    let half = Some(Duration::from_millis(500));
    assert_eq!(*seen.lock().unwrap(), [half, half]);
}

#[retry(hedge = 100ms, attempts = 2, deadline = 10s, attempt_timeout = 500ms, idempotent, budget = none)]
async fn hedged_observing(seen: &std::sync::Mutex<Vec<Option<Duration>>>) -> Result<(), Error> {
    seen.lock()
        .unwrap()
        .push(context().and_then(|cx| cx.remaining()));
    std::future::pending().await
}

/// The same through `call_async` with a `Retry`'s `attempt_timeout`, and
/// in each attempt of a hedged round (the hedge's own, from its start).
#[tokio::test(start_paused = true)]
async fn every_loops_attempt_context_says_the_time_its_attempt_timeout_leaves_it() {
    let half = Some(Duration::from_millis(500));
    let policy = backstop::Policy::new()
        .deadline(Some(Duration::from_secs(10)))
        .idempotent(true)
        .attempts(2)
        .no_budget();
    let seen = std::sync::Mutex::new(Vec::new());
    let out: Result<(), Error> = backstop::Retry::new(&policy)
        .attempt_timeout(Duration::from_millis(500))
        .call_async(|| async {
            seen.lock()
                .unwrap()
                .push(context().and_then(|cx| cx.remaining()));
            std::future::pending().await
        })
        .await;
    assert!(out.is_err());
    assert_eq!(*seen.lock().unwrap(), [half, half]);
    let seen = std::sync::Mutex::default();
    assert!(hedged_observing(&seen).await.is_err());
    assert_eq!(*seen.lock().unwrap(), [half, half]);
}

#[retry(attempts = 10, base = 100ms, jitter = none, budget = none)]
async fn refused_until_its_deadline(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 2, attempt_timeout = 1s, idempotent, base = 1ms, budget = none)]
async fn timed_around_a_retrying_call(calls: &AtomicU32) -> Result<(), Error> {
    refused_until_its_deadline(calls).await
}

/// A call nested in an attempt that is cut off after its
/// `attempt_timeout` keeps that limit as its deadline: it sleeps no retry
/// past it, and gives up with its own error (attempts at 0, 100, 300 and
/// 700 ms; the next would be at 1.5 s), rather than be cut off midway; the
/// call around it does not retry on top.
#[tokio::test(start_paused = true)]
async fn a_nested_call_keeps_the_attempt_timeout_of_the_attempt_it_runs_in() {
    let calls = AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let error = timed_around_a_retrying_call(&calls).await.unwrap_err();
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{error}"
    );
    assert_eq!(calls.load(Relaxed), 4);
    assert_eq!(started.elapsed(), Duration::from_millis(700));
}

#[retry(attempts = 100, base = 50ms, budget = none)]
fn inner_default_deadline() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 1, deadline = 1s, budget = none)]
fn outer_with_a_deadline() -> Result<(), Error> {
    inner_default_deadline()
}

#[test]
fn a_nested_call_never_outlives_the_enclosing_deadline() {
    let vt = VirtualTime::start();
    let _ = outer_with_a_deadline();
    assert!(vt.elapsed() < Duration::from_secs(1), "{:?}", vt.elapsed());
}

#[retry(attempts = 100, base = 50ms, budget = none)]
async fn inner_default_deadline_async() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 1, deadline = 1s, budget = none)]
async fn outer_with_a_deadline_async() -> Result<(), Error> {
    inner_default_deadline_async().await
}

#[tokio::test(start_paused = true)]
async fn a_nested_async_call_never_outlives_the_enclosing_deadline() {
    let t0 = tokio::time::Instant::now();
    let _ = outer_with_a_deadline_async().await;
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[retry(attempts = 100, base = 50ms, budget = none)]
async fn slow_inner(
    starts: &std::sync::Mutex<Vec<Duration>>,
    t0: tokio::time::Instant,
) -> Result<(), Error> {
    starts.lock().unwrap().push(t0.elapsed());
    // Each attempt takes time: the deadline must count it, not only the sleeps.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Err(refused())
}

#[retry(attempts = 1, deadline = 1s, budget = none)]
async fn outer_over_a_slow_inner(
    starts: &std::sync::Mutex<Vec<Duration>>,
    t0: tokio::time::Instant,
) -> Result<(), Error> {
    slow_inner(starts, t0).await
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_whose_attempts_take_time_never_outlives_the_enclosing_deadline() {
    let t0 = tokio::time::Instant::now();
    let starts = std::sync::Mutex::new(Vec::new());
    let _ = outer_over_a_slow_inner(&starts, t0).await;
    let starts = starts.into_inner().unwrap();
    assert!(starts.len() >= 2, "{starts:?}: it did retry");
    assert!(
        starts.iter().all(|s| *s < Duration::from_secs(1)),
        "{starts:?}: no attempt started after the outer deadline"
    );
    // The last attempt may still run (only attempt_timeout cuts one off),
    // but none started late: the call ends within one attempt of it.
    assert!(
        t0.elapsed() < Duration::from_millis(1300),
        "{:?}",
        t0.elapsed()
    );
}

// --- deadline scopes ---------------------------------------------------------

#[retry(attempts = 100, base = 100ms, jitter = none, budget = none)]
fn reaches(left: &mut Vec<Option<Duration>>) -> Result<(), Error> {
    left.push(context().and_then(|cx| cx.remaining()));
    Err(refused())
}

#[test]
fn calls_in_a_deadline_scope_end_by_it_one_after_another() {
    let vt = VirtualTime::start();
    let (mut first, mut second) = (Vec::new(), Vec::new());
    backstop::scope::deadline_sync(Duration::from_secs(1), || {
        let _ = reaches(&mut first);
        // The second call sees what is left of the scope, not its own 30 s.
        let _ = reaches(&mut second);
    });
    let ms = Duration::from_millis;
    assert_eq!(first[0], Some(ms(1000)), "the scope's deadline, not 30 s");
    assert_eq!(first.len(), 4, "0, 100, 300, 700 ms: 1.5 s would pass it");
    assert_eq!(
        second,
        [Some(ms(300)), Some(ms(200))],
        "700 ms in, 300 ms left: 100 ms fits, 200 ms would not"
    );
    assert!(vt.elapsed() < Duration::from_secs(1));
    // After the scope: a call's own deadline again.
    let mut after = Vec::new();
    let _ = reaches(&mut after);
    assert_eq!(after[0], Some(Duration::from_secs(30)));
    assert!(context().is_none());
}

/// Outside a call, `scope::time_left()` reads a scope's deadline on the
/// clock it was set on: a sync scope's on the system clock (virtual
/// here), an async one's on tokio's (paused).
#[test]
fn the_time_left_of_a_scope_is_read_on_its_own_clock() {
    assert_eq!(backstop::scope::time_left(), None);
    let vt = VirtualTime::start();
    let left = backstop::scope::deadline_sync(Duration::from_secs(10), || {
        vt.advance(Duration::from_secs(6));
        backstop::scope::time_left()
    });
    assert_eq!(left, Some(Duration::from_secs(4)));
    drop(vt);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let left = runtime.block_on(backstop::scope::deadline(Duration::from_secs(10), async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        backstop::scope::time_left()
    }));
    assert_eq!(left.unwrap(), Some(Duration::from_secs(4)));
}

#[retry(attempts = 2, deadline = 2s, jitter = none, budget = none)]
fn scoped_inside(left: &mut Vec<Option<Duration>>) -> Result<(), Error> {
    // A longer scope inside an attempt: the attempt's deadline still holds.
    let mut inner = Vec::new();
    backstop::scope::deadline_sync(Duration::from_secs(10), || {
        let _ = reaches(&mut inner);
    });
    left.push(inner[0]);
    // A shorter one shortens it.
    backstop::scope::deadline_sync(Duration::from_millis(50), || {
        left.push(context().and_then(|cx| cx.remaining()));
    });
    left.push(context().and_then(|cx| cx.remaining()));
    Ok(())
}

#[test]
fn a_deadline_scope_never_outlives_the_enclosing_deadline() {
    let _vt = VirtualTime::start();
    let mut left = Vec::new();
    scoped_inside(&mut left).unwrap();
    let ms = Duration::from_millis;
    assert_eq!(
        left[0],
        Some(ms(2000)),
        "the enclosing 2 s, not the scope's 10 s"
    );
    assert_eq!(left[1], Some(ms(50)));
    assert!(
        left[2] < Some(ms(2000)) && left[2] > Some(ms(50)),
        "{left:?}: back to the attempt's"
    );
}

#[test]
fn a_panic_inside_a_deadline_scope_leaves_no_deadline_behind() {
    let _vt = VirtualTime::start();
    let caught = std::panic::catch_unwind(|| {
        backstop::scope::deadline_sync(Duration::from_millis(10), || panic!("boom"));
    });
    assert!(caught.is_err());
    let mut after = Vec::new();
    let _ = reaches(&mut after);
    assert_eq!(after[0], Some(Duration::from_secs(30)));
}

#[retry(attempts = 100, base = 100ms, jitter = none, budget = none)]
async fn reaches_async(left: &std::sync::Mutex<Vec<Option<Duration>>>) -> Result<(), Error> {
    tokio::task::yield_now().await;
    left.lock()
        .unwrap()
        .push(context().and_then(|cx| cx.remaining()));
    Err(refused())
}

#[retry(attempts = 3, base = 10ms, budget = none, idempotent)]
async fn hangs(attempts: &std::sync::atomic::AtomicU32) -> Result<(), Error> {
    attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn an_async_deadline_is_a_time_limit_for_what_it_runs() {
    // Plain code inside it, and an attempt that hangs (no
    // `attempt_timeout`), are cut off at the deadline.
    let started = tokio::time::Instant::now();
    let slept = backstop::scope::deadline(
        Duration::from_secs(2),
        tokio::time::sleep(Duration::from_secs(5)),
    );
    let elapsed = slept.await.unwrap_err();
    assert_eq!(elapsed.to_string(), "`scope::deadline` of 2s ran out");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let hung = backstop::scope::deadline(Duration::from_secs(2), hangs(&attempts)).await;
    assert!(matches!(hung, Err(backstop::Elapsed { .. })), "{hung:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(attempts.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn an_async_deadline_scope_bounds_the_calls_awaited_in_it() {
    let started = tokio::time::Instant::now();
    let (first, second) = (std::sync::Mutex::default(), std::sync::Mutex::default());
    backstop::scope::deadline(Duration::from_secs(1), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = reaches_async(&first).await;
        let _ = reaches_async(&second).await;
    })
    .await
    .expect("the calls inside give up before the deadline");
    let ms = Duration::from_millis;
    let first = first.into_inner().unwrap();
    assert_eq!(
        first[0],
        Some(ms(900)),
        "the scope started at the first poll"
    );
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(second.into_inner().unwrap().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(1));
    let after = std::sync::Mutex::default();
    drop(tokio::time::timeout(ms(1), reaches_async(&after)).await);
    assert_eq!(
        after.into_inner().unwrap()[0],
        Some(Duration::from_secs(30))
    );
}

/// A scope inside an attempt, with more time than the call has left.
#[retry(deadline = 200ms, budget = none)]
async fn scoped_in_an_attempt() -> Result<(), Error> {
    backstop::scope::deadline(
        Duration::from_secs(10),
        tokio::time::sleep(Duration::from_secs(1)),
    )
    .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_async_deadline_scope_is_cut_off_at_the_deadline_it_runs_within() {
    // Inside an attempt: at the call's deadline, as a nested call's
    // attempt timeout is.
    let started = tokio::time::Instant::now();
    let error = scoped_in_an_attempt().await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!(
        error.to_string(),
        "`scope::deadline` of 10s cut off at the deadline it runs within (an enclosing call's, \
         scope's or served request's)"
    );
    // Inside another scope: at the enclosing scope's, where the code
    // around the inner one still runs (its fallback).
    let started = tokio::time::Instant::now();
    let outer = backstop::scope::deadline(Duration::from_millis(300), async {
        let inner =
            backstop::scope::deadline(Duration::from_secs(10), std::future::pending::<()>());
        match inner.await {
            Ok(()) => unreachable!("pending"),
            Err(elapsed) => format!("fallback after: {elapsed}"),
        }
    })
    .await;
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(
        outer.as_deref(),
        Ok(
            "fallback after: `scope::deadline` of 10s cut off at the deadline it runs within \
            (an enclosing call's, scope's or served request's)"
        )
    );
}

// --- the call carried into spawned work --------------------------------------

static SPAWNED_DEPENDENCY: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, base = 1ms, budget = none)]
async fn spawned_inner(
    keys: std::sync::Arc<std::sync::Mutex<Vec<Option<IdempotencyKey>>>>,
) -> Result<(), Error> {
    keys.lock().unwrap().push(None);
    SPAWNED_DEPENDENCY.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, base = 1ms, budget = none)]
async fn spawns(
    carry: bool,
    keys: &std::sync::Arc<std::sync::Mutex<Vec<Option<IdempotencyKey>>>>,
) -> Result<(), Error> {
    use backstop::scope::InCurrentCall;
    let outer_key = context().unwrap().idempotency_key();
    let seen = std::sync::Arc::clone(keys);
    let task = async move {
        seen.lock()
            .unwrap()
            .push(context().map(|cx| cx.idempotency_key()));
        assert!(context().is_some_and(|cx| cx.idempotency_key() == outer_key));
        spawned_inner(std::sync::Arc::clone(&seen)).await
    };
    if carry {
        tokio::spawn(task.in_current_call()).await.unwrap()
    } else {
        // Not carried: a task of its own, outside the attempt.
        tokio::spawn(async move {
            spawned_inner(std::sync::Arc::new(std::sync::Mutex::default())).await
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carried_into_a_spawned_task_keeps_the_one_layer_rule() {
    let keys = std::sync::Arc::default();
    SPAWNED_DEPENDENCY.store(0, Relaxed);
    let _ = spawns(true, &keys).await;
    assert_eq!(SPAWNED_DEPENDENCY.load(Relaxed), 3, "3, not 3 × 3");
    // Without it, the spawned calls retry on top of the attempt's retries.
    SPAWNED_DEPENDENCY.store(0, Relaxed);
    let _ = spawns(false, &keys).await;
    assert_eq!(SPAWNED_DEPENDENCY.load(Relaxed), 9);
}

static ABORTED_DEPENDENCY: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 5, base = 1s, jitter = none, budget = none)]
async fn carried_slow_retrying() -> Result<(), Error> {
    ABORTED_DEPENDENCY.fetch_add(1, Relaxed);
    Err(refused())
}

/// Carries a retrying call into a task, and aborts the task `after` this
/// long (at 1.5 s the call has retried once, at 0.5 s not yet).
#[retry(attempts = 3, base = 1ms, budget = none)]
async fn aborts_its_carried_task(after: Duration) -> Result<(), Error> {
    use backstop::scope::InCurrentCall;
    let task = tokio::spawn(carried_slow_retrying().in_current_call());
    tokio::time::sleep(after).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    Err(refused())
}

/// A call carried into a task that is aborted after it retried counts as
/// one that retried, as it does dropped in the attempt itself: it is
/// dropped in the call it was carried from (2 requests, not 3 × 2).
/// Aborted before it retried, the attempt is retried.
#[tokio::test(start_paused = true)]
async fn a_carried_call_aborted_after_it_retried_is_not_retried_around() {
    for (after, requests) in [(1500, 2), (500, 3)] {
        ABORTED_DEPENDENCY.store(0, Relaxed);
        let after = Duration::from_millis(after);
        assert!(aborts_its_carried_task(after).await.is_err());
        assert_eq!(
            ABORTED_DEPENDENCY.load(Relaxed),
            requests,
            "aborted after {after:?}"
        );
    }
}

static BLOCKING_DEPENDENCY: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, base = 1ms, jitter = none, budget = none)]
fn blocking_inner(left: &std::sync::Mutex<Vec<Option<Duration>>>) -> Result<(), Error> {
    left.lock()
        .unwrap()
        .push(context().and_then(|cx| cx.remaining()));
    BLOCKING_DEPENDENCY.fetch_add(1, Relaxed);
    Err(refused())
}

#[retry(attempts = 3, deadline = 2s, jitter = none, budget = none)]
async fn spawns_blocking(
    left: &std::sync::Arc<std::sync::Mutex<Vec<Option<Duration>>>>,
) -> Result<(), Error> {
    let call = backstop::scope::current_call();
    let left = std::sync::Arc::clone(left);
    tokio::task::spawn_blocking(move || call.in_scope(|| blocking_inner(&left)))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_call_carried_into_a_blocking_closure_keeps_the_deadline_and_one_layer() {
    BLOCKING_DEPENDENCY.store(0, Relaxed);
    let left = std::sync::Arc::default();
    let _ = spawns_blocking(&left).await;
    assert_eq!(BLOCKING_DEPENDENCY.load(Relaxed), 3, "3, not 3 × 3");
    let left = left.lock().unwrap();
    assert!(
        left[0].is_some_and(|d| d <= Duration::from_secs(2)),
        "{left:?}: the outer 2 s"
    );
}

/// Carries its call into a thread before it asks for its key: what the
/// thread read, and then what the attempt reads.
#[retry(attempts = 1, budget = none)]
fn carries_before_its_key() -> Result<(IdempotencyKey, IdempotencyKey), Error> {
    let call = backstop::scope::current_call();
    let carried =
        std::thread::spawn(move || call.in_scope(|| context().unwrap().idempotency_key()))
            .join()
            .unwrap();
    Ok((carried, context().unwrap().idempotency_key()))
}

#[test]
fn work_carried_out_before_the_attempt_asks_for_its_key_shares_the_key() {
    let (carried, own) = carries_before_its_key().unwrap();
    assert_eq!(carried, own);
}

#[retry(attempts = 1, deadline = 5s, budget = none)]
fn scope_described() -> Result<String, Error> {
    Ok(format!("{:?}", backstop::scope::current_call()))
}

#[test]
fn a_carried_scope_debugs_as_its_attempt_and_deadline() {
    assert_eq!(
        format!("{:?}", backstop::scope::current_call()),
        "CallScope { attempt: None, deadline: None, .. }"
    );
    let inside = scope_described().unwrap();
    assert!(
        inside.starts_with("CallScope { attempt: Some(1), deadline: Some(")
            && inside.ends_with(", .. }"),
        "{inside}"
    );
}

#[retry(attempts = 1, deadline = 5s, budget = none)]
fn carried_out() -> Result<backstop::scope::CallScope, Error> {
    Ok(backstop::scope::current_call())
}

#[test]
fn a_carried_scope_is_left_behind_on_return_and_on_panic() {
    let call = carried_out().unwrap();
    assert!(call.in_scope(|| context().is_some_and(|cx| cx.deadline().is_some())));
    assert!(context().is_none(), "left on return");
    let panicked = std::panic::catch_unwind(|| call.in_scope(|| panic!("boom")));
    assert!(panicked.is_err());
    assert!(context().is_none(), "left on panic");
}

#[test]
fn outside_every_call_a_carried_scope_changes_nothing_and_a_deadline_scope_carries() {
    let call = backstop::scope::current_call();
    assert!(call.in_scope(|| context().is_none()));
    let _vt = VirtualTime::start();
    let left = backstop::scope::deadline_sync(Duration::from_secs(1), || {
        let call = backstop::scope::current_call();
        std::thread::spawn(move || {
            call.in_scope(|| {
                let _vt = VirtualTime::start();
                let mut left = Vec::new();
                let _ = reaches(&mut left);
                left
            })
        })
        .join()
        .unwrap()
    });
    assert!(
        left[0].is_some_and(|d| d <= Duration::from_secs(1)),
        "{left:?}: the scope's 1 s, not 30 s"
    );
}
