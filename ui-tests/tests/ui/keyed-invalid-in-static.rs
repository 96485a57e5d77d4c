use backstop::limit::{Keyed, TokenBudget};

// A table with no room keeps no key.
static TABLE: Keyed<TokenBudget> = Keyed::with_capacity(TokenBudget::standard(), 0);

fn main() {
    let _ = &TABLE;
}
