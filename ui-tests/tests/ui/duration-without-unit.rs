use backstop::retry;

#[retry(base = 100)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
