use std::time::Duration;

use backstop::{limit::CircuitBreaker, CircuitOpen, retry};

#[derive(Debug)]
struct ApiError;

impl backstop::Classify for ApiError {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Retry
    }
}

impl From<CircuitOpen> for ApiError {
    fn from(_: CircuitOpen) -> Self {
        ApiError
    }
}

// A `const` is copied at every use: a fresh breaker per call never opens.
const USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

#[retry(breaker = USERS)]
fn fetch() -> Result<(), ApiError> {
    Ok(())
}

fn main() {}
