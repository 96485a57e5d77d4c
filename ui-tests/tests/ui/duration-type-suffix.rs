use backstop::retry;

#[retry(base = 100u64)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
