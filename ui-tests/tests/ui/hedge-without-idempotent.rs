use backstop::retry;

#[retry(hedge = 50ms)]
async fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(hedge = p95, idempotent = false)]
async fn fetch_not_idempotent() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
