use backstop::retry;

#[retry(atempts = 3)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
