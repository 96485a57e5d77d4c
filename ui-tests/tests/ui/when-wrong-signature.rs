use backstop::retry;

#[retry(when = |e: &String| e.is_empty())]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
