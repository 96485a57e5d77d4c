//! The runtime on its own: backoff and jitter, the attempt state machine
//! and its properties, the token budget, windowed budget, adaptive
//! throttle and breaker, hedging, the async runner, the module layering.
//! Run with `cargo test -p backstop-runtime --test runtime`.

mod adaptive;
mod async_runner;
mod breaker;
mod hedge_delay;
mod hedging;
mod jitter;
mod keyed;
mod layers;
mod properties;
mod state;
mod token;
mod window;
