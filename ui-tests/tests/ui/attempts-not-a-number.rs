use backstop::retry;

#[retry(attempts = "3")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
