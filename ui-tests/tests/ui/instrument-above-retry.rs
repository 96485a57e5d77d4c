use backstop::retry;

#[tracing::instrument]
#[retry(attempts = 2)]
fn send(body: String) -> Result<usize, std::io::Error> {
    Ok(body.len())
}

fn main() {}
