use backstop::retry;

// A duration with its unit is the option's value itself.
#[retry(attempt_timeout = Some(2s), idempotent)]
async fn in_some() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[retry(cap = Option::Some(1.5s))]
fn in_a_full_some() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
