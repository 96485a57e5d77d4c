use backstop::retry;

#[retry(cap = -5s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
