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

// More significant digits than a duration is read to.
#[retry(base = 1.0000000000000000000000000000000000000000001s)]
fn too_precise() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
