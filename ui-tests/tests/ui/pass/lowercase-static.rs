//! A `static` named in lowercase is reached as `self::name`.
#![allow(non_upper_case_globals)]

use std::time::Duration;

use backstop::{limit::WindowBudget, retry};

static users: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));

#[retry(budget = self::users)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    fetch().unwrap();
}
