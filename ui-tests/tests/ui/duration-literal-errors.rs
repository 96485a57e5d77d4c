use backstop::retry;

#[retry(attempt_timeout = 0ms)]
async fn zero() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(deadline = 99999999999999999999h)]
fn huge() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(base = true)]
fn not_a_duration() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(backoff = linear(100ms))]
fn linear() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
