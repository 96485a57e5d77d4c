//! A dependency that restarts: it refuses every call at once for a while
//! (`Verdict::Refused`), then answers again. Once the token budget has seen
//! every attempt fail and refuses retries, a refused call with a deadline
//! holds instead of giving up: it sends nothing, and retries when the
//! budget sees the dependency answer again, or gives up at its deadline.
//! In tokio's paused time.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use backstop::limit::TokenBudget;
use backstop::{Classify, Elapsed, Verdict, retry};
use tokio::time::Instant;

/// A dependency down until `up_at`, counting the requests sent to it.
struct Db {
    up_at: Instant,
    sent: Cell<u32>,
}

impl Db {
    fn down_for(outage: Duration) -> Rc<Self> {
        Rc::new(Self {
            up_at: Instant::now() + outage,
            sent: Cell::new(0),
        })
    }

    fn query(&self) -> Result<u32, DbError> {
        self.sent.set(self.sent.get() + 1);
        if Instant::now() < self.up_at {
            Err(DbError::Refused)
        } else {
            Ok(7)
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum DbError {
    /// Nothing listens: the server is restarting.
    Refused,
    /// The call ran out of time.
    TimedOut,
}

impl Classify for DbError {
    fn classify(&self) -> Verdict {
        match self {
            Self::Refused => Verdict::Refused,
            Self::TimedOut => Verdict::RetryIfIdempotent,
        }
    }
}

impl From<Elapsed> for DbError {
    fn from(_: Elapsed) -> Self {
        Self::TimedOut
    }
}

/// What each call came to, when it started and when it ended (from the
/// start of the test).
type Ends = Rc<std::cell::RefCell<Vec<(Duration, Result<u32, DbError>, Duration)>>>;

/// What each call came to and when it ended, in the order the calls
/// started.
fn in_order(ends: &Ends) -> Vec<(Result<u32, DbError>, Duration)> {
    let mut ends = ends.borrow().clone();
    ends.sort_by_key(|(start, _, _)| *start);
    ends.into_iter().map(|(_, out, end)| (out, end)).collect()
}

/// Starts `n` calls of `call`, one every `every`, each a task of its own.
fn spawn_calls<F, Fut>(n: u32, every: Duration, t0: Instant, ends: &Ends, call: F)
where
    F: Fn() -> Fut + 'static,
    Fut: std::future::Future<Output = Result<u32, DbError>> + 'static,
{
    let ends = ends.clone();
    tokio::task::spawn_local(async move {
        for _ in 0..n {
            let ends = ends.clone();
            let call = call();
            let start = t0.elapsed();
            tokio::task::spawn_local(async move {
                let out = call.await;
                ends.borrow_mut().push((start, out, t0.elapsed()));
            });
            tokio::time::sleep(every).await;
        }
    });
}

#[retry(deadline = 3s)]
async fn rescued(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

#[tokio::test(start_paused = true)]
async fn a_call_the_budget_refuses_to_retry_succeeds_when_the_dependency_answers_before_its_deadline()
 {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let t0 = Instant::now();
            let db = Db::down_for(Duration::from_secs(2));
            let ends: Ends = Rc::default();
            // 20 calls a second for 4 s: a restart of 2 s, then the
            // dependency answers the calls started after it.
            let d = db.clone();
            spawn_calls(80, Duration::from_millis(50), t0, &ends, move || {
                rescued(d.clone())
            });
            tokio::time::sleep(Duration::from_secs(10)).await;
            let ends = in_order(&ends);
            assert_eq!(ends.len(), 80);
            // The calls started in the restart: the first few spend their
            // retries while the budget allows them, and fail; the rest are
            // held, and succeed once it is back, before their deadlines.
            let in_outage: Vec<_> = ends.iter().take(40).collect();
            let ok = in_outage.iter().filter(|(out, _)| out.is_ok()).count();
            assert!(ok >= 30, "{ok} of 40 rescued: {in_outage:?}");
            for (out, _) in &in_outage {
                assert!(matches!(out, Ok(7) | Err(DbError::Refused)), "{out:?}");
            }
            // Held, they sent little: 40 first attempts, the retries the
            // budget allowed (5 at most), a probe about every 200 ms while it
            // was down (20 at most), and one retry each when released.
            let rescued_late = ends
                .iter()
                .take(40)
                .filter(|(out, end)| out.is_ok() && *end >= Duration::from_secs(2))
                .count();
            assert!(rescued_late >= 30, "{rescued_late}");
            assert!(db.sent.get() <= 80 + 5 + 20 + 40, "{} sent", db.sent.get());
            // Every call ended by its deadline.
            for (i, (_, end)) in ends.iter().enumerate() {
                let start = Duration::from_millis(50) * i as u32;
                assert!(*end <= start + Duration::from_secs(3), "call {i}: {end:?}");
            }
        })
        .await;
}

#[retry(deadline = 3s)]
async fn never_back(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

#[tokio::test(start_paused = true)]
async fn a_held_call_gives_up_at_its_deadline_when_the_dependency_does_not_answer() {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let t0 = Instant::now();
            let db = Db::down_for(Duration::from_secs(60));
            let ends: Ends = Rc::default();
            let d = db.clone();
            spawn_calls(20, Duration::from_millis(50), t0, &ends, move || {
                never_back(d.clone())
            });
            tokio::time::sleep(Duration::from_secs(10)).await;
            let ends = in_order(&ends);
            assert_eq!(ends.len(), 20);
            // The first calls retry while the budget allows and fail with
            // the refusal; so do the held calls whose probes (one every
            // 200 ms or so, refused) spent their three attempts. The others
            // end at their deadline (within the timer's slack), with the
            // deadline's error: their last outcome was dropped before they
            // slept.
            let held: Vec<_> = ends
                .iter()
                .filter(|(out, _)| *out == Err(DbError::TimedOut))
                .collect();
            assert!(held.len() >= 5, "{ends:?}");
            for (i, (out, end)) in ends.iter().enumerate() {
                let start = Duration::from_millis(50) * i as u32;
                let took = end.saturating_sub(start);
                match out {
                    Err(DbError::TimedOut) => assert!(
                        took <= Duration::from_secs(3) && took >= Duration::from_millis(2990),
                        "call {i}: {took:?}"
                    ),
                    Err(DbError::Refused) => assert!(took <= Duration::from_secs(3), "call {i}"),
                    Ok(_) => panic!("the dependency never answered"),
                }
            }
            // Held, little more was sent: the first attempts, the retries
            // the budget allowed (fewer than half its tokens, and the
            // refill's hundredth of a token per 100 ms), and a probe every
            // 200 ms or so for the 4 s that calls were held (20, and a
            // tenth more: 41–44 sent in all over twelve runs; a probe every
            // 100 ms would be 20 more).
            assert!(db.sent.get() <= 20 + 5 + 22, "{} sent", db.sent.get());
        })
        .await;
}

/// A budget that does not ride refusals out: each call gives up when it
/// refuses the retry, as for any failure.
static FAIL_FAST: TokenBudget = TokenBudget::standard().ride_out(Duration::ZERO);

#[retry(deadline = 3s, budget = FAIL_FAST)]
async fn fail_fast(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_does_not_ride_out_gives_up_at_once() {
    let db = Db::down_for(Duration::from_secs(60));
    let t0 = Instant::now();
    for _ in 0..20 {
        assert_eq!(fail_fast(db.clone()).await, Err(DbError::Refused));
    }
    assert!(db.sent.get() <= 20 + 5, "{} sent", db.sent.get());
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[retry(deadline = 60s)]
async fn long_deadline(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

#[tokio::test(start_paused = true)]
async fn a_dependency_refusing_longer_than_the_ride_out_is_down_and_calls_fail_fast() {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let t0 = Instant::now();
            let db = Db::down_for(Duration::from_secs(600));
            let ends: Ends = Rc::default();
            let d = db.clone();
            // A call every 500 ms for 20 s, each willing to wait a minute.
            spawn_calls(40, Duration::from_millis(500), t0, &ends, move || {
                long_deadline(d.clone())
            });
            tokio::time::sleep(Duration::from_secs(90)).await;
            let ends = in_order(&ends);
            assert_eq!(ends.len(), 40);
            for (i, (out, end)) in ends.iter().enumerate() {
                let start = Duration::from_millis(500) * i as u32;
                let took = end.saturating_sub(start);
                // Held at most until the budget has refused for 10 s (the
                // standard ride-out), then given up; later calls at once.
                assert!(
                    took <= Duration::from_millis(10_600),
                    "call {i}: {took:?} {out:?}"
                );
                if start >= Duration::from_secs(11) {
                    assert!(took < Duration::from_secs(1), "call {i}: {took:?}");
                }
            }
        })
        .await;
}

#[derive(Debug, PartialEq)]
struct NoElapsed;

impl Classify for NoElapsed {
    fn classify(&self) -> Verdict {
        Verdict::Refused
    }
}

#[retry(deadline = 3s)]
async fn cannot_hold(sent: &Cell<u32>) -> Result<(), NoElapsed> {
    sent.set(sent.get() + 1);
    Err(NoElapsed)
}

/// An async function whose error cannot hold an `Elapsed` would have
/// nothing to return at its deadline (its last outcome is dropped before
/// it sleeps): it gives up when the budget refuses its retry, as before.
#[tokio::test(start_paused = true)]
async fn an_async_function_whose_error_cannot_hold_an_elapsed_gives_up_at_once() {
    let sent = Cell::new(0);
    let t0 = Instant::now();
    for _ in 0..20 {
        assert_eq!(cannot_hold(&sent).await, Err(NoElapsed));
    }
    assert!(sent.get() <= 20 + 5, "{} sent", sent.get());
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

/// Two tokens: the first failure leaves one, not above half, so a refusal
/// holds at once.
static SYNC: TokenBudget = TokenBudget::new(2, 1.0);

// Attempts enough for its probes.
#[retry(deadline = 3s, attempts = 100, budget = SYNC)]
fn sync_query(sent: &Cell<u32>) -> Result<u32, std::io::Error> {
    sent.set(sent.get() + 1);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// A sync call keeps its outcome through the wait: held to its deadline,
/// probing, it returns the refusal it last saw.
#[test]
fn a_held_sync_call_returns_its_last_error() {
    let vt = backstop::testing::VirtualTime::start();
    let sent = Cell::new(0);
    let err = sync_query(&sent).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    // Its first attempt (without the hold it would have returned there),
    // then a probe every 100-300 ms, each refused; at its deadline it
    // returned.
    assert!((6..=40).contains(&sent.get()), "{} sent", sent.get());
    let took = vt.elapsed();
    assert!(
        took <= Duration::from_secs(3) && took >= Duration::from_millis(2990),
        "{took:?}"
    );
}

/// Two tokens, as `SYNC`'s.
static SYNC_NO_ELAPSED: TokenBudget = TokenBudget::new(2, 1.0);

#[retry(deadline = 3s, attempts = 100, budget = SYNC_NO_ELAPSED)]
fn sync_cannot_hold_an_elapsed(sent: &Cell<u32>) -> Result<u32, NoElapsed> {
    sent.set(sent.get() + 1);
    Err(NoElapsed)
}

/// A sync function holds whatever its error type (the blocking `postgres`
/// crate's, which cannot hold an `Elapsed`, included): it has its last
/// error to return, where an async function that cannot hold gives up.
#[test]
fn a_sync_function_holds_whatever_its_error_type() {
    let vt = backstop::testing::VirtualTime::start();
    let sent = Cell::new(0);
    assert_eq!(sync_cannot_hold_an_elapsed(&sent), Err(NoElapsed));
    assert!((6..=40).contains(&sent.get()), "{} sent", sent.get());
    let took = vt.elapsed();
    assert!(
        took <= Duration::from_secs(3) && took >= Duration::from_millis(2990),
        "{took:?}"
    );
}

/// Two tokens, as `SYNC`'s, for the test of what a held call's waits look
/// like in the sleeps a test is shown.
static LISTED: TokenBudget = TokenBudget::new(2, 1.0);

#[retry(deadline = 3s, attempts = 100, jitter = none, budget = LISTED)]
fn listed_query(sent: &Cell<u32>) -> Result<u32, std::io::Error> {
    sent.set(sent.get() + 1);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// A held call's waits are sleeps of its loop: `VirtualTime` lists each,
/// after the schedule's, and they are spread (from half to one and a half
/// `base`) even with `jitter = none`, so that held calls do not look again
/// together.
#[test]
fn a_held_calls_waits_are_listed_among_its_sleeps_spread_whatever_jitter_says() {
    let vt = backstop::testing::VirtualTime::start();
    let sent = Cell::new(0);
    let _ = listed_query(&sent);
    let sleeps = vt.sleeps();
    assert!(sleeps.len() >= 10, "{sleeps:?}");
    // The schedule's first sleep (100 ms, when the budget of two lets the
    // first retry), then the held waits; the last one ends at the deadline.
    let (last, waits) = sleeps.split_last().unwrap();
    let base = Duration::from_millis(100);
    assert!(
        waits.iter().all(|d| *d >= base / 2 && *d <= base * 3 / 2),
        "{sleeps:?}"
    );
    assert!(*last <= base * 3 / 2, "{sleeps:?}");
    assert!(sleeps.iter().any(|d| *d != base), "spread: {sleeps:?}");
    assert_eq!(sleeps.iter().sum::<Duration>(), vt.elapsed(), "{sleeps:?}");
}

/// Two tokens, as `SYNC`'s, for the async call below.
static ASYNC: TokenBudget = TokenBudget::new(2, 1.0);

#[retry(deadline = 3s, attempts = 100, budget = ASYNC)]
async fn async_query(sent: &Cell<u32>) -> Result<u32, std::io::Error> {
    sent.set(sent.get() + 1);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// An async call drops its outcome before it sleeps: held to its deadline,
/// it gives up with an `Elapsed` that says its dependency refused it, and
/// as an `io::Error` of the kind a sync call's last error has (not
/// `TimedOut`, which would call a refusal ambiguous).
#[tokio::test(start_paused = true)]
async fn a_held_async_call_gives_up_with_an_elapsed_that_says_it_was_refused() {
    let sent = Cell::new(0);
    let t0 = Instant::now();
    let err = async_query(&sent).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert_eq!(err.classify(), Verdict::Refused);
    let elapsed = err.get_ref().and_then(|e| e.downcast_ref::<Elapsed>());
    assert!(elapsed.is_some_and(Elapsed::is_refused), "{err:?}");
    assert!(err.to_string().contains("refused"), "{err}");
    // Its first attempt, then a probe every 100-300 ms, each refused.
    assert!((6..=40).contains(&sent.get()), "{} sent", sent.get());
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_secs(3) && took >= Duration::from_millis(2990),
        "{took:?}"
    );
}

/// Two tokens again, for the closure form below.
static CLOSURE: TokenBudget = TokenBudget::new(2, 1.0);

/// The closure form holds a refused call when it can give an `Elapsed`
/// (with an attempt timeout), and gives up with one that says so.
#[tokio::test(start_paused = true)]
async fn a_held_closure_call_gives_up_with_an_elapsed_that_says_it_was_refused() {
    let policy = backstop::Policy::new()
        .attempts(100)
        .deadline(Some(Duration::from_secs(3)));
    let sent = Cell::new(0);
    let t0 = Instant::now();
    let err = backstop::Retry::new(&policy)
        .budget(&CLOSURE)
        .attempt_timeout(Duration::from_secs(1))
        .call_async(|| async {
            sent.set(sent.get() + 1);
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let elapsed = err.get_ref().and_then(|e| e.downcast_ref::<Elapsed>());
    assert!(elapsed.is_some_and(Elapsed::is_refused), "{err:?}");
    assert!((6..=40).contains(&sent.get()), "{} sent", sent.get());
    assert!(
        t0.elapsed() >= Duration::from_millis(2990),
        "{:?}",
        t0.elapsed()
    );
}

/// Two tokens again, for the closure form without an attempt timeout.
static CLOSURE_UNTIMED: TokenBudget = TokenBudget::new(2, 1.0);

/// Without an attempt timeout, the closure form does not hold: generic
/// over its error, it cannot tell that `io::Error` could hold an
/// `Elapsed`, and it dropped the refusal before its sleep. Its retry
/// refused by the budget, it gives up at once with the refusal, as
/// docs/manual.md says.
#[tokio::test(start_paused = true)]
async fn a_closure_call_without_an_attempt_timeout_gives_up_at_the_budgets_refusal() {
    let policy = backstop::Policy::new()
        .attempts(100)
        .deadline(Some(Duration::from_secs(3)));
    let sent = Cell::new(0);
    let t0 = Instant::now();
    let err = backstop::Retry::new(&policy)
        .budget(&CLOSURE_UNTIMED)
        .call_async(|| async {
            sent.set(sent.get() + 1);
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let elapsed = err.get_ref().and_then(|e| e.downcast_ref::<Elapsed>());
    assert!(elapsed.is_none(), "the refusal itself: {err:?}");
    assert_eq!(sent.get(), 1, "its retry refused, no probe");
    assert!(
        t0.elapsed() < Duration::from_millis(10),
        "{:?}",
        t0.elapsed()
    );
}

/// Two tokens, for the nested calls below.
static INNER_ASYNC: TokenBudget = TokenBudget::new(2, 1.0);
static INNER_SYNC: TokenBudget = TokenBudget::new(2, 1.0);

// Held at once (two tokens), and its deadline comes before its first probe.
#[retry(deadline = 300ms, base = 1s, jitter = none, budget = INNER_ASYNC)]
async fn inner_async(sent: &Cell<u32>) -> Result<(), std::io::Error> {
    sent.set(sent.get() + 1);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[retry]
async fn outer_async(sent: &Cell<u32>) -> Result<(), std::io::Error> {
    inner_async(sent).await
}

#[retry(deadline = 300ms, base = 1s, jitter = none, budget = INNER_SYNC)]
fn inner_sync(sent: &Cell<u32>) -> Result<(), std::io::Error> {
    sent.set(sent.get() + 1);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[retry]
fn outer_sync(sent: &Cell<u32>) -> Result<(), std::io::Error> {
    inner_sync(sent)
}

/// Holding is a call's way of retrying a refusal: a nested call that held
/// and gave up (even before its first probe) has retried, and the call
/// around it does not retry it again (one layer retries per failure
/// domain). Async and sync alike.
#[tokio::test(start_paused = true)]
async fn a_nested_call_that_held_and_gave_up_is_not_retried_around_it() {
    let sent = Cell::new(0);
    let err = outer_async(&sent).await.unwrap_err();
    assert_eq!(sent.get(), 1, "{err}");
    let vt = backstop::testing::VirtualTime::start();
    let sent = Cell::new(0);
    let err = outer_sync(&sent).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(sent.get(), 1, "{err}");
    assert!(
        vt.elapsed() <= Duration::from_millis(300),
        "{:?}",
        vt.elapsed()
    );
}

#[retry(deadline = 3s)]
async fn alone(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

/// One caller, calling again and again: once its calls hold, no other
/// caller's answer will tell them the dependency is back. A held call
/// goes as a probe about every 200 ms and finds it back by itself.
#[tokio::test(start_paused = true)]
async fn a_caller_alone_finds_the_dependency_back_by_a_probe() {
    let t0 = Instant::now();
    let db = Db::down_for(Duration::from_secs(1));
    let mut calls = Vec::new();
    // Until the first success (later ones take no time at all).
    loop {
        let start = t0.elapsed();
        let out = alone(db.clone()).await;
        let ok = out.is_ok();
        calls.push((start, t0.elapsed(), out));
        if ok {
            break;
        }
    }
    for (start, end, out) in &calls {
        if *end > Duration::from_secs(1) {
            // Running when the dependency came back: it succeeded within
            // a probe's interval or two.
            assert!(out.is_ok(), "{start:?}..{end:?}: {out:?} in {calls:?}");
            assert!(
                *start >= Duration::from_secs(1) || *end <= Duration::from_millis(1300),
                "{start:?}..{end:?} in {calls:?}"
            );
        }
    }
    // It succeeded soon after the dependency came back, having sent a
    // request about every 200 ms at most while it was down: the first
    // calls' attempts and retries until the budget stopped them, then a
    // probe about every 200 ms (11–12 sent in all over twelve runs; a
    // probe every 100 ms would be 5 more).
    let (_, end, _) = calls.last().unwrap();
    assert!(*end <= Duration::from_millis(1300), "{calls:?}");
    assert!(db.sent.get() <= 15, "{} sent", db.sent.get());
}

#[retry(deadline = 3s)]
async fn not_held(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

/// A call holds only when the budget refuses its retry: a caller alone,
/// whose budget still has tokens (its function's, ten, untouched), spends
/// its three attempts within about 300 ms of backoff (sleeps of at most
/// 100 and 200 ms) and gives up with its last error, long before its
/// deadline.
#[tokio::test(start_paused = true)]
async fn a_caller_alone_with_tokens_spends_its_attempts_and_gives_up_with_its_last_error() {
    let t0 = Instant::now();
    let db = Db::down_for(Duration::from_secs(60));
    let out = not_held(db.clone()).await;
    assert_eq!(out, Err(DbError::Refused));
    assert_eq!(db.sent.get(), 3);
    // (Each sleep is rounded up to tokio's millisecond: 302 ms at most.)
    assert!(
        t0.elapsed() <= Duration::from_millis(302),
        "gave up after {:?}",
        t0.elapsed()
    );
}

#[retry(attempts = 8, deadline = 30s)]
async fn probing(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

/// A held call's probe is an attempt: a caller alone that holds gives up
/// once a probe has used its last attempt, with that probe's error, long
/// before its deadline or the budget's ride-out (8 attempts: retries
/// with backoff until the budget refuses, then a probe about every
/// 200 ms: 3.1 s in all in one run, the backoff's jitter aside).
#[tokio::test(start_paused = true)]
async fn a_held_call_gives_up_when_a_probe_has_used_its_last_attempt() {
    let t0 = Instant::now();
    let db = Db::down_for(Duration::from_secs(60));
    let out = probing(db.clone()).await;
    assert_eq!(out, Err(DbError::Refused));
    assert_eq!(db.sent.get(), 8, "every attempt sent, probes included");
    let took = t0.elapsed();
    assert!(
        Duration::from_millis(400) <= took && took <= Duration::from_secs(5),
        "gave up after {took:?}"
    );
}

#[retry(attempts = 20, deadline = 30s)]
async fn probing_20(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

#[retry(attempts = 60, deadline = 30s)]
async fn probing_60(db: Rc<Db>) -> Result<u32, DbError> {
    db.query()
}

/// How long a caller alone rides out a restart with the attempts it is
/// given (the README's figures): each probe is an attempt, about five a
/// second once the budget refuses. 20 attempts give up after 3.7–5.8 s
/// (four runs: the backoff's jitter) against an outage that never ends,
/// with the last probe's error; 60 outlast the budget's 10 s ride-out,
/// which ends the call (10.6–11.8 s, 52–54 attempts), with its
/// `Elapsed`. Each rides out a restart within that: 3 s, 9 s.
#[tokio::test(start_paused = true)]
async fn a_caller_alone_rides_out_3_s_with_20_attempts_and_9_s_with_60() {
    let gave_up_after = |took: Duration, within: std::ops::RangeInclusive<u64>| {
        assert!(
            Duration::from_millis(*within.start()) <= took
                && took <= Duration::from_millis(*within.end()),
            "gave up after {took:?}"
        );
    };
    {
        let _fresh = backstop::testing::isolate();
        let t0 = Instant::now();
        let db = Db::down_for(Duration::from_secs(60));
        let out = probing_20(db.clone()).await;
        assert_eq!((out, db.sent.get()), (Err(DbError::Refused), 20));
        gave_up_after(t0.elapsed(), 3_000..=6_500);
    }
    {
        let _fresh = backstop::testing::isolate();
        assert_eq!(
            probing_20(Db::down_for(Duration::from_secs(3))).await,
            Ok(7)
        );
    }
    {
        let _fresh = backstop::testing::isolate();
        let t0 = Instant::now();
        let db = Db::down_for(Duration::from_secs(60));
        let out = probing_60(db.clone()).await;
        assert_eq!(out, Err(DbError::TimedOut), "the ride-out's `Elapsed`");
        assert!(
            db.sent.get() < 60,
            "ended by the ride-out, not its attempts"
        );
        gave_up_after(t0.elapsed(), 10_000..=13_000);
    }
    {
        let _fresh = backstop::testing::isolate();
        assert_eq!(
            probing_60(Db::down_for(Duration::from_secs(9))).await,
            Ok(7)
        );
    }
}
