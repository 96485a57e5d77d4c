// A `Retry` with a breaker (or an adaptive throttle) around a call whose
// error type cannot hold the rejection.
use std::time::Duration;

use backstop::limit::{AdaptiveThrottle, CircuitBreaker};
use backstop::{Classify, Policy, Retry, Verdict};

#[derive(Debug)]
struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

static ORDERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
static SHED: AdaptiveThrottle = AdaptiveThrottle::standard();

fn main() {
    let policy = Policy::new();
    let _ = Retry::new(&policy).breaker(&ORDERS).call(|| Err::<(), _>(ApiError));
    let _ = Retry::new(&policy).throttle(&SHED).call(|| Err::<(), _>(ApiError));
}
