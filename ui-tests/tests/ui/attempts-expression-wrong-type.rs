use backstop::retry;

const ATTEMPTS: u64 = 4;

#[retry(attempts = ATTEMPTS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
