use backstop::retry;

#[retry(deadline = 99999999999999999999h)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
