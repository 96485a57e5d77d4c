// `Retry::breaker` and `Retry::throttle` take a reference to a `static`
// breaker or throttle: a throttle given as a breaker, a breaker given
// through one reference too many, a breaker given as a throttle.
use std::time::Duration;

use backstop::limit::{AdaptiveThrottle, CircuitBreaker};
use backstop::{Policy, Retry};

static POLICY: Policy = Policy::new();
static ORDERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
static SHED: AdaptiveThrottle = AdaptiveThrottle::standard();
static BY_REF: &CircuitBreaker = &ORDERS;

fn main() {
    let _ = Retry::new(&POLICY).breaker(&SHED);
    let _ = Retry::new(&POLICY).breaker(&BY_REF);
    let _ = Retry::new(&POLICY).throttle(&ORDERS);
}
