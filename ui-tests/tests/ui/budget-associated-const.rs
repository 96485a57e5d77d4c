use std::time::Duration;

use backstop::{limit::WindowBudget, retry};

struct Users;

impl Users {
    const BUDGET: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));

    #[retry(budget = Self::BUDGET)]
    fn fetch(&self) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {}
