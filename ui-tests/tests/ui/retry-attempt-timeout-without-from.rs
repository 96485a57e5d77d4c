use std::time::Duration;

use backstop::{Classify, Policy, Retry, Verdict};

#[derive(Debug)]
struct ApiError;

impl Classify for ApiError {
    fn classify(&self) -> Verdict {
        Verdict::Retry
    }
}

async fn run() {
    // A timed-out attempt must become an `ApiError`: it needs `From<Elapsed>`.
    let policy = Policy::new();
    let _ = Retry::new(&policy)
        .attempt_timeout(Duration::from_secs(1))
        .call_async(|| async { Err::<(), _>(ApiError) })
        .await;
}

fn main() {
    drop(run());
}
