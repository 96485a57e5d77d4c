use backstop::retry;

#[retry(deadline = "10s", base = "250 ms")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
