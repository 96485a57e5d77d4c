use backstop::retry;

const TIMEOUT_MS: u64 = 500;

#[retry(attempt_timeout = TIMEOUT_MS)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
