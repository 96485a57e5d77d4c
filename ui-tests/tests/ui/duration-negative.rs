use backstop::retry;

#[retry(cap = -5s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(cap = -std::time::Duration::from_secs(5))]
fn negated() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
