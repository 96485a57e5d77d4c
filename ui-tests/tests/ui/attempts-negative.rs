use backstop::retry;

#[retry(attempts = -1)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
