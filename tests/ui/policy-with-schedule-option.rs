use backstop::{Policy, retry};

static POLICY: Policy = Policy::new();

#[retry(policy = POLICY, attempts = 5, jitter = equal)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
