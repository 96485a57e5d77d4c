use std::time::Duration;

use backstop::{limit::{CircuitBreaker, WindowBudget}, retry};

fn main() {
    // A variable would be a new budget (or breaker) at every call.
    let local = WindowBudget::new(0.1, 10, Duration::from_secs(10));

    #[retry(budget = local)]
    fn fetch() -> Result<(), std::io::Error> {
        Ok(())
    }

    let breaker = CircuitBreaker::new(5, Duration::from_secs(30));

    #[retry(breaker = breaker)]
    fn order() -> Result<(), std::io::Error> {
        Ok(())
    }

    let _ = (local, breaker);
}
