use std::time::Duration;

use backstop::{limit::CircuitBreaker, Classify, Verdict, retry};

struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

// The crate's own `Result`, as many crates have.
type Result<T> = std::result::Result<T, ApiError>;

static USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

// Through an alias too, the missing `From<backstop::CircuitOpen>` is said
// at the breaker, and the missing `From<Elapsed>` at the attempt timeout.
#[retry(breaker = USERS, attempt_timeout = 2s)]
async fn fetch() -> Result<()> {
    Ok(())
}

fn main() {}
