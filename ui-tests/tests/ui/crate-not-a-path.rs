use backstop::retry;

#[retry(crate = "backstop")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
