use backstop::retry;

#[retry(attempts = 0)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
