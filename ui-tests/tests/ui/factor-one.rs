use backstop::retry;

// The boundary: a factor of exactly 1 would never grow the delay.
#[retry(factor = 1)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// Above 1 as written, 1 as an `f64`.
#[retry(factor = 1.0000000000000000000001)]
fn barely() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
