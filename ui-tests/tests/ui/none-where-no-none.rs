use backstop::retry;

// Only `deadline`, `budget` and `jitter` take `none`.
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

fn main() {}
