//! The attribute's compile-time checks assume the runtime's defaults: keep
//! them in step (`retry-macros/src/valid.rs` mirrors `Policy::DEFAULT`).

use std::io::Error;
use std::time::Duration;

use backstop::testing::VirtualTime;
use backstop::{Policy, retry};

// `base` equal to the default cap is accepted (`base-above-default-cap`
// pins that 30s is not), and so is `cap` equal to the default base.
#[retry(base = 20s, jitter = none, attempts = 2, deadline = none, budget = none)]
fn base_at_default_cap() -> Result<(), Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[retry(cap = 100ms, jitter = none, attempts = 2, budget = none)]
fn cap_at_default_base() -> Result<(), Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[test]
fn the_macro_and_the_runtime_agree_on_defaults() {
    let p = Policy::DEFAULT;
    assert_eq!(p.ceiling(0), Duration::from_millis(100), "default base");
    assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(20), "default cap");
    let vt = VirtualTime::start();
    let _ = base_at_default_cap();
    assert_eq!(vt.sleeps(), [Duration::from_secs(20)]);
    let vt = VirtualTime::start();
    let _ = cap_at_default_base();
    assert_eq!(vt.sleeps(), [Duration::from_millis(100)]);
}

// A dependency that fails every call: unreachable (a refused connection
// would hold instead, as a restart is ridden out), with the default
// budget and backoff (without jitter, so that the time the sleeps refill
// is the same on every run).
#[retry(jitter = none)]
fn down_three_attempts(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(std::io::ErrorKind::HostUnreachable.into())
}

#[retry(jitter = none, attempts = 10)]
fn down_ten_attempts(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(std::io::ErrorKind::HostUnreachable.into())
}

/// A dependency failing every call gets at most 5 retries from a function's
/// own token budget, 4 with three attempts a call (the failure that ends a
/// call takes a token too), once its sleeps have refilled the first
/// hundredths of a token (4 and 3 when no time passes, as the manual's
/// example shows).
#[test]
fn a_dependency_failing_every_call_gets_at_most_five_retries_four_with_three_attempts() {
    let _vt = VirtualTime::start();
    let mut attempts = 0;
    for _ in 0..20 {
        let _ = down_three_attempts(&mut attempts);
    }
    assert_eq!(attempts, 20 + 4);
    let mut attempts = 0;
    for _ in 0..20 {
        let _ = down_ten_attempts(&mut attempts);
    }
    assert_eq!(attempts, 20 + 5);
}
