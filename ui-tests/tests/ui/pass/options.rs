//! Every option `#[retry]` accepts today, in every form it allows.
#![deny(warnings)]

use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::{
    limit::AdaptiveThrottle, limit::CircuitBreaker, Jitter, Policy, limit::WindowBudget, limit::TokenBudget, Verdict, retry,
};

static BUDGET: WindowBudget = WindowBudget::new(0.2, 5, Duration::from_secs(10));
static TOKENS: TokenBudget = TokenBudget::new(20, 0.2);
static BREAKER: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
static SHED: AdaptiveThrottle = AdaptiveThrottle::standard();
static POLICY: Policy = Policy::new().attempts(5).jitter(Jitter::Equal);

fn transient(e: &Error) -> bool {
    e.kind() == ErrorKind::ConnectionRefused
}

const TIMEOUT: Duration = Duration::from_secs(3);

#[retry(
    attempts = 4,
    deadline = 10s,
    backoff = exponential,
    base = 250ms,
    factor = 1.5,
    cap = 2m,
    jitter = decorrelated,
    idempotent = true,
    budget = BUDGET,
    retry_after_max = 30s,
)]
fn literals() -> Result<(), Error> {
    Ok(())
}

#[retry(deadline = none, budget = none, backoff = linear, jitter = none, base = 1us, cap = 1h)]
fn nones() -> Result<(), Error> {
    Ok(())
}

#[retry(budget = TOKENS, breaker = BREAKER, throttle = SHED)]
fn gates() -> Result<(), Error> {
    Ok(())
}

#[retry(backoff = fixed, base = 0.5s, cap = 500ms, jitter = equal, idempotent)]
fn fixed() -> Result<(), Error> {
    Ok(())
}

#[retry(deadline = TIMEOUT, base = Duration::from_millis(20), cap = TIMEOUT / 2, factor = 3.0_f64.sqrt())]
fn expressions() -> Result<(), Error> {
    Ok(())
}

#[retry(deadline = timeout, attempts = tries)]
fn arguments_as_options(timeout: Duration, tries: u32) -> Result<(), Error> {
    let _ = (timeout, tries);
    Ok(())
}

#[retry(when = transient)]
fn when_path() -> Result<(), Error> {
    Ok(())
}

#[retry(when = |e| e.kind() == ErrorKind::TimedOut)]
fn when_closure_bool() -> Result<(), Error> {
    Ok(())
}

#[retry(when = |e: &String| if e.is_empty() { Verdict::Stop } else { Verdict::Retry })]
fn when_closure_verdict() -> Result<(), String> {
    Ok(())
}

#[retry(when = |_| false, when_ok = |status| *status == 503)]
fn when_ok(status: u16) -> Result<u16, String> {
    Ok(status)
}

#[retry(policy = POLICY)]
fn policy_value() -> Result<(), Error> {
    Ok(())
}

#[retry(policy = &POLICY, budget = BUDGET)]
fn policy_ref() -> Result<(), Error> {
    Ok(())
}

#[retry(policy = Policy::new().attempts(n))]
fn policy_runtime(n: u32) -> Result<(), Error> {
    Ok(())
}

mod renamed {
    pub use backstop as engine;
}

#[retry(crate = crate::renamed::engine, attempts = 2)]
fn renamed_crate() -> Result<(), Error> {
    Ok(())
}

// A fraction's trailing zeros carry nothing: one second; digits far below
// a nanosecond are dropped.
#[retry(base = 1.0000000000000000000000000000000000000000000s)]
fn zeros_that_carry_nothing() -> Result<(), Error> {
    Ok(())
}

#[retry(base = 1.0000000000000000000000000000000000000000001s)]
fn digits_far_below_a_nanosecond() -> Result<(), Error> {
    Ok(())
}

// A parameter named `none` is the caller's value; a function of one's
// own named so, written as a path.
#[retry(key = none)]
fn keyed_by_a_parameter(none: u64) -> Result<u64, std::io::Error> {
    Ok(none)
}

fn none(_: &std::io::Error) -> backstop::Verdict {
    backstop::Verdict::Stop
}

#[retry(when = self::none)]
fn classified_by_a_function_named_none() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {
    let _ = keyed_by_a_parameter(1);
    let _ = classified_by_a_function_named_none();
    let _ = literals();
    let _ = zeros_that_carry_nothing();
    let _ = digits_far_below_a_nanosecond();
    let _ = nones();
    let _ = gates();
    let _ = fixed();
    let _ = expressions();
    let _ = arguments_as_options(Duration::from_secs(1), 3);
    let _ = when_path();
    let _ = when_closure_bool();
    let _ = when_closure_verdict();
    let _ = when_ok(200);
    let _ = policy_value();
    let _ = policy_ref();
    let _ = policy_runtime(2);
    let _ = renamed_crate();
}
