use backstop::retry;

#[retry(factor = 0.5)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
