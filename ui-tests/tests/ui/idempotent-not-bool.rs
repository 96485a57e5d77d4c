use backstop::retry;

#[retry(idempotent = yes)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
