//! Async retry loops on an executor that is not tokio's, in a build whose
//! only timer feature is `tokio` (the default: a program on smol,
//! async-std or `futures::executor` that did not enable `async-io`).
//! Outside a tokio runtime, their sleeps and cut-offs go on a timer
//! thread of the crate's own: they retry and cut off as on tokio's timer.
//! CI runs this file with the default features alone
//! (`cargo test -p backstop --test no_runtime`); with `async-io` also on,
//! as in `cargo test --workspace`, the same calls sleep on async-io's.

use std::io::{Error, ErrorKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::{Policy, retry};

#[retry(base = 5ms, jitter = none, budget = none)]
async fn refused_twice(calls: &AtomicU32) -> Result<u32, Error> {
    let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
    if n < 3 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(n)
}

#[test]
fn an_async_function_outside_any_runtime_sleeps_between_its_attempts() {
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let out = async_io::block_on(refused_twice(&calls));
    assert_eq!(out.unwrap(), 3);
    // Two sleeps, of 5 and 10 ms.
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(15), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[retry(attempt_timeout = 20ms, attempts = 2, deadline = 1s, idempotent, base = 1ms, budget = none)]
async fn hangs(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    std::future::pending().await
}

#[test]
fn an_attempt_outside_any_runtime_is_cut_off_at_its_limit() {
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let error = async_io::block_on(hangs(&calls)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimedOut);
    let took = start.elapsed();
    // Each cut off after its 20 ms (however late the timer's thread
    // wakes, the deadline leaves room for the second).
    assert_eq!(calls.load(Ordering::Relaxed), 2, "{calls:?}");
    assert!(took >= Duration::from_millis(40), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn closures_on_threads_of_their_own_outside_any_runtime_each_retry() {
    let policy = Policy::new().base(Duration::from_millis(2)).no_budget();
    std::thread::scope(|threads| {
        for _ in 0..4 {
            threads.spawn(|| {
                let calls = AtomicU32::new(0);
                let out = async_io::block_on(backstop::call_async(&policy, || async {
                    let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
                    if n < 3 {
                        Err(Error::from(ErrorKind::ConnectionRefused))
                    } else {
                        Ok(n)
                    }
                }));
                assert_eq!(out.unwrap(), 3);
            });
        }
    });
}
