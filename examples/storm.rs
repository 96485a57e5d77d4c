//! A retry storm, and the retries that do not start one.
//!
//! ```sh
//! cargo run --release --example storm
//! cargo run --release --example storm -- --seed 7 --outage 4 --svg storm.svg
//! cargo run --release --example storm -- --help
//! ```
//!
//! Thousands of client tasks (tokio, in paused virtual time) call one
//! server through a real `#[retry]` function: together they offer a fixed
//! load, each its share, as Poisson arrivals, and every call is a task of
//! its own, so calls overlap as requests from many users do (an open
//! system: a slow server does not slow the arrivals down). The server has a fixed
//! capacity, a first-in-first-out queue, and no way to know that a client
//! stopped waiting: a request whose client timed out is still served, and
//! that work is wasted. An outage stalls the server for a few seconds; the
//! queue fills with requests nobody is waiting for any more.
//!
//! What happens next depends only on what the clients send. Without
//! retries, the offered load is below capacity and the queue drains. Every
//! retry adds load: when calls × attempts exceeds capacity the queue never
//! drains, every request served has already been given up on, and the
//! server does full work for zero goodput long after the outage ended — a
//! metastable failure. Jitter spreads the retries but does not reduce them;
//! a retry budget bounds them to a fraction of the calls; a circuit breaker
//! stops sending while the server is drowning.
//!
//! Each strategy runs the same seeded scenario on its own current-thread
//! runtime with a paused clock, so a run is reproducible with `--seed` and
//! takes seconds of real time for half a minute of simulated traffic.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use backstop::backoff::Rng;
use backstop::limit::{AdaptiveThrottle, CircuitBreaker, Keyed, WindowBudget};
use backstop::{CircuitOpen, Classify, Elapsed, Throttled, Verdict, retry};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The resolution of every time series: load and success per 100 ms.
const BUCKET: Duration = Duration::from_millis(100);

/// What a run simulates; every field has a flag. (The items `tests/attribute/storm.rs`
/// drives are `pub(crate)`.)
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) clients: usize,
    /// Offered load as a fraction of capacity.
    pub(crate) load: f64,
    /// Requests the server completes per second.
    pub(crate) capacity: f64,
    /// Requests the server queues before rejecting with "overloaded".
    pub(crate) queue: usize,
    /// How long a client waits for one attempt.
    pub(crate) timeout: Duration,
    pub(crate) outage_at: Duration,
    pub(crate) outage: Duration,
    /// What the outage is: the server stalls (requests queue, nothing is
    /// served), or it refuses every request at once, as a restarting
    /// dependency does (`--outage-kind refuse`).
    pub(crate) refuse: bool,
    /// How long a call may take, all its attempts included.
    pub(crate) deadline: Duration,
    /// How long clients keep making calls.
    pub(crate) duration: Duration,
    /// Fraction of served requests that fail transiently anyway.
    pub(crate) flaky: f64,
    pub(crate) seed: u64,
    pub(crate) svg: Option<String>,
    /// Run the scenario matrix instead (`--matrix`).
    pub(crate) matrix: bool,
    /// Print one row of the matrix (a process of its own per row, so that
    /// every row starts from fresh statics: `--matrix-row NAME`).
    pub(crate) matrix_row: Option<String>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            clients: 2_000,
            load: 0.8,
            capacity: 1_000.0,
            queue: 2_000,
            timeout: Duration::from_secs(1),
            outage_at: Duration::from_secs(5),
            outage: Duration::from_secs(3),
            refuse: false,
            deadline: Duration::from_secs(30),
            duration: Duration::from_secs(30),
            flaky: 0.002,
            seed: 1,
            svg: None,
            matrix: false,
            matrix_row: None,
        }
    }
}

const USAGE: &str = "\
Usage: cargo run --release --example storm -- [OPTIONS]

Options (`--flag value` or `--flag=value`; defaults in brackets; a duration
S is in seconds, `2` or `2s`, or `250ms`):
  --clients N      client tasks; together they offer --load, each its share
                   as Poisson arrivals, one tokio task per call [2000]
  --load F         offered load as a fraction of capacity [0.8]
  --capacity N     requests the server completes per second [1000]
  --queue N        requests queued before the server rejects [2000]
  --timeout S      seconds a client waits for one attempt, from 0.001 [1]
  --outage-at S    when the server stalls, in seconds [5]
  --outage S       how long it stalls, in seconds [3]
  --outage-kind K  `stall` (requests queue, nothing is served) or `refuse`
                   (every request refused at once: a restart) [stall]
  --deadline S     how long a call may take, attempts included [30]
  --duration S     how long clients make calls, in seconds [30]
  --flaky F        fraction of served requests failing transiently [0.002]
  --seed N         seed for arrivals, failures and jitter [1]
  --svg FILE       also write the load chart as SVG to FILE
  --matrix         run the matrix of scenarios (load, outage, queue, flaky
                   errors) with seeds 1-3 and check what each strategy buys
  --help           this text";

impl Scenario {
    pub(crate) fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        fn value<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
            let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse()
                .map_err(|_| format!("{flag}: cannot read `{v}` as a number"))
        }
        /// Seconds, bare (`1.5`) or with a unit (`1.5s`, `250ms`), the
        /// way the summary line prints them.
        fn seconds(flag: &str, v: Option<String>) -> Result<Duration, String> {
            let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
            let (number, scale) = if let Some(ms) = v.strip_suffix("ms") {
                (ms, 1e-3)
            } else {
                (v.strip_suffix('s').unwrap_or(&v), 1.0)
            };
            number
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|n| Duration::try_from_secs_f64(n * scale).ok())
                .ok_or_else(|| {
                    format!("{flag}: `{v}` is not a duration (seconds: `2`, `2s` or `250ms`)")
                })
        }
        let mut sc = Self::default();
        while let Some(arg) = args.next() {
            // `--flag value` or `--flag=value`.
            let (flag, v) = match arg.split_once('=') {
                Some((flag, v)) if flag.starts_with("--") => (flag.to_owned(), Some(v.to_owned())),
                _ => (arg, None),
            };
            let takes_value = !matches!(flag.as_str(), "--help" | "-h" | "--matrix");
            let v = if v.is_none() && takes_value {
                args.next()
            } else {
                v
            };
            match flag.as_str() {
                "--clients" => sc.clients = value(&flag, v)?,
                "--load" => sc.load = value(&flag, v)?,
                "--capacity" => sc.capacity = value(&flag, v)?,
                "--queue" => sc.queue = value(&flag, v)?,
                "--timeout" => sc.timeout = seconds(&flag, v)?,
                "--outage-at" => sc.outage_at = seconds(&flag, v)?,
                "--outage" => sc.outage = seconds(&flag, v)?,
                "--outage-kind" => sc.refuse = refuses(v.as_deref())?,
                "--deadline" => sc.deadline = seconds(&flag, v)?,
                "--duration" => sc.duration = seconds(&flag, v)?,
                "--flaky" => sc.flaky = value(&flag, v)?,
                "--seed" => sc.seed = value(&flag, v)?,
                "--svg" => sc.svg = Some(v.ok_or("--svg needs a file name")?),
                "--matrix" => sc.matrix = true,
                "--matrix-row" => sc.matrix_row = Some(v.ok_or("--matrix-row needs a name")?),
                "--help" | "-h" => return Err(String::new()),
                other => return Err(format!("unknown option `{other}`")),
            }
        }
        sc.check()?;
        Ok(sc)
    }

    /// The scenario's values, checked together: a clear error for each
    /// that cannot be simulated.
    fn check(&self) -> Result<(), String> {
        let hour = Duration::from_secs(3600);
        if !(1..=1_000_000).contains(&self.clients) {
            return Err("--clients is between 1 and 1000000".into());
        }
        if !(self.load > 0.0 && self.load <= 10.0) {
            return Err("--load is a fraction of capacity above 0, at most 10".into());
        }
        if !(1.0..=1_000_000.0).contains(&self.capacity) {
            return Err("--capacity is between 1 and 1000000 requests a second".into());
        }
        if self.queue == 0 {
            return Err(
                "--queue must be at least 1: a server that queues nothing serves nothing".into(),
            );
        }
        if !(0.0..=1.0).contains(&self.flaky) {
            return Err("--flaky is a fraction between 0 and 1".into());
        }
        if self.duration < Duration::from_secs(2) || self.duration > hour {
            return Err("--duration is between 2 s and an hour".into());
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > self.duration {
            return Err("--timeout is between 1 ms (the timer's resolution) and --duration".into());
        }
        if self.deadline < self.timeout {
            return Err("--deadline is at least --timeout".into());
        }
        if self.outage_at > self.duration || self.outage > self.duration {
            return Err("--outage-at and --outage are at most --duration".into());
        }
        let calls = self.load * self.capacity * self.duration.as_secs_f64();
        if calls > 2_000_000.0 {
            return Err(format!(
                "{calls:.0} calls per strategy is too many to simulate in reasonable time: \
                 lower --load, --capacity or --duration (at most 2000000)"
            ));
        }
        if let Some(path) = &self.svg {
            // Fail now, not after the simulation.
            std::fs::File::create(path).map_err(|e| format!("--svg {path}: {e}"))?;
        }
        Ok(())
    }

    fn outage_end(&self) -> Duration {
        self.outage_at + self.outage
    }
}

/// `--outage-kind`: whether the server refuses every request (or stalls).
fn refuses(v: Option<&str>) -> Result<bool, String> {
    match v {
        Some("stall") => Ok(false),
        Some("refuse") => Ok(true),
        Some(other) => Err(format!(
            "--outage-kind: `{other}` is not `stall` or `refuse`"
        )),
        None => Err("--outage-kind needs a value".into()),
    }
}

/// What a call can fail with, and which failures a retry may fix.
#[derive(Debug)]
enum CallError {
    /// The server's queue was full (a 503): retryable.
    Overloaded,
    /// Served, but failed transiently (a reset connection): retryable.
    Transient,
    /// The attempt timed out: the server may still do the work.
    TimedOut,
    /// The server refused the request at once (it is restarting):
    /// nothing was done, retryable.
    Refused,
    /// The circuit breaker is open, or the adaptive throttle shed the
    /// attempt: not even sent.
    Open,
}

impl Classify for CallError {
    fn classify(&self) -> Verdict {
        match self {
            Self::Overloaded | Self::Transient => Verdict::Retry,
            Self::Refused => Verdict::Refused,
            Self::TimedOut => Verdict::RetryIfIdempotent,
            Self::Open => Verdict::Stop,
        }
    }
}

impl From<Elapsed> for CallError {
    fn from(elapsed: Elapsed) -> Self {
        // A call held after refusals gave up: still a refusal.
        if elapsed.is_refused() {
            Self::Refused
        } else {
            Self::TimedOut
        }
    }
}

impl From<CircuitOpen> for CallError {
    fn from(_: CircuitOpen) -> Self {
        Self::Open
    }
}

impl From<Throttled> for CallError {
    fn from(_: Throttled) -> Self {
        Self::Open
    }
}

/// Counts per 100 ms bucket.
#[derive(Default)]
pub(crate) struct Series {
    /// Calls started.
    pub(crate) offered: Vec<u32>,
    /// Requests that reached the server (attempts), rejected or not.
    pub(crate) sent: Vec<u32>,
    /// Calls, by when they started, that returned `Ok` / an error.
    pub(crate) ok: Vec<u32>,
    pub(crate) failed: Vec<u32>,
    /// Requests served for a client still waiting / for nobody.
    pub(crate) useful: Vec<u32>,
    pub(crate) wasted: Vec<u32>,
}

fn bump(series: &mut Vec<u32>, bucket: usize) {
    if series.len() <= bucket {
        series.resize(bucket + 1, 0);
    }
    series[bucket] += 1;
}

struct ServerState {
    queue: VecDeque<oneshot::Sender<Result<(), CallError>>>,
    series: Series,
    rng: Rng,
}

/// A server with a fixed capacity and a FIFO queue, stalled during the
/// outage, serving every queued request even if its client is gone.
struct Server {
    sc: Scenario,
    origin: Instant,
    state: Mutex<ServerState>,
    stop: AtomicBool,
}

impl Server {
    fn new(sc: Scenario) -> Self {
        let rng = Rng::seeded(mix(sc.seed, u64::MAX));
        Self {
            sc,
            origin: Instant::now(),
            state: Mutex::new(ServerState {
                queue: VecDeque::new(),
                series: Series::default(),
                rng,
            }),
            stop: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state
            .lock()
            .expect("no code panics while holding the lock")
    }

    fn bucket(&self, at: Instant) -> usize {
        (at.duration_since(self.origin).as_millis() / BUCKET.as_millis()) as usize
    }

    fn timeout(&self) -> Duration {
        self.sc.timeout
    }

    fn deadline(&self) -> Duration {
        self.sc.deadline
    }

    /// The server is in its outage at `t` (from its start).
    fn down_at(&self, t: Duration) -> bool {
        t >= self.sc.outage_at && t < self.sc.outage_end()
    }

    /// One attempt: queue the request, wait for its answer.
    async fn request(&self) -> Result<(), CallError> {
        let answer = {
            let mut st = self.lock();
            bump(&mut st.series.sent, self.bucket(Instant::now()));
            if self.sc.refuse && self.down_at(self.origin.elapsed()) {
                return Err(CallError::Refused);
            }
            if st.queue.len() >= self.sc.queue {
                return Err(CallError::Overloaded);
            }
            let (tx, rx) = oneshot::channel();
            st.queue.push_back(tx);
            rx
        };
        answer.await.unwrap_or(Err(CallError::Overloaded))
    }

    /// Serves the queue at `capacity` a second, one millisecond at a time.
    async fn serve(self: Arc<Self>) {
        let per_tick = self.sc.capacity / 1000.0;
        let mut credit = 0.0;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        while !self.stop.load(Ordering::Relaxed) {
            tick.tick().await;
            if !self.sc.refuse && self.down_at(self.origin.elapsed()) {
                continue; // stalled: requests queue up, nothing is served
            }
            credit += per_tick;
            let now = self.bucket(Instant::now());
            let mut st = self.lock();
            while credit >= 1.0 {
                let Some(client) = st.queue.pop_front() else {
                    credit = credit.fract(); // idle capacity is not saved up
                    break;
                };
                credit -= 1.0;
                if client.is_closed() {
                    bump(&mut st.series.wasted, now);
                    continue;
                }
                bump(&mut st.series.useful, now);
                let fail = st.rng.next_f64() < self.sc.flaky;
                let _ = client.send(if fail {
                    Err(CallError::Transient)
                } else {
                    Ok(())
                });
            }
        }
    }

    fn finished(&self, started: Instant, ok: bool) {
        let b = self.bucket(started);
        let mut st = self.lock();
        bump(
            if ok {
                &mut st.series.ok
            } else {
                &mut st.series.failed
            },
            b,
        );
    }
}

// ---------------------------------------------------------------------
// The strategies: the same request, retried six ways.

/// Retried by the caller's caller, if at all.
async fn no_retry(server: &Server) -> Result<(), CallError> {
    tokio::time::timeout(server.timeout(), server.request())
        .await
        .map_err(|_| CallError::TimedOut)?
}

/// Retry at once (1 ms), three attempts: what a hand-written loop does.
#[retry(attempts = 3, backoff = fixed, base = 1ms, jitter = none, budget = none,
        idempotent, attempt_timeout = server.timeout(), deadline = server.deadline())]
async fn naive(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// Exponential backoff from 100 ms, every client on the same schedule.
#[retry(jitter = none, budget = none, idempotent, attempt_timeout = server.timeout(), deadline = server.deadline())]
async fn exponential(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// Exponential backoff with full jitter, no budget.
#[retry(budget = none, idempotent, attempt_timeout = server.timeout(), deadline = server.deadline())]
async fn full_jitter(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// The crate's defaults: full jitter and the function's own token
/// budget (10 tokens, 0.1 per answer).
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline())]
async fn defaults(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// A windowed budget instead: retries at most 10% of the calls of the last
/// 10 s, plus a reserve of 10 a second.
static WINDOW: WindowBudget = WindowBudget::standard();

/// Full jitter and the windowed budget.
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline(), budget = WINDOW)]
async fn windowed(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// Google SRE's client-side throttling: sheds attempts locally in
/// proportion to what the server has been refusing.
static ADAPTIVE: AdaptiveThrottle = AdaptiveThrottle::standard();

/// The defaults behind an adaptive throttle.
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline(), throttle = ADAPTIVE)]
async fn defaults_adaptive(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// Opens after 5 consecutive failures; one probe a second while open.
static BREAKER: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(1));

/// The defaults behind a circuit breaker.
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline(), breaker = BREAKER)]
async fn defaults_breaker(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// Two dependencies behind one client, protected per destination: the
/// call's key picks its own token budget and its own breaker (what the
/// tower layer and the middleware do by destination, without a key).
static PER_DESTINATION: Keyed<CircuitBreaker> =
    Keyed::new(CircuitBreaker::new(5, Duration::from_secs(1)));

/// The defaults and a breaker, both kept per destination.
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline(), breaker = PER_DESTINATION, key = destination)]
async fn per_destination(server: &Server, destination: usize) -> Result<(), CallError> {
    server.request().await
}

/// One breaker for both dependencies.
static ONE_FOR_BOTH: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(1));

/// The defaults and a breaker, one of each for both dependencies.
#[retry(idempotent, attempt_timeout = server.timeout(), deadline = server.deadline(), breaker = ONE_FOR_BOTH)]
async fn one_for_both(server: &Server) -> Result<(), CallError> {
    server.request().await
}

/// How a client calling two dependencies protects its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protection {
    /// The healthy dependency's calls only, as if it were the only one.
    Alone,
    /// A token budget and a breaker per destination.
    PerDestination,
    /// One token budget and one breaker for both.
    OneForBoth,
}

impl Protection {
    pub(crate) const ALL: [Self; 3] = [Self::Alone, Self::PerDestination, Self::OneForBoth];

    fn name(self) -> &'static str {
        match self {
            Self::Alone => "the healthy one alone",
            Self::PerDestination => "per destination",
            Self::OneForBoth => "one for both",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    NoRetry,
    Naive,
    Exponential,
    FullJitter,
    Windowed,
    Defaults,
    DefaultsAdaptive,
    DefaultsBreaker,
}

impl Strategy {
    const ALL: [Self; 8] = [
        Self::NoRetry,
        Self::Naive,
        Self::Exponential,
        Self::FullJitter,
        Self::Windowed,
        Self::Defaults,
        Self::DefaultsAdaptive,
        Self::DefaultsBreaker,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::NoRetry => "no retry",
            Self::Naive => "naive, immediate",
            Self::Exponential => "exponential, no jitter",
            Self::FullJitter => "full jitter",
            Self::Windowed => "windowed budget (10%)",
            Self::Defaults => "defaults (token budget)",
            Self::DefaultsAdaptive => "defaults + adaptive",
            Self::DefaultsBreaker => "defaults + breaker",
        }
    }

    async fn call(self, server: &Server) -> Result<(), CallError> {
        match self {
            Self::NoRetry => no_retry(server).await,
            Self::Naive => naive(server).await,
            Self::Exponential => exponential(server).await,
            Self::FullJitter => full_jitter(server).await,
            Self::Windowed => windowed(server).await,
            Self::Defaults => defaults(server).await,
            Self::DefaultsAdaptive => defaults_adaptive(server).await,
            Self::DefaultsBreaker => defaults_breaker(server).await,
        }
    }
}

// ---------------------------------------------------------------------
// Running one strategy.

/// `SplitMix64` of `a` and `b`: unrelated seeds for related inputs.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An exponentially distributed gap with mean `mean`: Poisson arrivals.
fn exponential_gap(rng: &mut Rng, mean: f64) -> Duration {
    Duration::from_secs_f64(-mean * (1.0 - rng.next_f64()).ln())
}

/// The clients' calls to `servers` (each its own scenario), on a
/// current-thread runtime in paused time, jitter seeded with `jitter`:
/// `clients` tasks whose calls arrive as Poisson arrivals with mean gap
/// `mean`; each call goes where `pick` says (none: not made) and is
/// `call(server, destination)`, true for a success. Returns each server's
/// series.
fn simulate<P, C, F>(
    sc: &Scenario,
    servers: Vec<Scenario>,
    jitter: u64,
    mean: f64,
    pick: P,
    call: C,
) -> Vec<Series>
where
    P: Fn(&mut Rng) -> Option<usize> + Copy + Send + 'static,
    C: Fn(Arc<Server>, usize) -> F + Copy + Send + 'static,
    F: Future<Output = bool> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    // Jitter draws from a sequence fixed by the seed: the runtime is
    // single-threaded, so every strategy replays exactly.
    backstop::testing::seed_jitter(jitter);
    // Every run starts as a fresh process would: the functions' own
    // throttles full, whatever an earlier run in this process left.
    let _fresh = backstop::testing::isolate();
    runtime.block_on(async {
        let servers: Vec<Arc<Server>> = servers
            .into_iter()
            .map(|sc| Arc::new(Server::new(sc)))
            .collect();
        let serving: Vec<_> = servers
            .iter()
            .map(|server| tokio::spawn(server.clone().serve()))
            .collect();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let origin = servers[0].origin;
        let clients: Vec<_> = (0..sc.clients)
            .map(|c| {
                let servers = servers.clone();
                let in_flight = in_flight.clone();
                let mut rng = Rng::seeded(mix(sc.seed, c as u64));
                let end = origin + sc.duration;
                tokio::spawn(async move {
                    let mut next = origin + exponential_gap(&mut rng, mean);
                    while next < end {
                        tokio::time::sleep_until(next).await;
                        let destination = pick(&mut rng);
                        next += exponential_gap(&mut rng, mean);
                        let Some(destination) = destination else {
                            continue;
                        };
                        in_flight.fetch_add(1, Ordering::Relaxed);
                        let (server, in_flight) = (servers[destination].clone(), in_flight.clone());
                        tokio::spawn(async move {
                            let started = Instant::now();
                            bump(&mut server.lock().series.offered, server.bucket(started));
                            let ok = call(server.clone(), destination).await;
                            server.finished(started, ok);
                            in_flight.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for client in clients {
            client.await.expect("a client task does not panic");
        }
        while in_flight.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(BUCKET).await;
        }
        for (server, serving) in servers.iter().zip(serving) {
            server.stop.store(true, Ordering::Relaxed);
            serving.await.expect("the server task does not panic");
        }
        servers
            .iter()
            .map(|server| std::mem::take(&mut server.lock().series))
            .collect()
    })
}

pub(crate) fn run(strategy: Strategy, sc: &Scenario) -> Series {
    // Each client calls on average every `mean` seconds, at random.
    let mean = sc.clients as f64 / (sc.load * sc.capacity);
    let mut series = simulate(
        sc,
        vec![sc.clone()],
        mix(sc.seed, 0x5eed),
        mean,
        |_| Some(0),
        move |server, _| async move { strategy.call(&server).await.is_ok() },
    );
    series.remove(0)
}

/// Two dependencies behind one client, each offered `sc.load` of its
/// capacity: the first stalls as the scenario says, the second never does.
/// Calls go to one or the other at random (the same calls to the healthy
/// one under every protection); `Alone` makes only those. Returns what the
/// healthy dependency's calls saw, and how many of its requests were
/// retries.
pub(crate) fn run_two(protection: Protection, sc: &Scenario) -> (Series, u64) {
    let healthy = Scenario {
        outage: Duration::ZERO,
        ..sc.clone()
    };
    let mean = sc.clients as f64 / (2.0 * sc.load * sc.capacity);
    let alone = protection == Protection::Alone;
    let mut series = simulate(
        sc,
        vec![sc.clone(), healthy],
        mix(sc.seed, 0x2d5e),
        mean,
        move |rng| {
            let destination = usize::from(rng.next_f64() < 0.5);
            (!alone || destination == 1).then_some(destination)
        },
        move |server, destination| async move {
            match protection {
                Protection::Alone | Protection::PerDestination => {
                    per_destination(&server, destination).await.is_ok()
                }
                Protection::OneForBoth => one_for_both(&server).await.is_ok(),
            }
        },
    );
    let healthy = series.remove(1);
    let retries = sum(&healthy.sent).saturating_sub(sum(&healthy.offered));
    (healthy, retries)
}

/// The rows of two dependencies behind one client: what the healthy one's
/// calls saw under each protection.
fn two_dependencies(sc: &Scenario) -> String {
    let mut out = format!(
        "\ntwo dependencies behind one client, each offered {:.0}% of its capacity; the \
         first stalls as above,\nthe second never does (the defaults and a breaker, as \
         `defaults + breaker`):\n\n{:<25} {:>13} {:>10} {:>14}\n",
        100.0 * sc.load,
        "the healthy one's calls",
        "offered",
        "retries",
        "calls failed"
    );
    for protection in Protection::ALL {
        let (series, retries) = run_two(protection, sc);
        let s = summarise(&series, sc);
        let _ = writeln!(
            out,
            "{:<25} {:>13} {:>10} {:>7} ({:>4.1}%)",
            protection.name(),
            s.offered,
            retries,
            s.failed,
            100.0 * s.failed_share()
        );
    }
    out
}

// ---------------------------------------------------------------------
// Reporting.

pub(crate) struct Summary {
    /// Through the outage: calls started in it, and how many succeeded;
    /// requests sent in it; the most sent in 100 ms after it.
    pub(crate) outage: OutageSummary,
    pub(crate) offered: u64,
    pub(crate) sent: u64,
    pub(crate) peak: u32,
    pub(crate) goodput: f64,
    pub(crate) wasted: f64,
    pub(crate) recovered: Recovery,
    pub(crate) failed: u64,
}

impl Summary {
    /// The share of the calls offered that failed.
    pub(crate) fn failed_share(&self) -> f64 {
        if self.offered == 0 {
            0.0
        } else {
            self.failed as f64 / self.offered as f64
        }
    }
}

fn sum(v: &[u32]) -> u64 {
    v.iter().map(|&x| u64::from(x)).sum()
}

fn at(v: &[u32], i: usize) -> u32 {
    v.get(i).copied().unwrap_or(0)
}

/// What a run did through its outage.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OutageSummary {
    /// Calls started during the outage, and those of them that succeeded.
    pub(crate) offered: u64,
    pub(crate) ok: u64,
    /// Requests sent during the outage.
    pub(crate) sent: u64,
    /// The most requests sent in one 100 ms after the outage.
    pub(crate) peak_after: u32,
}

impl OutageSummary {
    /// The share of the calls started during the outage that succeeded.
    pub(crate) fn rescued(&self) -> f64 {
        self.ok as f64 / self.offered.max(1) as f64
    }

    /// Requests sent during the outage per call offered in it.
    pub(crate) fn amplification(&self) -> f64 {
        self.sent as f64 / self.offered.max(1) as f64
    }
}

fn outage_summary(s: &Series, sc: &Scenario) -> OutageSummary {
    let bucket = |d: Duration| (d.as_millis() / BUCKET.as_millis()) as usize;
    let (from, to) = (bucket(sc.outage_at), bucket(sc.outage_end()));
    let span = |v: &[u32]| (from..to).map(|i| u64::from(at(v, i))).sum::<u64>();
    OutageSummary {
        offered: span(&s.offered),
        ok: span(&s.ok),
        sent: span(&s.sent),
        peak_after: s.sent.iter().skip(to).copied().max().unwrap_or(0),
    }
}

pub(crate) fn summarise(s: &Series, sc: &Scenario) -> Summary {
    let ok = sum(&s.ok);
    let (useful, wasted) = (sum(&s.useful), sum(&s.wasted));
    Summary {
        outage: outage_summary(s, sc),
        offered: sum(&s.offered),
        sent: sum(&s.sent),
        peak: s.sent.iter().copied().max().unwrap_or(0),
        goodput: ok as f64 / sc.duration.as_secs_f64(),
        wasted: wasted as f64 / (useful + wasted).max(1) as f64,
        recovered: recovery(s, sc),
        failed: sum(&s.failed),
    }
}

/// From the end of the outage, how long until every later second of calls
/// (a window sliding by 100 ms, calls counted by when they started)
/// succeeds at 99% or more; seconds in which no call started are not
/// judged.
fn recovery(s: &Series, sc: &Scenario) -> Recovery {
    let window = 10; // buckets: one second
    let from = (sc.outage_end().as_millis() / BUCKET.as_millis()) as usize;
    let last = (sc.duration.as_millis() / BUCKET.as_millis()) as usize;
    if sc.outage.is_zero() || from + window > last {
        return Recovery::NoOutage;
    }
    let failing = |start: usize| {
        let (ok, failed) = (start..start + window).fold((0u64, 0u64), |(o, f), i| {
            (o + u64::from(at(&s.ok, i)), f + u64::from(at(&s.failed, i)))
        });
        ok + failed > 0 && (ok as f64) < 0.99 * (ok + failed) as f64
    };
    // The earliest start after which no window dips below 99%.
    let mut recovered = None;
    for start in (from..=last - window).rev() {
        if failing(start) {
            break;
        }
        recovered = Some(start);
    }
    recovered.map_or(Recovery::Never, |b| {
        Recovery::After(BUCKET * (b - from) as u32)
    })
}

/// How the success rate came back after the outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recovery {
    After(Duration),
    /// Not before the clients stopped.
    Never,
    /// The outage did not end a second or more before the clients stopped.
    NoOutage,
}

fn table(results: &[(Strategy, Summary)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<25} {:>8} {:>8} {:>7} {:>11} {:>9} {:>7} {:>10} {:>14}",
        "strategy",
        "offered",
        "sent",
        "ampl.",
        "peak/100ms",
        "goodput/s",
        "wasted",
        "recovered",
        "calls failed"
    );
    for (strategy, r) in results {
        let recovered = match r.recovered {
            Recovery::After(d) => format!("{:.1} s", d.as_secs_f64()),
            Recovery::Never => "never".to_owned(),
            Recovery::NoOutage => "n/a".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<25} {:>8} {:>8} {:>6.2}× {:>11} {:>9.0} {:>6.1}% {:>10} {:>7} ({:>4.1}%)",
            strategy.name(),
            r.offered,
            r.sent,
            r.sent as f64 / r.offered.max(1) as f64,
            r.peak,
            r.goodput,
            100.0 * r.wasted,
            recovered,
            r.failed,
            100.0 * r.failed_share(),
        );
    }
    out
}

/// Columns of the terminal chart: 500 ms each.
const COLUMN: usize = 5;
const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Requests sent per 100 ms, averaged over each column.
fn load_columns(s: &Series, buckets: usize) -> Vec<f64> {
    (0..buckets.div_ceil(COLUMN))
        .map(|c| {
            let total: u32 = (c * COLUMN..(c + 1) * COLUMN).map(|i| at(&s.sent, i)).sum();
            f64::from(total) / COLUMN as f64
        })
        .collect()
}

/// The share of calls started in each column that succeeded: a full
/// block for 99% or more, lower blocks for less, blank for no calls.
fn success_row(s: &Series, columns: usize) -> String {
    (0..columns)
        .map(|c| {
            let (mut ok, mut failed) = (0, 0);
            for i in c * COLUMN..(c + 1) * COLUMN {
                ok += at(&s.ok, i);
                failed += at(&s.failed, i);
            }
            if ok + failed == 0 {
                return ' ';
            }
            let rate = f64::from(ok) / f64::from(ok + failed);
            if rate >= 0.99 {
                LEVELS[8]
            } else {
                LEVELS[1 + (rate * 6.0) as usize]
            }
        })
        .collect()
}

/// A bar chart `rows` characters tall, scaled so that `max` fills it.
fn bars(values: &[f64], max: f64, rows: usize) -> Vec<String> {
    (0..rows)
        .rev()
        .map(|row| {
            values
                .iter()
                .map(|&v| {
                    let eighths = (v / max * (rows * 8) as f64).round() as usize;
                    LEVELS[eighths.saturating_sub(row * 8).min(8)]
                })
                .collect()
        })
        .collect()
}

fn chart(runs: &[(Strategy, Series)], sc: &Scenario) -> String {
    let buckets = runs.iter().map(|(_, s)| s.sent.len()).max().unwrap_or(0);
    let loads: Vec<Vec<f64>> = runs.iter().map(|(_, s)| load_columns(s, buckets)).collect();
    let capacity = sc.capacity * BUCKET.as_secs_f64();
    // Capacity stays in the picture even when no strategy reaches it.
    let max = loads
        .iter()
        .flatten()
        .copied()
        .fold(capacity * 1.2, f64::max);
    let columns = buckets.div_ceil(COLUMN);
    let secs = |c: usize| c * COLUMN * BUCKET.as_millis() as usize / 1000;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Requests reaching the server per 100 ms (each column their mean over 0.5 s, \
         below the table's peak; the full height is {max:.0}, capacity is {capacity:.0}: \
         ─ marks it; ▒ the outage).\n\
         Under each, `ok`: the calls started in that half second that succeeded \
         (█ for 99% or more, ▁ for none)."
    );
    let cap_row = 3.0 * capacity / max; // in rows from the bottom
    for ((strategy, series), load) in runs.iter().zip(&loads) {
        let _ = writeln!(out, "\n{}", strategy.name());
        for (r, line) in bars(load, max, 3).into_iter().enumerate() {
            let row = 2 - r; // 0 is the bottom row
            let marker = if cap_row >= row as f64 && cap_row < (row + 1) as f64 {
                '─'
            } else {
                ' '
            };
            let _ = writeln!(out, "  {marker}│{line}");
        }
        let outage: String = (0..columns)
            .map(|c| {
                let t = Duration::from_millis((c * COLUMN) as u64 * BUCKET.as_millis() as u64);
                if t >= sc.outage_at && t < sc.outage_end() {
                    '▒'
                } else {
                    '─'
                }
            })
            .collect();
        let _ = writeln!(out, "   └{outage}");
        let _ = writeln!(out, " ok {}", success_row(series, columns));
    }
    let mut axis = String::new();
    let mut c = 0;
    while c < columns {
        let label = format!("{}s", secs(c));
        let _ = write!(axis, "{label:<10}");
        c += 10;
    }
    let _ = writeln!(out, "    {axis}");
    out
}

fn svg(path: &str, runs: &[(Strategy, Series)], sc: &Scenario) -> Result<(), String> {
    use plotters::prelude::*;

    let buckets = runs.iter().map(|(_, s)| s.sent.len()).max().unwrap_or(0);
    let max = runs
        .iter()
        .flat_map(|(_, s)| s.sent.iter().copied())
        .max()
        .unwrap_or(1);
    let seconds = buckets as f64 * BUCKET.as_secs_f64();
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| format!("drawing {path}: {e}");
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Requests reaching the server per 100 ms",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..seconds, 0.0..f64::from(max) * 1.05)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests / 100 ms")
        .draw()
        .map_err(|e| draw(&e))?;
    let (from, to) = (sc.outage_at.as_secs_f64(), sc.outage_end().as_secs_f64());
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(from, 0.0), (to, f64::from(max) * 1.05)],
            RGBColor(220, 220, 220).filled(),
        )))
        .map_err(|e| draw(&e))?
        .label("outage")
        .legend(|(x, y)| {
            Rectangle::new(
                [(x, y - 5), (x + 16, y + 5)],
                RGBColor(220, 220, 220).filled(),
            )
        });
    let capacity = sc.capacity * BUCKET.as_secs_f64();
    chart
        .draw_series(LineSeries::new(
            [(0.0, capacity), (seconds, capacity)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| draw(&e))?
        .label("capacity")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    for (i, (strategy, s)) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.sent
                    .iter()
                    .enumerate()
                    .map(|(b, &n)| (b as f64 * BUCKET.as_secs_f64(), f64::from(n))),
                color.stroke_width(2),
            ))
            .map_err(|e| draw(&e))?
            .label(strategy.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))
}

// ---------------------------------------------------------------------
// The matrix: what each strategy buys, across scenarios and seeds.

/// The strategies of the matrix: no retry, retries without a budget, the
/// windowed budget, and the crate's defaults alone and with each addition.
pub(crate) const MATRIX_STRATEGIES: [Strategy; 6] = [
    Strategy::NoRetry,
    Strategy::FullJitter,
    Strategy::Windowed,
    Strategy::Defaults,
    Strategy::DefaultsAdaptive,
    Strategy::DefaultsBreaker,
];

/// The matrix's scenarios: the default one and its variations.
pub(crate) fn matrix_scenarios(base: &Scenario) -> Vec<(&'static str, Scenario)> {
    let with = |f: &dyn Fn(&mut Scenario)| {
        let mut sc = base.clone();
        f(&mut sc);
        sc
    };
    vec![
        ("default (--load 0.8)", base.clone()),
        ("--load 0.6", with(&|sc| sc.load = 0.6)),
        ("--load 0.9", with(&|sc| sc.load = 0.9)),
        (
            "--outage 10",
            with(&|sc| sc.outage = Duration::from_secs(10)),
        ),
        ("--queue 5000", with(&|sc| sc.queue = 5000)),
        (
            "--load 0.7 --outage 8 --flaky 0.01",
            with(&|sc| {
                sc.load = 0.7;
                sc.outage = Duration::from_secs(8);
                sc.flaky = 0.01;
            }),
        ),
        (
            "--outage 0 --flaky 0.05",
            with(&|sc| {
                sc.outage = Duration::ZERO;
                sc.flaky = 0.05;
            }),
        ),
    ]
}

/// The restarts of the matrix: the server refuses every request at once for
/// its outage, and callers would wait 3 s.
pub(crate) fn restart_scenarios(base: &Scenario) -> Vec<(&'static str, Scenario)> {
    let restart = |load: f64, outage: u64| Scenario {
        load,
        outage: Duration::from_secs(outage),
        refuse: true,
        deadline: Duration::from_secs(3),
        ..base.clone()
    };
    vec![
        ("restart 2 s, deadline 3 s, --load 0.3", restart(0.3, 2)),
        ("restart 2 s, deadline 3 s, --load 0.8", restart(0.8, 2)),
        ("restart 5 s, deadline 3 s, --load 0.3", restart(0.3, 5)),
    ]
}

/// What `strategy` came to among a matrix row's `results`.
fn summary_of(results: &[(Strategy, Summary)], strategy: Strategy) -> &Summary {
    results
        .iter()
        .find(|(s, _)| *s == strategy)
        .map(|(_, summary)| summary)
        .expect("every matrix strategy ran")
}

/// What the matrix promises, for one scenario and seed: a line for each
/// promise broken (none when all hold).
pub(crate) fn broken_promises(results: &[(Strategy, Summary)]) -> Vec<String> {
    let get = |strategy: Strategy| summary_of(results, strategy);
    let secs = |r: Recovery| match r {
        Recovery::After(d) => Some(d),
        Recovery::Never | Recovery::NoOutage => None,
    };
    let (none, unbudgeted, defaults) = (
        get(Strategy::NoRetry),
        get(Strategy::FullJitter),
        get(Strategy::Defaults),
    );
    let mut broken = Vec::new();
    let outage = none.recovered != Recovery::NoOutage;
    if outage {
        // Retries without a budget never recover, or recover last.
        if let Some(u) = secs(unbudgeted.recovered) {
            for (strategy, s) in results {
                if let Some(other) = secs(s.recovered)
                    && other > u
                {
                    broken.push(format!(
                        "{} recovered after full jitter ({other:?} > {u:?})",
                        strategy.name()
                    ));
                }
            }
        }
        // The defaults: no later than no retry + max(1 s, 15%).
        match (secs(none.recovered), secs(defaults.recovered)) {
            (Some(n), Some(d)) => {
                let slack = n.mul_f64(0.15).max(Duration::from_secs(1));
                if d > n + slack {
                    broken.push(format!("defaults recovered at {d:?}, no retry at {n:?}"));
                }
            }
            (Some(n), None) => broken.push(format!("defaults never recovered, no retry at {n:?}")),
            _ => {}
        }
        // The adaptive throttle and the breaker: before no retry, having
        // sent less than the offered load.
        for strategy in [Strategy::DefaultsAdaptive, Strategy::DefaultsBreaker] {
            let s = get(strategy);
            match (secs(none.recovered), secs(s.recovered)) {
                (Some(n), Some(x)) if x >= n => broken.push(format!(
                    "{} recovered at {x:?}, not before no retry ({n:?})",
                    strategy.name()
                )),
                (_, None) => broken.push(format!("{} never recovered", strategy.name())),
                _ => {}
            }
            if s.sent >= s.offered {
                broken.push(format!(
                    "{} sent {} for {} offered",
                    strategy.name(),
                    s.sent,
                    s.offered
                ));
            }
        }
    } else if defaults.failed >= none.failed {
        // No outage, flaky errors: the defaults rescue them.
        broken.push(format!(
            "without an outage the defaults failed {} calls, no retry {}",
            defaults.failed, none.failed
        ));
    }
    if defaults.failed_share() > none.failed_share() + 0.01 {
        broken.push(format!(
            "defaults failed {:.1}% of calls, no retry {:.1}%",
            100.0 * defaults.failed_share(),
            100.0 * none.failed_share()
        ));
    }
    let amplification = defaults.sent as f64 / defaults.offered.max(1) as f64;
    // Without an outage, the retries that rescue flaky failures are the
    // amplification (5% flaky: 1.05×, and what retries are for); the bound
    // that matters is the one through an outage.
    let bound = if outage { 1.05 } else { 1.10 };
    if amplification > bound {
        broken.push(format!("defaults amplified the load {amplification:.3}×"));
    }
    broken
}

/// What the matrix promises of a restart (the server refuses at once for
/// its outage), for one scenario and seed: a line for each promise broken.
/// The defaults hold the calls whose retries the budget refuses until the
/// server answers again: at `--load 0.3` (headroom to spare) at least 80%
/// of the calls started during a 2 s restart succeed; at `--load 0.8`,
/// where the 20% of spare capacity bounds the rescue, at least 25%, and no
/// more calls fail than with no retry. In every restart, the requests sent
/// during it stay within 1.10× of the calls offered in it, and no 100 ms
/// after it sees more than 1.2× the server's capacity.
pub(crate) fn broken_restart_promises(
    results: &[(Strategy, Summary)],
    sc: &Scenario,
) -> Vec<String> {
    let get = |strategy: Strategy| summary_of(results, strategy);
    let (none, defaults) = (get(Strategy::NoRetry), get(Strategy::Defaults));
    let o = defaults.outage;
    let mut broken = Vec::new();
    // Calls whose deadline outlasts the restart can be rescued.
    if sc.deadline > sc.outage {
        let least = if sc.load <= 0.5 { 0.80 } else { 0.25 };
        if o.rescued() < least {
            broken.push(format!(
                "defaults rescued {:.1}% of the calls started in the restart, not {:.0}%",
                100.0 * o.rescued(),
                100.0 * least
            ));
        }
    }
    if defaults.failed > none.failed {
        broken.push(format!(
            "defaults failed {} calls, no retry {}",
            defaults.failed, none.failed
        ));
    }
    if o.amplification() > 1.10 {
        broken.push(format!(
            "defaults sent {:.2}× the calls offered during the restart",
            o.amplification()
        ));
    }
    let peak = f64::from(o.peak_after) / (sc.capacity * BUCKET.as_secs_f64());
    if peak > 1.2 {
        broken.push(format!(
            "defaults sent {peak:.2}× capacity in 100 ms after the restart"
        ));
    }
    broken
}

/// One row of the matrix: `name`'s scenario (from the command line) run
/// with every strategy; prints the row, then a line per promise broken.
fn matrix_row(name: &str, sc: &Scenario) {
    let results: Vec<(Strategy, Summary)> = MATRIX_STRATEGIES
        .into_iter()
        .map(|strategy| (strategy, summarise(&run(strategy, sc), sc)))
        .collect();
    let mut line = format!("{name:<36} {:>4}", sc.seed);
    if sc.refuse {
        // A restart: what each strategy rescued of the calls started in
        // it, what it sent in it per call, and its peak after it.
        let capacity = sc.capacity * BUCKET.as_secs_f64();
        for (_, s) in &results {
            let o = s.outage;
            let _ = write!(
                line,
                " {:>5.1}% {:>4.2}× {:>4.2}×",
                100.0 * o.rescued(),
                o.amplification(),
                f64::from(o.peak_after) / capacity
            );
        }
        println!("{line}");
        for broken in broken_restart_promises(&results, sc) {
            println!("broken: {name}, seed {}: {broken}", sc.seed);
        }
        return;
    }
    for (_, s) in &results {
        let recovered = match s.recovered {
            Recovery::After(d) => format!("{:.1} s", d.as_secs_f64()),
            Recovery::Never => "never".to_owned(),
            Recovery::NoOutage => "n/a".to_owned(),
        };
        let _ = write!(line, " {recovered:>9} {:>8.1}%", 100.0 * s.failed_share());
    }
    println!("{line}");
    for broken in broken_promises(&results) {
        println!("broken: {name}, seed {}: {broken}", sc.seed);
    }
}

/// Runs the matrix: every scenario with seeds 1 to 3, each in a process of
/// its own (the strategies' shared budgets and breakers are `static`s, and
/// a row must not start from what the previous one left); prints one line
/// per scenario and seed, recovery and calls failed per strategy, and the
/// promises broken. `Ok` when every promise holds.
fn matrix(base: &Scenario) -> Result<(), ()> {
    let mut out = String::new();
    let _ = write!(out, "{:<36} {:>4}", "scenario", "seed");
    let short = |strategy: Strategy| match strategy {
        Strategy::NoRetry => "no retry",
        Strategy::FullJitter => "full jitter",
        Strategy::Windowed => "windowed",
        Strategy::Defaults => "defaults",
        Strategy::DefaultsAdaptive => "+ adaptive",
        Strategy::DefaultsBreaker => "+ breaker",
        other => other.name(),
    };
    for strategy in MATRIX_STRATEGIES {
        let _ = write!(out, " {:>19}", short(strategy));
    }
    println!("{out}");
    let exe = std::env::current_exe().map_err(|e| eprintln!("error: {e}"))?;
    let mut broken = Vec::new();
    for (name, sc) in matrix_scenarios(base) {
        for seed in 1..=3u64 {
            let output = std::process::Command::new(&exe)
                .args(sc.flags())
                .args(["--seed", &seed.to_string(), "--matrix-row", name])
                .output()
                .map_err(|e| eprintln!("error: {e}"))?;
            let text = String::from_utf8_lossy(&output.stdout);
            for line in text.lines() {
                match line.strip_prefix("broken: ") {
                    Some(b) => broken.push(b.to_owned()),
                    None => println!("{line}"),
                }
            }
            if !output.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&output.stderr));
                return Err(());
            }
        }
    }
    println!(
        "\neach cell: recovery after the outage (as in the table of a single run), \
         and the share of calls that failed."
    );
    // The restarts: the server refuses at once, and callers would wait.
    let mut out = format!("\n{:<36} {:>4}", "restart", "seed");
    for strategy in MATRIX_STRATEGIES {
        let _ = write!(out, " {:>19}", short(strategy));
    }
    println!("{out}");
    for (name, sc) in restart_scenarios(base) {
        for seed in 1..=3u64 {
            let output = std::process::Command::new(&exe)
                .args(sc.flags())
                .args(["--seed", &seed.to_string(), "--matrix-row", name])
                .output()
                .map_err(|e| eprintln!("error: {e}"))?;
            let text = String::from_utf8_lossy(&output.stdout);
            for line in text.lines() {
                match line.strip_prefix("broken: ") {
                    Some(b) => broken.push(b.to_owned()),
                    None => println!("{line}"),
                }
            }
            if !output.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&output.stderr));
                return Err(());
            }
        }
    }
    println!(
        "\neach cell: of the calls started during the restart, the share that succeeded; \
         requests sent during it per call offered; the most sent in 100 ms after it, \
         per capacity."
    );
    if broken.is_empty() {
        println!(
            "every promise holds: without a budget no recovery (or the last); the defaults \
             within max(1 s, 15%) of no retry, at most 1 point more calls failed, at most \
             1.05× the load, and fewer failures without an outage; the adaptive throttle and \
             the breaker before no retry, sending less than the offered load. Through a \
             restart the defaults rescued at least \
             80% of the calls started in it at --load 0.3 and 25% at 0.8 (no more failed \
             than with no retry), sent at most 1.10× the calls offered in it, and no \
             100 ms after it saw more than 1.2× capacity."
        );
        Ok(())
    } else {
        println!("promises broken:");
        for b in &broken {
            println!("  {b}");
        }
        Err(())
    }
}

impl Scenario {
    /// The flags that give this scenario (but its seed).
    fn flags(&self) -> Vec<String> {
        let secs = |d: Duration| format!("{}s", d.as_secs_f64());
        vec![
            format!("--clients={}", self.clients),
            format!("--load={}", self.load),
            format!("--capacity={}", self.capacity),
            format!("--queue={}", self.queue),
            format!("--timeout={}", secs(self.timeout)),
            format!("--outage-at={}", secs(self.outage_at)),
            format!("--outage={}", secs(self.outage)),
            format!(
                "--outage-kind={}",
                if self.refuse { "refuse" } else { "stall" }
            ),
            format!("--deadline={}", secs(self.deadline)),
            format!("--duration={}", secs(self.duration)),
            format!("--flaky={}", self.flaky),
        ]
    }
}

fn main() -> ExitCode {
    let sc = match Scenario::parse(std::env::args().skip(1)) {
        Ok(sc) => sc,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(name) = &sc.matrix_row {
        matrix_row(name, &sc);
        return ExitCode::SUCCESS;
    }
    if sc.matrix {
        return if matrix(&sc).is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    println!(
        "{} clients offer {:.0}% of a {:.0} req/s server's capacity for {:.0} s \
         (queue {}, client timeout {:?}, deadline {:?}, {:.1}% of requests fail \
         transiently); the server {} from {:?} to {:?}. Seed {}.\n",
        sc.clients,
        100.0 * sc.load,
        sc.capacity,
        sc.duration.as_secs_f64(),
        sc.queue,
        sc.timeout,
        sc.deadline,
        100.0 * sc.flaky,
        if sc.refuse {
            "refuses every request at once (a restart)"
        } else {
            "stalls"
        },
        sc.outage_at,
        sc.outage_end(),
        sc.seed,
    );
    let runs: Vec<(Strategy, Series)> = Strategy::ALL
        .into_iter()
        .map(|strategy| (strategy, run(strategy, &sc)))
        .collect();
    let summaries: Vec<(Strategy, Summary)> = runs
        .iter()
        .map(|(strategy, s)| (*strategy, summarise(s, &sc)))
        .collect();
    print!("{}", table(&summaries));
    println!(
        "\nsent: requests reaching the server; ampl.: sent / offered; wasted: server \
         work done for clients that had stopped waiting; recovered: from the end of the \
         outage until every following second of calls succeeds at 99% or more.\n"
    );
    print!("{}", chart(&runs, &sc));
    print!("{}", two_dependencies(&sc));
    if let Some(path) = &sc.svg {
        if let Err(e) = svg(path, &runs, &sc) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        println!("\nwrote {path}");
    }
    ExitCode::SUCCESS
}
