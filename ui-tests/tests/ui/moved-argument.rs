use backstop::retry;

fn consume(_: String) -> Result<(), std::io::Error> {
    Ok(())
}

#[retry]
fn send(body: String) -> Result<(), std::io::Error> {
    consume(body)
}

fn main() {}
