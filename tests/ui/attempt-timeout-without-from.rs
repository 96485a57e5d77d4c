use backstop::retry;

// A timed-out attempt must be returned as this error type: it needs
// `From<backstop::Elapsed>`.
#[retry(attempt_timeout = 2s)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
