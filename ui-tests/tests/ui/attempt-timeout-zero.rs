use backstop::retry;

#[retry(attempt_timeout = 0ms)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
