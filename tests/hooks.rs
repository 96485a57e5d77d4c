//! `on_retry` and `on_give_up`: every retry and every give-up is reported.

use backstop::testing::VirtualTime;
use backstop::{GiveUp, GiveUpEvent, RetryEvent, retry};
use std::cell::RefCell;
use std::io::{Error, ErrorKind};

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn log(line: String) {
    LOG.with(|l| l.borrow_mut().push(line));
}

fn take_log() -> Vec<String> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

fn on_retry(event: &RetryEvent<'_, u16, Error>) {
    let what = match event.outcome() {
        Ok(status) => format!("status {status}"),
        Err(e) => format!("error {:?}", e.kind()),
    };
    log(format!(
        "retry after attempt {}: {what}, {:?}, sleep {:?}, at {:?}",
        event.attempt(),
        event.verdict(),
        event.delay(),
        event.elapsed()
    ));
}

#[retry(attempts = 4, jitter = none, budget = none, when_ok = |s: &u16| *s == 503,
        on_retry = on_retry,
        on_give_up = |e: &GiveUpEvent<'_, u16, Error>| log(format!("gave up: {:?} after {}", e.reason(), e.attempts())))]
fn fetch(answers: &mut Vec<Result<u16, Error>>) -> Result<u16, Error> {
    answers.remove(0)
}

#[test]
fn every_retry_is_reported_with_its_outcome_verdict_and_delay() {
    let _vt = VirtualTime::start();
    let mut answers = vec![Err(ErrorKind::ConnectionReset.into()), Ok(503), Ok(200)];
    assert_eq!(fetch(&mut answers).unwrap(), 200);
    assert_eq!(
        take_log(),
        [
            "retry after attempt 1: error ConnectionReset, Retry, sleep 100ms, at 0ns",
            "retry after attempt 2: status 503, Retry, sleep 200ms, at 100ms",
        ]
    );
}

#[test]
fn a_give_up_is_reported_with_its_reason() {
    let _vt = VirtualTime::start();
    let mut answers = (0..4).map(|_| Ok(503)).collect();
    assert_eq!(fetch(&mut answers).unwrap(), 503);
    let log = take_log();
    assert_eq!(log.len(), 4);
    assert_eq!(log[3], "gave up: Attempts after 4");

    let mut answers = vec![Err(ErrorKind::PermissionDenied.into())];
    let _ = fetch(&mut answers);
    assert_eq!(take_log(), ["gave up: Stopped after 1"]);
}

#[retry(attempts = 3, jitter = none, budget = none,
        on_give_up = |e: &GiveUpEvent<'_, (), Error>| log(format!("async gave up: {:?}", e.reason())),
        on_retry = |e: &RetryEvent<'_, (), Error>| log(format!("async retry {}", e.attempt())))]
async fn fetch_async() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[tokio::test(start_paused = true)]
async fn async_hooks_are_called_too() {
    let _ = fetch_async().await;
    assert_eq!(
        take_log(),
        ["async retry 1", "async retry 2", "async gave up: Attempts"]
    );
}

#[retry(attempts = 100, deadline = 1s, budget = none,
        on_give_up = |e: &GiveUpEvent<'_, (), Error>| log(format!("{:?} {}", e.reason(), e.reason().as_str())))]
fn against_the_deadline() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn the_reason_has_a_stable_name_for_metrics() {
    let _vt = VirtualTime::start();
    let _ = against_the_deadline();
    assert_eq!(take_log(), ["Deadline deadline"]);
    assert_eq!(GiveUp::RetriedBelow.as_str(), "retried_below");
    assert_eq!(GiveUp::BreakerOpen.as_str(), "breaker_open");
}
