use backstop::{RetryEvent, retry};

// The hook takes the event of another function: its `T` is `u32`.
#[retry(on_retry = |e: &RetryEvent<'_, String, std::io::Error>| eprintln!("{}", e.attempt()))]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
