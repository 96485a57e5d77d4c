//! `testing::isolate()`: a test's retries do not depend on the tests that
//! ran before it, and `testing::record_sleeps()` lists the delays async
//! loops slept in tokio's paused time. CI also runs this file with
//! `--test-threads=1`.

use std::io::{Error, ErrorKind};
use std::sync::mpsc;
use std::time::Duration;

use backstop::retry;
use backstop::testing::{VirtualTime, isolate, record_sleeps};

/// Fails transiently, counting its attempts; draws on its own default budget.
#[retry(attempts = 3, base = 10ms)]
fn shared_flaky(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

/// Enough failing calls to spend a default budget (10% of calls plus a
/// reserve of 100 retries): 60 calls want 120 retries.
fn spend(f: fn(&mut u32) -> Result<(), Error>) -> u32 {
    let mut attempts = 0;
    for _ in 0..60 {
        let _ = f(&mut attempts);
    }
    attempts
}

// These two share one function and one budget: in either order, in
// parallel or one at a time, each passes only if isolation works.

#[test]
fn a_test_that_spends_the_default_budget() {
    let _vt = VirtualTime::start();
    let _fresh = isolate();
    assert!(spend(shared_flaky) < 180, "the budget refused some retries");
    let mut attempts = 0;
    let _ = shared_flaky(&mut attempts);
    assert_eq!(attempts, 1, "spent: no retry");
}

#[test]
fn b_table_driven_test_gets_every_retry_in_every_case() {
    let _vt = VirtualTime::start();
    for case in 0..80 {
        // One guard per case: 80 failing cases would spend even a fresh
        // budget (10% of 80 calls plus 100 is 108 retries, not 160).
        let _fresh = isolate();
        let mut attempts = 0;
        let _ = shared_flaky(&mut attempts);
        assert_eq!(attempts, 3, "case {case}");
    }
}

#[retry(attempts = 3, base = 10ms)]
fn flaky(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn without_isolation_one_test_leaks_into_the_next_and_with_it_none_does() {
    let _vt = VirtualTime::start();
    spend(flaky);
    // The leak `isolate` is for: the same process, a spent budget.
    let mut attempts = 0;
    let _ = flaky(&mut attempts);
    assert_eq!(attempts, 1);
    {
        let _fresh = isolate();
        let mut attempts = 0;
        let _ = flaky(&mut attempts);
        assert_eq!(attempts, 3, "a fresh budget");
        // Nested: shadows, then gives the outer guard's budget back.
        spend(flaky);
        {
            let _inner = isolate();
            let mut attempts = 0;
            let _ = flaky(&mut attempts);
            assert_eq!(attempts, 3);
        }
        let mut attempts = 0;
        let _ = flaky(&mut attempts);
        assert_eq!(attempts, 1, "the outer guard's budget, spent above");
    }
    let mut attempts = 0;
    let _ = flaky(&mut attempts);
    assert_eq!(attempts, 1, "the process's own budget again");
}

#[retry(attempts = 3, base = 10ms)]
fn threaded_flaky(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn isolation_holds_per_thread_while_another_thread_spends() {
    let (spent, wait) = mpsc::channel();
    let spender = std::thread::spawn(move || {
        let _vt = VirtualTime::start();
        let _fresh = isolate();
        spend(threaded_flaky);
        let mut attempts = 0;
        let _ = threaded_flaky(&mut attempts);
        spent.send(()).unwrap();
        attempts
    });
    let counter = std::thread::spawn(move || {
        wait.recv().unwrap();
        let _vt = VirtualTime::start();
        (0..40)
            .map(|_| {
                // A fresh throttle per case: 40 failing calls in a row
                // would spend even a fresh one (that is what it is for).
                let _fresh = isolate();
                let mut attempts = 0;
                let _ = threaded_flaky(&mut attempts);
                attempts
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(spender.join().unwrap(), 1, "the spender's budget is spent");
    assert_eq!(
        counter.join().unwrap(),
        vec![3; 40],
        "the other thread's is fresh"
    );
}

#[retry(attempts = 3, base = 1ms)]
async fn async_flaky(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[retry(attempts = 4, base = 100ms, jitter = none)]
async fn async_recorded(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[tokio::test(start_paused = true)]
async fn async_tests_isolate_and_record_their_sleeps() {
    {
        let _fresh = isolate();
        for _ in 0..60 {
            let _ = async_flaky(&mut 0).await;
        }
        let mut attempts = 0;
        let _ = async_flaky(&mut attempts).await;
        assert_eq!(attempts, 1, "spent");
    }
    let _fresh = isolate();
    let mut attempts = 0;
    let _ = async_flaky(&mut attempts).await;
    assert_eq!(attempts, 3, "fresh");

    let sleeps = record_sleeps();
    let mut attempts = 0;
    // In a spawned task too: it runs on this test's thread.
    let handle = tokio::spawn(async move {
        let _ = async_recorded(&mut attempts).await;
        attempts
    });
    assert_eq!(handle.await.unwrap(), 4);
    assert_eq!(sleeps.sleeps(), [100, 200, 400].map(Duration::from_millis));
}

#[test]
fn sync_sleeps_are_recorded_too_and_recorders_nest() {
    let _vt = VirtualTime::start();
    let _fresh = isolate();
    let outer = record_sleeps();
    let _ = flaky(&mut 0);
    {
        let _fresh = isolate();
        let inner = record_sleeps();
        let _ = flaky(&mut 0);
        assert_eq!(inner.sleeps().len(), 2);
    }
    assert_eq!(
        outer.sleeps().len(),
        2,
        "the inner recorder's sleeps are its own"
    );
}

/// A guard reassigned (a fresh one per case, `_fresh = isolate();`) is
/// dropped after the one that replaces it: each guard takes away only
/// its own, and what is in force stays the latest; once every guard is
/// gone, nothing of them is left on the thread.
#[test]
fn guards_reassigned_or_dropped_out_of_order_take_away_only_their_own() {
    static PG_OWN: backstop::limit::TokenBudget = backstop::limit::TokenBudget::standard();
    let mut vt = VirtualTime::start();
    let mut fresh = isolate();
    let mut sleeps = record_sleeps();
    for case in 0..80 {
        fresh = isolate();
        vt = VirtualTime::start();
        sleeps = record_sleeps();
        let mut attempts = 0;
        let _ = shared_flaky(&mut attempts);
        assert_eq!(attempts, 3, "case {case}: a fresh budget");
        assert_eq!(sleeps.sleeps().len(), 2, "case {case}: its own record");
        assert!(vt.elapsed() > Duration::ZERO, "case {case}: virtual");
    }
    assert!(!std::ptr::eq(
        backstop::testing::own(&PG_OWN),
        &raw const PG_OWN
    ));
    drop((vt, fresh, sleeps));
    assert!(
        std::ptr::eq(backstop::testing::own(&PG_OWN), &raw const PG_OWN),
        "no isolation left"
    );
    // Two clocks dropped first to last: real time again after both.
    let (first, second) = (VirtualTime::start(), VirtualTime::start());
    drop(first);
    second.advance(Duration::from_secs(60));
    drop(second);
    let started = std::time::Instant::now();
    let recorder = record_sleeps();
    let _ = backstop::call(
        &backstop::Policy::new()
            .attempts(2)
            .base(Duration::from_millis(20))
            .jitter(backstop::Jitter::None)
            .no_budget(),
        || Err::<(), _>(Error::from(ErrorKind::ConnectionRefused)),
    );
    assert!(
        started.elapsed() >= Duration::from_millis(10),
        "slept in real time"
    );
    assert_eq!(recorder.sleeps().len(), 1);
}

// Named statics, as the README recommends (`budget = PG`): under
// `isolate()` each is a fresh instance with its own configuration.

static PG: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(4, 0.1);

/// Always fails transiently (unreachable: a refusal would hold once the
/// budget refuses), on the named throttle: 4 tokens, so a fresh one grants
/// one retry (3 left, above 2) and refuses the next.
#[retry(attempts = 5, base = 10ms, budget = PG)]
fn on_named_token_budget(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::HostUnreachable.into())
}

#[test]
fn a_named_token_budget_is_fresh_with_its_own_configuration_in_each_isolation() {
    let _vt = VirtualTime::start();
    for round in 0..3 {
        let _fresh = isolate();
        let mut attempts = 0;
        let _ = on_named_token_budget(&mut attempts);
        assert_eq!(
            attempts, 2,
            "round {round}: a fresh 4-token throttle, one retry"
        );
        let mut attempts = 0;
        let _ = on_named_token_budget(&mut attempts);
        assert_eq!(
            attempts, 1,
            "round {round}: within one isolation it is shared"
        );
        let in_use = backstop::testing::own(&PG);
        assert!(
            !std::ptr::eq(in_use, &raw const PG),
            "the calls drew on a fresh one"
        );
        assert_eq!(in_use.max_tokens(), 4);
        assert!((in_use.tokens() - 1.0).abs() < 1e-9, "{}", in_use.tokens());
    }
    assert!(
        (PG.tokens() - 4.0).abs() < 1e-9,
        "the static itself was never touched"
    );
}

static WITHOUT: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(4, 0.1);

#[retry(attempts = 5, base = 10ms, budget = WITHOUT)]
fn on_unisolated_token_budget(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::HostUnreachable.into())
}

#[test]
fn without_isolation_a_named_token_budget_is_one_instance() {
    let _vt = VirtualTime::start();
    let mut attempts = 0;
    let _ = on_unisolated_token_budget(&mut attempts);
    let _ = on_unisolated_token_budget(&mut attempts);
    assert_eq!(attempts, 2 + 1, "the second call found it drained");
    assert!(WITHOUT.tokens() < 4.0);
}

static WINDOW: backstop::limit::WindowBudget =
    backstop::limit::WindowBudget::new(0.5, 1, Duration::from_secs(10));
static BREAKER: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, Duration::from_secs(60));
static SHEDDER: backstop::limit::AdaptiveThrottle =
    backstop::limit::AdaptiveThrottle::new(3.0, Duration::from_secs(5));

#[derive(Debug)]
enum Down {
    Refused,
    Open,
    Shed,
}

impl backstop::Classify for Down {
    fn classify(&self) -> backstop::Verdict {
        match self {
            Down::Refused => backstop::Verdict::Retry,
            Down::Open | Down::Shed => backstop::Verdict::Stop,
        }
    }
}

impl From<backstop::CircuitOpen> for Down {
    fn from(_: backstop::CircuitOpen) -> Self {
        Down::Open
    }
}

impl From<backstop::Throttled> for Down {
    fn from(_: backstop::Throttled) -> Self {
        Down::Shed
    }
}

#[retry(attempts = 3, base = 10ms, budget = WINDOW, breaker = BREAKER, throttle = SHEDDER)]
fn behind_everything(attempts: &mut u32) -> Result<(), Down> {
    *attempts += 1;
    Err(Down::Refused)
}

#[test]
fn a_named_budget_breaker_and_adaptive_throttle_are_fresh_in_each_isolation() {
    let _vt = VirtualTime::start();
    for round in 0..3 {
        let _fresh = isolate();
        let mut attempts = 0;
        let error = behind_everything(&mut attempts).unwrap_err();
        assert!(matches!(error, Down::Refused), "round {round}: {error:?}");
        assert_eq!(attempts, 1, "round {round}: the failure opened the breaker");
        let error = behind_everything(&mut attempts).unwrap_err();
        // Shed by the adaptive throttle (one refusal in its window sheds
        // half the calls) or turned away by the open breaker: not sent.
        assert!(
            matches!(error, Down::Open | Down::Shed),
            "round {round}: {error:?}"
        );
        assert_eq!(attempts, 1, "round {round}: not sent");
        let budget = backstop::testing::own(&WINDOW);
        assert_eq!((budget.ratio(), budget.min_per_sec()), (0.5, 1));
        assert_eq!(budget.stats().calls, 1, "round {round}");
        let throttle = backstop::testing::own(&SHEDDER);
        assert_eq!(
            (throttle.k(), throttle.window()),
            (3.0, Duration::from_secs(5))
        );
        let breaker = backstop::testing::own(&BREAKER);
        assert_eq!(breaker.state(), backstop::limit::BreakerState::Open);
    }
    assert_eq!(BREAKER.state(), backstop::limit::BreakerState::Closed);
    assert_eq!(WINDOW.stats().calls, 0);
}

#[test]
fn a_budget_lent_to_the_state_machine_is_used_as_it_is() {
    // A budget made for one case and dropped: the next case's, at the same
    // address perhaps, is its own, not a copy of the first.
    let _fresh = isolate();
    let policy = backstop::Policy::new();
    for max in [4, 100] {
        let throttle = backstop::limit::TokenBudget::new(max, 0.1);
        let mut state =
            backstop::__private::AttemptState::new(&policy, backstop::time::SystemClock)
                .budget(Some(&throttle));
        let _ = state.decide(backstop::__private::Attempted::Failed(
            backstop::Verdict::Retry,
        ));
        assert!(
            (throttle.tokens() - f64::from(max - 1)).abs() < 1e-9,
            "{max}: {}",
            throttle.tokens()
        );
    }
}

/// The policy of the tests below: three attempts, 10 ms apart.
static THREE_ATTEMPTS: backstop::Policy = backstop::Policy::new()
    .attempts(3)
    .base(Duration::from_millis(10));

/// A named budget with room for two retries in a row (above half its 10
/// tokens), and not for a second call's two.
static TABLE_BUDGET: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(10, 1.0);

/// A `Retry` built once, before any case's `isolate()` (a test's client,
/// a `LazyLock`): each case still draws on a fresh copy of its budget, the
/// default one or a named one, as a `#[retry]` function's cases do.
#[test]
fn a_retry_built_before_the_guard_draws_on_each_cases_fresh_budget() {
    let _vt = VirtualTime::start();
    let policy = THREE_ATTEMPTS;
    let named = THREE_ATTEMPTS.token_budget(&TABLE_BUDGET);
    for (label, retry) in [
        ("the default budget", backstop::Retry::new(&policy)),
        ("a named budget", backstop::Retry::new(&named)),
        (
            "a budget given",
            backstop::Retry::new(&policy).budget(&TABLE_BUDGET),
        ),
    ] {
        let mut attempts = Vec::new();
        for _ in 0..5 {
            let _fresh = isolate();
            let mut n = 0;
            let _ = retry.call(|| {
                n += 1;
                Err::<(), _>(Error::from(ErrorKind::HostUnreachable))
            });
            attempts.push(n);
        }
        assert_eq!(attempts, [3, 3, 3, 3, 3], "{label}");
    }
    assert!(
        (TABLE_BUDGET.tokens() - 10.0).abs() < 1e-9,
        "the static untouched"
    );
}

/// The same through `call_async`, and for a `Retry` built in one case's
/// isolation and used in the next's.
#[tokio::test(start_paused = true)]
async fn a_retry_kept_from_one_case_to_the_next_draws_on_each_cases_fresh_budget() {
    let policy = THREE_ATTEMPTS;
    let mut kept = None;
    let mut attempts = Vec::new();
    for _ in 0..5 {
        let _fresh = isolate();
        let retry = kept.get_or_insert_with(|| backstop::Retry::new(&policy));
        let n = std::sync::atomic::AtomicU32::new(0);
        let _ = retry
            .call_async(|| async {
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err::<(), _>(Error::from(ErrorKind::HostUnreachable))
            })
            .await;
        attempts.push(n.into_inner());
    }
    assert_eq!(attempts, [3, 3, 3, 3, 3]);
}

/// A tower layer kept from one case to the next (a test's client): its
/// token budget of its own is fresh in each case too.
#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn a_layer_kept_from_one_case_to_the_next_has_a_fresh_budget_in_each() {
    use tower::{Layer, ServiceExt};
    let policy = THREE_ATTEMPTS;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = calls.clone();
    let service =
        backstop::tower::RetryLayer::new(&policy).layer(tower::service_fn(move |_: u32| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async { Err::<(), _>(Error::from(ErrorKind::HostUnreachable)) }
        }));
    let mut attempts = Vec::new();
    for _ in 0..5 {
        let _fresh = isolate();
        calls.store(0, std::sync::atomic::Ordering::Relaxed);
        let _ = service.clone().oneshot(7).await;
        attempts.push(calls.load(std::sync::atomic::Ordering::Relaxed));
    }
    assert_eq!(attempts, [3, 3, 3, 3, 3]);
}

static KEPT_BUDGET: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(10, 1.0);

static KEPT_PER_TENANT: backstop::limit::Keyed<backstop::limit::TokenBudget> =
    backstop::limit::Keyed::new(backstop::limit::TokenBudget::standard());

/// A `Retry` given a key and a `Keyed` budget, built under one case's
/// guard and kept for the next, draws there on the copy of its key's
/// budget that case's calls draw on (`own`), not on one of its own.
#[test]
fn a_keyed_retry_kept_from_one_case_draws_on_the_next_cases_own_copy_of_its_keys_budget() {
    let _vt = VirtualTime::start();
    let policy = THREE_ATTEMPTS;
    let failing = || || Err::<(), _>(Error::from(ErrorKind::HostUnreachable));
    let first = isolate();
    let kept = backstop::Retry::new(&policy)
        .key("tenant-7")
        .budget(&KEPT_PER_TENANT);
    let _ = kept.call(failing());
    drop(first);
    let _second = isolate();
    let _ = kept.call(failing());
    let tenant = KEPT_PER_TENANT.get("tenant-7");
    assert!(
        (backstop::testing::own(tenant).tokens() - 7.0).abs() < 1e-9,
        "the kept Retry's three failures, in this case's copy of the key's budget: {}",
        backstop::testing::own(tenant).tokens()
    );
    assert!(
        (tenant.tokens() - 10.0).abs() < 1e-9,
        "the table's untouched"
    );
}

/// A `Retry` built under one case's guard and kept for the next draws,
/// there, on the copy that case's calls draw on (`own`), not on one of its
/// own.
#[test]
fn a_retry_kept_from_one_case_draws_on_the_next_cases_own_copy() {
    let _vt = VirtualTime::start();
    let policy = THREE_ATTEMPTS;
    let failing = || || Err::<(), _>(Error::from(ErrorKind::HostUnreachable));
    let first = isolate();
    let kept = backstop::Retry::new(&policy).budget(&KEPT_BUDGET);
    let _ = kept.call(failing());
    drop(first);
    let _second = isolate();
    let _ = kept.call(failing());
    assert!(
        (backstop::testing::own(&KEPT_BUDGET).tokens() - 7.0).abs() < 1e-9,
        "the kept Retry's three failures, in this case's copy: {}",
        backstop::testing::own(&KEPT_BUDGET).tokens()
    );
    assert!(
        (KEPT_BUDGET.tokens() - 10.0).abs() < 1e-9,
        "the static untouched"
    );
}
