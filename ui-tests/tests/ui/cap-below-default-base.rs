use backstop::retry;

#[retry(cap = 50ms)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
