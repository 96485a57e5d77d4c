use backstop::retry;

// A classifier named by a path, written for another error type.
fn by_message(message: &String) -> bool {
    message.is_empty()
}

#[retry(when = by_message)]
fn get() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
