use backstop::retry;

#[retry(deadline = 0s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
