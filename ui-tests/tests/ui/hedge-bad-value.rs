use backstop::retry;

#[retry(hedge = p5, idempotent)]
async fn one_digit() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 0ms, idempotent)]
async fn zero() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 50ms, hedges = 0, idempotent)]
async fn no_hedges() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedges = 2, idempotent)]
async fn hedges_alone() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = "50ms", idempotent)]
async fn quoted() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p100, idempotent)]
async fn hundredth() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 50ms, idempotent, attempts = 1)]
async fn one_attempt() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p00, idempotent)]
async fn zeroth() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p950, idempotent)]
async fn a_digit_too_many() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p005, idempotent)]
async fn two_zeros_first() -> Result<u32, std::io::Error> {
    Ok(1)
}

// Nines past an `f64`'s precision: the 100th percentile.
#[retry(hedge = p99999999999999999, idempotent)]
async fn too_many_nines() -> Result<u32, std::io::Error> {
    Ok(1)
}

// A percentile written with its point.
#[retry(hedge = p99.9, idempotent)]
async fn with_a_point() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p99.09, idempotent)]
async fn with_a_point_and_a_zero() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p95.5, idempotent)]
async fn with_a_point_not_nines() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
