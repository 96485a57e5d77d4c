//! `#[retry]` on sync functions, option by option, in virtual time.

use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::limit::WindowBudget;
use backstop::testing::VirtualTime;
use backstop::{Classify, Policy, Verdict, retry};

use crate::support;
use support::refused;

const MS: Duration = Duration::from_millis(1);

// --- attempts and schedules ---------------------------------------------

#[retry(attempts = 5, jitter = none, budget = none)]
fn always_fails(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn attempts_bound_the_call_and_the_default_schedule_doubles() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    assert_eq!(
        always_fails(&mut calls).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
    assert_eq!(calls, 5);
    assert_eq!(vt.sleeps(), [100, 200, 400, 800].map(|ms| ms * MS));
}

#[retry(attempts = 6, base = 10ms, factor = 3, cap = 200ms, jitter = none, budget = none)]
fn exponential(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn exponential_schedule_with_factor_and_cap() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = exponential(&mut calls);
    assert_eq!(calls, 6);
    assert_eq!(vt.sleeps(), [10, 30, 90, 200, 200].map(|ms| ms * MS));
}

#[retry(attempts = 4, backoff = linear, base = 50ms, jitter = none, budget = none)]
fn linear() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 4, backoff = fixed, base = 0.05s, jitter = none, budget = none)]
fn fixed() -> Result<(), Error> {
    Err(refused())
}

#[test]
fn linear_and_fixed_schedules() {
    let vt = VirtualTime::start();
    let _ = linear();
    assert_eq!(vt.sleeps(), [50, 100, 150].map(|ms| ms * MS));
    drop(vt);
    let vt = VirtualTime::start();
    let _ = fixed();
    assert_eq!(vt.sleeps(), [50, 50, 50].map(|ms| ms * MS));
}

#[retry(attempts = 5, base = 100ms, cap = 1s, budget = none)]
fn full_jitter() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 5, base = 100ms, cap = 1s, jitter = equal, budget = none)]
fn equal_jitter() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 5, base = 100ms, cap = 1s, jitter = decorrelated, budget = none)]
fn decorrelated_jitter() -> Result<(), Error> {
    Err(refused())
}

/// Runs `f` 300 times, returning each call's sleeps.
fn sleeps_of(f: fn() -> Result<(), Error>) -> Vec<Vec<Duration>> {
    (0..300)
        .map(|_| {
            let vt = VirtualTime::start();
            let _ = f();
            vt.sleeps()
        })
        .collect()
}

#[test]
fn full_jitter_stays_below_the_schedule_and_spreads() {
    let ceilings = [100, 200, 400, 800].map(|ms| ms * MS);
    let runs = sleeps_of(full_jitter);
    for sleeps in &runs {
        assert_eq!(sleeps.len(), 4);
        assert!(
            sleeps.iter().zip(ceilings).all(|(d, c)| *d <= c),
            "{sleeps:?}"
        );
    }
    let firsts: std::collections::HashSet<_> = runs.iter().map(|s| s[0]).collect();
    assert!(firsts.len() > 250, "calls must not share a jitter sequence");
}

#[test]
fn equal_jitter_keeps_half_the_schedule() {
    let ceilings = [100, 200, 400, 800].map(|ms| ms * MS);
    for sleeps in sleeps_of(equal_jitter) {
        assert!(
            sleeps
                .iter()
                .zip(ceilings)
                .all(|(d, c)| *d >= c / 2 && *d <= c),
            "{sleeps:?}"
        );
    }
}

#[test]
fn decorrelated_jitter_grows_from_the_previous_delay_within_the_cap() {
    for sleeps in sleeps_of(decorrelated_jitter) {
        let mut prev = 100 * MS;
        for d in &sleeps {
            assert!(
                *d >= 100 * MS && *d <= (prev * 3).min(Duration::from_secs(1)),
                "{sleeps:?}"
            );
            prev = *d;
        }
    }
}

// --- deadline ------------------------------------------------------------

#[retry(attempts = 10, base = 400ms, jitter = none, deadline = 1s, budget = none)]
fn short_deadline(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn gives_up_when_the_next_delay_would_pass_the_deadline() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = short_deadline(&mut calls);
    assert_eq!(calls, 2);
    assert_eq!(vt.sleeps(), [400 * MS]);
}

#[retry(attempts = 10, base = 400ms, jitter = none, deadline = 1s)]
fn short_deadline_budgeted(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::HostUnreachable.into())
}

/// The same under the default token budget, with tokens to spare: a delay
/// is cut to fit the deadline only for a call held after a refusal.
#[test]
fn gives_up_when_the_next_delay_would_pass_the_deadline_under_a_budget() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = short_deadline_budgeted(&mut calls);
    assert_eq!(calls, 2);
    assert_eq!(vt.sleeps(), [400 * MS]);
}

#[retry(attempts = 5, deadline = 1s, budget = none)]
fn slow(vt: &VirtualTime, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    vt.advance(Duration::from_secs(2));
    Err(refused())
}

#[test]
fn a_slow_first_attempt_eats_the_deadline() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = slow(&vt, &mut calls);
    assert_eq!(calls, 1);
    assert!(vt.sleeps().is_empty());
}

#[retry(attempts = 30, deadline = none, cap = 1h, jitter = none, budget = none)]
fn no_deadline(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn deadline_none_leaves_only_the_attempts() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = no_deadline(&mut calls);
    assert_eq!(calls, 30);
    assert!(vt.elapsed() > Duration::from_secs(3600));
}

#[retry(attempts = 100, deadline = limit, base = 10ms, jitter = none, budget = none)]
fn deadline_from_argument(limit: Duration, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn a_deadline_expression_may_use_the_arguments() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = deadline_from_argument(Duration::from_millis(100), &mut calls);
    // 0, 10, 30, 70 ms; the next delay (80 ms) would pass 100 ms.
    assert_eq!(calls, 4);
    assert!(vt.elapsed() < Duration::from_millis(100));
}

#[retry(attempts = 100, deadline = limit, base = 10ms, jitter = none, budget = none)]
fn deadline_from_option(limit: Option<Duration>, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn a_deadline_expression_may_be_an_option_and_none_is_no_deadline() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = deadline_from_option(Some(Duration::from_millis(100)), &mut calls);
    assert_eq!(calls, 4);
    assert!(vt.elapsed() < Duration::from_millis(100));
    let mut calls = 0;
    let _ = deadline_from_option(None, &mut calls);
    // Only the attempts bound the call.
    assert_eq!(calls, 100);
}

#[retry(key = shard, base = 1ms, jitter = none)]
fn by_shard(shard: u32, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(support::unreachable())
}

#[test]
fn with_a_key_each_key_has_a_default_token_budget_of_its_own() {
    let _vt = VirtualTime::start();
    let attempts = |shard: u32| {
        let mut calls = 0;
        let _ = by_shard(shard, &mut calls);
        calls
    };
    // Shard 1 is down: 3 retries in its first calls (each failure takes a
    // token, retries only above half: at 9, 8 and 6), then none.
    let spent: u32 = (0..10).map(|_| attempts(1)).sum();
    assert_eq!(spent, 10 + 3);
    assert_eq!(attempts(1), 1, "no retry left for shard 1");
    assert_eq!(attempts(2), 3, "shard 2 has its own budget, full");
}

// --- a trait's provided method -----------------------------------------------

trait Dependency {
    fn calls(&self) -> &std::cell::Cell<u32>;

    /// One function for every type that does not override it: one
    /// default budget.
    #[retry(base = 1ns)]
    fn shared(&self) -> Result<(), Error> {
        self.calls().set(self.calls().get() + 1);
        Err(support::unreachable())
    }

    /// A budget of each type's own: the default per key, keyed by type.
    #[retry(base = 1ns, key = std::any::type_name::<Self>())]
    fn per_type(&self) -> Result<(), Error> {
        self.calls().set(self.calls().get() + 1);
        Err(support::unreachable())
    }
}

struct Users(std::cell::Cell<u32>);
struct Payments(std::cell::Cell<u32>);

impl Dependency for Users {
    fn calls(&self) -> &std::cell::Cell<u32> {
        &self.0
    }
}

impl Dependency for Payments {
    fn calls(&self) -> &std::cell::Cell<u32> {
        &self.0
    }
}

#[test]
fn a_traits_provided_method_has_one_default_budget_unless_keyed_by_type() {
    let _fresh = backstop::testing::isolate();
    let _vt = VirtualTime::start();
    let first_call = |call: &dyn Fn(&Users) -> Result<(), Error>| {
        let users = Users(std::cell::Cell::new(0));
        let _ = call(&users);
        users.0.get()
    };
    // Payments is down: its calls spend the budget their method has.
    let payments = Payments(std::cell::Cell::new(0));
    for _ in 0..20 {
        let _ = payments.shared();
        let _ = payments.per_type();
    }
    assert_eq!(first_call(&|u| u.shared()), 1, "one budget for every type");
    assert_eq!(first_call(&|u| u.per_type()), 3, "Users' own");
}

// --- options given through macro_rules! fragments ----------------------------

static FRAGMENT_BUDGET: backstop::limit::TokenBudget = backstop::limit::TokenBudget::standard();

fn is_timed_out(error: &Error) -> bool {
    error.kind() == ErrorKind::TimedOut
}

/// A client's functions made by a macro of the user's, each option's value
/// passed as a fragment (`$x:literal`, `$x:expr`, `$x:path`), which rustc
/// wraps in an invisible group: read as if written out.
#[rustfmt::skip] // (rustfmt moves the attribute's second line on at each run)
macro_rules! fragment_client {
    ($name:ident, $attempts:literal, $idempotent:literal, $base:literal, $jitter:expr,
     $deadline:expr, $budget:path, $when:expr) => {
        #[retry(attempts = $attempts, idempotent = $idempotent, base = $base, jitter = $jitter,
                deadline = $deadline, budget = $budget, when = $when)]
        fn $name(calls: &mut u32) -> Result<(), Error> {
            *calls += 1;
            Err(ErrorKind::TimedOut.into())
        }
    };
}

/// `idempotent` and `deadline` through fragments, read by the loop: a
/// timeout is retried only if idempotent, and no sleep goes past the
/// deadline.
#[rustfmt::skip] // (as above)
macro_rules! fragment_timing_out {
    ($name:ident, $idempotent:literal, $deadline:expr) => {
        #[retry(attempts = 5, idempotent = $idempotent, deadline = $deadline, jitter = none,
                budget = none)]
        fn $name(calls: &mut u32) -> Result<(), Error> {
            *calls += 1;
            Err(ErrorKind::TimedOut.into())
        }
    };
}

fragment_timing_out!(not_idempotent, false, none);
fragment_timing_out!(idempotent_within, true, 250ms);

fragment_client!(
    by_closure,
    4,
    true,
    50ms,
    none,
    none,
    FRAGMENT_BUDGET,
    |e: &Error| is_timed_out(e)
);
fragment_client!(
    by_path,
    2,
    false,
    1s,
    none,
    10s,
    FRAGMENT_BUDGET,
    is_timed_out
);

#[test]
fn options_given_through_macro_fragments_are_read_as_written() {
    let _fresh = backstop::testing::isolate();
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = by_closure(&mut calls);
    assert_eq!(calls, 4);
    assert_eq!(
        vt.sleeps(),
        [50, 100, 200].map(Duration::from_millis),
        "`base = 50ms`, `jitter = none`"
    );
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = by_path(&mut calls);
    assert_eq!(calls, 2);
    assert_eq!(vt.sleeps(), [Duration::from_secs(1)]);
    assert!(
        backstop::testing::own(&FRAGMENT_BUDGET).tokens() < 10.0,
        "`budget = FRAGMENT_BUDGET` drawn on"
    );
    let mut calls = 0;
    let _ = not_idempotent(&mut calls);
    assert_eq!(calls, 1, "`idempotent = false`: a timeout is not retried");
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = idempotent_within(&mut calls);
    // 100 ms, then 200 ms would pass the 250 ms deadline.
    assert_eq!((calls, vt.sleeps()), (2, vec![Duration::from_millis(100)]));
}

// --- Retry-After -----------------------------------------------------------

#[derive(Debug)]
struct Throttled(Duration);

impl Classify for Throttled {
    fn classify(&self) -> Verdict {
        Verdict::RetryAfter(self.0)
    }
}

#[retry(attempts = 2, deadline = 1m, budget = none)]
fn throttled(after: Duration) -> Result<(), Throttled> {
    Err(Throttled(after))
}

#[retry(attempts = 2, retry_after_max = 1s, budget = none)]
fn throttled_with_max(after: Duration) -> Result<(), Throttled> {
    Err(Throttled(after))
}

#[retry(attempts = 3, deadline = 1m)]
fn throttled_within_the_budget(calls: &mut u32) -> Result<(), Throttled> {
    *calls += 1;
    Err(Throttled(Duration::from_secs(1)))
}

/// A retry after a `Retry-After` is a retry like any other, drawn from
/// the budget: a server answering every call so (a burst of 429s) sees
/// the first few retried, and the rest given back at once.
#[test]
fn a_retry_after_draws_on_the_budget_like_any_retry() {
    let _fresh = backstop::testing::isolate();
    let _vt = VirtualTime::start();
    let attempts: Vec<u32> = (0..6)
        .map(|_| {
            let mut calls = 0;
            let _ = throttled_within_the_budget(&mut calls);
            calls
        })
        .collect();
    // (Each failure takes a token, and retries go only while more than
    // half are left: the first two calls are retried, then none are.)
    assert_eq!(attempts, [3, 3, 1, 1, 1, 1]);
}

#[test]
fn retry_after_is_slept_and_jittered_upward_only() {
    for _ in 0..200 {
        let vt = VirtualTime::start();
        let _ = throttled(Duration::from_secs(2));
        let sleeps = vt.sleeps();
        assert_eq!(sleeps.len(), 1);
        assert!(sleeps[0] >= Duration::from_secs(2), "{sleeps:?}");
        assert!(sleeps[0] <= Duration::from_millis(2400), "{sleeps:?}");
    }
}

#[test]
fn retry_after_above_the_max_gives_up_at_once() {
    let vt = VirtualTime::start();
    let _ = throttled_with_max(Duration::from_secs(2));
    assert!(vt.sleeps().is_empty());
    let _ = throttled_with_max(Duration::from_millis(500));
    assert_eq!(vt.sleeps().len(), 1);
}

// --- classification ----------------------------------------------------------

fn only_resets(e: &Error) -> bool {
    e.kind() == ErrorKind::ConnectionReset
}

#[retry(attempts = 3, when = only_resets, budget = none)]
fn when_path(kind: ErrorKind, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(kind.into())
}

#[retry(attempts = 3, when = String::is_empty, budget = none)]
fn when_closure_bool(message: &str, calls: &mut u32) -> Result<(), String> {
    *calls += 1;
    Err(message.to_owned())
}

#[retry(attempts = 3, when = |code: &u16| if *code == 429 { Verdict::Retry } else { Verdict::Stop }, budget = none)]
fn when_closure_verdict(code: u16, calls: &mut u32) -> Result<(), u16> {
    *calls += 1;
    Err(code)
}

#[test]
fn when_decides_which_errors_are_retried() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let _ = when_path(ErrorKind::ConnectionReset, &mut calls);
    assert_eq!(calls, 3);
    calls = 0;
    let _ = when_path(ErrorKind::ConnectionRefused, &mut calls); // Classify would retry it
    assert_eq!(calls, 1);
    calls = 0;
    let _ = when_closure_bool("", &mut calls);
    assert_eq!(calls, 3);
    calls = 0;
    let _ = when_closure_bool("bad request", &mut calls);
    assert_eq!(calls, 1);
    calls = 0;
    let _ = when_closure_verdict(429, &mut calls);
    assert_eq!(calls, 3);
    calls = 0;
    let _ = when_closure_verdict(400, &mut calls);
    assert_eq!(calls, 1);
}

/// A classifier given to the function as an argument and named by `when`
/// or `when_ok`: borrowed by each attempt, as a hook is, not moved by the
/// first (it was "use of moved value").
#[retry(attempts = 3, when = retried, when_ok = again, budget = none)]
fn classifiers_as_arguments(
    retried: impl Fn(&Error) -> bool,
    again: impl Fn(&u32) -> bool,
    calls: &mut u32,
) -> Result<u32, Error> {
    *calls += 1;
    if *calls == 1 {
        return Err(ErrorKind::ConnectionReset.into());
    }
    Ok(*calls)
}

#[test]
fn a_classifier_passed_as_an_argument_is_used_by_every_attempt() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let out = classifiers_as_arguments(|_| true, |answer| *answer < 3, &mut calls);
    assert_eq!(
        (out.unwrap(), calls),
        (3, 3),
        "a reset, a 2 asked again, then a 3"
    );
    calls = 0;
    let out = classifiers_as_arguments(|_| false, |_| false, &mut calls);
    assert_eq!(calls, 1, "{out:?}");
}

#[retry(attempts = 5, when = |_| false, when_ok = |status| *status == 503, budget = none)]
fn status(responses: &mut Vec<u16>) -> Result<u16, String> {
    Ok(responses.pop().unwrap_or(500))
}

#[test]
fn when_ok_retries_an_ok_value() {
    let vt = VirtualTime::start();
    let mut responses = vec![200, 503, 503];
    assert_eq!(status(&mut responses), Ok(200));
    assert!(responses.is_empty());
    assert_eq!(vt.sleeps().len(), 2);
    // Out of attempts, the last Ok value is returned as it is.
    let mut responses = vec![503; 10];
    assert_eq!(status(&mut responses), Ok(503));
    assert_eq!(responses.len(), 5);
}

#[retry(attempts = 3, budget = none)]
fn timed_out(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::TimedOut.into())
}

#[retry(attempts = 3, idempotent = true, budget = none)]
fn timed_out_idempotent(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::TimedOut.into())
}

#[test]
fn a_timeout_is_retried_only_when_idempotent() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let _ = timed_out(&mut calls);
    assert_eq!(calls, 1);
    calls = 0;
    let _ = timed_out_idempotent(&mut calls);
    assert_eq!(calls, 3);
}

#[retry(attempts = 10)]
fn not_retryable(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::PermissionDenied.into())
}

#[test]
fn a_stop_error_is_attempted_once() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let err = not_retryable(&mut calls).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::PermissionDenied,
        "the caller's own error, unchanged"
    );
    assert_eq!(calls, 1);
    assert!(vt.sleeps().is_empty());
}

// --- budgets -----------------------------------------------------------------

static SHARED: WindowBudget = WindowBudget::new(0.5, 0, Duration::from_secs(10));

#[retry(attempts = 5, base = 1ms, budget = SHARED)]
fn shared_a(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(support::unreachable())
}

#[retry(attempts = 5, base = 1ms, budget = SHARED)]
fn shared_b(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(support::unreachable())
}

#[retry(attempts = 5, base = 1ms, budget = none)]
fn unbudgeted(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn a_shared_static_budget_bounds_both_functions_and_none_bounds_nothing() {
    let _vt = VirtualTime::start();
    let (mut a, mut b) = (0, 0);
    let _ = shared_a(&mut a); // deposits half a retry: refused
    let _ = shared_b(&mut b); // a whole retry now: granted once
    assert_eq!((a, b), (1, 2));
    let stats = SHARED.stats();
    assert_eq!((stats.calls, stats.retries), (2, 1));
    let mut c = 0;
    let _ = unbudgeted(&mut c);
    assert_eq!(c, 5);
}

#[retry(attempts = 3, base = 1ns)]
fn own_budget(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(support::unreachable())
}

#[retry(attempts = 3, base = 1ns)]
fn other_own_budget(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(support::unreachable())
}

#[test]
fn every_function_has_a_token_budget_of_its_own_by_default() {
    let _vt = VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    let mut calls = 0;
    for _ in 0..300 {
        let _ = own_budget(&mut calls);
    }
    // Every failure takes a token from 10; retries stop at half: 9, 8 (the
    // first call's two retries) and 6 (the second's one; 7 was its first
    // attempt's failure). 3 retries, where 600 were wanted.
    assert_eq!(calls - 300, 3);
    // Another function's throttle is untouched.
    let mut other = 0;
    let _ = other_own_budget(&mut other);
    assert_eq!(other, 3);
}

// --- the body ------------------------------------------------------------------

#[retry(attempts = 4, budget = none)]
fn question_mark(inputs: &mut Vec<&'static str>) -> Result<u32, Error> {
    let raw = inputs
        .pop()
        .ok_or_else(|| Error::from(ErrorKind::UnexpectedEof))?;
    if raw.is_empty() {
        return Err(refused());
    }
    let n = raw.parse().map_err(|_| refused())?;
    Ok(n)
}

#[test]
fn question_mark_and_return_end_only_the_attempt() {
    let _vt = VirtualTime::start();
    let mut inputs = vec!["42", "x", ""];
    assert_eq!(question_mark(&mut inputs).unwrap(), 42);
    assert!(inputs.is_empty());
}

struct Connection {
    attempts: u32,
    healthy_after: u32,
}

impl Connection {
    #[retry(attempts = 5, jitter = none, budget = none)]
    fn send(&mut self, payload: &str) -> Result<usize, Error> {
        self.attempts += 1;
        if self.attempts < self.healthy_after {
            return Err(refused());
        }
        Ok(payload.len())
    }

    #[retry(attempts = 2, budget = none)]
    fn peek(&self) -> Result<u32, Error> {
        Ok(self.attempts)
    }
}

#[test]
fn a_mut_self_method_mutates_state_across_attempts() {
    let vt = VirtualTime::start();
    let mut conn = Connection {
        attempts: 0,
        healthy_after: 3,
    };
    assert_eq!(conn.send("hello").unwrap(), 5);
    assert_eq!(conn.peek().unwrap(), 3);
    assert_eq!(vt.sleeps(), [100, 200].map(|ms| ms * MS));
}

// --- policy = expr ---------------------------------------------------------------

static POLICY: Policy = Policy::new()
    .attempts(2)
    .base(Duration::from_millis(7))
    .jitter(backstop::Jitter::None)
    .no_budget();

#[retry(policy = POLICY, budget = none)]
fn with_static_policy(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[retry(policy = Policy::new().attempts(n).jitter(backstop::Jitter::None), budget = none)]
fn with_runtime_policy(n: u32, calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn a_policy_expression_replaces_the_schedule_options() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let _ = with_static_policy(&mut calls);
    assert_eq!(calls, 2);
    assert_eq!(vt.sleeps(), [7 * MS]);
    calls = 0;
    let _ = with_runtime_policy(4, &mut calls);
    assert_eq!(calls, 4);
}

mod facade {
    pub(crate) use backstop as renamed;
}

#[retry(crate = self::facade::renamed, attempts = 2, budget = none)]
// (A relative path is named once: written out at each use, each `self::`
// would be an unnecessary qualification.)
#[deny(unused_qualifications)]
fn through_a_renamed_crate(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(refused())
}

#[test]
fn crate_path_points_at_a_renamed_facade() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let _ = through_a_renamed_crate(&mut calls);
    assert_eq!(calls, 2);
}

#[retry(attempts = 5, budget = none)]
fn mutable_argument(mut tries: u32) -> Result<u32, Error> {
    tries += 1;
    if tries < 3 {
        return Err(refused());
    }
    Ok(tries)
}

#[test]
fn a_mut_argument_keeps_its_changes_across_attempts() {
    let vt = VirtualTime::start();
    assert_eq!(mutable_argument(0).unwrap(), 3);
    assert_eq!(vt.sleeps().len(), 2);
}

#[retry(attempts = 2, base = 10ms, jitter = none, deadline = 10030us, budget = none)]
fn real_time_tight_deadline(starts: &mut Vec<std::time::Instant>) -> Result<(), Error> {
    starts.push(std::time::Instant::now());
    Err(ErrorKind::ConnectionRefused.into())
}

/// Real time, on purpose (20 × 10 ms): `thread::sleep` oversleeps by the
/// timer slack, which virtual time cannot show.
#[test]
fn no_attempt_starts_after_the_deadline_when_the_thread_oversleeps() {
    for _ in 0..20 {
        let mut starts = Vec::new();
        let _ = real_time_tight_deadline(&mut starts);
        if let [first, second] = starts[..] {
            assert!(
                second - first < Duration::from_micros(10_030),
                "the second attempt started {:?} after the first, past the deadline",
                second - first
            );
        }
    }
}

static LAZY: std::sync::LazyLock<WindowBudget> =
    std::sync::LazyLock::new(|| WindowBudget::new(0.5, 0, Duration::from_secs(10)));

#[retry(attempts = 5, budget = LAZY)]
fn lazily_budgeted(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_static_budget_built_lazily_is_drawn_on() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let _ = lazily_budgeted(&mut calls);
    let _ = lazily_budgeted(&mut calls);
    assert_eq!(calls, 3, "one retry for two calls at 50%");
    assert_eq!(LAZY.stats().calls, 2);
}

/// A holder of the budget in use, which configuration may replace (a
/// reload): `budget =` takes a `static` of it, as `breaker =` does.
struct Current(std::sync::RwLock<&'static WindowBudget>);

impl std::ops::Deref for Current {
    type Target = WindowBudget;
    fn deref(&self) -> &WindowBudget {
        *self.0.read().unwrap()
    }
}

static CURRENT: std::sync::LazyLock<Current> = std::sync::LazyLock::new(|| {
    Current(std::sync::RwLock::new(Box::leak(Box::new(
        WindowBudget::new(0.5, 0, Duration::from_secs(10)),
    ))))
});

#[retry(attempts = 5, budget = CURRENT)]
fn currently_budgeted(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_static_that_hands_out_the_current_budget_is_drawn_on() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    let _ = currently_budgeted(&mut calls);
    let _ = currently_budgeted(&mut calls);
    assert_eq!(calls, 3, "one retry for two calls at 50%");
    assert_eq!(CURRENT.stats().calls, 2);
}

#[retry(deadline = 5ms, base = 100us, backoff = fixed, jitter = none, budget = none, attempts = 1000)]
fn fails_fast(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::ConnectionRefused.into())
}

/// A deadline of a few milliseconds is measured from the precise clock:
/// the coarse clock trails it by milliseconds (up to 10 ms measured on a
/// virtual machine), which would end such a call before its first retry,
/// every time. A thread descheduled for the whole 5 ms (two cores, the
/// other tests beside it) ends a call so too, now and then: most calls,
/// not all, must retry.
#[test]
fn a_short_deadline_gets_its_whole_time_in_real_time() {
    let mut short = Vec::new();
    for _ in 0..20 {
        let mut attempts = 0;
        let started = std::time::Instant::now();
        let _ = fails_fast(&mut attempts);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(4),
            "{took:?} of a 5 ms deadline"
        );
        // (One attempt in more than the deadline: the thread slept
        // through it, the scheduler's doing.)
        if attempts < 2 && took < Duration::from_millis(5) {
            short.push(took);
        }
    }
    assert!(
        short.len() <= 5,
        "{} of 20 calls gave up after one attempt, in {short:?}",
        short.len()
    );
}

#[retry(attempts = 3, base = 1ns)]
fn quiet(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(support::unreachable())
}

#[test]
fn a_quiet_function_gets_its_retries_back_in_time() {
    let vt = VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    // An outage drains its throttle: no more retries.
    for _ in 0..10 {
        let _ = quiet(&mut 0);
    }
    let mut attempts = 0;
    let _ = quiet(&mut attempts);
    assert_eq!(attempts, 1);
    // Called again a minute and a half later (gRPC's bucket alone would
    // wait for 60 answers): 9 tokens back, two retries.
    vt.advance(Duration::from_secs(90));
    let mut attempts = 0;
    let _ = quiet(&mut attempts);
    assert_eq!(attempts, 3);
}

#[retry(attempts = 3, base = 1ns)]
fn answers(fail: bool, attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    if fail {
        Err(support::unreachable())
    } else {
        Ok(())
    }
}

#[test]
fn successes_at_the_first_attempt_refill_the_token_budget() {
    let _vt = VirtualTime::start();
    let _fresh = backstop::testing::isolate();
    for _ in 0..10 {
        let _ = answers(true, &mut 0);
    }
    let mut attempts = 0;
    let _ = answers(true, &mut attempts);
    assert_eq!(attempts, 1, "an outage drained the throttle");
    // No time passes: only the answers refill it, a tenth of a token each.
    for _ in 0..70 {
        answers(false, &mut 0).unwrap();
    }
    // 7 tokens: the failure takes one, the retry stays above half (6 > 5);
    // the second failure takes another, and 5 is not above half.
    let mut attempts = 0;
    let _ = answers(true, &mut attempts);
    assert_eq!(attempts, 2);
}

// --- Macros in the body -----------------------------------------------------

#[retry(base = 1ms, budget = none)]
fn sums_with_a_local_macro(input: &str, calls: &mut u32) -> Result<usize, Error> {
    *calls += 1;
    if *calls < 2 {
        return Err(refused());
    }
    let mut total = 0;
    macro_rules! add {
        ($e:expr) => {
            total += $e
        };
    }
    macro_rules! add_twice {
        ($e:expr) => {
            $e + $e
        };
    }
    add!(input.len());
    // An item after it may use it.
    fn doubled(n: usize) -> usize {
        add_twice!(n)
    }
    Ok(doubled(total) / 2)
}

#[retry(base = 1ms, budget = none)]
fn shadows_a_macro(calls: &mut u32) -> Result<u32, Error> {
    *calls += 1;
    macro_rules! m {
        () => {
            1
        };
    }
    let first = m!();
    macro_rules! m {
        () => {
            2
        };
    }
    let second = m!();
    if *calls < 2 {
        return Err(refused());
    }
    Ok(first * 10 + second)
}

/// A `macro_rules!` in the body keeps its place: it names the locals
/// before it, and shadows a macro used before it only after it.
#[test]
fn a_macro_defined_in_the_body_keeps_its_place() {
    let _vt = VirtualTime::start();
    let mut calls = 0;
    assert_eq!(sums_with_a_local_macro("hello", &mut calls).unwrap(), 5);
    assert_eq!(calls, 2);
    let mut calls = 0;
    assert_eq!(shadows_a_macro(&mut calls).unwrap(), 12);
    assert_eq!(calls, 2);
}

// --- `impl Trait` in a result alias ----------------------------------------

#[retry(base = 1ms, budget = none)]
fn displayed_through_an_alias(calls: &mut u32) -> std::io::Result<impl std::fmt::Display> {
    *calls += 1;
    if *calls < 2 {
        return Err(refused());
    }
    Ok(7)
}

type Answer<T> = Result<T, Error>;

#[retry(base = 1ms, budget = none)]
fn displayed_through_an_alias_of_ours(calls: &mut u32) -> Answer<impl std::fmt::Display> {
    *calls += 1;
    if *calls < 2 {
        return Err(refused());
    }
    Ok("seven")
}

#[retry(base = 1ms, budget = none)]
async fn displayed_through_an_alias_async(
    calls: &std::cell::Cell<u32>,
) -> std::io::Result<impl std::fmt::Display> {
    calls.set(calls.get() + 1);
    if calls.get() < 2 {
        return Err(refused());
    }
    Ok(7)
}

/// A success type written `impl Trait` inside an alias of `Result`
/// (`io::Result<impl Display>`) is retried as inside `Result<_, _>`.
#[tokio::test(start_paused = true)]
async fn an_impl_trait_inside_a_result_alias_is_retried() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    let shown = displayed_through_an_alias(&mut calls).unwrap().to_string();
    assert_eq!((shown.as_str(), calls), ("7", 2));
    let mut calls = 0;
    let shown = displayed_through_an_alias_of_ours(&mut calls)
        .unwrap()
        .to_string();
    assert_eq!((shown.as_str(), calls), ("seven", 2));
    drop(vt);
    let calls = std::cell::Cell::new(0);
    let shown = displayed_through_an_alias_async(&calls)
        .await
        .unwrap()
        .to_string();
    assert_eq!((shown.as_str(), calls.get()), ("7", 2));
}

// --- `impl Trait` as the error type ----------------------------------------

#[retry(base = 1ms, budget = none)]
fn failing_opaquely(calls: &mut u32) -> Result<u32, impl std::error::Error + backstop::Classify> {
    *calls += 1;
    if *calls < 2 {
        return Err(refused());
    }
    Ok(7)
}

#[retry(base = 1ms, budget = none)]
async fn failing_opaquely_async(
    calls: &std::cell::Cell<u32>,
) -> Result<u32, impl std::error::Error + backstop::Classify> {
    calls.set(calls.get() + 1);
    if calls.get() < 3 {
        return Err(refused());
    }
    Ok(7)
}

static OPAQUE: backstop::Policy = backstop::Policy::new()
    .base(Duration::from_millis(1))
    .attempts(2)
    .attempt_timeout(Some(Duration::from_millis(50)))
    .no_budget();

#[retry(policy = OPAQUE)]
async fn failing_opaquely_by_policy(
    calls: &std::cell::Cell<u32>,
) -> Result<u32, impl std::error::Error + backstop::Classify> {
    calls.set(calls.get() + 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Err::<u32, _>(refused())
}

static REFUSING: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(1, 0.1);

// The budget's one token goes to the first failure: its retry is refused.
#[retry(budget = REFUSING, deadline = 1s)]
async fn refused_opaquely(
    calls: &std::cell::Cell<u32>,
) -> Result<u32, impl std::error::Error + backstop::Classify> {
    calls.set(calls.get() + 1);
    Err::<u32, _>(refused())
}

#[retry(base = 1ms, budget = none, attempt_timeout = 50ms)]
async fn hanging_opaquely() -> Result<u32, impl std::error::Error + backstop::Classify> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Err::<u32, _>(refused())
}

/// An error type written `impl Trait` is classified and retried as the
/// type it stands for, sync and async; it takes an `attempt_timeout`
/// when the type it stands for holds an `Elapsed` (`io::Error` does), but
/// not a policy's, and does not hold once the budget refuses a retry
/// (asked before the body ran, it holds none).
#[tokio::test(start_paused = true)]
async fn an_impl_trait_error_is_retried() {
    let vt = VirtualTime::start();
    let mut calls = 0;
    assert_eq!((failing_opaquely(&mut calls).unwrap(), calls), (7, 2));
    drop(vt);
    let calls = std::cell::Cell::new(0);
    assert_eq!(failing_opaquely_async(&calls).await.unwrap(), 7);
    assert_eq!(calls.get(), 3);
    let calls = std::cell::Cell::new(0);
    let started = tokio::time::Instant::now();
    let error = failing_opaquely_by_policy(&calls).await.unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the policy's 50 ms not applied: {:?}",
        started.elapsed()
    );
    assert_eq!(
        (error.to_string().as_str(), calls.get()),
        ("connection refused", 2)
    );
    let calls = std::cell::Cell::new(0);
    let started = tokio::time::Instant::now();
    let error = refused_opaquely(&calls).await.unwrap_err();
    assert_eq!(error.to_string(), "connection refused", "its last error");
    assert_eq!(calls.get(), 1);
    assert!(started.elapsed() < Duration::from_secs(1), "not held");
    let started = tokio::time::Instant::now();
    let error = hanging_opaquely().await.unwrap_err();
    assert!(
        error.to_string().contains("`attempt_timeout` of 50ms"),
        "{error}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(50), "not retried");
}
