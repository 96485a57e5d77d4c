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
