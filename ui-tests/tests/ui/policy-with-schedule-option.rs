use backstop::{Policy, retry};

static POLICY: Policy = Policy::new();

#[retry(policy = POLICY, attempts = 5, jitter = equal)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// The attempt timeout is the policy's too (`Policy::attempt_timeout`).
#[retry(policy = POLICY, attempt_timeout = 2s)]
async fn load() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
