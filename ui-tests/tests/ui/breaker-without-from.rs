use std::time::Duration;

use backstop::{limit::CircuitBreaker, Classify, Verdict, retry};

struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

static USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

// A rejected call must be returned as this error type: it needs
// `From<backstop::CircuitOpen>`.
#[retry(breaker = USERS)]
fn fetch() -> Result<(), ApiError> {
    Ok(())
}

fn main() {}
