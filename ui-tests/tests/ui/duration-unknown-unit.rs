use backstop::retry;

#[retry(deadline = 10secs)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
