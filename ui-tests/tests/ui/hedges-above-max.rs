use backstop::retry;

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
