//! The closure API: operations that need `&mut` state (passed through
//! `call_async_with`), `Send` futures on a multi-thread runtime, and hooks
//! whose event type is inferred.

use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::{Policy, Retry};

/// A connection with state that each query needs `&mut` access to.
struct Conn {
    queries: u32,
}

impl Conn {
    async fn query(&mut self) -> Result<u32, Error> {
        self.queries += 1;
        tokio::task::yield_now().await;
        if self.queries < 3 {
            return Err(ErrorKind::ConnectionRefused.into());
        }
        Ok(self.queries)
    }
}

fn fast() -> Policy {
    Policy::new().base(Duration::from_millis(1)).no_budget()
}

#[tokio::test(start_paused = true)]
async fn a_method_taking_mut_self_is_retried_through_call_async_with() {
    let mut conn = Conn { queries: 0 };
    let policy = fast();
    let (_, out) = backstop::call_async_with(&policy, &mut conn, |conn| async move {
        let out = conn.query().await;
        (conn, out)
    })
    .await;
    assert_eq!(out.unwrap(), 3);
    assert_eq!(conn.queries, 3);
    // An owned value comes back, with `Retry` too.
    let (conn, out) = Retry::new(&policy)
        .call_async_with(Conn { queries: 0 }, |mut conn| async move {
            let out = conn.query().await;
            (conn, out)
        })
        .await;
    assert_eq!((out.unwrap(), conn.queries), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn a_closure_returning_a_future_still_works() {
    let policy = fast();
    let mut tries = 0;
    let out = backstop::call_async(&policy, || {
        tries += 1;
        let fail = tries < 2;
        async move {
            if fail {
                Err(Error::from(ErrorKind::ConnectionRefused))
            } else {
                Ok(7)
            }
        }
    })
    .await;
    assert_eq!(out.unwrap(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_futures_are_send_and_spawn_on_a_multi_thread_runtime() {
    static POLICY: Policy = Policy::new().base(Duration::from_millis(1)).no_budget();
    let with_state = tokio::spawn(async {
        let mut conn = Conn { queries: 0 };
        let (_, out) = backstop::call_async_with(&POLICY, &mut conn, |conn| async move {
            let out = conn.query().await;
            (conn, out)
        })
        .await;
        out
    });
    let with_future = tokio::spawn(async {
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Conn { queries: 0 }));
        backstop::call_async(&POLICY, || {
            let shared = std::sync::Arc::clone(&shared);
            async move {
                let queries = {
                    let mut conn = shared.lock().unwrap();
                    conn.queries += 1;
                    conn.queries
                };
                tokio::task::yield_now().await;
                if queries < 3 {
                    return Err(Error::from(ErrorKind::ConnectionRefused));
                }
                Ok(queries)
            }
        })
        .await
    });
    assert_eq!(with_state.await.unwrap().unwrap(), 3);
    assert_eq!(with_future.await.unwrap().unwrap(), 3);
}

#[test]
fn hooks_infer_their_event_type() {
    let _vt = backstop::testing::VirtualTime::start();
    let policy = Policy::new().no_budget();
    let retries = std::cell::RefCell::new(Vec::new());
    let gave_up = std::cell::Cell::new(None);
    let out: Result<(), Error> = Retry::new(&policy)
        .on_retry(|e| {
            retries
                .borrow_mut()
                .push((e.attempt(), format!("{:?}", e.error())));
        })
        .on_give_up(|e| gave_up.set(Some((e.reason(), e.attempts()))))
        .call(|| Err(ErrorKind::ConnectionRefused.into()));
    assert!(out.is_err());
    assert_eq!(retries.borrow().len(), 2);
    assert!(retries.borrow()[0].1.contains("ConnectionRefused"));
    assert_eq!(gave_up.get(), Some((backstop::GiveUp::Attempts, 3)));
}

#[tokio::test(start_paused = true)]
async fn retry_cuts_attempts_off_and_a_timed_out_one_is_ambiguous() {
    let policy = Policy::new()
        .deadline(Some(Duration::from_millis(1500)))
        .no_budget();
    let mut attempts = 0;
    let started = tokio::time::Instant::now();
    // The classifier would retry anything: a timeout is still ambiguous.
    let out: Result<(), Error> = Retry::new(&policy)
        .when(|_: &Error| backstop::Verdict::Retry)
        .attempt_timeout(Duration::from_secs(10))
        .call_async(|| {
            attempts += 1;
            std::future::pending()
        })
        .await;
    assert_eq!(out.unwrap_err().kind(), ErrorKind::TimedOut);
    assert_eq!(attempts, 1, "not idempotent: not repeated");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(1498),
        "cut off by the deadline, the timer's 2 ms slack before it"
    );

    let idempotent = Policy::new().idempotent(true).no_budget();
    let mut attempts = 0;
    let out: Result<(), Error> = Retry::new(&idempotent)
        .attempt_timeout(
            idempotent
                .attempt_timeout(Some(Duration::from_millis(200)))
                .get_attempt_timeout(),
        )
        .call_async(|| {
            attempts += 1;
            std::future::pending()
        })
        .await;
    assert!(out.is_err());
    assert_eq!(attempts, 3);
}

#[tokio::test(start_paused = true)]
async fn retry_cuts_an_attempt_off_by_the_deadline_whatever_the_timers_phase() {
    tokio::time::advance(Duration::from_micros(300)).await;
    let policy = Policy::new()
        .deadline(Some(Duration::from_micros(1500)))
        .idempotent(true)
        .no_budget();
    let started = tokio::time::Instant::now();
    let out: Result<(), Error> = Retry::new(&policy)
        .attempt_timeout(Duration::from_secs(10))
        .call_async(std::future::pending)
        .await;
    assert!(out.is_err());
    assert!(
        started.elapsed() <= Duration::from_micros(1500),
        "{:?}",
        started.elapsed()
    );
}

// --- the same default protection as the attribute ----------------------------

/// A transient failure (unreachable: a refusal would hold once the budget
/// refuses its retry).
fn refused() -> Result<(), Error> {
    Err(ErrorKind::HostUnreachable.into())
}

#[test]
fn closures_draw_on_a_token_budget_of_their_call_site_by_default() {
    let _vt = backstop::testing::VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    // Retries at once: no time passes, so no token comes back in time.
    let policy = Policy::new().base(Duration::from_nanos(1));
    let (mut here, mut there, mut off) = (0, 0, 0);
    for _ in 0..20 {
        let _ = backstop::call(&policy, || {
            here += 1;
            refused()
        });
    }
    // A dependency failing every call: every attempt's failure takes a
    // token, retries only above half: 9, 8 (the first call's two retries;
    // its third failure leaves 7), 6 (the second call's one). Then none.
    assert_eq!(here, 20 + 3);
    // Another call site has a throttle of its own.
    let _ = Retry::new(&policy).call(|| {
        there += 1;
        refused()
    });
    assert_eq!(there, 3);
    // `no_budget` is the explicit way out.
    let unprotected = Policy::new().base(Duration::from_nanos(1)).no_budget();
    for _ in 0..20 {
        let _ = backstop::call(&unprotected, || {
            off += 1;
            refused()
        });
    }
    assert_eq!(off, 60);
}

/// A helper of an application's own around `backstop::call`, as callers
/// of several dependencies write one: `#[track_caller]` makes each line
/// calling it a call site of its own.
#[track_caller]
fn with_retries<T>(policy: &Policy, op: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    backstop::call(policy, op)
}

/// The same helper without `#[track_caller]`: one call site, one budget.
fn with_shared_retries<T>(
    policy: &Policy,
    op: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    backstop::call(policy, op)
}

#[test]
fn a_helper_marked_track_caller_gives_each_line_calling_it_a_budget() {
    let _vt = backstop::testing::VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    let policy = Policy::new().base(Duration::from_nanos(1));
    // One dependency fails every call and drains its budget...
    for _ in 0..20 {
        let _ = with_retries(&policy, refused);
        let _ = with_shared_retries(&policy, refused);
    }
    // ...and another's first failure is still retried through the marked
    // helper (its line has a budget of its own), not through the other.
    let (mut marked, mut shared) = (0, 0);
    let _ = with_retries(&policy, || {
        marked += 1;
        refused()
    });
    let _ = with_shared_retries(&policy, || {
        shared += 1;
        refused()
    });
    assert_eq!(marked, 3, "a budget of this line's own");
    assert_eq!(
        shared, 1,
        "the helper's one budget, drained by the other dependency"
    );
}

#[tokio::test(start_paused = true)]
async fn call_async_draws_on_its_call_sites_token_budget_too() {
    let _fresh = backstop::testing::isolate();
    let policy = Policy::new().base(Duration::from_nanos(1));
    let attempts = std::cell::Cell::new(0);
    for _ in 0..20 {
        let _ = backstop::call_async(&policy, || async {
            attempts.set(attempts.get() + 1);
            refused()
        })
        .await;
    }
    // 3 retries, as sync; tokio's timer rounds each sleep up to a whole
    // millisecond, so a few milliseconds pass, and may cross one of the
    // throttle's 100 ms ticks: a hundredth of a token back, one retry more.
    assert!((23..=24).contains(&attempts.get()), "{}", attempts.get());
}

#[cfg(feature = "serde")]
#[test]
fn a_policy_without_a_budget_from_configuration_gets_the_default_too() {
    let _vt = backstop::testing::VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    let policy: Policy = serde_json::from_str(r#"{ "attempts": 3, "base": "1ns" }"#).unwrap();
    assert!(policy.has_default_budget());
    let mut attempts = 0;
    for _ in 0..20 {
        let _ = Retry::new(&policy).call(|| {
            attempts += 1;
            refused()
        });
    }
    assert_eq!(attempts, 20 + 3);
}

static NO_BUDGET: Policy = Policy::new().no_budget();

#[backstop::retry(policy = NO_BUDGET)]
fn attribute_with_an_unbudgeted_policy(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    refused()
}

#[test]
fn the_attribute_respects_a_policy_that_says_no_budget() {
    let _vt = backstop::testing::VirtualTime::start();
    let mut attempts = 0;
    for _ in 0..20 {
        let _ = attribute_with_an_unbudgeted_policy(&mut attempts);
    }
    assert_eq!(attempts, 60);
}

/// An error this test takes for transient, by its kind (`NotFound`,
/// which `Classify` for `io::Error` stops on: only the classifier given
/// retries it).
fn transient(error: &Error) -> bool {
    error.kind() == ErrorKind::NotFound
}

/// `when` and `when_ok` take their closures' argument types from their
/// bounds: a closure passes its argument on, or matches it, unannotated.
#[test]
// (A closure is what is tried, not the function it calls.)
#[allow(clippy::redundant_closure)]
fn classifiers_need_no_annotation() {
    let _vt = backstop::testing::VirtualTime::start();
    let policy = fast();
    let mut attempts = 0;
    let out = Retry::new(&policy).when(|e| transient(e)).call(|| {
        attempts += 1;
        Err::<(), _>(Error::from(ErrorKind::NotFound))
    });
    assert!(out.is_err());
    assert_eq!(attempts, 3);

    let mut statuses = vec![200_u16, 503];
    let retry = Retry::new(&policy).when_ok(|&status| status == 503);
    let status = retry.call(|| Ok::<_, Error>(statuses.pop().unwrap()));
    assert_eq!(status.unwrap(), 200);

    let mut attempts = 0;
    let out = Retry::new(&policy).when(|_| false).call(|| {
        attempts += 1;
        Err::<(), _>(Error::from(ErrorKind::ConnectionRefused))
    });
    assert!(out.is_err());
    assert_eq!(attempts, 1);
}

/// `Retry::key` keys a call as `#[retry(key = ..)]` does: each key has a
/// default token budget of its own at the call site, so a shard that is
/// down spends its retries and no other shard's.
#[test]
fn with_a_key_each_key_of_a_retry_has_a_default_token_budget_of_its_own() {
    let _vt = backstop::testing::VirtualTime::start();
    let policy = Policy::new().base(Duration::from_millis(1));
    let attempts = |shard: u32| {
        let mut calls = 0;
        let _ = Retry::new(&policy).key(&shard).call(|| {
            calls += 1;
            Err::<(), _>(Error::from(ErrorKind::HostUnreachable))
        });
        calls
    };
    // Shard 1 is down: 3 retries in its first calls (each failure takes a
    // token, retries only above half: at 9, 8 and 6), then none.
    let spent: u32 = (0..10).map(|_| attempts(1)).sum();
    assert_eq!(spent, 10 + 3);
    assert_eq!(attempts(1), 1, "no retry left for shard 1");
    assert_eq!(attempts(2), 3, "shard 2 has its own budget, full");
}

/// A closure call whose task runs late starts no attempt past its
/// deadline where it can say why (given an attempt timeout, its error
/// holds an `Elapsed`); without one, generic over its error, it has
/// nothing else to return and makes its attempt.
#[tokio::test(start_paused = true)]
async fn a_closure_call_whose_task_runs_late_starts_no_attempt_past_its_deadline() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let policy = Policy::new()
        .base(Duration::from_millis(100))
        .jitter(backstop::Jitter::None)
        .attempts(5)
        .deadline(Some(Duration::from_secs(1)))
        .no_budget();
    for timeout in [Some(Duration::from_secs(5)), None] {
        let sent = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&sent);
        let call = tokio::spawn(async move {
            let attempt = || {
                counted.fetch_add(1, Ordering::Relaxed);
                async { Err::<(), _>(Error::from(ErrorKind::NotConnected)) }
            };
            match timeout {
                Some(timeout) => {
                    Retry::new(&policy)
                        .attempt_timeout(timeout)
                        .call_async(attempt)
                        .await
                }
                None => Retry::new(&policy).call_async(attempt).await,
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(sent.load(Ordering::Relaxed), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        let error = call.await.unwrap().unwrap_err();
        if timeout.is_some() {
            assert_eq!(
                sent.load(Ordering::Relaxed),
                1,
                "no attempt past the deadline"
            );
            assert_eq!(error.kind(), ErrorKind::TimedOut);
        } else {
            assert_eq!(
                sent.load(Ordering::Relaxed),
                2,
                "started late, then the deadline"
            );
            assert_eq!(error.kind(), ErrorKind::NotConnected);
        }
    }
}
