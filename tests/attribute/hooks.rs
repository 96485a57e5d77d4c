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
        "retry after attempt {}: {what}, {:?}, sleep {:?}, at {:?}, {} hedges",
        event.attempt(),
        event.verdict(),
        event.delay(),
        event.elapsed(),
        event.hedges()
    ));
}

#[retry(attempts = 4, jitter = none, budget = none, when_ok = |s: &u16| *s == 503,
        on_retry = on_retry,
        on_give_up = |e: &GiveUpEvent<'_, u16, Error>| log(format!("gave up: {:?} after {} ({} hedges) at {:?}", e.reason(), e.attempts(), e.hedges(), e.elapsed())))]
fn fetch(answers: &mut Vec<Result<u16, Error>>) -> Result<u16, Error> {
    answers.remove(0)
}

#[test]
fn every_retry_is_reported_with_its_outcome_verdict_and_delay() {
    let _vt = VirtualTime::start();
    let mut answers = vec![Err(ErrorKind::ConnectionRefused.into()), Ok(503), Ok(200)];
    assert_eq!(fetch(&mut answers).unwrap(), 200);
    assert_eq!(
        take_log(),
        [
            "retry after attempt 1: error ConnectionRefused, Refused, sleep 100ms, at 0ns, 0 hedges",
            "retry after attempt 2: status 503, Retry, sleep 200ms, at 100ms, 0 hedges",
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
    assert_eq!(log[3], "gave up: Attempts after 4 (0 hedges) at 700ms");

    let mut answers = vec![Err(ErrorKind::PermissionDenied.into())];
    let _ = fetch(&mut answers);
    assert_eq!(take_log(), ["gave up: Stopped after 1 (0 hedges) at 0ns"]);
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

// --- every give-up reason, as a hook sees it ---------------------------------

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use backstop::limit::{CircuitBreaker, WindowBudget};
use backstop::{CircuitOpen, Classify, Verdict};

#[derive(Debug)]
enum Failure {
    Transient,
    Ambiguous,
    Throttled(std::time::Duration),
    Invalid,
    Open,
}

impl Classify for Failure {
    fn classify(&self) -> Verdict {
        match self {
            Failure::Transient => Verdict::Retry,
            Failure::Ambiguous => Verdict::RetryIfIdempotent,
            Failure::Throttled(after) => Verdict::RetryAfter(*after),
            Failure::Invalid | Failure::Open => Verdict::Stop,
        }
    }
}

impl From<CircuitOpen> for Failure {
    fn from(_: CircuitOpen) -> Self {
        Failure::Open
    }
}

impl From<backstop::Throttled> for Failure {
    fn from(_: backstop::Throttled) -> Self {
        Failure::Open
    }
}

fn reason(event: &GiveUpEvent<'_, (), Failure>) {
    log(event.reason().as_str().to_owned());
}

#[retry(attempts = 2, budget = none, on_give_up = reason)]
fn plain(failure: fn() -> Failure) -> Result<(), Failure> {
    Err(failure())
}

#[retry(attempts = 5, deadline = 1s, budget = none, on_give_up = reason)]
fn with_deadline() -> Result<(), Failure> {
    Err(Failure::Throttled(std::time::Duration::from_secs(2)))
}

#[retry(attempts = 5, retry_after_max = 10s, budget = none, on_give_up = reason)]
fn with_retry_after_max() -> Result<(), Failure> {
    Err(Failure::Throttled(std::time::Duration::from_secs(30)))
}

static EMPTY: WindowBudget = WindowBudget::new(0.1, 0, std::time::Duration::from_secs(10));

#[retry(attempts = 5, budget = EMPTY, on_give_up = reason)]
fn with_budget() -> Result<(), Failure> {
    Err(Failure::Transient)
}

static TRIPPED: CircuitBreaker = CircuitBreaker::new(1, std::time::Duration::from_secs(60));

#[retry(attempts = 5, budget = none, breaker = TRIPPED, on_give_up = reason)]
fn with_breaker() -> Result<(), Failure> {
    Err(Failure::Transient)
}

static SHEDDING: backstop::limit::AdaptiveThrottle =
    backstop::limit::AdaptiveThrottle::new(2.0, std::time::Duration::from_secs(60));

#[retry(attempts = 5, budget = none, throttle = SHEDDING, on_give_up = reason)]
fn with_throttle() -> Result<(), Failure> {
    Err(Failure::Transient)
}

#[retry(attempts = 3, budget = none, on_give_up = reason)]
fn inner_layer() -> Result<(), Failure> {
    Err(Failure::Transient)
}

#[retry(attempts = 3, budget = none, on_give_up = reason)]
fn outer_layer() -> Result<(), Failure> {
    inner_layer()
}

#[test]
fn every_give_up_reason_is_reported() {
    let _vt = VirtualTime::start();
    let _ = plain(|| Failure::Invalid);
    let _ = plain(|| Failure::Ambiguous);
    let _ = plain(|| Failure::Transient);
    let _ = with_deadline();
    let _ = with_retry_after_max();
    let _ = with_budget();
    let _ = with_breaker();
    // Ten thousand refusals: the next attempt is shed with p = 0.9999.
    for _ in 0..10_000 {
        SHEDDING.requested(backstop::time::Clock::now(&backstop::time::SystemClock));
    }
    backstop::testing::seed_jitter(1);
    let _ = with_throttle();
    let _ = outer_layer();
    assert_eq!(
        take_log(),
        [
            "stopped",
            "not_idempotent",
            "attempts",
            "deadline",
            "retry_after_too_long",
            "budget",
            "breaker_open",
            "throttled",
            "attempts",      // the inner call, after its three attempts
            "retried_below", // the outer one, which does not retry on top
        ]
    );
}

static PANICKY: CircuitBreaker = CircuitBreaker::new(1, std::time::Duration::from_secs(10));

#[retry(attempts = 1, budget = none, breaker = PANICKY)]
fn probe(calls: &AtomicU32, panics: bool) -> Result<(), Failure> {
    calls.fetch_add(1, Relaxed);
    assert!(!panics, "the probe's call panicked");
    Err(Failure::Transient)
}

#[test]
fn a_panicking_probe_frees_the_half_open_slot_a_cooldown_after_it_went() {
    let vt = VirtualTime::start();
    let calls = AtomicU32::new(0);
    let _ = probe(&calls, false); // opens it
    vt.advance(std::time::Duration::from_secs(10));
    let caught = std::panic::catch_unwind(|| probe(&calls, true));
    assert!(caught.is_err());
    assert_eq!(calls.load(Relaxed), 2, "the probe ran");
    // As if it were still out: the next trial a cooldown after it went.
    let _ = probe(&calls, false);
    assert_eq!(calls.load(Relaxed), 2, "within its time, turned away");
    vt.advance(std::time::Duration::from_secs(10));
    let _ = probe(&calls, false);
    assert_eq!(calls.load(Relaxed), 3, "the next caller probes: not wedged");
}

#[retry(attempts = 2, budget = none,
        on_retry = |e| log(format!("untyped retry {}", e.attempt())),
        on_give_up = |e| log(format!("untyped give-up {}", e.reason())))]
fn untyped_hooks() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn hook_closures_need_no_annotations() {
    let _vt = VirtualTime::start();
    let _ = untyped_hooks();
    assert_eq!(
        take_log(),
        ["untyped retry 1", "untyped give-up attempts exhausted"]
    );
}

// A hook that is a value, not a path or a closure literal: it is borrowed
// for each call of it, not moved.
#[retry(attempts = 3, budget = none, on_retry = hook)]
fn with_hook_value<H: Fn(&RetryEvent<'_, (), Error>)>(hook: H) -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

type BoxedHook = Box<dyn Fn(&GiveUpEvent<'_, (), Error>)>;

// Owned on purpose: a boxed hook handed to the function.
#[allow(clippy::needless_pass_by_value)]
#[retry(attempts = 3, budget = none, on_give_up = hook)]
fn with_boxed_hook(hook: BoxedHook) -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_hook_passed_as_an_argument_is_called_each_time() {
    let _vt = VirtualTime::start();
    let _ = with_hook_value(|e| log(format!("value {}", e.attempt())));
    let _ = with_boxed_hook(Box::new(|e| log(format!("boxed {}", e.attempts()))));
    assert_eq!(take_log(), ["value 1", "value 2", "boxed 3"]);
}
