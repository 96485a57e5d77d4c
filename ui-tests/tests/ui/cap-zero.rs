use backstop::retry;

#[retry(cap = 0ms)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
