use backstop::retry;

// `timeout` elsewhere means either limit: both are named.
#[retry(timeout = 2s)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
