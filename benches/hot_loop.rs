//! One case of `peers.rs` in a plain loop, for `perf` and `valgrind`:
//! criterion's medians move by more than a small change on a shared
//! machine, a loop's minimum over alternate runs and its instruction count
//! do not.
//!
//! ```sh
//! cargo bench --bench hot_loop --no-run   # then, with the binary it names:
//! taskset -c 1 target/release/deps/hot_loop-… sync        # ns per call
//! N=100000 valgrind --tool=cachegrind --cache-sim=no target/release/deps/hot_loop-… sync
//! ```
//!
//! Cases: `sync`, `async` and `fail` (three failures, then success) with
//! `#[retry]`, `window` (`sync` drawing on a windowed budget), `keyed`
//! and `keyed_host` (`sync` with `key = ` a number or a
//! host name, among 64), `call_async` (the closure form of `async`); `backon`, `backon_fail` and `tokio_retry2` beside them. `N`
//! calls (5,000,000 unless set; a tenth of that for the failing cases).
//! BENCHMARKS.md says how the figures were taken.

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

mod cases;
use cases::{
    backstop_async, backstop_call_async, backstop_flaky, backstop_sync, backstop_sync_keyed,
    backstop_sync_keyed_host, backstop_sync_window, flaky, op,
};

fn main() {
    // `cargo bench` passes `--bench`; the case is the first other argument.
    let Some(case) = std::env::args().skip(1).find(|arg| !arg.starts_with("--")) else {
        eprintln!(
            "usage: hot_loop sync|window|keyed|keyed_host|async|call_async|fail|backon|backon_fail|tokio_retry2"
        );
        return;
    };
    let n: u64 = std::env::var("N").map_or(5_000_000, |n| n.parse().expect("N: a number"));
    let calls = if case.ends_with("fail") { n / 10 } else { n };
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    };
    let started = Instant::now();
    match case.as_str() {
        "sync" => {
            for i in 0..calls {
                black_box(backstop_sync(black_box(i))).ok();
            }
        }
        "window" => {
            for i in 0..calls {
                black_box(backstop_sync_window(black_box(i))).ok();
            }
        }
        "keyed" => {
            for i in 0..calls {
                black_box(backstop_sync_keyed(black_box(i % 64), black_box(i))).ok();
            }
        }
        "keyed_host" => {
            let hosts: Vec<String> = (0..64).map(|h| format!("api-{h}.internal:443")).collect();
            for i in 0..calls {
                let host = &hosts[(i % 64) as usize];
                black_box(backstop_sync_keyed_host(black_box(host), black_box(i))).ok();
            }
        }
        "async" => runtime().block_on(async {
            for i in 0..calls {
                black_box(backstop_async(black_box(i)).await).ok();
            }
        }),
        "call_async" => runtime().block_on(async {
            for i in 0..calls {
                black_box(backstop_call_async(black_box(i)).await).ok();
            }
        }),
        "fail" => {
            for _ in 0..calls {
                black_box(backstop_flaky(&mut black_box(3))).ok();
            }
        }
        "backon" => {
            use backon::{BlockingRetryable, ExponentialBuilder};
            let policy = ExponentialBuilder::default()
                .with_jitter()
                .with_max_times(2);
            for i in 0..calls {
                black_box((|| op(black_box(i))).retry(policy).call()).ok();
            }
        }
        "backon_fail" => {
            use backon::{BlockingRetryable, ExponentialBuilder};
            let policy = ExponentialBuilder::default()
                .with_min_delay(Duration::ZERO)
                .with_jitter()
                .with_max_times(3);
            for _ in 0..calls {
                let mut failures = black_box(3);
                black_box((|| flaky(&mut failures)).retry(policy).call()).ok();
            }
        }
        "tokio_retry2" => runtime().block_on(async {
            use tokio_retry2::strategy::{ExponentialBackoff, jitter};
            use tokio_retry2::{Retry, RetryError};
            for i in 0..calls {
                let strategy = ExponentialBackoff::from_millis(100).map(jitter).take(2);
                let attempt = || async { op(black_box(i)).map_err(RetryError::transient) };
                black_box(Retry::spawn(strategy, attempt).await).ok();
            }
        }),
        other => {
            eprintln!("unknown case `{other}`");
            return;
        }
    }
    let per_call = started.elapsed() / u32::try_from(calls.max(1)).unwrap_or(u32::MAX);
    println!("{case}: {per_call:?} per call");
}
