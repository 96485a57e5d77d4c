use backstop::{limit::AdaptiveThrottle, retry};

// A `const` is copied at every use: each call would count on a fresh throttle.
const USERS: AdaptiveThrottle = AdaptiveThrottle::standard();

#[retry(throttle = USERS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
