use backstop::retry;

const DEADLINE_MS: u64 = 3000;

#[retry(deadline = DEADLINE_MS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
