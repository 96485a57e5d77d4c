/work/main/retry-runtime/target/loom/debug/deps/cfg_if-e9bade92b2a881c9.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/main/retry-runtime/target/loom/debug/deps/libcfg_if-e9bade92b2a881c9.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs:
