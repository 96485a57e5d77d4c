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

// A round sends 10 hedges at most, however many attempts there are.
#[retry(hedge = 20ms, hedges = 11, attempts = 20, idempotent)]
async fn more_hedges_than_a_round_sends() -> Result<u32, std::io::Error> {
    Ok(1)
}

// The largest `u32`: the same error, not a panic of the macro.
#[retry(hedge = 20ms, hedges = 4294967295, idempotent)]
async fn the_largest_count() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
