//! backstop beside the peer crates, on the same operations.
//!
//! ```sh
//! cargo bench --bench peers                 # everything
//! cargo bench --bench peers -- success      # one group
//! ```
//!
//! Groups:
//!
//! - `success`: the first attempt succeeds. A direct call, `#[retry]` sync
//!   and async, and the same operation under backon, backoff and
//!   tokio-retry2, each with exponential backoff, jitter and three attempts,
//!   and under tower's `Retry` middleware (which leaves backoff to its
//!   policy), bare and with what `#[retry]` keeps: a retry budget
//!   (`TpsBudget`) and a time limit (`Timeout`).
//! - `fail_3x_then_ok`: three failures then success, with zero delays, so
//!   that only the cost of deciding is measured (no sleep).
//! - `budget`: one call recorded and one retry withdrawn, on one thread,
//!   against tower's `TpsBudget`; and two threads contending for one budget.
//! - `delay`: computing one jittered exponential delay, against backon's.
//!
//! BENCHMARKS.md has the figures and what they mean.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::io::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop::backoff::Rng;
use backstop::limit::{TokenBudget, WindowBudget};
use backstop::{Jitter, Policy};
use criterion::{BenchmarkId, Criterion, criterion_group};

mod cases;
use cases::{
    backstop_async, backstop_call_async, backstop_flaky, backstop_sync, backstop_sync_bare,
    backstop_sync_no_budget, flaky, op,
};

/// tower's retry middleware needs a policy: retry a retryable error up to
/// this many more times, at once (tower's `Retry` leaves backoff to the
/// policy, and a success never reaches it).
#[derive(Clone)]
struct TowerAttempts(u32);

impl tower::retry::Policy<u64, u64, Error> for TowerAttempts {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut u64, result: &mut Result<u64, Error>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &u64) -> Option<u64> {
        Some(*req)
    }
}

/// tower's retry middleware keeping what a `#[retry]` call keeps: a retry
/// budget (tower's `TpsBudget`: a success deposits, a retry withdraws), and
/// a time limit (tower's `Timeout` around the service).
#[derive(Clone)]
struct TowerBudgeted(Arc<tower::retry::budget::TpsBudget>);

impl tower::retry::Policy<u64, u64, tower::BoxError> for TowerBudgeted {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _: &mut u64,
        result: &mut Result<u64, tower::BoxError>,
    ) -> Option<Self::Future> {
        use tower::retry::budget::Budget;
        match result {
            Ok(_) => {
                self.0.deposit();
                None
            }
            Err(_) => self.0.withdraw().then(|| std::future::ready(())),
        }
    }

    fn clone_request(&mut self, req: &u64) -> Option<u64> {
        Some(*req)
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn success(c: &mut Criterion) {
    let mut g = c.benchmark_group("success");
    g.bench_function("direct call", |b| b.iter(|| op(black_box(1))));
    g.bench_function("backstop #[retry] sync", |b| {
        b.iter(|| backstop_sync(black_box(1)));
    });
    g.bench_function("backstop #[retry(budget = none)] sync", |b| {
        b.iter(|| backstop_sync_no_budget(black_box(1)));
    });
    g.bench_function(
        "backstop #[retry(deadline = none, budget = none)] sync",
        |b| {
            b.iter(|| backstop_sync_bare(black_box(1)));
        },
    );
    g.bench_function("backon sync", |b| {
        use backon::{BlockingRetryable, ExponentialBuilder};
        let policy = ExponentialBuilder::default()
            .with_jitter()
            .with_max_times(2);
        b.iter(|| (|| op(black_box(1))).retry(policy).call());
    });
    g.bench_function("backoff sync", |b| {
        b.iter(|| {
            backoff::retry(backoff::ExponentialBackoff::default(), || {
                op(black_box(1)).map_err(backoff::Error::transient)
            })
        });
    });
    let rt = current_thread();
    g.bench_function("direct call async", |b| {
        b.to_async(&rt).iter(|| async { op(black_box(1)) });
    });
    g.bench_function("backstop #[retry] async", |b| {
        b.to_async(&rt).iter(|| backstop_async(black_box(1)));
    });
    g.bench_function("backon async", |b| {
        use backon::{ExponentialBuilder, Retryable};
        let policy = ExponentialBuilder::default()
            .with_jitter()
            .with_max_times(2);
        b.to_async(&rt)
            .iter(|| (|| async { op(black_box(1)) }).retry(policy));
    });
    g.bench_function("tower Retry async", |b| {
        use tower::retry::Retry;
        use tower::{ServiceExt, service_fn};
        b.to_async(&rt).iter(|| {
            let service = service_fn(|x: u64| async move { op(x) });
            Retry::new(TowerAttempts(2), service).oneshot(black_box(1))
        });
    });
    let budget = TowerBudgeted(Arc::new(tower::retry::budget::TpsBudget::new(
        Duration::from_secs(10),
        10,
        0.2,
    )));
    g.bench_function("tower Retry + TpsBudget + Timeout async", |b| {
        use tower::retry::Retry;
        use tower::timeout::Timeout;
        use tower::{ServiceExt, service_fn};
        b.to_async(&rt).iter(|| {
            let service = service_fn(|x: u64| async move { op(x) });
            let service = Timeout::new(service, Duration::from_secs(30));
            Retry::new(budget.clone(), service).oneshot(black_box(1))
        });
    });
    g.bench_function("tokio-retry2 async", |b| {
        use tokio_retry2::strategy::{ExponentialBackoff, jitter};
        use tokio_retry2::{Retry, RetryError};
        b.to_async(&rt).iter(|| {
            let strategy = ExponentialBackoff::from_millis(100).map(jitter).take(2);
            Retry::spawn(strategy, || async {
                op(black_box(1)).map_err(RetryError::transient)
            })
        });
    });
    g.finish();
}

fn fail_then_ok(c: &mut Criterion) {
    let mut g = c.benchmark_group("fail_3x_then_ok");
    g.bench_function("backstop #[retry] sync", |b| {
        b.iter(|| backstop_flaky(&mut black_box(3)));
    });
    g.bench_function("backon sync", |b| {
        use backon::{BlockingRetryable, ExponentialBuilder};
        let policy = ExponentialBuilder::default()
            .with_min_delay(Duration::ZERO)
            .with_jitter()
            .with_max_times(3);
        b.iter(|| {
            let mut failures = black_box(3);
            (|| flaky(&mut failures)).retry(policy).call()
        });
    });
    g.bench_function("backoff sync", |b| {
        b.iter(|| {
            let mut failures = black_box(3);
            let schedule = backoff::ExponentialBackoffBuilder::new()
                .with_initial_interval(Duration::ZERO)
                .build();
            backoff::retry(schedule, || {
                flaky(&mut failures).map_err(backoff::Error::transient)
            })
        });
    });
    g.finish();
}

/// Calls and retries per thread in `budget_2_threads`.
const OPS: u32 = 1_000_000;

fn budget(c: &mut Criterion) {
    use tower::retry::budget::{Budget, TpsBudget};
    let mut g = c.benchmark_group("budget");
    let ours = WindowBudget::new(0.1, 10, Duration::from_secs(10));
    g.bench_function("backstop call + retry", |b| {
        b.iter(|| {
            let now = Instant::now();
            ours.record_call(now);
            black_box(ours.try_withdraw(now))
        });
    });
    let tower = TpsBudget::new(Duration::from_secs(10), 10, 0.1);
    g.bench_function("tower call + retry", |b| {
        b.iter(|| {
            tower.deposit();
            black_box(tower.withdraw())
        });
    });
    // The default: a success with the bucket full reads one word.
    let full = TokenBudget::standard();
    let now = Instant::now();
    g.bench_function("backstop throttle: answer, bucket full", |b| {
        b.iter(|| black_box(&full).answered(black_box(now)));
    });
    // A failure and an answer: two compare-and-swaps.
    let busy = TokenBudget::standard();
    g.bench_function("backstop throttle: failure + answer", |b| {
        b.iter(|| {
            let now = Instant::now();
            black_box(busy.failed(now));
            busy.answered(now);
        });
    });
    g.finish();

    // Two threads, one budget, a million calls and retries each: the
    // figure is the wall time of the pair.
    let mut g = c.benchmark_group("budget_2_threads");
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("backstop", OPS), |b| {
        b.iter(|| {
            let budget = Arc::new(WindowBudget::new(0.1, 10, Duration::from_secs(10)));
            contend(|| {
                let budget = budget.clone();
                move || {
                    for _ in 0..OPS {
                        let now = Instant::now();
                        budget.record_call(now);
                        black_box(budget.try_withdraw(now));
                    }
                }
            });
        });
    });
    g.bench_function(BenchmarkId::new("backstop throttle", OPS), |b| {
        b.iter(|| {
            let throttle = Arc::new(TokenBudget::standard());
            contend(|| {
                let throttle = throttle.clone();
                move || {
                    for _ in 0..OPS {
                        let now = Instant::now();
                        black_box(throttle.failed(now));
                        throttle.answered(now);
                    }
                }
            });
        });
    });
    g.bench_function(BenchmarkId::new("tower", OPS), |b| {
        b.iter(|| {
            let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.1));
            contend(|| {
                let budget = budget.clone();
                move || {
                    for _ in 0..OPS {
                        budget.deposit();
                        black_box(budget.withdraw());
                    }
                }
            });
        });
    });
    g.finish();
}

/// Runs two copies of a job on two threads at once.
fn contend<F: FnOnce() + Send + 'static>(mut job: impl FnMut() -> F) {
    let threads: Vec<_> = (0..2).map(|_| std::thread::spawn(job())).collect();
    for t in threads {
        t.join().expect("no panic");
    }
}

fn delay(c: &mut Criterion) {
    let mut g = c.benchmark_group("delay");
    let policy = Policy::new().jitter(Jitter::Full);
    let mut rng = Rng::new();
    let mut n = 0u32;
    g.bench_function("backstop Policy::delay", |b| {
        b.iter(|| {
            n = (n + 1) % 8;
            policy.delay(black_box(n), Duration::ZERO, &mut rng)
        });
    });
    g.bench_function("backon ExponentialBackoff::next", |b| {
        use backon::{BackoffBuilder, ExponentialBuilder};
        let builder = ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(20))
            .without_max_times();
        let mut backoff = builder.build();
        let mut n = 0u32;
        b.iter(|| {
            // Restart every 8 delays, as `Policy::delay` cycles its retry
            // number, so both stay below the cap.
            n = (n + 1) % 8;
            if n == 0 {
                backoff = builder.build();
            }
            backoff.next()
        });
    });
    g.finish();
}

/// Memory, not time: the size of one call in flight (the future an async
/// call is, or the state a retry loop keeps), printed before the timings.
fn sizes() {
    use std::mem::size_of_val;
    let rt = current_thread();
    let ours = backstop_async(1);
    let closure = backstop_call_async(1);
    let backon = {
        use backon::{ExponentialBuilder, Retryable};
        (|| async { op(black_box(1)) }).retry(ExponentialBuilder::default().with_jitter())
    };
    let tokio_retry2 = {
        use tokio_retry2::strategy::{ExponentialBackoff, jitter};
        use tokio_retry2::{Retry, RetryError};
        let strategy = ExponentialBackoff::from_millis(100).map(jitter).take(2);
        Retry::spawn(strategy, || async {
            op(black_box(1)).map_err(RetryError::transient)
        })
    };
    println!(
        "future of one async call, bytes: backstop #[retry] {}, backstop call_async {}, backon {}, tokio-retry2 {}",
        size_of_val(&ours),
        size_of_val(&closure),
        size_of_val(&backon),
        size_of_val(&tokio_retry2),
    );
    rt.block_on(async {
        let _ = ours.await;
        let _ = closure.await;
        let _ = backon.await;
        let _ = tokio_retry2.await;
    });
    println!(
        "WindowBudget {} bytes (no heap), tower TpsBudget {} bytes (and a boxed slice of slots)",
        size_of::<WindowBudget>(),
        size_of::<tower::retry::budget::TpsBudget>(),
    );
}

/// The per-call random stream: `rand`'s `SmallRng` (what `Rng` wraps)
/// beside the 8-byte wyrand generator the runtime once hand-wrote, each
/// seeded and drawn from once, as a call's first retry does.
fn rng(c: &mut Criterion) {
    let mut g = c.benchmark_group("rng");
    g.bench_function("backstop Rng::new + next_u64 (SmallRng)", |b| {
        b.iter(|| Rng::new().next_u64());
    });
    g.bench_function("wyrand, as the runtime once did: new + next_u64", |b| {
        use std::cell::Cell;
        thread_local! {
            static SEEDS: Cell<u64> = const { Cell::new(0x5eed) };
        }
        b.iter(|| {
            // The per-thread seed sequence, the SplitMix64 finaliser, one draw.
            let counter = SEEDS.with(|s| {
                let cur = s.get();
                s.set(cur.wrapping_add(0x9e37_79b9_7f4a_7c15) | 1);
                cur
            });
            let mut z = counter;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let state = (z ^ (z >> 31)).wrapping_add(0xa076_1d64_78bd_642f);
            let t = u128::from(state) * u128::from(state ^ 0xe703_7ed1_a0b4_28db);
            ((t >> 64) as u64) ^ (t as u64)
        });
    });
    g.finish();
}

/// The clock every sync call reads: `SystemClock` (which follows a
/// `testing::VirtualTime` when one is installed on the thread) beside the
/// clocks it reads underneath.
fn clock(c: &mut Criterion) {
    use backstop::time::{Clock, SystemClock};
    let mut g = c.benchmark_group("clock");
    g.bench_function("Instant::now", |b| b.iter(Instant::now));
    g.bench_function("backstop SystemClock::now", |b| {
        b.iter(|| SystemClock.now());
    });
    g.bench_function("backstop SystemClock::start_now (coarse)", |b| {
        b.iter(|| SystemClock.start_now());
    });
    g.finish();
}

criterion_group!(benches, success, fail_then_ok, budget, delay, rng, clock);

fn main() {
    sizes();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
