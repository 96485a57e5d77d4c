use std::time::Duration;

use backstop::retry;

const DELAY: Duration = Duration::from_millis(20);
// A constant named as a percentile is a duration, not a percentile.
const P99: Duration = Duration::from_millis(50);

#[retry(hedge = P99, idempotent)]
async fn named_like_a_percentile() -> Result<u32, std::io::Error> {
    Ok(1)
}

struct Client {
    base: String,
}

impl Client {
    #[retry(hedge = p99, hedges = 2, idempotent)]
    async fn get(&self, path: &str) -> Result<String, std::io::Error> {
        Ok(format!("{}{path}", self.base))
    }

    // A borrowed answer, its lifetime elided.
    #[retry(hedge = 10ms, idempotent)]
    async fn base(&self) -> Result<&str, std::io::Error> {
        Ok(&self.base)
    }

    #[retry(hedge = DELAY, idempotent, attempt_timeout = 1s)]
    async fn put(&self, key: String, value: Vec<u8>) -> Result<usize, std::io::Error> {
        Ok(key.len() + value.len())
    }
}

#[retry(policy = backstop::Policy::new().idempotent(true), hedge = p999)]
async fn with_a_policy(name: &str) -> Result<usize, std::io::Error> {
    Ok(name.len())
}

// The widest round: `hedge::MAX_HEDGES`.
#[retry(hedge = 20ms, hedges = 10, attempts = 11, idempotent)]
async fn the_widest_round() -> Result<u32, std::io::Error> {
    const _: () = assert!(backstop::hedge::MAX_HEDGES == 10);
    Ok(1)
}

fn is_send<T: Send>(t: T) -> T {
    t
}

fn main() {
    let client = Client { base: String::new() };
    drop(is_send(client.get("x")));
    drop(is_send(client.put(String::new(), Vec::new())));
    drop(is_send(with_a_policy("x")));
    drop(is_send(named_like_a_percentile()));
    drop(is_send(the_widest_round()));
    drop(is_send(a_second_hedge_past_the_deadline()));
    drop(is_send(a_hedge_under_a_policy()));
    drop(is_send(hedged_after(Duration::ZERO)));
    drop(is_send(hedged_after_a_constant()));
    drop(is_send(hedged_opaquely()));
}

// The first hedge is due before the deadline: a second one past it is
// no mistake (`hedges` is a maximum; the deadline stops it at run time).
#[retry(hedge = 60ms, hedges = 2, idempotent, deadline = 100ms)]
async fn a_second_hedge_past_the_deadline() -> Result<u32, std::io::Error> {
    Ok(1)
}

// Under `policy = ..`, the deadline is the policy's: nothing is compared.
#[retry(policy = backstop::Policy::new().idempotent(true), hedge = 40s)]
async fn a_hedge_under_a_policy() -> Result<u32, std::io::Error> {
    Ok(1)
}

// A parameter named like a percentile with a unit is the caller's delay;
// a constant so named, written as a path.
#[retry(hedge = p99ms, idempotent)]
async fn hedged_after(p99ms: Duration) -> Result<u32, std::io::Error> {
    Ok(u32::from(p99ms.is_zero()))
}

#[allow(non_upper_case_globals)]
const p95ms: Duration = Duration::from_millis(95);

#[retry(hedge = self::p95ms, idempotent)]
async fn hedged_after_a_constant() -> Result<u32, std::io::Error> {
    Ok(1)
}

// An error type written `impl Trait`, hedged.
#[retry(hedge = 10ms, idempotent, attempt_timeout = 1s)]
async fn hedged_opaquely() -> Result<u32, impl std::error::Error + backstop::Classify> {
    Err::<u32, _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}
