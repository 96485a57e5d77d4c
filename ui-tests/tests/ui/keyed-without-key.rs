use std::sync::LazyLock;
use std::time::Duration;

use backstop::limit::{AdaptiveThrottle, CircuitBreaker, Keyed, TokenBudget};
use backstop::retry;

static PER_DB: Keyed<CircuitBreaker> = Keyed::new(CircuitBreaker::new(5, Duration::from_secs(30)));
static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
static PER_HOST: LazyLock<Keyed<AdaptiveThrottle>> =
    LazyLock::new(|| Keyed::new(AdaptiveThrottle::standard()));

// A `Keyed` table keeps a limiter per key: a call that gives no key would
// draw on the table's one limiter for calls without a key, every call.
#[retry(breaker = PER_DB)]
fn query() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(budget = PER_SHARD)]
fn read() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(throttle = PER_HOST)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// With a key, each is taken.
#[retry(breaker = PER_DB, budget = PER_SHARD, throttle = PER_HOST, key = db)]
async fn keyed(db: u32) -> Result<u32, std::io::Error> {
    Ok(db)
}

fn main() {}
