//! `#[retry]` and the closure runner: the retry loop, its options and its
//! protections, in one test binary (a module per concern).
//! Run with `cargo test -p backstop --test attribute`.

#[path = "../support/mod.rs"]
mod support;

mod adaptive;
mod attempt_timeout;
mod attribute_async;
mod attribute_order;
mod attribute_sync;
mod breaker;
mod closures;
mod composition;
mod defaults;
mod faults;
mod foreign_errors;
mod hedging;
mod hooks;
pub mod pedantic;
mod peer_defects;
mod restart;
mod send;
mod storm;
