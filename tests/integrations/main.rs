//! The integrations, each behind its feature: configuration (`serde`),
//! HTTP statuses, reqwest, reqwest-middleware, the tower layer, tonic, and
//! real PostgreSQL and Redis servers. `cargo test --workspace` turns every
//! feature on; `cargo test -p backstop --features tower --test integrations`
//! runs the modules of the features given.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "serde")]
mod config;
#[cfg(all(
    feature = "redis",
    feature = "tokio-postgres",
    feature = "anyhow",
    feature = "deadpool",
    feature = "bb8"
))]
mod databases;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "reqwest")]
mod prelude;
#[cfg(feature = "reqwest")]
mod reqwest;
#[cfg(feature = "reqwest-blocking")]
mod reqwest_blocking;
#[cfg(feature = "reqwest-middleware")]
mod reqwest_middleware;
#[cfg(feature = "tonic")]
mod tonic;
#[cfg(feature = "tower")]
mod tower;
