use backstop::{Policy, retry};

static NOT_A_BUDGET: Policy = Policy::new();

#[retry(budget = NOT_A_BUDGET)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
