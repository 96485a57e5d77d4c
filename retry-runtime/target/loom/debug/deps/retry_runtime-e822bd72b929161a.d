/work/main/retry-runtime/target/loom/debug/deps/retry_runtime-e822bd72b929161a.d: retry-runtime/src/lib.rs retry-runtime/src/sync.rs retry-runtime/src/classify/mod.rs retry-runtime/src/classify/clients.rs retry-runtime/src/limit/mod.rs retry-runtime/src/limit/adaptive.rs retry-runtime/src/limit/breaker.rs retry-runtime/src/limit/budget.rs retry-runtime/src/limit/throttle.rs retry-runtime/src/macro_support.rs retry-runtime/src/run/mod.rs retry-runtime/src/run/context.rs retry-runtime/src/run/observe.rs retry-runtime/src/state/mod.rs retry-runtime/src/state/backoff.rs retry-runtime/src/state/policy.rs retry-runtime/src/state/vocabulary.rs retry-runtime/src/state/first.rs retry-runtime/src/testing/mod.rs retry-runtime/src/testing/isolation.rs retry-runtime/src/time/mod.rs retry-runtime/src/time/clock.rs retry-runtime/src/time/timer.rs retry-runtime/src/time/units.rs retry-runtime/src/time/virtual_time.rs

/work/main/retry-runtime/target/loom/debug/deps/libretry_runtime-e822bd72b929161a.rmeta: retry-runtime/src/lib.rs retry-runtime/src/sync.rs retry-runtime/src/classify/mod.rs retry-runtime/src/classify/clients.rs retry-runtime/src/limit/mod.rs retry-runtime/src/limit/adaptive.rs retry-runtime/src/limit/breaker.rs retry-runtime/src/limit/budget.rs retry-runtime/src/limit/throttle.rs retry-runtime/src/macro_support.rs retry-runtime/src/run/mod.rs retry-runtime/src/run/context.rs retry-runtime/src/run/observe.rs retry-runtime/src/state/mod.rs retry-runtime/src/state/backoff.rs retry-runtime/src/state/policy.rs retry-runtime/src/state/vocabulary.rs retry-runtime/src/state/first.rs retry-runtime/src/testing/mod.rs retry-runtime/src/testing/isolation.rs retry-runtime/src/time/mod.rs retry-runtime/src/time/clock.rs retry-runtime/src/time/timer.rs retry-runtime/src/time/units.rs retry-runtime/src/time/virtual_time.rs

retry-runtime/src/lib.rs:
retry-runtime/src/sync.rs:
retry-runtime/src/classify/mod.rs:
retry-runtime/src/classify/clients.rs:
retry-runtime/src/limit/mod.rs:
retry-runtime/src/limit/adaptive.rs:
retry-runtime/src/limit/breaker.rs:
retry-runtime/src/limit/budget.rs:
retry-runtime/src/limit/throttle.rs:
retry-runtime/src/macro_support.rs:
retry-runtime/src/run/mod.rs:
retry-runtime/src/run/context.rs:
retry-runtime/src/run/observe.rs:
retry-runtime/src/state/mod.rs:
retry-runtime/src/state/backoff.rs:
retry-runtime/src/state/policy.rs:
retry-runtime/src/state/vocabulary.rs:
retry-runtime/src/state/first.rs:
retry-runtime/src/testing/mod.rs:
retry-runtime/src/testing/isolation.rs:
retry-runtime/src/time/mod.rs:
retry-runtime/src/time/clock.rs:
retry-runtime/src/time/timer.rs:
retry-runtime/src/time/units.rs:
retry-runtime/src/time/virtual_time.rs:
