use backstop::retry;

#[retry(base = 100ms, cap = 5s, base = 200ms)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
