//! The functions both benchmarks run: the operation every contender
//! retries, and `#[retry]` around it as a user writes it.

// Each benchmark runs some of them.
#![allow(dead_code)]

use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::limit::WindowBudget;
use backstop::{Jitter, Policy, retry};

/// The operation every contender retries: cheap, so the overhead shows.
#[inline(never)]
pub(crate) fn op(x: u64) -> Result<u64, Error> {
    if x == u64::MAX {
        Err(ErrorKind::ConnectionRefused.into())
    } else {
        Ok(x.wrapping_add(1))
    }
}

/// Fails `*failures` times, then succeeds.
#[inline(never)]
pub(crate) fn flaky(failures: &mut u32) -> Result<u64, Error> {
    if *failures > 0 {
        *failures -= 1;
        Err(ErrorKind::ConnectionRefused.into())
    } else {
        Ok(7)
    }
}

// --- backstop, as a user writes it -------------------------------------
// Out of line, as a function called from elsewhere is.

#[retry]
#[inline(never)]
pub(crate) fn backstop_sync(x: u64) -> Result<u64, Error> {
    op(x)
}

/// `backstop_sync` with a key: its default token budget is the key's own,
/// found in the process-wide table by the key's hash.
#[retry(key = shard)]
#[inline(never)]
pub(crate) fn backstop_sync_keyed(shard: u64, x: u64) -> Result<u64, Error> {
    op(x)
}

/// `backstop_sync` drawing on a windowed budget, which records each call
/// at its start.
static WINDOW: WindowBudget = WindowBudget::new(0.2, 10, Duration::from_secs(10));

#[retry(budget = WINDOW)]
#[inline(never)]
pub(crate) fn backstop_sync_window(x: u64) -> Result<u64, Error> {
    op(x)
}

/// `backstop_sync_keyed` with a host name as its key.
#[retry(key = host)]
#[inline(never)]
pub(crate) fn backstop_sync_keyed_host(host: &str, x: u64) -> Result<u64, Error> {
    op(x)
}

#[retry(budget = none)]
#[inline(never)]
pub(crate) fn backstop_sync_no_budget(x: u64) -> Result<u64, Error> {
    op(x)
}

#[retry(deadline = none, budget = none)]
#[inline(never)]
pub(crate) fn backstop_sync_bare(x: u64) -> Result<u64, Error> {
    op(x)
}

#[retry]
pub(crate) async fn backstop_async(x: u64) -> Result<u64, Error> {
    op(x)
}

/// The closure form of `backstop_async`: `call_async` with the defaults
/// (its call site's token budget, as `#[retry]` has its function's).
/// Not marked `#[inline(never)]`, as `backstop_async` is not: on an
/// `async fn` it puts the making of its future out of line, and the
/// caller then copies the whole future (a `memcpy` of its full size): a
/// cost of the mark, not of either form.
pub(crate) async fn backstop_call_async(x: u64) -> Result<u64, Error> {
    backstop::call_async(&Policy::DEFAULT, || async move { op(x) }).await
}

/// Zero delays, and a budget that always has a retry: deciding, not
/// sleeping or refusing, is what `fail_3x_then_ok` measures.
static ZERO_DELAY: Policy = Policy::new()
    .attempts(4)
    .base(Duration::ZERO)
    .jitter(Jitter::Full);
static GENEROUS: WindowBudget = WindowBudget::new(1.0, u32::MAX, Duration::from_secs(10));

#[retry(policy = &ZERO_DELAY, budget = GENEROUS)]
#[inline(never)]
pub(crate) fn backstop_flaky(failures: &mut u32) -> Result<u64, Error> {
    flaky(failures)
}
