//! `#[retry(throttle = ..)]`: the adaptive throttle sheds attempts before
//! they are made, the first included.

use std::cell::Cell;
use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::limit::AdaptiveThrottle;
use backstop::testing::{VirtualTime, isolate, seed_jitter};
use backstop::{GiveUp, Throttled, retry};

#[derive(Debug, PartialEq)]
enum ApiError {
    Refused,
    Shed,
}

impl backstop::Classify for ApiError {
    fn classify(&self) -> backstop::Verdict {
        match self {
            ApiError::Refused => backstop::Verdict::Retry,
            ApiError::Shed => backstop::Verdict::Stop,
        }
    }
}

impl From<Throttled> for ApiError {
    fn from(_: Throttled) -> Self {
        ApiError::Shed
    }
}

static DOWN: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 1, throttle = DOWN, budget = none)]
fn refused(calls: &Cell<u32>) -> Result<(), ApiError> {
    calls.set(calls.get() + 1);
    Err(ApiError::Refused)
}

#[test]
fn a_dependency_refusing_everything_is_shed_before_it_is_called() {
    let _vt = VirtualTime::start();
    seed_jitter(7);
    let calls = Cell::new(0);
    let mut shed = 0;
    for _ in 0..1000 {
        if refused(&calls) == Err(ApiError::Shed) {
            shed += 1;
        }
    }
    // Shed before running the body: what was sent plus what was shed is
    // every call, and most were shed.
    assert_eq!(calls.get() + shed, 1000);
    assert!(shed > 900, "{shed} shed");
}

static HALF: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 3, base = 1ns, throttle = HALF, budget = none,
        on_give_up = |e| REASONS.with(|r| r.borrow_mut().push((e.reason(), e.attempts()))))]
fn later_attempts(calls: &Cell<u32>) -> Result<(), ApiError> {
    calls.set(calls.get() + 1);
    Err(ApiError::Refused)
}

thread_local! {
    static REASONS: std::cell::RefCell<Vec<(GiveUp, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[test]
fn a_shed_later_attempt_gives_up_with_the_last_outcome() {
    let _vt = VirtualTime::start();
    let _fresh = isolate();
    seed_jitter(11);
    let calls = Cell::new(0);
    let (mut shed_later, mut shed_first) = (0, 0);
    for _ in 0..200 {
        REASONS.with(|r| r.borrow_mut().clear());
        let outcome = later_attempts(&calls);
        let gave_up = REASONS.with(|r| r.borrow().clone());
        match gave_up[..] {
            // Shed after a retry's sleep: the outcome it kept, not `Shed`.
            [(GiveUp::Throttled, attempts)] if attempts > 0 => {
                shed_later += 1;
                assert_eq!(outcome, Err(ApiError::Refused), "after {attempts} attempts");
            }
            // Turned away before its first attempt: nothing was kept.
            [(GiveUp::Throttled, 0)] => {
                shed_first += 1;
                assert_eq!(outcome, Err(ApiError::Shed));
            }
            _ => assert_eq!(outcome, Err(ApiError::Refused), "{gave_up:?}"),
        }
    }
    assert!(
        shed_later > 0 && shed_first > 0,
        "{shed_later} later, {shed_first} first"
    );
}

static HALF_ASYNC: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 3, base = 1ns, throttle = HALF_ASYNC, budget = none,
        on_give_up = |e| REASONS.with(|r| r.borrow_mut().push((e.reason(), e.attempts()))))]
async fn later_attempts_async() -> Result<(), ApiError> {
    Err(ApiError::Refused)
}

#[tokio::test(start_paused = true)]
async fn a_shed_later_attempt_of_an_async_call_gives_up_with_the_rejection() {
    // An async call drops its outcome before the sleep (a retried
    // response releases its connection at once): a retry shed after it
    // ends the call with the rejection, as a first attempt shed does.
    let _fresh = isolate();
    seed_jitter(11);
    let (mut shed_later, mut shed_first) = (0, 0);
    for _ in 0..200 {
        REASONS.with(|r| r.borrow_mut().clear());
        let outcome = later_attempts_async().await;
        let gave_up = REASONS.with(|r| r.borrow().clone());
        match gave_up[..] {
            [(GiveUp::Throttled, attempts)] => {
                if attempts > 0 {
                    shed_later += 1;
                } else {
                    shed_first += 1;
                }
                assert_eq!(outcome, Err(ApiError::Shed), "after {attempts} attempts");
            }
            _ => assert_eq!(outcome, Err(ApiError::Refused), "{gave_up:?}"),
        }
    }
    assert!(
        shed_later > 0 && shed_first > 0,
        "{shed_later} later, {shed_first} first"
    );
}

static REPLAYED: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 1, throttle = REPLAYED, budget = none)]
fn replayed() -> Result<(), ApiError> {
    Err(ApiError::Refused)
}

#[test]
fn seed_jitter_replays_what_is_shed() {
    let _vt = VirtualTime::start();
    let run = |seed| {
        seed_jitter(seed);
        (0..200)
            .map(|_| replayed() == Err(ApiError::Shed))
            .collect::<Vec<_>>()
    };
    // The throttle's counts carry over between runs: compare runs that
    // start from the same counts, a window apart in virtual time.
    let vt = VirtualTime::start();
    let first = run(3);
    vt.advance(Duration::from_secs(120));
    let second = run(3);
    assert_eq!(first, second);
}

static IO: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 1, throttle = IO, budget = none)]
fn io_refused() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn io_errors_take_the_throttle_too() {
    let _vt = VirtualTime::start();
    seed_jitter(5);
    let shed = (0..100)
        .filter_map(|_| io_refused().err())
        .filter(|e| {
            let inner: Option<&(dyn std::error::Error + Send + Sync)> = e.get_ref();
            inner.is_some_and(|inner| inner.downcast_ref::<Throttled>().is_some())
        })
        .count();
    assert!(shed > 50, "{shed}");
}

#[test]
fn retry_takes_the_throttle_too() {
    static SHARED: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));
    let _vt = VirtualTime::start();
    seed_jitter(1);
    let policy = backstop::Policy::new().attempts(1).no_budget();
    let shed = (0..200)
        .filter(|_| {
            backstop::Retry::new(&policy)
                .throttle(&SHARED)
                .call(|| Err::<(), _>(ApiError::Refused))
                == Err(ApiError::Shed)
        })
        .count();
    assert!(shed > 150, "{shed}");
}

static GUARD: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, Duration::from_secs(600));
static BEHIND_GUARD: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

impl From<backstop::CircuitOpen> for ApiError {
    fn from(_: backstop::CircuitOpen) -> Self {
        ApiError::Shed
    }
}

#[retry(attempts = 1, throttle = BEHIND_GUARD, breaker = GUARD, budget = none)]
fn guarded(calls: &Cell<u32>) -> Result<(), ApiError> {
    calls.set(calls.get() + 1);
    Err(ApiError::Refused)
}

#[test]
fn calls_the_breaker_rejects_are_not_requests_the_dependency_refused() {
    let vt = VirtualTime::start();
    seed_jitter(2);
    let calls = Cell::new(0);
    let _ = guarded(&calls); // sent, refused: the breaker opens
    for _ in 0..100 {
        let _ = guarded(&calls);
    }
    assert_eq!(calls.get(), 1, "one attempt sent");
    // One request, no accept: (1 - 0) / (1 + 1), however many the breaker
    // turned away.
    let p = BEHIND_GUARD.rejection_probability_at(vt.now());
    assert!((p - 0.5).abs() < 1e-12, "{p}");
}

/// An error that says how the dependency refused.
#[derive(Debug, PartialEq)]
enum Pushback {
    /// "Do not retry": the dependency is overloaded.
    Overloaded,
    /// An answer no retry can fix (a bad request).
    Invalid,
    Shed,
}

impl backstop::Classify for Pushback {
    fn classify(&self) -> backstop::Verdict {
        match self {
            Pushback::Overloaded => backstop::Verdict::StopOverloaded,
            Pushback::Invalid | Pushback::Shed => backstop::Verdict::Stop,
        }
    }
}

impl From<Throttled> for Pushback {
    fn from(_: Throttled) -> Self {
        Pushback::Shed
    }
}

static OVERLOADED: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));
static INVALID: AdaptiveThrottle = AdaptiveThrottle::new(2.0, Duration::from_secs(60));

#[retry(attempts = 1, throttle = OVERLOADED, budget = none)]
fn overloaded(calls: &Cell<u32>) -> Result<(), Pushback> {
    calls.set(calls.get() + 1);
    Err(Pushback::Overloaded)
}

#[retry(attempts = 1, throttle = INVALID, budget = none)]
fn invalid(calls: &Cell<u32>) -> Result<(), Pushback> {
    calls.set(calls.get() + 1);
    Err(Pushback::Invalid)
}

#[test]
fn a_dependency_that_says_it_is_overloaded_is_shed_and_one_that_answers_is_not() {
    let _vt = VirtualTime::start();
    seed_jitter(11);
    let overloaded_calls = Cell::new(0);
    let invalid_calls = Cell::new(0);
    let mut shed = (0, 0);
    for _ in 0..1000 {
        if overloaded(&overloaded_calls) == Err(Pushback::Shed) {
            shed.0 += 1;
        }
        if invalid(&invalid_calls) == Err(Pushback::Shed) {
            shed.1 += 1;
        }
    }
    // "Do not retry" is a refusal, not an answer: the throttle sheds.
    assert_eq!(overloaded_calls.get() + shed.0, 1000);
    assert!(shed.0 > 900, "{shed:?} shed");
    // A bad request is an answer: every call reaches the dependency.
    assert_eq!((invalid_calls.get(), shed.1), (1000, 0));
}

static PER_SHARD: backstop::limit::Keyed<AdaptiveThrottle> =
    backstop::limit::Keyed::new(AdaptiveThrottle::new(2.0, Duration::from_secs(60)));

#[retry(attempts = 1, throttle = PER_SHARD, key = shard, budget = none)]
fn on_shard(shard: &str, calls: &Cell<u32>) -> Result<(), ApiError> {
    calls.set(calls.get() + 1);
    if shard == "down" {
        Err(ApiError::Refused)
    } else {
        Ok(())
    }
}

#[test]
fn a_throttle_kept_per_key_sheds_the_calls_of_the_key_that_is_refused_only() {
    let _vt = VirtualTime::start();
    seed_jitter(7);
    let calls = Cell::new(0);
    let shed = (0..1000)
        .filter(|_| on_shard("down", &calls) == Err(ApiError::Shed))
        .count();
    assert_eq!(calls.get() as usize + shed, 1000);
    assert!(shed > 900, "{shed} shed");
    // Another shard, answering, has its own throttle: nothing is shed.
    calls.set(0);
    for _ in 0..1000 {
        assert_eq!(on_shard("up", &calls), Ok(()));
    }
    assert_eq!(calls.get(), 1000);
}
