use backstop::retry;

#[retry(base = 0.1ns)]
fn below_a_nanosecond() -> Result<(), std::io::Error> {
    Ok(())
}

// An `i32`'s smallest exponent, with a fraction: below a nanosecond, not a
// panic of the macro.
#[retry(deadline = 10.25e-2147483648ms)]
fn smallest_exponent() -> Result<(), std::io::Error> {
    Ok(())
}

// Below a nanosecond in options that would take zero silently.
#[retry(cap = 0.1ns, retry_after_max = 0.5ns)]
fn cap_and_retry_after_max() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(hedge = 0.1ns, idempotent)]
async fn hedge_below_a_nanosecond() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
