use backstop::retry;

const BASE_MS: u64 = 100;

#[retry(base = BASE_MS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
