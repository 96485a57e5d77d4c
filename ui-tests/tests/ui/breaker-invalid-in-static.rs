use std::time::Duration;

use backstop::limit::CircuitBreaker;

// A breaker that opens after zero failures would never let a call through.
static BREAKER: CircuitBreaker = CircuitBreaker::new(0, Duration::from_secs(30));

fn main() {
    let _ = &BREAKER;
}
