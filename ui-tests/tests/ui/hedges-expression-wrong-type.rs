use backstop::retry;

const HEDGES: usize = 2;

#[retry(hedge = 50ms, hedges = HEDGES, idempotent)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
