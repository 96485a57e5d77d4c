use backstop::retry;

#[retry(base = 0.1ns)]
fn below_a_nanosecond() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
