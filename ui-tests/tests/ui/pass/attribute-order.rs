//! `#[retry]` above the attributes that rewrite a function sees it as
//! written: one span per call, and tokio's paused clock for the sleeps.
use backstop::retry;

#[retry(attempts = 2)]
#[tracing::instrument]
fn send(body: String) -> Result<usize, std::io::Error> {
    Ok(body.len())
}

#[retry(attempts = 2)]
#[tracing::instrument(skip(body), err)]
async fn send_async(body: String) -> Result<usize, std::io::Error> {
    Ok(body.len())
}

#[retry(attempts = 2)]
#[tokio::test(start_paused = true)]
async fn flaky() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = send(String::new());
    let _ = send_async(String::new());
}
