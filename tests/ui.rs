//! Compile-time rules of `#[retry]`: every misuse is a clear error on the
//! right token (`tests/ui/*.rs`, with the reviewed `.stderr`), and every
//! supported shape compiles (`tests/ui/pass/*.rs`).

// The committed `.stderr` files are what rustc says with every feature on,
// as `cargo test --workspace` builds backstop (a name such as `Elapsed` is
// printed with its path when a feature brings another of that name).
#[test]
#[cfg_attr(
    not(all(
        feature = "tracing",
        feature = "metrics",
        feature = "anyhow",
        feature = "http",
        feature = "serde",
        feature = "reqwest",
        feature = "tower",
        feature = "reqwest-middleware",
        feature = "tonic",
        feature = "async-io",
        feature = "custom-timer",
        feature = "redis",
        feature = "tokio-postgres",
        feature = "deadpool",
        feature = "bb8"
    )),
    ignore = "the snapshots are taken with every feature: run `cargo test --workspace`"
)]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/*.rs");
}
