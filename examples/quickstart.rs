//! Quick start: a flaky dependency, retried the safe way.
//!
//! Run with `cargo run --example quickstart`.

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

use backstop::{Jitter, Policy, Retry, RetryBudget};

/// Shared by every call to the dependency: at most 10% of calls (plus 10 a
/// second) may be retried, however badly the dependency is failing.
static BUDGET: RetryBudget = RetryBudget::new(0.1, 10, Duration::from_secs(10));

/// Exponential backoff from 50 ms, capped at 1 s, full jitter, a 5 s
/// deadline for the whole call, at most 4 attempts.
static POLICY: Policy = Policy::new()
    .attempts(4)
    .base(Duration::from_millis(50))
    .cap(Duration::from_secs(1))
    .jitter(Jitter::Full)
    .deadline(Some(Duration::from_secs(5)))
    .budget(&BUDGET);

/// A dependency that resets the connection twice, then answers.
struct Flaky {
    failures_left: u32,
}

impl Flaky {
    fn get_user(&mut self, id: u64) -> Result<String, Error> {
        if self.failures_left > 0 {
            self.failures_left -= 1;
            return Err(ErrorKind::ConnectionReset.into());
        }
        Ok(format!("user #{id}"))
    }
}

fn main() {
    let mut dep = Flaky { failures_left: 2 };
    let started = Instant::now();
    let mut attempts = 0;
    let user = backstop::call(&POLICY, || {
        attempts += 1;
        dep.get_user(42)
    });
    println!(
        "transient failures: {:?} after {attempts} attempts in {:?}",
        user,
        started.elapsed()
    );

    // A permission error is not something a retry can fix: one attempt.
    let mut attempts = 0;
    let denied: Result<(), Error> = backstop::call(&POLICY, || {
        attempts += 1;
        Err(ErrorKind::PermissionDenied.into())
    });
    println!("permanent failure: {denied:?} after {attempts} attempt");

    // Your own rule for what is worth retrying, and a retried Ok value.
    let mut statuses = vec![200, 503];
    let outcome = Retry::new(&POLICY)
        .when(|_: &Error| false)
        .when_ok(|status: &u16| *status == 503)
        .call(|| Ok::<u16, Error>(statuses.pop().unwrap_or(500)));
    println!("503 then 200: {outcome:?}");

    let stats = BUDGET.stats();
    println!(
        "budget: {} calls, {} retries, {} refused",
        stats.calls, stats.retries, stats.refusals
    );
}
