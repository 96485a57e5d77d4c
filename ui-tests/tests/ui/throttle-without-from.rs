use backstop::{limit::AdaptiveThrottle, Classify, Verdict, retry};

#[derive(Debug)]
struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

static USERS: AdaptiveThrottle = AdaptiveThrottle::standard();

// A shed attempt is returned as the function's error: it needs `From<Throttled>`.
#[retry(throttle = USERS)]
fn fetch() -> Result<(), ApiError> {
    Ok(())
}

fn main() {}
