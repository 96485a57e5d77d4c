use std::time::Duration;

use backstop::{limit::WindowBudget, retry};

// A `const` is copied at every use: each call would draw on a fresh budget.
const USERS: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));

#[retry(budget = USERS)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

mod limits {
    pub const ORDERS: backstop::limit::WindowBudget = backstop::limit::WindowBudget::standard();
}

#[retry(budget = limits::ORDERS)]
fn order() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
