use backstop::retry;

#[retry(base = true)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
