use backstop::retry;

// A hedge no hedge could beat.
#[retry(hedge = 500ms, idempotent, deadline = 100ms)]
async fn after_the_deadline() -> Result<u32, std::io::Error> {
    Ok(1)
}

// Within the timer's 2 ms of slack of the deadline: no attempt starts.
#[retry(hedge = 50ms, idempotent, deadline = 51ms)]
async fn within_the_slack() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 40s, idempotent)]
async fn after_the_default_deadline() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 2s, idempotent, attempt_timeout = 1s)]
async fn after_the_attempt_timeout() -> Result<u32, std::io::Error> {
    Ok(1)
}

// A zero deadline is an error of its own: no second one here.
#[retry(hedge = 50ms, idempotent, deadline = 0s)]
async fn a_zero_deadline() -> Result<u32, std::io::Error> {
    Ok(1)
}

// Before them: no error.
#[retry(hedge = 50ms, idempotent, deadline = 100ms, attempt_timeout = 60ms)]
async fn in_time() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 50ms, idempotent, deadline = 53ms)]
async fn past_the_slack() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
