use backstop::{Classify, Verdict, retry};

struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

// A timed-out attempt must be returned as this error type: it needs
// `From<backstop::Elapsed>`.
#[retry(attempt_timeout = 2s)]
async fn fetch() -> Result<(), ApiError> {
    Ok(())
}

fn main() {}
