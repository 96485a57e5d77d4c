use backstop::retry;

const FACTOR: u32 = 2;

#[retry(factor = FACTOR)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
