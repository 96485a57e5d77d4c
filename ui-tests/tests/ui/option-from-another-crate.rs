use backstop::retry;

#[retry(max_retries = 3)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
