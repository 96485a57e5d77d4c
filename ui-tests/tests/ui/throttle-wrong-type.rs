use std::time::Duration;

use backstop::{limit::CircuitBreaker, retry};

static USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

// `throttle` takes an adaptive throttle; a breaker goes in `breaker`.
#[retry(throttle = USERS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
