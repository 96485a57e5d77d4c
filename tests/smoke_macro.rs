//! A first end-to-end check of `#[retry]` on a sync and an async fn.
use backstop::{retry, testing::VirtualTime};
use std::io::{Error, ErrorKind};
use std::time::Duration;

#[retry(attempts = 4, base = 100ms, cap = 5s, jitter = none)]
fn flaky(calls: &mut u32) -> Result<u32, Error> {
    *calls += 1;
    if *calls < 3 {
        return Err(ErrorKind::ConnectionReset.into());
    }
    let n: u32 = "7"
        .parse()
        .map_err(|_| Error::from(ErrorKind::InvalidData))?;
    Ok(n)
}

#[retry(attempts = 3, jitter = none)]
async fn flaky_async(calls: &std::cell::Cell<u32>) -> Result<u32, Error> {
    calls.set(calls.get() + 1);
    Err(ErrorKind::ConnectionReset.into())
}

#[test]
fn smoke() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    assert_eq!(flaky(&mut calls).unwrap(), 7);
    assert_eq!(calls, 3);
    assert_eq!(
        vt.sleeps(),
        [Duration::from_millis(100), Duration::from_millis(200)]
    );
}

#[tokio::test(start_paused = true)]
async fn smoke_async() {
    let calls = std::cell::Cell::new(0);
    assert!(flaky_async(&calls).await.is_err());
    assert_eq!(calls.get(), 3);
}
