use backstop::retry;

#[retry(attempt_timeout = 2s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
