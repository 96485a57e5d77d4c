use backstop::retry;

const POLICY: u32 = 5;

#[retry(policy = POLICY)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
