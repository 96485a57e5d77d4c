//! The limiters a call's retries draw on, each lock-free and shareable as
//! a `static`: the token budget, the windowed budget, the adaptive
//! throttle and the circuit breaker.
//!
//! Each is named by its option: `budget = X` takes a [`TokenBudget`] or a
//! [`WindowBudget`], `throttle = X` an [`AdaptiveThrottle`], `breaker = X` a
//! [`CircuitBreaker`]; the builder's methods have the same names.
//!
//! # The token budget (the default)
//!
//! Retries stop while failure is systemic, and resume as answers come
//! back. A budget funded per call is still funded while every call fails: during
//! an outage it keeps adding its share of retries to a dependency that has
//! no headroom, and the savings of a healthy window are spent in a burst
//! when the outage starts. The token budget is funded by *answers*
//! instead, as gRPC's retry throttling (gRFC A6), the AWS SDKs' retry quota
//! and Google Cloud's retry throttler are: a token bucket that every
//! retryable failure debits and every answer credits, which stops retries
//! within a handful of failures and lets them resume after a few dozen
//! answers.
//!
//! # The windowed budget
//!
//! Retries as a fraction of calls. Backoff bounds what one client sends; a budget bounds what the fleet
//! sends. When a dependency is down, every call fails and every call wants
//! to retry: without a budget that multiplies the load on the one service
//! least able to take it (a retry storm). With a budget of 10%, the worst
//! case is 1.1× normal traffic plus the reserve, however long the outage
//! lasts (the reserve of 10 retries a second dominates below about 100
//! calls a second: 2.92× the calls at 5 a second).
//!
//! # The adaptive throttle
//!
//! Google SRE's client-side throttling ("Handling Overload", *Site
//! Reliability Engineering*, ch. 21). A token budget stops the *retries* when failure is systemic; the
//! first attempts still go out, and a dependency that is drowning keeps
//! getting the whole offered load. The adaptive throttle sheds attempts
//! themselves, locally, in proportion to how many the dependency has been
//! rejecting: each client counts its `requests` and the `accepts` among
//! them over a sliding window, and rejects a new attempt with probability
//! `max(0, (requests − K × accepts) / (requests + 1))`. With healthy
//! traffic `requests ≤ K × accepts` and the probability is exactly 0.
//!
//! # The circuit breaker
//!
//! Fail fast while a dependency is known to be down. A budget limits how much retrying adds to an outage; a breaker stops
//! the calls themselves. After `failure_threshold` consecutive retryable
//! failures it opens, and calls fail at once with [`CircuitOpen`] without
//! touching the dependency, which gets room to recover. After `cooldown`
//! one call, the probe, is let through: its success closes the breaker,
//! its failure opens it for another cooldown ([`CircuitBreaker::growing`]:
//! each longer than the last, up to a longest; [`CircuitBreaker::trials`]:
//! several trials, all to succeed). [`CircuitBreaker::ratio`]
//! opens on a share of failed calls over a sliding window instead, once it
//! saw a minimum throughput. An operator can hold it open
//! ([`CircuitBreaker::hold_open`], a dependency down for maintenance) and
//! close it ([`CircuitBreaker::reset`]); [`CircuitBreaker::state`] tells
//! where it stands.

//! # Per key
//!
//! One instance protects every call that names it. Where calls go to
//! several destinations (hosts, shards, tenants), one that goes down would
//! drain the budget, or open the breaker, of all of them: a [`Keyed`]
//! table keeps an instance per key instead (Envoy's per-cluster circuit
//! breaking, gRPC's throttling per channel), and the call's key picks it
//! (`key = expr`, [`Retry::key`](crate::Retry::key); the tower layer and
//! the middleware key by destination).

pub(crate) mod adaptive;
pub(crate) mod breaker;
pub(crate) mod isolation;
pub(crate) mod keyed;
pub(crate) mod names;
pub(crate) mod token;
pub(crate) mod window;

pub use adaptive::{AdaptiveThrottle, Throttled};
pub use breaker::{BreakerChange, BreakerState, ChangeReason, CircuitBreaker, CircuitOpen, Permit};
pub use keyed::{Destination, Keyed, PerKey};
#[cfg(feature = "tower")]
pub(crate) use token::OwnBudget;
pub use token::TokenBudget;
pub use window::{BudgetStats, WindowBudget};

/// What a call's retries draw on: a [`TokenBudget`] (the default of
/// `#[retry]`: retries stop while failure is systemic) or a windowed
/// [`WindowBudget`] (retries at most a fraction of the calls of a window).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{BudgetRef, TokenBudget, WindowBudget};
///
/// static TOKENS: TokenBudget = TokenBudget::standard();
/// static WINDOW: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));
/// assert!(matches!(BudgetRef::from(&TOKENS), BudgetRef::Token(_)));
/// assert!(matches!(BudgetRef::from(&WINDOW), BudgetRef::Window(_)));
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum BudgetRef<'a> {
    /// A token bucket debited by failures, credited by answers.
    Token(&'a TokenBudget),
    /// Retries as a fraction of the calls of a sliding window.
    Window(&'a WindowBudget),
}

impl<'a> From<&'a TokenBudget> for BudgetRef<'a> {
    fn from(throttle: &'a TokenBudget) -> Self {
        Self::Token(throttle)
    }
}

impl<'a> From<&'a WindowBudget> for BudgetRef<'a> {
    fn from(budget: &'a WindowBudget) -> Self {
        Self::Window(budget)
    }
}

impl BudgetRef<'_> {
    /// The very same budget (by address).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{BudgetRef, TokenBudget};
    /// static USERS: TokenBudget = TokenBudget::standard();
    /// static ORDERS: TokenBudget = TokenBudget::standard();
    /// assert!(BudgetRef::from(&USERS).same_as(&BudgetRef::from(&USERS)));
    /// assert!(!BudgetRef::from(&USERS).same_as(&BudgetRef::from(&ORDERS)), "alike, not the same");
    /// ```
    pub fn same_as(&self, other: &BudgetRef<'_>) -> bool {
        match (self, other) {
            (Self::Token(a), BudgetRef::Token(b)) => std::ptr::eq(*a, *b),
            (Self::Window(a), BudgetRef::Window(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}
