// A breaker on a layer whose inner service's error cannot hold its
// rejection.
use std::time::Duration;

use backstop::tower::RetryLayer;
use backstop::{limit::CircuitBreaker, Classify, Policy, Retry, Verdict};
use tower::{Layer, ServiceExt};

#[derive(Debug)]
struct ConnError;

impl Classify for ConnError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

static DOWNSTREAM: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

fn main() {
    let inner = tower::service_fn(|request: u32| async move {
        if request == 0 { Err(ConnError) } else { Ok(request) }
    });
    let service = RetryLayer::new(Retry::new(&Policy::new()).breaker(&DOWNSTREAM)).layer(inner);
    let _ = service.oneshot(7);
}
