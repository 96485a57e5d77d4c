use backstop::retry;

#[retry(when = |_: &std::io::Error| 5)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
