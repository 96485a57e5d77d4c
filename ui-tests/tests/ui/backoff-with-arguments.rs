use backstop::retry;

// The step of a linear backoff is `base`.
#[retry(backoff = linear(100ms))]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
