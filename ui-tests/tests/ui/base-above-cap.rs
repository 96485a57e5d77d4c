use backstop::retry;

#[retry(base = 10s, cap = 2s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
