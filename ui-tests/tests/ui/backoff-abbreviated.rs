use backstop::retry;

#[retry(backoff = exp)]
fn abbreviated() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
