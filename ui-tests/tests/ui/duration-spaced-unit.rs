use backstop::retry;

#[retry(base = 10 ms, cap = 2.5 s)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
