use backstop::retry;

#[retry(base = 30s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
