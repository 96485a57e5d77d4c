//! Exponential backoff and jitter, measured: many clients contending for one
//! row, under five retry strategies.
//!
//! This is the experiment of Marc Brooker's "Exponential Backoff And Jitter"
//! (AWS Architecture Blog, 2015), with the delays computed by backstop's own
//! schedule, [`Policy::delay`], rather than by hand-written formulas.
//!
//! # The model
//!
//! `N` clients start at the same instant, and each wants one successful write
//! to a single row guarded by optimistic concurrency control:
//!
//! 1. the client sends a read to the server;
//! 2. the server answers with the row's current version;
//! 3. the client sends a write conditional on that version;
//! 4. the server applies the write only if the version has not moved since
//!    the read (a successful write bumps the version), and answers.
//!
//! Each of these four messages spends `|Normal(10 ms, 2 ms)|` on the network.
//! A client whose write failed waits for its backoff delay once the answer
//! has reached it, then starts again with a read. Only one write per version
//! can succeed, so every client that read the same version as a winner has
//! wasted its attempt.
//!
//! The strategies, for the delay before retry number `n` (0 for the first),
//! with `base` = 5 ms, `cap` = 2 s and a factor of 2:
//!
//! | column         | delay                                                      |
//! |----------------|------------------------------------------------------------|
//! | `no backoff`   | zero                                                       |
//! | `exponential`  | `min(cap, base · 2^n)`, [`Jitter::None`]                   |
//! | `full jitter`  | `uniform(0, min(cap, base · 2^n))`, [`Jitter::Full`]       |
//! | `equal jitter` | half that ceiling plus `uniform(0, half)`, [`Jitter::Equal`] |
//! | `decorrelated` | `min(cap, uniform(base, 3 · previous delay))`, [`Jitter::Decorrelated`] |
//!
//! The first delay's ceiling is `base`, as in `#[retry]`. (The post's own
//! simulator numbers the first retry 1, so its first ceiling is `2 · base`.)
//!
//! The simulation is discrete-event: a priority queue of messages ordered by
//! arrival time, in virtual nanoseconds. Nothing sleeps, nothing runs
//! concurrently, and the same `--seed` gives the same tables on every
//! machine. Each client draws its jitter from its own random stream, as each
//! call of a `#[retry]` function does.
//!
//! # What is measured
//!
//! - **Work**: the write attempts of all clients together, the post's
//!   "calls". `N` is the least possible. Every attempt is one read and one
//!   write, so the network carries exactly four messages per attempt.
//! - **Time**: from the start until the last client has heard that its write
//!   succeeded.
//!
//! Each cell is the mean over `--reps` runs. The runs for one `N` and one
//! repetition share a seed across strategies, so every strategy starts from
//! the same first round of network delays.
//!
//! # Running it
//!
//! ```text
//! cargo run --release --example jitter
//! cargo run --release --example jitter -- --seed 7 --reps 50 --clients-max 250
//! ```
//!
//! | option            | meaning                                        | default |
//! |-------------------|------------------------------------------------|---------|
//! | `--seed N`        | the seed every random draw derives from        | 1       |
//! | `--reps N`        | runs averaged into each cell                   | 20      |
//! | `--clients-max N` | the last row: `N` = 10, 30, 50, … up to this   | 190     |
//!
//! The defaults take about a second in a release build. Retrying at once
//! does work that grows with the square of `N`, so large `--clients-max`
//! values take longer, above all in a debug build.
//!
//! # What to expect
//!
//! Without jitter, exponential backoff saves only part of the work of
//! retrying at once, and takes by far the longest: clients that failed
//! together compute the same delay and come back together, so each round is
//! nearly as crowded as the last, only later. Any jitter spreads them out:
//! from about 100 clients on, it does about half the work of un-jittered
//! backoff (full and equal jitter a little less, decorrelated a little more)
//! in about a tenth of its time. Full and equal jitter do about the same
//! work, but equal jitter, which never waits less than half the ceiling,
//! finishes later. Decorrelated jitter does the least work of all with a
//! few clients and more than full jitter from about fifty on; it finishes
//! sooner than full jitter from a few dozen to about a hundred and thirty
//! clients, later outside that range. Retrying at once finishes first of
//! all, since the row is never left idle, at about four times the work of
//! full jitter with 190 clients.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Display;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use backstop::backoff::Rng;
use backstop::{Backoff, Jitter, Policy};

/// The first backoff delay's ceiling, as in the post.
const BASE: Duration = Duration::from_millis(5);
/// No backoff delay exceeds it, jitter included.
const CAP: Duration = Duration::from_secs(2);
/// One message's time on the network is `|Normal(mean, sd)|` milliseconds.
const NET_MEAN_MS: f64 = 10.0;
const NET_SD_MS: f64 = 2.0;
/// The tables' rows: 10, 30, 50, … clients.
const CLIENTS_FIRST: usize = 10;
const CLIENTS_STEP: usize = 20;

const USAGE: &str = "\
usage: cargo run --release --example jitter -- [--seed N] [--reps N] [--clients-max N]

  --seed N          the seed every random draw derives from (default 1)
  --reps N          runs averaged into each cell (default 20)
  --clients-max N   the last row of the tables: 10, 30, 50, ... up to N (default 190)";

/// How a client waits after a failed write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    NoBackoff,
    Exponential,
    FullJitter,
    EqualJitter,
    Decorrelated,
}

impl Strategy {
    const ALL: [Self; 5] = [
        Self::NoBackoff,
        Self::Exponential,
        Self::FullJitter,
        Self::EqualJitter,
        Self::Decorrelated,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::NoBackoff => "no backoff",
            Self::Exponential => "exponential",
            Self::FullJitter => "full jitter",
            Self::EqualJitter => "equal jitter",
            Self::Decorrelated => "decorrelated",
        }
    }

    /// The schedule behind the strategy; `None` for retrying at once.
    fn policy(self) -> Option<Policy> {
        let jitter = match self {
            Self::NoBackoff => return None,
            Self::Exponential => Jitter::None,
            Self::FullJitter => Jitter::Full,
            Self::EqualJitter => Jitter::Equal,
            Self::Decorrelated => Jitter::Decorrelated,
        };
        Some(
            Policy::new()
                .backoff(Backoff::Exponential)
                .base(BASE)
                .cap(CAP)
                .factor(2.0)
                .jitter(jitter),
        )
    }
}

/// What a message says; who it is for travels beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Message {
    /// Client to server: what version is the row at?
    Read,
    /// Server to client: the version it read.
    Version(u64),
    /// Client to server: write, if the row is still at this version.
    Write(u64),
    /// Server to client: whether the write was applied.
    Written(bool),
}

/// Messages in flight, delivered in order of arrival.
struct Network {
    /// `(arrival in ns, sequence number, client, message)`. The sequence
    /// number breaks ties in sending order, so equal arrival times cannot
    /// make a run depend on anything but the seed.
    in_flight: BinaryHeap<Reverse<(u64, u64, usize, Message)>>,
    sent: u64,
    rng: Rng,
}

impl Network {
    fn new(rng: Rng) -> Self {
        Self {
            in_flight: BinaryHeap::new(),
            sent: 0,
            rng,
        }
    }

    /// Sends `message` between the server and `client` once `wait` has
    /// passed after `now`; it arrives one network delay later.
    fn send(&mut self, now: u64, wait: u64, client: usize, message: Message) {
        let arrival = now.saturating_add(wait).saturating_add(self.delay());
        self.in_flight
            .push(Reverse((arrival, self.sent, client, message)));
        self.sent += 1;
    }

    /// The next message to arrive: `(arrival, client, message)`.
    fn deliver(&mut self) -> Option<(u64, usize, Message)> {
        self.in_flight
            .pop()
            .map(|Reverse((at, _, client, message))| (at, client, message))
    }

    /// One message's time on the network, in ns: `|Normal(10 ms, 2 ms)|` by
    /// the Box–Muller transform.
    fn delay(&mut self) -> u64 {
        // `1 - u` lies in (0, 1], so its logarithm is finite.
        let u1 = 1.0 - self.rng.next_f64();
        let u2 = self.rng.next_f64();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let ms = (NET_MEAN_MS + NET_SD_MS * z).abs();
        (ms * 1e6).round() as u64
    }
}

/// One client's retry state.
struct Client {
    /// Failed writes so far: the retry number of its next delay.
    failures: u32,
    /// Its previous delay, which decorrelated jitter grows from.
    prev: Duration,
    /// Its own jitter stream.
    rng: Rng,
}

/// What one run cost.
struct Run {
    /// Write attempts by all clients.
    writes: u64,
    /// Messages sent, both ways: four per write attempt.
    messages: u64,
    /// When the last client heard that its write succeeded, in ns.
    completion: u64,
}

/// Runs `clients` clients to completion under `strategy`.
fn simulate(strategy: Strategy, clients: usize, seed: u64) -> Run {
    let policy = strategy.policy();
    let mut net = Network::new(Rng::seeded(mix(seed, 0)));
    let mut state: Vec<Client> = (0..clients)
        .map(|c| Client {
            failures: 0,
            prev: BASE,
            rng: Rng::seeded(mix(seed, c as u64 + 1)),
        })
        .collect();
    let mut version = 0_u64;
    let mut writes = 0_u64;
    let mut completion = 0_u64;

    for c in 0..clients {
        net.send(0, 0, c, Message::Read);
    }
    while let Some((now, c, message)) = net.deliver() {
        match message {
            Message::Read => net.send(now, 0, c, Message::Version(version)),
            Message::Version(read) => net.send(now, 0, c, Message::Write(read)),
            Message::Write(read) => {
                writes += 1;
                let applied = read == version;
                if applied {
                    version += 1;
                }
                net.send(now, 0, c, Message::Written(applied));
            }
            Message::Written(true) => completion = now,
            Message::Written(false) => {
                let client = &mut state[c];
                let wait = policy.map_or(Duration::ZERO, |p| {
                    p.delay(client.failures, client.prev, &mut client.rng)
                });
                client.failures = client.failures.saturating_add(1);
                client.prev = wait;
                net.send(now, nanos(wait), c, Message::Read);
            }
        }
    }
    debug_assert_eq!(version, clients as u64, "every client wrote once");
    Run {
        writes,
        messages: net.sent,
        completion,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A seed for stream `stream` of the run seeded `seed` (`SplitMix64`'s
/// finaliser), so that the streams of one run are unrelated to each other.
fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Args {
    seed: u64,
    reps: u32,
    clients_max: usize,
}

/// The command line, or `None` when help was asked for.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    fn number<T: FromStr>(flag: &str, value: &str) -> Result<T, String>
    where
        T::Err: Display,
    {
        value.parse().map_err(|e| format!("{flag} {value}: {e}"))
    }

    let mut parsed = Args {
        seed: 1,
        reps: 20,
        clients_max: 190,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), value.to_owned()),
            None => {
                let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
                (arg, value)
            }
        };
        match flag.as_str() {
            "--seed" => parsed.seed = number(&flag, &value)?,
            "--reps" => parsed.reps = number(&flag, &value)?,
            "--clients-max" => parsed.clients_max = number(&flag, &value)?,
            _ => {
                return Err(format!(
                    "unknown option `{flag}`: expected one of --seed, --reps, --clients-max"
                ));
            }
        }
    }
    if parsed.reps == 0 {
        return Err("--reps must be at least 1".to_owned());
    }
    if parsed.clients_max < CLIENTS_FIRST {
        return Err(format!("--clients-max must be at least {CLIENTS_FIRST}"));
    }
    Ok(Some(parsed))
}

/// Prints one table: a row per client count, a column per strategy.
fn print_table(title: &str, rows: &[(usize, [f64; 5])], decimals: usize) {
    println!("{title}");
    print!("{:>7}", "clients");
    for strategy in Strategy::ALL {
        print!("  {:>12}", strategy.label());
    }
    println!();
    for (clients, cells) in rows {
        print!("{clients:>7}");
        for cell in cells {
            print!("  {cell:>12.decimals$}");
        }
        println!();
    }
    println!();
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let mut work = Vec::new();
    let mut time = Vec::new();
    for clients in (CLIENTS_FIRST..=args.clients_max).step_by(CLIENTS_STEP) {
        let mut writes = [0.0; 5];
        let mut completion_ms = [0.0; 5];
        for rep in 0..args.reps {
            let seed = mix(mix(args.seed, clients as u64), u64::from(rep));
            for (i, strategy) in Strategy::ALL.into_iter().enumerate() {
                let run = simulate(strategy, clients, seed);
                debug_assert_eq!(run.messages, 4 * run.writes);
                writes[i] += run.writes as f64;
                completion_ms[i] += run.completion as f64 / 1e6;
            }
        }
        let reps = f64::from(args.reps);
        work.push((clients, writes.map(|w| w / reps)));
        time.push((clients, completion_ms.map(|t| t / reps)));
    }

    println!(
        "{} runs per cell, seed {}: base {} ms, cap {} ms, factor 2; \
         each message |Normal({NET_MEAN_MS} ms, {NET_SD_MS} ms)| on the network\n",
        args.reps,
        args.seed,
        BASE.as_millis(),
        CAP.as_millis(),
    );
    print_table(
        "Work: write attempts by all clients (N at least; 4 messages each), mean",
        &work,
        1,
    );
    print_table(
        "Time: until the last client's write succeeded, ms, mean",
        &time,
        0,
    );
    ExitCode::SUCCESS
}
