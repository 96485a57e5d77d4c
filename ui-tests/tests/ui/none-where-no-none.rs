use backstop::retry;

// Only `deadline`, `budget` and `jitter` take `none`; a count takes no
// `None` either.
#[retry(cap = none)]
fn no_cap() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(attempt_timeout = none)]
async fn no_attempt_timeout() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = none, idempotent)]
async fn no_hedge() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(base = none)]
fn no_base() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(retry_after_max = None)]
fn no_retry_after_max() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(attempts = none)]
fn no_attempts() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(attempts = None)]
fn no_attempts_as_an_option() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(factor = none)]
fn no_factor() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 10ms, hedges = none, idempotent)]
async fn no_hedges() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(breaker = none)]
fn no_breaker() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(throttle = none)]
fn no_throttle() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(key = none)]
fn no_key() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(when = none)]
fn no_classifier() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(policy = none)]
fn no_policy() -> Result<u32, std::io::Error> {
    Ok(1)
}

// `None` is an `attempt_timeout`'s "no limit" (it takes an `Option`), and
// a path of one's own ending in `None` is a value: both compile.
#[retry(attempt_timeout = None, idempotent)]
async fn no_limit() -> Result<u32, std::io::Error> {
    Ok(1)
}

struct Limits;
impl Limits {
    #[allow(non_upper_case_globals)]
    const None: std::time::Duration = std::time::Duration::from_secs(1);
}

#[retry(cap = Limits::None)]
fn a_cap_of_ones_own() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
