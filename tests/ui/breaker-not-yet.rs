use backstop::retry;

#[retry(breaker = BREAKER)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
