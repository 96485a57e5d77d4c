use backstop::retry;

const ATTEMPTS: u64 = 4;
const FACTOR: u32 = 2;
const HEDGES: usize = 2;
const POLICY: u32 = 5;

#[retry(attempts = ATTEMPTS)]
fn count() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(factor = FACTOR)]
fn grow() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(hedge = 50ms, hedges = HEDGES, idempotent)]
async fn hedged() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(policy = POLICY)]
fn configured() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
