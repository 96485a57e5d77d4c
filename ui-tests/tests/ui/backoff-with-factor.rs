use backstop::retry;

#[retry(backoff = exponential(2))]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
