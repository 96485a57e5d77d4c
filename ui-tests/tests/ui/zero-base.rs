use backstop::retry;

#[retry(base = 0ms)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
