//! Feature `async-io`: async retry loops on async-io's timer, driven by
//! async-io's `block_on` (the core of smol), with no tokio runtime.
//! Run with `cargo test -p backstop --features async-io --test async_io`.

use std::io::{Error, ErrorKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::time::RuntimeClock;
use backstop::{Policy, Retry, retry};

#[retry(attempts = 3, base = 5ms, jitter = none, budget = none)]
async fn flaky(calls: &AtomicU32) -> Result<u32, Error> {
    let n = calls.fetch_add(1, Ordering::Relaxed);
    async_io::Timer::after(Duration::from_millis(1)).await;
    if n < 2 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(n)
}

#[test]
fn outside_a_tokio_runtime_the_loops_run_on_async_io() {
    // (Built with the feature `tokio` too, as `cargo test --workspace` is.)
    assert!(matches!(RuntimeClock::current(), RuntimeClock::AsyncIo));
}

#[test]
fn a_retry_fn_sleeps_on_async_io_between_attempts() {
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let out = async_io::block_on(flaky(&calls));
    assert_eq!(out.unwrap(), 2);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    // 5 ms, then 10 ms, slept on async-io's timer.
    assert!(
        started.elapsed() >= Duration::from_millis(15),
        "{:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn an_attempt_timeout_cuts_off_a_hung_attempt_on_async_io() {
    let policy = Policy::new()
        .idempotent(true)
        .base(Duration::from_millis(1))
        .no_budget();
    let attempts = AtomicU32::new(0);
    let started = Instant::now();
    let out: Result<(), Error> = async_io::block_on(
        Retry::new(&policy)
            .attempt_timeout(Duration::from_millis(20))
            .call_async(|| {
                attempts.fetch_add(1, Ordering::Relaxed);
                std::future::pending()
            }),
    );
    assert_eq!(out.unwrap_err().kind(), ErrorKind::TimedOut);
    assert_eq!(attempts.load(Ordering::Relaxed), 3);
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[retry(deadline = 10s, attempt_timeout = 50ms, attempts = 1)]
async fn says_its_time_left() -> Result<Option<Duration>, Error> {
    Ok(backstop::context().and_then(|cx| cx.remaining()))
}

/// On async-io's timer too, an attempt's context says the time its
/// `attempt_timeout` leaves it, not the call's.
#[test]
fn an_attempts_context_says_its_cut_off_on_async_io() {
    let left = async_io::block_on(says_its_time_left()).unwrap().unwrap();
    assert!(
        left <= Duration::from_millis(50) && left > Duration::from_millis(10),
        "{left:?}"
    );
}

#[retry(deadline = 100ms, attempts = 100, base = 30ms, jitter = none, budget = none)]
async fn always_down(
    started: Instant,
    starts: &std::sync::Mutex<Vec<Duration>>,
) -> Result<(), Error> {
    starts.lock().unwrap().push(started.elapsed());
    Err(ErrorKind::ConnectionRefused.into())
}

/// On async-io's timer (real time: a busy machine wakes its sleeps late),
/// no attempt starts past the deadline, and each sleep lasts its delay:
/// attempts at 0, 30 and 90 ms, the third gone if a sleep woke late.
#[test]
fn the_deadline_holds_on_async_io() {
    let sleeps = backstop::testing::record_sleeps();
    let started = Instant::now();
    let starts = std::sync::Mutex::new(Vec::new());
    assert!(async_io::block_on(always_down(started, &starts)).is_err());
    let took = started.elapsed();
    let starts = starts.into_inner().unwrap();
    assert!((2..=3).contains(&starts.len()), "{starts:?}");
    assert!(
        starts.iter().all(|at| *at < Duration::from_millis(100)),
        "an attempt past the deadline: {starts:?}"
    );
    // No sleep that ends past the deadline (decided after its attempt
    // started, so it fits from that start); the call gave up instead.
    let sleeps = sleeps.sleeps();
    assert_eq!(
        sleeps.len(),
        starts.len() - 1,
        "{sleeps:?} after {starts:?}"
    );
    for (start, sleep) in starts.iter().zip(&sleeps) {
        assert!(
            *start + *sleep <= Duration::from_millis(100),
            "a sleep past the deadline: {sleeps:?} after {starts:?}"
        );
    }
    assert!(starts[1] >= Duration::from_millis(30), "{starts:?}");
    if let Some(third) = starts.get(2) {
        assert!(*third >= Duration::from_millis(90), "{starts:?}");
    }
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_runs_on_async_io() {
    use tower::{Layer, ServiceExt};
    let calls = std::sync::Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let inner = tower::service_fn(
        move |_: http::Request<backstop::tower::ReplayBody<String>>| {
            let status = if seen.fetch_add(1, Ordering::Relaxed) < 2 {
                503
            } else {
                200
            };
            async move { Ok::<_, Error>(http::Response::builder().status(status).body(()).unwrap()) }
        },
    );
    let policy = Policy::new().base(Duration::from_millis(1));
    let service = backstop::tower::RetryLayer::http(&policy).layer(inner);
    let request = http::Request::get("/users/7").body(String::new()).unwrap();
    let response = async_io::block_on(service.oneshot(request)).unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

#[cfg(feature = "tokio")]
#[test]
fn inside_a_tokio_runtime_tokio_still_keeps_time() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        assert!(matches!(RuntimeClock::current(), RuntimeClock::Tokio));
        let started = tokio::time::Instant::now();
        let calls = AtomicU32::new(0);
        assert_eq!(flaky(&calls).await.unwrap(), 2);
        // Paused time: the sleeps took no real time, and 15 ms of tokio's.
        assert!(started.elapsed() >= Duration::from_millis(15));
    });
}
