use backstop::retry;

#[retry(backoff = fixed, base = 1s, factor = 3)]
fn fixed() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(backoff = linear, factor = 1.5)]
fn linear() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(backoff = exponential, factor = 3)]
fn exponential() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
