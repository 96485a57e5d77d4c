use backstop::retry;

#[retry(budget = 0.1)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
