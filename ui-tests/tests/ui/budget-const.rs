use std::time::Duration;

use backstop::{RetryBudget, retry};

// A `const` is copied at every use: each call would draw on a fresh budget.
const USERS: RetryBudget = RetryBudget::new(0.1, 10, Duration::from_secs(10));

#[retry(budget = USERS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

mod limits {
    pub const ORDERS: backstop::RetryBudget = backstop::RetryBudget::standard();
}

#[retry(budget = limits::ORDERS)]
fn order() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
