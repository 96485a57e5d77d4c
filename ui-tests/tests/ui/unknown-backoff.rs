use backstop::retry;

#[retry(backoff = exponentail)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
