//! The compile-time rules of `#[retry]`: see `tests/ui.rs`. Nothing here.
