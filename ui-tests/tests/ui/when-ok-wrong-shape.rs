use backstop::{Verdict, retry};

// `when_ok` is asked of the `Ok` value, a `u32`, not of the error.
#[retry(when_ok = |e: &std::io::Error| e.kind() == std::io::ErrorKind::TimedOut)]
fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

// It answers a `Verdict` or a `bool`.
#[retry(when_ok = |n: &u32| *n)]
fn count() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn keep(_: Verdict) {}

fn main() {
    keep(Verdict::Retry);
}
