//! Without a timer feature, an async `#[retry]` fn, and `call_async`, are one clear error
//! naming the features. Run with
//! `cargo test -p backstop --no-default-features --test ui_no_tokio`.
#![cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]

#[test]
fn ui_without_tokio() {
    trybuild::TestCases::new().compile_fail("tests/ui-no-tokio/*.rs");
}
