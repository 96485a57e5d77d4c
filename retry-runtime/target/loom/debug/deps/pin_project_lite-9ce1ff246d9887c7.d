/work/main/retry-runtime/target/loom/debug/deps/pin_project_lite-9ce1ff246d9887c7.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs

/work/main/retry-runtime/target/loom/debug/deps/libpin_project_lite-9ce1ff246d9887c7.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs:
