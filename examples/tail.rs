//! Tail latency, and the hedged requests that cut it.
//!
//! ```sh
//! cargo run --release --example tail
//! cargo run --release --example tail -- --seed 7
//! ```
//!
//! Client tasks (tokio, in paused virtual time) call one dependency
//! through a real `#[retry]` function. The dependency is fast most of the
//! time and sometimes very slow, each request on its own (a mixture
//! model, stated here): 98% of requests take 2 ms plus an exponential
//! delay of mean 3 ms; 2% take twenty times as long (a garbage collection,
//! a busy disk, a queue behind a large request). Latencies are
//! independent: a hedge of a slow request is as likely to be fast as any
//! request, and hedges add no queueing (a server with capacity to spare).
//!
//! The same seeded traffic runs four times: without hedging; with a hedge
//! after a fixed 10 ms (as in "The Tail at Scale"); with a hedge after the
//! function's own 95th percentile (`hedge = p95`, adaptive); and with that
//! adaptive hedge under a retry budget with little in it (hedges are
//! granted as retries are, here at most 0.5% of calls). Each prints the
//! latency percentiles and the load (requests sent per call).

use std::io::{Error, ErrorKind};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::backoff::Rng;
use backstop::limit::WindowBudget;
use backstop::retry;
use tokio::time::{Instant, sleep};

/// Calls per scenario: enough for a steady 99.9th percentile.
const CALLS: usize = 60_000;
/// Client tasks calling at once.
const CLIENTS: usize = 100;

/// The dependency: what each request sent to it costs, and how many were
/// sent.
struct Dependency {
    rng: Mutex<Rng>,
    sent: AtomicU64,
}

impl Dependency {
    fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(Rng::seeded(seed)),
            sent: AtomicU64::new(0),
        }
    }

    /// One request: 2 ms plus an exponential of mean 3 ms, twenty times
    /// that for 2% of requests.
    async fn serve(&self) -> Result<(), Error> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let (slow, u) = {
            let mut rng = self.rng.lock().map_err(|_| Error::from(ErrorKind::Other))?;
            (rng.next_f64() < 0.02, rng.next_f64())
        };
        let fast = 2.0 - 3.0 * (1.0 - u).ln();
        let ms = if slow { 20.0 * fast } else { fast };
        sleep(Duration::from_secs_f64(ms / 1e3)).await;
        Ok(())
    }
}

#[retry(idempotent)]
async fn plain(dependency: &Dependency) -> Result<(), Error> {
    dependency.serve().await
}

#[retry(idempotent, hedge = 10ms)]
async fn fixed(dependency: &Dependency) -> Result<(), Error> {
    dependency.serve().await
}

#[retry(idempotent, hedge = p95)]
async fn adaptive(dependency: &Dependency) -> Result<(), Error> {
    dependency.serve().await
}

/// A budget with little in it: retries and hedges at most 0.5% of calls.
static SCARCE: WindowBudget = WindowBudget::new(0.005, 0, Duration::from_secs(10));

#[retry(idempotent, hedge = p95, budget = SCARCE)]
async fn adaptive_scarce(dependency: &Dependency) -> Result<(), Error> {
    dependency.serve().await
}

#[derive(Clone, Copy)]
enum Scenario {
    Plain,
    Fixed,
    Adaptive,
    AdaptiveScarce,
}

impl Scenario {
    const ALL: [Self; 4] = [
        Self::Plain,
        Self::Fixed,
        Self::Adaptive,
        Self::AdaptiveScarce,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "no hedging",
            Self::Fixed => "hedge = 10ms",
            Self::Adaptive => "hedge = p95",
            Self::AdaptiveScarce => "hedge = p95, budget 0.5%",
        }
    }

    async fn call(self, dependency: &Dependency) -> Result<(), Error> {
        match self {
            Self::Plain => plain(dependency).await,
            Self::Fixed => fixed(dependency).await,
            Self::Adaptive => adaptive(dependency).await,
            Self::AdaptiveScarce => adaptive_scarce(dependency).await,
        }
    }
}

/// What one scenario measured.
struct Report {
    p50: Duration,
    p99: Duration,
    p999: Duration,
    load: f64,
}

fn run(scenario: Scenario, seed: u64) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    let dependency = Arc::new(Dependency::new(seed));
    let latencies = runtime.block_on(async {
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..CLIENTS {
            let dependency = Arc::clone(&dependency);
            clients.spawn(async move {
                let mut took = Vec::with_capacity(CALLS / CLIENTS);
                for _ in 0..CALLS / CLIENTS {
                    let start = Instant::now();
                    scenario
                        .call(&dependency)
                        .await
                        .expect("every call answers");
                    took.push(start.elapsed());
                }
                took
            });
        }
        clients.join_all().await
    });
    let mut latencies: Vec<Duration> = latencies.into_iter().flatten().collect();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((q * latencies.len() as f64).ceil() as usize).max(1) - 1];
    Report {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        load: dependency.sent.load(Ordering::Relaxed) as f64 / latencies.len() as f64,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut seed = 1;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|v| v.parse::<u64>())) {
            ("--seed", Some(Ok(value))) => seed = value,
            _ => {
                eprintln!("usage: tail [--seed N]");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{CALLS} calls from {CLIENTS} clients; 98% of requests 2 ms + Exp(3 ms), 2% twenty times slower (seed {seed})\n"
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>7}",
        "", "p50", "p99", "p99.9", "load"
    );
    let reports: Vec<(Scenario, Report)> = Scenario::ALL
        .into_iter()
        .map(|s| (s, run(s, seed)))
        .collect();
    for (scenario, r) in &reports {
        println!(
            "{:<26} {:>9} {:>9} {:>9} {:>6.3}×",
            scenario.name(),
            ms(r.p50),
            ms(r.p99),
            ms(r.p999),
            r.load
        );
    }
    let plain = &reports[0].1;
    let adaptive = &reports[2].1;
    let cut = plain.p999.as_secs_f64() / adaptive.p999.as_secs_f64();
    println!(
        "\nhedge = p95 cuts p99.9 by {cut:.1}× for {:.1}% more requests",
        (adaptive.load - 1.0) * 100.0
    );
    if cut >= 5.0 && adaptive.load <= 1.06 {
        ExitCode::SUCCESS
    } else {
        eprintln!("expected a cut of 5× or more at no more than 1.06× the load");
        ExitCode::FAILURE
    }
}
