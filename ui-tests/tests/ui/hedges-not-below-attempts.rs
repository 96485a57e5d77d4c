use backstop::retry;

// Hedges are attempts: a round of one attempt and N hedges needs
// `attempts` above N.

#[retry(hedge = 20ms, hedges = 3, idempotent)]
async fn hedges_past_the_default_attempts() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = 20ms, hedges = 4, attempts = 4, idempotent)]
async fn hedges_as_many_as_attempts() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
