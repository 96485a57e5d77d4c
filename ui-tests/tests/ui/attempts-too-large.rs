use backstop::retry;

#[retry(attempts = 10000000000)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
