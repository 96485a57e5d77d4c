use backstop::retry;

// One loop per function: retries at one layer.
#[retry(attempts = 3)]
#[retry(deadline = 5s)]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
