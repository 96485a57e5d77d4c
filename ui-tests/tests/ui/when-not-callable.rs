use backstop::retry;

#[retry(when = 503)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
