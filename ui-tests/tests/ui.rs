//! Compile-time rules of `#[retry]`: every misuse is a clear error on the
//! right token (`tests/ui/*.rs`, with the reviewed `.stderr`), and every
//! supported shape compiles (`tests/ui/pass/*.rs`). The cases build against
//! backstop with the features `tower` and `tracing` (this package's
//! dependencies), whatever else the workspace turns on.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/*.rs");
}
