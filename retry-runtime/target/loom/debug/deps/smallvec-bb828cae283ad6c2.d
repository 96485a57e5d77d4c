/work/main/retry-runtime/target/loom/debug/deps/smallvec-bb828cae283ad6c2.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/work/main/retry-runtime/target/loom/debug/deps/libsmallvec-bb828cae283ad6c2.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs:
