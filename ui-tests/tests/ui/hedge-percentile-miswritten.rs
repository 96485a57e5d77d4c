use backstop::retry;

// A percentile is written `p95`.
#[retry(hedge = 95p, idempotent)]
async fn after() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p95ms, idempotent)]
async fn with_a_unit() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
