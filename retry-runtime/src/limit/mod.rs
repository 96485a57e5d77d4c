//! The limiters a call's retries draw on, each lock-free and shareable as
//! a `static`: the retry throttle, the windowed budget, the adaptive
//! throttle and the circuit breaker.

pub mod adaptive;
pub mod breaker;
pub mod budget;
pub mod throttle;
