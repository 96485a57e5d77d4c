/work/main/retry-runtime/target/loom/debug/deps/scoped_tls-3f995a28878f2997.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scoped-tls-1.0.1/src/lib.rs

/work/main/retry-runtime/target/loom/debug/deps/libscoped_tls-3f995a28878f2997.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scoped-tls-1.0.1/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scoped-tls-1.0.1/src/lib.rs:
