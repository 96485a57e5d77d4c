use backstop::retry;

#[retry(deadline)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
