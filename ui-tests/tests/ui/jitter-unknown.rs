use backstop::retry;

#[retry(jitter = random)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(jitter = ful)]
fn typo() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
