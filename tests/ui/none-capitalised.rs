use backstop::retry;

#[retry(deadline = None, budget = None)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
