use backstop::limit::{AdaptiveThrottle, Keyed, TokenBudget};

// A token budget of no tokens would never let a retry go.
static BUDGET: TokenBudget = TokenBudget::new(0, 0.1);

// A throttle that sheds at a ratio of requests to accepts below 1 would
// shed healthy calls.
static THROTTLE: AdaptiveThrottle = AdaptiveThrottle::new(0.5, std::time::Duration::from_secs(2));

// A table with no room keeps no key.
static TABLE: Keyed<TokenBudget> = Keyed::with_capacity(TokenBudget::standard(), 0);

fn main() {
    let _ = (&BUDGET, &THROTTLE, &TABLE);
}
