use backstop::limit::TokenBudget;

// A token budget of no tokens would never let a retry go.
static BUDGET: TokenBudget = TokenBudget::new(0, 0.1);

fn main() {
    let _ = &BUDGET;
}
