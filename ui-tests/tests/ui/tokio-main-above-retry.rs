use backstop::retry;

// `#[tokio::test]` rewrites a function the same way (and adds `#[test]`).
#[tokio::main(flavor = "current_thread")]
#[retry(attempts = 2)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = fetch();
}
