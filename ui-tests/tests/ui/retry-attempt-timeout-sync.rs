use std::time::Duration;

use backstop::{Policy, Retry};

fn main() {
    // A sync attempt cannot be interrupted.
    let policy = Policy::new();
    let _ = Retry::new(&policy)
        .attempt_timeout(Duration::from_secs(1))
        .call(|| Ok::<_, std::io::Error>(()));
}
