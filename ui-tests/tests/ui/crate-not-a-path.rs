use backstop::retry;

#[retry(crate = "backstop")]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// Not a path in quotes either: no quotes to remove.
#[retry(crate = "my backstop")]
fn spaced() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
