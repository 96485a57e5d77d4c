use std::time::Duration;

use backstop::{Policy, Retry};

async fn run() {
    // `call_async_with` hands each attempt a value and applies no attempt
    // timeout: one given is refused, not ignored.
    let policy = Policy::new();
    let _ = Retry::new(&policy)
        .attempt_timeout(Duration::from_secs(1))
        .call_async_with(0u32, |n| async move { (n, Ok::<u32, std::io::Error>(n)) })
        .await;
}

fn main() {
    drop(run());
}
