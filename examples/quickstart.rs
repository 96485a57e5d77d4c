//! Quick start: a flaky dependency, retried the safe way.
//!
//! Run with `cargo run --example quickstart`.

use std::io::{Error, ErrorKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use backstop::limit::TokenBudget;
use backstop::{Verdict, retry};

/// Shared by every function that calls the user service (each `#[retry]`
/// function has one of its own by default): a token bucket that every
/// retryable failure drains and every answer refills, so that retries stop
/// within a few failures when the service is down.
static USERS: TokenBudget = TokenBudget::standard();

/// A dependency that refuses the connection twice, then answers.
static REFUSALS_LEFT: AtomicU32 = AtomicU32::new(2);

/// Exponential backoff from 50 ms, capped at 1 s, full jitter, at most 4
/// attempts, and 5 s for the whole call. A refused connection sent
/// nothing (`std::io::Error` knows which of its kinds say so): it is
/// retried. (A reset one, after the request was sent, would be retried
/// only for a function declared `idempotent`.)
#[retry(attempts = 4, base = 50ms, cap = 1s, deadline = 5s, budget = USERS)]
fn get_user(id: u64, attempts: &mut u32) -> Result<String, Error> {
    *attempts += 1;
    if REFUSALS_LEFT.load(Ordering::Relaxed) > 0 {
        REFUSALS_LEFT.fetch_sub(1, Ordering::Relaxed);
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(format!("user #{id}"))
}

/// A permission error is not something a retry can fix: one attempt.
#[retry(attempts = 4, budget = USERS)]
fn delete_user(_id: u64, attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    Err(ErrorKind::PermissionDenied.into())
}

/// Your own rule for errors, and an `Ok` value that asks for a retry (an
/// HTTP 503 that arrives as a response, not as an error).
#[retry(
    attempts = 3,
    base = 20ms,
    when = |_: &String| Verdict::Stop,
    when_ok = |status: &u16| *status == 503,
    budget = USERS
)]
fn health(statuses: &mut Vec<u16>) -> Result<u16, String> {
    Ok(statuses.pop().unwrap_or(500))
}

/// Async works the same, on tokio's timer.
#[retry(attempts = 3, base = 20ms, budget = USERS)]
async fn get_user_async(id: u64) -> Result<String, Error> {
    Ok(format!("user #{id} (async)"))
}

fn main() {
    let started = Instant::now();
    let mut attempts = 0;
    let user = get_user(42, &mut attempts);
    println!(
        "transient failures: {user:?} after {attempts} attempts in {:?}",
        started.elapsed()
    );

    let mut attempts = 0;
    let denied = delete_user(42, &mut attempts);
    println!("permanent failure: {denied:?} after {attempts} attempt");

    let mut statuses = vec![200, 503];
    println!("503 then 200: {:?}", health(&mut statuses));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    println!("async: {:?}", runtime.block_on(get_user_async(7)));

    println!(
        "token budget: {} of {} tokens left (retries stop at half)",
        USERS.tokens(),
        USERS.max_tokens()
    );
}
