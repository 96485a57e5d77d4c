use backstop::retry;

#[retry(attempts = "3")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// Not a number in quotes either: no quotes to remove.
#[retry(attempts = "NaN")]
fn many() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
