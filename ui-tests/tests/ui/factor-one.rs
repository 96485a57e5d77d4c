use backstop::retry;

// The boundary: a factor of exactly 1 would never grow the delay.
#[retry(factor = 1)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
