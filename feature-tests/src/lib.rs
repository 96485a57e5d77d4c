//! Turns every optional feature of `backstop` on when the whole workspace
//! is tested: see this package's `Cargo.toml`. It has no code of its own.
