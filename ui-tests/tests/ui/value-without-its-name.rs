use backstop::retry;

#[retry(3)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(5s, base = 10ms)]
fn load() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(0)]
fn none_at_all() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry("fast")]
fn quoted() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
