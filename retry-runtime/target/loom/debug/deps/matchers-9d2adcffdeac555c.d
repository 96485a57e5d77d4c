/work/main/retry-runtime/target/loom/debug/deps/matchers-9d2adcffdeac555c.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/matchers-0.2.0/src/lib.rs

/work/main/retry-runtime/target/loom/debug/deps/libmatchers-9d2adcffdeac555c.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/matchers-0.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/matchers-0.2.0/src/lib.rs:
