use backstop::{RetryEvent, retry};

// The hook takes the event of another function: its `T` is `u32`.
#[retry(on_retry = |e: &RetryEvent<'_, String, std::io::Error>| eprintln!("{}", e.attempt()))]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}

// The same for `on_give_up`: its `E` is `std::io::Error`.
#[retry(on_give_up = |e: &backstop::GiveUpEvent<'_, u32, String>| eprintln!("{:?}", e.reason()))]
fn read() -> Result<u32, std::io::Error> {
    Ok(1)
}
