use backstop::retry;

#[retry(jitter = "full")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
