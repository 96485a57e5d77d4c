//! loom models of the lock-free limiters: every interleaving of a few
//! threads on one windowed budget, breaker, token budget, adaptive
//! throttle and table per key. Built only with `--cfg loom` (see `.ci/run`, which runs each module with its own
//! `LOOM_MAX_PREEMPTIONS`):
//! `RUSTFLAGS="--cfg loom" cargo test -p backstop-runtime --no-default-features --release --test loom -- window::`.
#![cfg(loom)]

mod adaptive;
mod breaker;
mod keyed;
mod token;
mod window;
