use backstop::retry;

#[retry(attempts = 0, base = 100, jiter = full)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
