use backstop::retry;

// It answers a `Verdict` or a `bool`.
#[retry(when_ok = |n: &u32| *n)]
fn count() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
