use backstop::retry;

#[retry(hedge = 50ms, idempotent)]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
