use std::time::Duration;

use backstop::limit::AdaptiveThrottle;

// Below a ratio of 1, the throttle would shed healthy calls.
static THROTTLE: AdaptiveThrottle = AdaptiveThrottle::new(0.5, Duration::from_secs(2));

fn main() {
    let _ = &THROTTLE;
}
