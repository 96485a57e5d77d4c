use backstop::{Policy, retry};

static POLICY: Policy = Policy::new();

// Under a policy (whose attempt timeout the loop applies when the error
// type can hold one): still said once, at the return type.
#[retry(policy = POLICY)]
async fn fetch() -> u32 {
    1
}

fn main() {}
