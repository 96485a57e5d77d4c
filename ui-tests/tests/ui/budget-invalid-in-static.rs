use std::time::Duration;

use backstop::limit::WindowBudget;

// A ratio above 1 would let every call retry more than once.
static BUDGET: WindowBudget = WindowBudget::new(1.5, 10, Duration::from_secs(10));

fn main() {
    let _ = &BUDGET;
}
