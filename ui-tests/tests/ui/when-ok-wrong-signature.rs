use backstop::retry;

// `when_ok` is asked of the `Ok` value, a `u32`, not of the error.
#[retry(when_ok = |e: &std::io::Error| e.kind() == std::io::ErrorKind::TimedOut)]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
