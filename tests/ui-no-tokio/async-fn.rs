use backstop::retry;

#[retry(attempts = 2)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = fetch();
}
