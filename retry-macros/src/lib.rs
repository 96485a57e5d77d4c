//! The `#[retry]` attribute of [`backstop`](https://docs.rs/backstop).
//!
//! Not written yet: this crate is a skeleton that the attribute (issue 3)
//! fills in. Until then, use `backstop::call` and `backstop::call_async`.
#![deny(missing_docs)]
