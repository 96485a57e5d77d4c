//! # backstop
//!
//! Retries that never make an outage worse. One line above a function
//! gives it exponential backoff with jitter that never breaks its cap, a
//! deadline for the whole call, `Retry-After` honoured, a token budget on
//! by default that stops retrying when failure is systemic, and retries
//! only for what a retry can fix.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use backstop::retry;
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! #[retry(attempts = 4, base = 100ms, cap = 5s, deadline = 10s)]
//! fn fetch_user(id: u64, refusals: &mut u32) -> Result<String, Error> {
//!     if *refusals > 0 {
//!         *refusals -= 1;
//!         return Err(ErrorKind::ConnectionRefused.into()); // transient: retried
//!     }
//!     Ok(format!("user #{id}"))
//! }
//!
//! let mut refusals = 2;
//! assert_eq!(fetch_user(7, &mut refusals).unwrap(), "user #7");
//! ```
//!
//! `async fn` works the same, sleeping on tokio's timer (or async-io's,
//! or one of your own: see [`time`]):
//!
//! ```
//! # use std::io::Error;
//! # use backstop::retry;
//! #[retry(attempts = 4, base = 100ms, cap = 5s, deadline = 10s)]
//! async fn fetch_user(id: u64) -> Result<String, Error> {
//!     Ok(format!("user #{id}"))
//! }
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! assert_eq!(fetch_user(7).await.unwrap(), "user #7");
//! # }
//! ```
//!
//! Giving up returns the last outcome unchanged: callers see their own error
//! type, never a wrapper. The first attempt always runs.
//!
//! A sync function sleeps its thread between attempts: on an async
//! executor's thread that blocks every task on it, so there make the
//! function `async` instead.
//!
//! # Where calls are made
//!
//! One [`Policy`], one state machine, wherever the call is:
//!
//! | where the call is made | use | feature |
//! |---|---|---|
//! | a function you write | `#[retry(..)]` above it | (async: a timer, `tokio` by default) |
//! | a closure, one call site | `backstop::call(&policy, \|\| ..)`, `backstop::call_async`, `backstop::call_async_with` | (async: a timer) |
//! | a closure, with a budget, breaker, classifiers or hooks | `backstop::Retry::new(&policy).breaker(..).when(..).call_async(..)` | (async: a timer) |
//! | a tower stack (hyper, any `Service`) | `backstop::tower::RetryLayer::http(&policy)`, `backstop::tower::RetryLayer::new(&policy)` | `tower` |
//! | reqwest | `#[retry]` with `backstop::reqwest::within_attempt(..).send()` and `when_ok = response_verdict` | `reqwest` |
//! | a reqwest-middleware client | `backstop::reqwest::RetryMiddleware::new(&policy)` | `reqwest-middleware` |
//! | a tonic client | `backstop::tower::RetryLayer::http(&policy)` on its `Channel`, or `#[retry]` with `backstop::tonic::within_attempt(request)` (`Classify` for `tonic::Status`) | `tonic` |
//!
//! Each keeps the same guarantees: the deadline, the budget, the
//! classification, the context inside attempts.
//!
//! # What a call does
//!
//! On entry the deadline starts (never later than the deadline of an
//! enclosing `#[retry]` call, see [Composing calls](#composing-calls)).
//! Before each attempt, the adaptive throttle (`throttle = ..`) may shed
//! it, and the breaker (`breaker = ..`) may reject it. After each attempt,
//! the token budget hears of it (an answer gives back a tenth of a token,
//! a failure a retry could fix takes one; a windowed budget counts the
//! call once instead), and then, in this order:
//!
//! 1. **Classify.** `Ok` is returned unless `when_ok` asks for a retry. An
//!    error is classified by `when`, or by its [`Classify`] impl: `Stop`
//!    returns at once; `RetryIfIdempotent` (a timeout: the work may have
//!    happened) returns unless the function is `idempotent`.
//! 2. **One layer.** If a `#[retry]` call nested in the attempt gave up
//!    after retrying, return: it retried already.
//! 3. **Attempts.** The `attempts`-th attempt is the last.
//! 4. **Delay.** The server's `Retry-After` (`RetryAfter(d)`), spread upward
//!    to `d × [1.0, 1.2)` and never shortened, or refused when longer than
//!    `retry_after_max`; the spread shrinks to fit the deadline, so only
//!    `d` itself not fitting gives up. Otherwise the backoff schedule with
//!    jitter, never above `cap`.
//! 5. **Deadline.** If the delay would reach the deadline, return now:
//!    no attempt starts after the deadline, and no sleep runs into it.
//!    Timers oversleep, so this holds after waking too: a sync function
//!    checks the clock again when its thread wakes, and returns the last
//!    outcome if it is late; an async one, which drops the outcome before
//!    sleeping, gives up rather than sleep within 2 ms of the deadline, as
//!    late as tokio's millisecond timer ends a sleep. (An async attempt can
//!    still start late if its task runs late: an executor that polls it
//!    late behind a blocked worker thread, or an overloaded machine that
//!    wakes the runtime's thread late.)
//! 6. **Budget.** The token budget allows a retry only while more than
//!    half its tokens are left (a windowed budget: while the window has
//!    one to grant).
//! 7. Sleep, and attempt again.
//!
//! # The options
//!
//! All options are optional. Durations are a literal with a unit (`ns`,
//! `us`, `ms`, `s`, `m`, `h`: `250ms`, `1.5s`, `2m`), checked at compile
//! time, or any expression of type [`Duration`](std::time::Duration).
//! Expressions (durations, `attempts`, `factor`, `policy`) are evaluated on
//! every call, before the first attempt, inside the function: they may use
//! its arguments.
//!
//! The table of every option, its values and its default is on the
//! attribute's own page, [`retry`]; each is shown at work below.
//!
//!
//! ### `attempts`
//!
//! A backstop on attempts, the first included; the deadline is what bounds
//! a call in time.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use backstop::retry;
//! # let _vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 5)]
//! fn reach(calls: &mut u32) -> Result<(), Error> {
//!     *calls += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let mut calls = 0;
//! let _ = reach(&mut calls);
//! assert_eq!(calls, 5);
//! ```
//!
//! ### `deadline`
//!
//! The whole call's bound, from entry. `deadline = none` removes it.
//! No attempt starts after it and no sleep runs into it; an attempt already
//! running is not interrupted unless `attempt_timeout` is set (async),
//! which ends every attempt in time for the call to return by the deadline
//! (2 ms before it: tokio's millisecond timer can end that late).
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::retry;
//! let vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 100, jitter = none, deadline = 1s)]
//! fn reach() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let _ = reach();
//! // Attempts at 0, 100, 300 and 700 ms: an 800 ms sleep would pass 1 s.
//! assert_eq!(vt.sleeps().len(), 3);
//! assert!(vt.elapsed() < Duration::from_secs(1));
//! ```
//!
//! ### `backoff`, `base`, `factor`, `cap`
//!
//! The schedule before jitter: `base · factor^n` (exponential),
//! `base · (n + 1)` (linear) or `base` (fixed), never above `cap`; `n`
//! counts the retries so far. The arithmetic saturates: no retry number
//! makes it overflow.
//!
//! Literals are checked at compile time (a zero `base`, a `factor` not above
//! 1, `base` above `cap` are errors). An expression (`base = self.base`) is
//! taken at run time as [`Policy`] takes it: a zero `base` retries at once,
//! bounded only by the attempts, the deadline and the budget; a `factor`
//! below 1 or NaN is read as 1; `base` above `cap` waits `cap`.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::retry;
//! let vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 5, backoff = exponential, base = 50ms, factor = 3, cap = 1s, jitter = none)]
//! fn exponential() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let _ = exponential();
//! assert_eq!(vt.sleeps(), [50, 150, 450, 1000].map(Duration::from_millis));
//!
//! #[retry(attempts = 4, backoff = linear, base = 1s, jitter = none)]
//! fn linear() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let vt = backstop::testing::VirtualTime::start();
//! let _ = linear();
//! assert_eq!(vt.sleeps(), [1, 2, 3].map(Duration::from_secs));
//! ```
//!
//! ### `jitter`
//!
//! How the delay is drawn below the schedule's ceiling `c`: `full` is
//! `uniform(0, c)`, `equal` is `c/2 + uniform(0, c/2)`, `decorrelated` is
//! `min(cap, uniform(base, 3 × previous))`, `none` is `c`. Every call draws
//! from its own random stream, and the result is clamped to `cap`.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::retry;
//! let vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 2, base = 1s, jitter = equal)]
//! fn reach() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let _ = reach();
//! let slept = vt.sleeps()[0];
//! assert!(slept >= Duration::from_millis(500) && slept <= Duration::from_secs(1));
//! ```
//!
//! ### `when` and `when_ok`
//!
//! `when` classifies errors instead of their [`Classify`] impl; `when_ok`
//! retries `Ok` values (an HTTP 503 response). Both take a path or a
//! closure answering `bool` or [`Verdict`].
//!
//! ```
//! # use backstop::{retry, Verdict};
//! # let _vt = backstop::testing::VirtualTime::start();
//! fn transient(status: &u16) -> Verdict {
//!     match status {
//!         429 | 503 => Verdict::Retry,
//!         _ => Verdict::Stop,
//!     }
//! }
//!
//! #[retry(when = transient, when_ok = |body: &String| body.is_empty())]
//! fn get(responses: &mut Vec<Result<String, u16>>) -> Result<String, u16> {
//!     responses.pop().unwrap()
//! }
//!
//! let mut responses = vec![Ok("hello".to_owned()), Ok(String::new()), Err(503)];
//! assert_eq!(get(&mut responses).unwrap(), "hello");
//! ```
//!
//! ### `idempotent`
//!
//! A timeout is ambiguous: the server may have done the work. Such errors
//! ([`Verdict::RetryIfIdempotent`]; `io::ErrorKind::TimedOut`) are retried
//! only where repeating the work is harmless.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use backstop::retry;
//! # let _vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 3)]
//! fn charge(calls: &mut u32) -> Result<(), Error> {
//!     *calls += 1;
//!     Err(ErrorKind::TimedOut.into())
//! }
//!
//! #[retry(attempts = 3, idempotent = true)]
//! fn read(calls: &mut u32) -> Result<(), Error> {
//!     *calls += 1;
//!     Err(ErrorKind::TimedOut.into())
//! }
//!
//! let (mut charges, mut reads) = (0, 0);
//! let _ = charge(&mut charges);
//! let _ = read(&mut reads);
//! assert_eq!((charges, reads), (1, 3));
//! ```
//!
//! ### `budget`
//!
//! Every `#[retry]` function has a [`TokenBudget`](limit::TokenBudget) of its own by default
//! (gRPC's retry throttling: 10 tokens; every failure a retry could fix
//! takes one, every answer gives back 0.1; retries only while more than 5
//! are left; one token back every 10 s). A dependency failing every call
//! gets 5 retries, then one per 10 s, so an outage adds no load worth the
//! name; isolated failures are retried: with attempts failing at random,
//! at most 1% of the retries are refused while 4% of attempts fail or
//! fewer (evenly spaced failures get all their retries up to about 9%).
//! Share a `static` token budget between the functions that call one
//! dependency, use a windowed [`WindowBudget`](limit::WindowBudget) (retries at most a fraction
//! of the calls of a window) where a fixed ratio fits better, or opt out
//! with `budget = none`. It must be a `static`: a `const` is copied at
//! every use, so each call would draw on a fresh one and every retry be
//! granted; `budget = SOME_CONST` is a compile error.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use backstop::{retry, limit::TokenBudget};
//! # let _vt = backstop::testing::VirtualTime::start();
//! static DB: TokenBudget = TokenBudget::new(10, 0.1);
//!
//! #[retry(budget = DB, base = 1ns)] // (no time passes: no refill)
//! fn read_row(attempts: &mut u32) -> Result<(), Error> {
//!     *attempts += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! let mut attempts = 0;
//! for _ in 0..100 {
//!     let _ = read_row(&mut attempts);
//! }
//! // The database is down: 3 retries (at 9, 8 and 6 tokens: every failed
//! // attempt takes one), not 200.
//! assert_eq!(attempts, 103);
//! ```
//!
//! A windowed budget, shared:
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::{retry, limit::WindowBudget};
//! # let _vt = backstop::testing::VirtualTime::start();
//! static DB: WindowBudget = WindowBudget::new(0.2, 5, Duration::from_secs(10));
//!
//! #[retry(budget = DB)]
//! fn read_row() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! #[retry(budget = DB)]
//! fn write_row() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! for _ in 0..100 {
//!     let _ = read_row();
//!     let _ = write_row();
//! }
//! // 20% of 200 calls, plus a reserve of 5/s × 10 s: 90 retries, not 400.
//! assert_eq!(DB.stats().retries, 90);
//! ```
//!
//! ### `breaker`
//!
//! A [`CircuitBreaker`](limit::CircuitBreaker) stops the calls themselves while the dependency is
//! known to be down: after `failure_threshold` consecutive retryable
//! failures (a `Stop` error such as a 400 is the caller's fault and does
//! not count) it opens, and calls fail at once with [`CircuitOpen`],
//! through the function's error type, without running the body. After the
//! cooldown, one call (the probe) goes through, never retried: its success
//! closes the breaker, its failure opens it again. A probe that panics or
//! whose future is dropped frees the slot for the next caller; a probe
//! that hangs holds it for a cooldown at most (then the next caller is a
//! new trial, and the first trial to report decides), so give async
//! functions behind a breaker an `attempt_timeout` all the same: a hung
//! probe still holds its caller. Like a budget, it must be a `static`, shared by
//! everything that calls the dependency.
//!
//! A call that finds the breaker open after a retry's sleep ends with the
//! last outcome if it is sync; an async one, which dropped that outcome
//! before sleeping (so that its future stays `Send`), ends with
//! `Err(E::from(CircuitOpen::new()))`. Both are reported to `on_give_up` as
//! [`GiveUp::BreakerOpen`].
//!
//! ```
//! # use std::time::Duration;
//! use backstop::{retry, limit::CircuitBreaker, CircuitOpen, Classify, Verdict};
//! # let vt = backstop::testing::VirtualTime::start();
//!
//! #[derive(Debug, PartialEq)]
//! enum PayError { Unavailable, Open }
//! impl Classify for PayError {
//!     fn classify(&self) -> Verdict {
//!         match self { PayError::Unavailable => Verdict::Retry, PayError::Open => Verdict::Stop }
//!     }
//! }
//! impl From<CircuitOpen> for PayError {
//!     fn from(_: CircuitOpen) -> Self { PayError::Open }
//! }
//!
//! static PAYMENTS: CircuitBreaker = CircuitBreaker::new(3, Duration::from_secs(30));
//!
//! #[retry(attempts = 3, breaker = PAYMENTS)]
//! fn charge(calls: &mut u32) -> Result<(), PayError> {
//!     *calls += 1;
//!     Err(PayError::Unavailable)
//! }
//!
//! let mut calls = 0;
//! assert_eq!(charge(&mut calls), Err(PayError::Unavailable)); // 3 failures: open
//! assert_eq!(charge(&mut calls), Err(PayError::Open)); // rejected at once
//! assert_eq!(calls, 3);
//! vt.advance(Duration::from_secs(30));
//! assert_eq!(charge(&mut calls), Err(PayError::Unavailable)); // the probe, once
//! assert_eq!(calls, 4);
//! ```
//!
//! ### `attempt_timeout`
//!
//! Each attempt of an `async fn` gets at most this long, and never more
//! than the time left before the deadline (less the 2 ms by which tokio's
//! timer can end late, so that the call returns by its deadline); an
//! attempt that runs out is cancelled and becomes the function's error
//! through `From<Elapsed>`. The value may also be an `Option<Duration>`
//! (`None`: only the deadline cuts an attempt off). With `policy = ..`,
//! the policy's own `attempt_timeout` applies instead, when the error type
//! implements `From<Elapsed>` (see [`Policy::attempt_timeout`]).
//! It is ambiguous (the work may have been done), so it is retried only
//! for an `idempotent` function. A sync attempt cannot be interrupted: give
//! the blocking call its own timeout (from [`context()`]'s `remaining()`).
//!
//! ```
//! # use std::time::Duration;
//! use backstop::{retry, Classify, Elapsed, Verdict};
//!
//! #[derive(Debug, PartialEq)]
//! enum FetchError { TimedOut }
//! impl Classify for FetchError {
//!     fn classify(&self) -> Verdict { Verdict::Retry }
//! }
//! impl From<Elapsed> for FetchError {
//!     fn from(_: Elapsed) -> Self { FetchError::TimedOut }
//! }
//!
//! #[retry(attempts = 3, attempt_timeout = 1s, idempotent)]
//! async fn fetch(calls: &std::cell::Cell<u32>) -> Result<(), FetchError> {
//!     calls.set(calls.get() + 1);
//!     tokio::time::sleep(Duration::from_secs(60)).await; // hangs
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let calls = std::cell::Cell::new(0);
//! assert_eq!(fetch(&calls).await, Err(FetchError::TimedOut));
//! assert_eq!(calls.get(), 3);
//! # }
//! ```
//!
//! ### `hedge` and `hedges`
//!
//! Retries fix failures; a call that is merely slow needs a hedge: after
//! the `hedge` delay, if the attempt has not answered, another copy starts
//! beside it, and the first answer (a success, or an error no retry can
//! fix) wins; the others are dropped at once. A retryable failure of one
//! attempt does not end the others (nor sends the next copy early: each
//! waits for its delay); when all have failed, the call retries as usual,
//! after its backoff, or after the longest `Retry-After` any attempt was
//! given. `hedges = N` allows N copies beside the first, each a delay
//! after the one before.
//!
//! `hedge = p95` (any `p` and two or more digits: `p50`, `p99`, `p999`)
//! hedges after the function's own 95th percentile of recent latencies
//! (over a rotating 10 s window, learnt from first attempts, within 6.25%):
//! about one call in twenty gets a hedge, and none is sent until 100
//! latencies are known. A fixed delay (`hedge = 50ms`) suits a dependency
//! whose latency is known and steady.
//!
//! Hedges are duplicates, so the function must be `idempotent`, `async`,
//! and take no argument an attempt could change (`&mut`, `mut`): attempts
//! side by side share the arguments (by `&`; the future is then `Send`
//! when the arguments are `Sync`). Each hedge is an attempt: it has its
//! own number in [`context()`], the call's idempotency key and deadline;
//! it counts towards `attempts`; and it is granted as a retry is — never
//! after the deadline, never beside a breaker's half-open probe, not while
//! the breaker is open or the adaptive throttle sheds it, and only while
//! the budget grants it: a token budget with more than half its tokens
//! (a check, nothing taken, as gRFC A6 sends hedges), or a windowed
//! budget's token (counted as a retry). When the dependency is failing, the budget
//! stops hedges first: hedging is for latency, not for overload. Hooks
//! see hedges in [`RetryEvent::hedges`] and [`GiveUpEvent::hedges`];
//! `tracing` logs each at DEBUG, `metrics` counts `backstop_hedges_total`
//! and `backstop_hedge_wins_total`.
//!
//! ```
//! # use std::time::Duration;
//! use backstop::retry;
//!
//! #[retry(hedge = 20ms, hedges = 2, idempotent)]
//! async fn price(sku: &str) -> Result<u32, std::io::Error> {
//!     let attempt = backstop::context().unwrap().attempt();
//!     // The first two copies stall; the third, sent at 40 ms, answers.
//!     let took = if attempt < 3 { 5_000 } else { 10 };
//!     tokio::time::sleep(Duration::from_millis(took)).await;
//!     Ok(sku.len() as u32 * 100)
//! }
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let start = tokio::time::Instant::now();
//! assert_eq!(price("sku-1").await.unwrap(), 500);
//! assert_eq!(start.elapsed(), Duration::from_millis(50));
//! # }
//! ```
//!
//! The same is [`Retry::hedge`] for closures, and for a tower stack a
//! [`tower::RetryLayer`] made from such a `Retry`.
//!
//! ### `on_retry` and `on_give_up`
//!
//! Retries nobody can see are a storm nobody can diagnose. `on_retry` is
//! told about each retry before its sleep (a [`RetryEvent`]: the attempt
//! that failed, its outcome, the verdict, the delay, the time since the
//! call began); `on_give_up` about a call that stops retrying and returns
//! its last outcome (a [`GiveUpEvent`], with the [`GiveUp`] reason, whose
//! `as_str()` is a stable name for a metrics label). A success that needed
//! no retry reports nothing.
//!
//! ```
//! # use std::io::{Error, ErrorKind};
//! use backstop::{retry, GiveUpEvent, RetryEvent};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! fn log_retry(event: &RetryEvent<'_, u32, Error>) {
//!     eprintln!("attempt {} failed ({:?}); retrying in {:?}",
//!         event.attempt(), event.error().map(Error::kind), event.delay());
//! }
//!
//! #[retry(attempts = 3, on_retry = log_retry,
//!         on_give_up = |e: &GiveUpEvent<'_, u32, Error>| eprintln!("gave up: {}", e.reason()))]
//! fn fetch() -> Result<u32, Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//! let _ = fetch();
//! ```
//!
//! ### `retry_after_max`
//!
//! A server asking for a longer wait than this is taken at its word: the
//! call gives up instead of sleeping.
//!
//! ```
//! # use std::time::Duration; use backstop::{retry, Classify, Verdict};
//! # let vt = backstop::testing::VirtualTime::start();
//! struct SlowDown(Duration);
//! impl Classify for SlowDown {
//!     fn classify(&self) -> Verdict {
//!         Verdict::RetryAfter(self.0)
//!     }
//! }
//!
//! #[retry(retry_after_max = 5s)]
//! fn call(wait: Duration) -> Result<(), SlowDown> {
//!     Err(SlowDown(wait))
//! }
//!
//! let _ = call(Duration::from_secs(60)); // gives up at once
//! assert!(vt.sleeps().is_empty());
//! let _ = call(Duration::from_secs(2)); // sleeps 2 to 2.4 s, twice
//! assert!(vt.sleeps().iter().all(|d| *d >= Duration::from_secs(2)));
//! ```
//!
//! ### `policy`
//!
//! A [`Policy`] built at run time (from configuration, say) replaces the
//! schedule options, which cannot be combined with it. It is evaluated on
//! every call, before the first attempt. The function keeps a token budget of
//! its own unless the policy has a budget or `budget` says otherwise.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::{retry, Policy};
//! # let _vt = backstop::testing::VirtualTime::start();
//! static FAST: Policy = Policy::new().attempts(2).base(Duration::from_millis(5));
//!
//! #[retry(policy = FAST)]
//! fn ping(calls: &mut u32) -> Result<(), Error> {
//!     *calls += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! #[retry(policy = Policy::new().attempts(tries))]
//! fn ping_n(tries: u32, calls: &mut u32) -> Result<(), Error> {
//!     *calls += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! let (mut a, mut b) = (0, 0);
//! let _ = ping(&mut a);
//! let _ = ping_n(4, &mut b);
//! assert_eq!((a, b), (2, 4));
//! ```
//!
//! ### `crate`
//!
//! The generated code names this crate as `::backstop`; if you depend on it
//! under another name, or re-export it, say where it is.
//!
//! ```
//! # use std::io::Error;
//! mod deps {
//!     pub(crate) use backstop as resilience;
//! }
//!
//! #[backstop::retry(crate = crate::deps::resilience)]
//! fn ping() -> Result<(), Error> {
//!     Ok(())
//! }
//! # fn main() { assert!(ping().is_ok()); }
//! ```
//!
//! # Where it applies
//!
//! Free functions, inherent and trait-impl methods (`self`, `&self`,
//! `&mut self`), trait methods with a default body, generic functions with
//! lifetimes, `where` clauses and `impl Trait` arguments or return types,
//! `async fn` everywhere, `async fn` in traits included. Attributes, doc
//! comments and the signature are kept as written. The return type must be
//! a `Result` (or an alias such as `std::io::Result<T>`).
//!
//! The body runs again on every attempt, so `?` and `return` inside it end
//! that attempt, not the call. Because it runs again, it cannot move an
//! argument out: the compiler reports "use of moved value … value moved
//! into closure here, in previous iteration of loop". Take the argument by
//! reference, or clone it inside the body:
//!
//! ```
//! # use std::io::Error; use backstop::retry;
//! fn send(_body: String) -> Result<(), Error> { Ok(()) }
//!
//! #[retry]
//! fn post(body: &str) -> Result<(), Error> {
//!     send(body.to_owned()) // a fresh copy per attempt
//! }
//! # assert!(post("hi").is_ok());
//! ```
//!
//! The attempts share the arguments: what one attempt changes in an
//! argument (a `mut` one, or through `&mut`), the next attempt sees. To
//! start every attempt from the same value, change a copy made in the body.
//!
//! The future of an `async fn` is `Send` whenever the plain function's
//! would be, with arguments that are `Send` but not `Sync` (a `RefCell`
//! inside, a generic `T: Send`): each attempt holds the arguments by unique
//! reference, `&mut`, which is `Send` when the argument is. An owned
//! argument becomes a `mut` binding for that (invisible to callers and in
//! the documentation), so the body may change it where it was not declared
//! `mut`. Held by shared reference instead, and so needing `Sync` for the
//! future to be `Send`: `&mut` arguments when the return type may borrow
//! from them (it has a `&`, a lifetime or an `impl`), arguments the
//! `policy = ..` expression names, `_`-prefixed or `#[cfg]`'d ones, and
//! those bound by a pattern other than a name.
//!
//! `#[retry]` goes above the other attributes that rewrite a function, so
//! that it sees the function as written: above `#[tracing::instrument]`
//! (one span per call, not per attempt) and above `#[tokio::test]` (one
//! runtime, whose paused clock the sleeps then use). Written below them,
//! it would retry their output, and says so at compile time. Methods of an
//! `#[async_trait]` impl return boxed futures it cannot retry: use native
//! `async fn` in traits instead.
//!
//! ```
//! # use std::io::Error; use backstop::retry;
//! #[retry(attempts = 3)]
//! #[tokio::main(flavor = "current_thread")] // stands for #[tokio::test] here
//! async fn main() -> Result<(), Error> {
//!     Ok(())
//! }
//! ```
//!
//! Mistakes are compile errors on the offending token: an unknown option
//! (with the nearest valid one), a duration without a unit, `base` above
//! `cap`, `attempts = 0` or `-1`, a quoted duration, `backoff =
//! exponential(2)` (that is `factor = 2`), a `factor` with a `fixed` or
//! `linear` backoff, a zero deadline, `policy` mixed
//! with schedule options, `attempt_timeout` on a sync fn, `hedge` on a
//! sync fn, without `idempotent` or with a `&mut` or `mut` argument, a `const` or
//! `extern` fn, a function returning a future instead of an `async fn`, a
//! return type that is not a `Result`, an error type that neither
//! implements [`Classify`] nor has `when`, a `when` of the wrong shape, a
//! `budget` that is not a `static`, an `async fn` without a timer feature
//! (`tokio`, `async-io` or `custom-timer`).
//!
//! # What it expands to
//!
//! Roughly (the real names are hygienic, so they cannot clash with yours):
//!
//! ```
//! # use std::io::Error;
//! # fn fetch() -> Result<u32, Error> { Ok(1) }
//! // #[retry(attempts = 4, base = 100ms)]
//! // fn get() -> Result<u32, Error> { fetch() }
//! fn get() -> Result<u32, Error> {
//!     use backstop::__private as rt;
//!     static BUDGET: rt::TokenBudget = rt::TokenBudget::standard();
//!     // Options that are all literals make a `static` policy.
//!     static POLICY: rt::Policy = rt::Policy::new()
//!         .attempts(4)
//!         .base(std::time::Duration::new(0, 100_000_000));
//!     // (Under `testing::isolate()`, the call draws on a fresh copy.)
//!     let budget = Some(rt::BudgetRef::Token(&BUDGET));
//!     // Names the call for `tracing` and `metrics`.
//!     static FUNCTION: rt::Function = rt::Function::new("my_crate::get");
//!     // The call reads the clock once. Its state machine is made only if
//!     // the first attempt fails: a call that succeeds at once costs a
//!     // clock read, the attempt's context and a read of the budget.
//!     let mut call = rt::Call::new(&POLICY, rt::SystemClock, budget, &FUNCTION);
//!     loop {
//!         // The attempt, with `backstop::context()` set while it runs.
//!         let outcome: Result<u32, Error> =
//!             rt::Call::run_attempt(&mut call, || -> Result<u32, Error> { fetch() });
//!         // `when_ok` and `when`, where given, judge `Ok` and `Err` instead.
//!         let attempted = match <Result<u32, Error> as rt::Outcome>::as_result(&outcome) {
//!             Ok(_value) => rt::Attempted::Succeeded,
//!             Err(error) => rt::Attempted::Failed(rt::Classify::classify(error)),
//!         };
//!         // The decision, told to `on_retry` and `on_give_up` where given
//!         // (here neither is, and no event is built).
//!         let view = <Result<u32, Error> as rt::Outcome>::as_result(&outcome);
//!         let no_retry_hook = None::<fn(&rt::RetryEvent<'_, _, _>)>;
//!         let no_give_up_hook = None::<fn(&rt::GiveUpEvent<'_, _, _>)>;
//!         match rt::Call::decided(&mut call, view, attempted, no_retry_hook, no_give_up_hook) {
//!             Some(delay) => {
//!                 rt::sleep(delay);
//!                 // Woke at or past the deadline: return, never start late.
//!                 let no_give_up_hook = None::<fn(&rt::GiveUpEvent<'_, _, _>)>;
//!                 if !rt::Call::resumed(&mut call, view, no_give_up_hook) {
//!                     return outcome;
//!                 }
//!             }
//!             None => return outcome,
//!         }
//!     }
//! }
//! # assert_eq!(get().unwrap(), 1);
//! ```
//!
//! An `async fn` awaits an `async { body }` block instead of calling a
//! closure, reads the clock and sleeps on the timer of its runtime
//! ([`time::RuntimeClock`]: tokio's, async-io's or one set with
//! [`time::set_timer`]). Its outcome
//! lives in an inner block that ends before the sleep: a retried value (a
//! 503 response and its connection) is dropped at once, and the future is
//! `Send` whenever the plain function's would be, even for a `!Send` error
//! such as `Box<dyn Error>`. Since it keeps no outcome to return after
//! waking, the async loop gives up instead when the delay comes within
//! 2 ms of the deadline (tokio's timer can end a sleep up to two
//! millisecond ticks late; a timer of your own says its own slack).
//!
//! # Composing calls
//!
//! Inside an attempt, [`context()`] tells it which attempt it is, the
//! call's idempotency key (random, the same for every attempt of the call:
//! send it as an `Idempotency-Key` header so that a retried `POST` is done
//! once) and the time left before the deadline (give it to the operation
//! as its timeout). It is set around each attempt, around every poll of an
//! async one: it holds across `.await` points and worker threads. Outside
//! an attempt it is `None`.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration;
//! use backstop::{context, retry};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! #[retry(deadline = 2s, jitter = none)]
//! fn post(sent: &mut Vec<(u32, String, Duration)>) -> Result<(), Error> {
//!     let cx = context().unwrap();
//!     let key = cx.idempotency_key().to_string();
//!     sent.push((cx.attempt(), key, cx.remaining().unwrap()));
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! let mut sent = Vec::new();
//! let _ = post(&mut sent);
//! assert_eq!(sent.len(), 3);
//! assert!(sent.iter().all(|s| s.1 == sent[0].1)); // one key for the call
//! assert_eq!(sent[1].2, Duration::from_millis(1900)); // 100 ms slept
//! ```
//!
//! The context belongs to the attempt's own thread or task: work it hands
//! to `tokio::spawn` or `spawn_blocking` runs outside it (no context, no
//! deadline propagation, no one-layer rule there) unless the call is
//! carried along, as `tracing` carries a span: `tokio::spawn(fut.in_current_call())`
//! ([`InCurrentCall`](scope::InCurrentCall)), or `let call = current_call();` then
//! `spawn_blocking(move || call.in_scope(|| ...))` ([`current_call`](scope::current_call)).
//! `block_in_place` keeps it.
//!
//! `#[retry]` functions that call each other compose:
//!
//! - a nested call's deadline is its own or the enclosing call's,
//!   whichever comes first: an inner call never outlives the outer one;
//! - one layer retries: when a nested call gives up after retrying, the
//!   enclosing call returns its error rather than retry on top of it
//!   (three attempts over three would be nine calls to a dependency that
//!   is down; they stay three). This holds for the whole attempt in which
//!   the nested call gave up, even if the attempt then handled that error
//!   and failed otherwise.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::cell::Cell; use backstop::retry;
//! # let _vt = backstop::testing::VirtualTime::start();
//! #[retry(attempts = 3)]
//! fn query(calls: &Cell<u32>) -> Result<(), Error> {
//!     calls.set(calls.get() + 1);
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! #[retry(attempts = 3)]
//! fn handler(calls: &Cell<u32>) -> Result<(), Error> {
//!     query(calls)
//! }
//!
//! let calls = Cell::new(0);
//! let _ = handler(&calls);
//! assert_eq!(calls.get(), 3); // not 9
//! ```
//!
//! To bound a whole request without retrying it, run it under a deadline:
//! [`deadline`](scope::deadline) for a future, a time limit (its output, or [`Elapsed`] at
//! the deadline, when the future is dropped), and [`deadline_sync`](scope::deadline_sync) for
//! sync code, which cannot be cut off. The `#[retry]` calls inside either
//! see its deadline as they would see an enclosing `#[retry]` call's, and
//! give up before it with their own error.
//!
//! ```
//! # use std::io::{Error, ErrorKind}; use std::time::Duration; use backstop::retry;
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! #[retry(attempts = 10)]
//! async fn load_profile(id: u64) -> Result<String, Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! async fn handler(id: u64) -> Result<String, Error> {
//!     // Every call in the handler ends by 500 ms, whatever its own deadline;
//!     // whatever else runs past it is cut off (`Elapsed`, into `Error`).
//!     backstop::scope::deadline(Duration::from_millis(500), async {
//!         load_profile(id).await
//!     })
//!     .await?
//! }
//!
//! let started = tokio::time::Instant::now();
//! assert!(handler(7).await.is_err());
//! assert!(started.elapsed() < Duration::from_millis(500));
//! # }
//! ```
//!
//! # Observing retries: `tracing` and `metrics`
//!
//! Besides the hooks, two features report every call without code:
//!
//! - `tracing`: a span `retry` per call (field `function`), entered around
//!   each attempt (each poll, for async ones), with an INFO event
//!   `retrying` per retry (`function`, `attempt`, `delay_ms` with its
//!   fraction, `verdict`) and `giving up` per give-up (`function`,
//!   `attempts`, `reason`).
//! - `metrics`: counters `backstop_calls_total`, `backstop_retries_total`,
//!   `backstop_give_ups_total` (label `reason`, as [`GiveUp::as_str`]),
//!   `backstop_rejections_total` (label `reason`) and
//!   `backstop_budget_refusals_total`, histograms `backstop_attempts` (per
//!   call) and `backstop_slept_seconds` (per call), all labelled
//!   `function`. A call is counted when it ends.
//!
//! A give-up is a call that stopped retrying: it retried and then failed,
//! or it wanted a retry that it could not have (attempts, deadline, budget,
//! breaker, an ambiguous failure of a call not declared `idempotent`…). A
//! first attempt failing with an error that no retry can fix (a 404,
//! `NotFound`: [`GiveUp::Stopped`] on attempt 1) retried nothing and gave
//! nothing up: it is a DEBUG event `not retried` and is not counted in
//! `backstop_give_ups_total` (hooks still hear of it, as `on_give_up` with
//! `attempts() == 1`). A call turned away before its first attempt (an
//! open breaker, the adaptive throttle) sent nothing and gave nothing up:
//! a DEBUG event `rejected`, counted in `backstop_rejections_total` (an
//! outage turns every call away; one INFO event each would flood the
//! logs), and `on_give_up` with `attempts() == 0`.
//!
//! `function` is the function's path, `my_service::users::fetch_user`; a
//! method's is the path of the type it is called on, generic arguments
//! left out (`my_service::Client::get`, for every `Client<T>`), so that
//! same-named methods of different types never share a label. A method is
//! a function with a `self` receiver or whose signature names `Self`; an
//! associated function that does neither is named by its module.
//!
//! Off, they compile to nothing.
//!
//! # Classification
//!
//! | [`Verdict`] | meaning | retried |
//! |---|---|---|
//! | `Retry` | transient: nothing was done (a refused connection, a 503) | yes |
//! | `RetryAfter(d)` | the server said when | after `d`…`1.2·d`, unless `d > retry_after_max` |
//! | `RetryIfIdempotent` | ambiguous: the work may have happened (a timeout, a connection reset after the request was sent) | only if `idempotent` |
//! | `Stop` | retrying cannot help (validation, most 4xx) | never |
//! | `StopOverloaded` | the dependency is overloaded and said not to retry (gRPC's negative pushback): a failure for the budgets and the breaker, where a `Stop` is an answer | never |
//!
//! ```
//! use backstop::{retry, Classify, Verdict};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! #[derive(Debug)]
//! enum ApiError { Unavailable, Invalid }
//!
//! impl Classify for ApiError {
//!     fn classify(&self) -> Verdict {
//!         match self {
//!             ApiError::Unavailable => Verdict::Retry,
//!             ApiError::Invalid => Verdict::Stop,
//!         }
//!     }
//! }
//!
//! #[retry]
//! fn submit(attempts: &mut u32) -> Result<(), ApiError> {
//!     *attempts += 1;
//!     Err(ApiError::Invalid)
//! }
//! let mut attempts = 0;
//! let _ = submit(&mut attempts);
//! assert_eq!(attempts, 1); // not retried
//! ```
//!
//! [`std::io::Error`] is classified by kind, by whether the request can
//! have reached the other side. What proves nothing was sent is retried: a
//! refused connection, `NotConnected`, `AddrNotAvailable`, a host or
//! network unreachable, the network down, `Interrupted`.
//! What can come after the request was written is ambiguous, retried only
//! for idempotent operations: a connection reset or aborted, a broken
//! pipe, an unexpected end of stream, `TimedOut` and `WouldBlock` (a socket's read timeout on Unix; a server that did the
//! work and then dropped the connection looks like one that never saw the
//! request). Everything else stops. Declare reads `idempotent`, so that
//! they are retried after a reset too.
//!
//! # Without the macro
//!
//! The same loop runs closures: [`call`], [`call_async`],
//! [`call_async_with`] for an operation that needs `&mut` state (each
//! attempt gets it and hands it back), and [`Retry`] for a budget, a
//! breaker, `when`, `when_ok` and hooks.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use std::time::Duration;
//! use backstop::{Policy, limit::WindowBudget};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! static BUDGET: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));
//! static POLICY: Policy = Policy::new().attempts(4).window_budget(&BUDGET);
//!
//! let mut refusals = 2;
//! let answer = backstop::call(&POLICY, || {
//!     if refusals > 0 {
//!         refusals -= 1;
//!         return Err(Error::from(ErrorKind::ConnectionRefused));
//!     }
//!     Ok(42)
//! });
//! assert_eq!(answer.unwrap(), 42);
//! ```
//!
//! Every decision is made by one state machine, which never sleeps and
//! reads time only through a [`Clock`](time::Clock): the attribute, the
//! closures, the layer and the middleware all drive the same one.
//!
//! # Testing your retries in virtual time
//!
//! [`testing::VirtualTime`] makes the sync retry loops of the current thread
//! sleep in virtual time and records the delays; under
//! `#[tokio::test(start_paused = true)]`, async ones run in tokio's virtual
//! time. A test of a 30-second retry schedule takes microseconds.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use std::time::Duration;
//! use backstop::{retry, testing::VirtualTime};
//!
//! #[retry(attempts = 3, jitter = none)]
//! fn flaky() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! let vt = VirtualTime::start();
//! let _ = flaky();
//! assert_eq!(vt.sleeps(), [Duration::from_millis(100), Duration::from_millis(200)]);
//! ```
//!
//! In async tests, [`testing::record_sleeps`] lists what the retry loops of
//! the test's thread slept, sync and async:
//!
//! ```
//! # use std::io::{Error, ErrorKind};
//! # use std::time::Duration;
//! use backstop::{retry, testing::record_sleeps};
//!
//! #[retry(attempts = 3, jitter = none)]
//! async fn flaky() -> Result<(), Error> {
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // #[tokio::test(start_paused = true)]
//! let sleeps = record_sleeps();
//! let _ = flaky().await;
//! assert_eq!(sleeps.sleeps(), [Duration::from_millis(100), Duration::from_millis(200)]);
//! # }
//! ```
//!
//! ## Tests that do not leak into each other
//!
//! A `#[retry]` function's default token budget is one per function for the
//! whole process, and the tests of a crate run in one process: a test that
//! makes a few failing calls spends the budget that the next test's
//! retries count on, so that test passes alone and fails after the other.
//! The same holds for the budgets, throttles and breakers a crate names
//! (`budget = PG`, `breaker = PAYMENTS`). [`testing::isolate`] gives the
//! calls made on the test's thread fresh copies of all of them, each
//! configured as the one it stands for, until its guard is dropped
//! ([`testing::own`]`(&PG)` is the copy in use). Take one per test, or per
//! case of a table-driven test (a few failing cases in a row spend even a
//! fresh budget: that is what it is for).
//!
//! ```
//! # use std::io::{Error, ErrorKind};
//! use backstop::{retry, testing::{isolate, VirtualTime}};
//!
//! #[retry(attempts = 3)]
//! fn flaky(attempts: &mut u32) -> Result<(), Error> {
//!     *attempts += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! }
//!
//! let _vt = VirtualTime::start();
//! for case in 0..80 {
//!     let _fresh = isolate();
//!     let mut attempts = 0;
//!     let _ = flaky(&mut attempts);
//!     assert_eq!(attempts, 3, "case {case}");
//! }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Loom's models are the runtime's own tests: no user builds with `loom`.
#![cfg_attr(docsrs, doc(auto_cfg(hide(loom))))]
#![forbid(unsafe_code)]

#[doc(inline)]
pub use backstop_macros::retry;
#[doc(inline)]
pub use backstop_runtime::{
    Backoff, CircuitOpen, Classify, Context, Elapsed, GiveUp, GiveUpEvent, Jitter, Policy, Retry,
    RetryEvent, Throttled, Verdict, call, context,
};
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[doc(inline)]
pub use backstop_runtime::{call_async, call_async_with};

#[doc(inline)]
pub use backstop_runtime::{backoff, builder, classify, hedge, limit, scope, testing, time};

#[cfg(feature = "http")]
#[doc(inline)]
pub use backstop_runtime::http;

#[cfg(feature = "serde")]
#[doc(inline)]
pub use backstop_runtime::config;

#[cfg(feature = "reqwest")]
#[doc(inline)]
pub use backstop_runtime::reqwest;

#[cfg(feature = "tower")]
#[doc(inline)]
pub use backstop_runtime::tower;

/// tonic (feature `tonic`): the retry layer on a `Channel`, gRPC statuses
/// classified, the call's deadline sent as `grpc-timeout`.
///
/// # A tonic client on a `Channel`, behind the retry layer
///
/// ```no_run
/// use backstop::{tower::{ReplayBody, RetryLayer}, Policy};
/// use tonic::body::Body;
///
/// # async fn run(channel: tonic::transport::Channel) {
/// type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// let policy = Policy::new().deadline(Some(std::time::Duration::from_secs(5)));
/// let service = tower::ServiceBuilder::new()
///     .layer(RetryLayer::http(&policy))
///     .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
///     .map_err(|e: tonic::transport::Error| BoxError::from(e))
///     .service(channel);
/// // `GreeterClient::new(service)`, or `tonic::client::Grpc::new(service)`.
/// # let _ = service; }
/// ```
#[cfg(feature = "tonic")]
#[doc(inline)]
pub use backstop_runtime::tonic;

/// The items most code needs, for a glob import: `use backstop::prelude::*;`.
///
/// It holds items only, no modules: a glob import of the crate root would
/// bring its modules too, and `backstop::reqwest`, `backstop::http`,
/// `backstop::tower`, `backstop::tonic`, `backstop::time`,
/// `backstop::config` or `backstop::backoff` would then shadow the crates
/// of the same names (`reqwest::Client` would be looked up in
/// `backstop::reqwest`). Import from the crate root
/// and its modules by name.
///
/// ```
/// use backstop::prelude::*;
/// # let _vt = backstop::testing::VirtualTime::start();
///
/// #[retry(attempts = 2)]
/// fn ping() -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// assert!(ping().is_ok());
/// assert_eq!(Verdict::from(true), Verdict::Retry);
/// ```
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::limit::{AdaptiveThrottle, CircuitBreaker, TokenBudget, WindowBudget};
    #[doc(no_inline)]
    pub use crate::{
        Backoff, CircuitOpen, Classify, Context, Elapsed, GiveUp, GiveUpEvent, Jitter, Policy,
        Retry, RetryEvent, Throttled, Verdict, call, context, retry,
    };
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[doc(no_inline)]
    pub use crate::{call_async, call_async_with};
}

/// For code generated by `#[retry]` only: not a public API, may change in
/// any release.
#[doc(hidden)]
pub use backstop_runtime::__private;

/// The manual's chapters beyond the options, also in the repository's
/// `docs/`: why retries need a budget, the storm reproduced, hedging, each
/// integration, configuration, composing and observing retries, and the
/// guarantees with the tests that check them. (Documentation only: this
/// module holds no items.)
#[cfg(any(doc, doctest))]
#[cfg_attr(docsrs, doc(auto_cfg = false))]
#[cfg(all(
    feature = "tokio",
    feature = "reqwest",
    feature = "tower",
    feature = "reqwest-middleware",
    feature = "tonic",
    feature = "serde",
    feature = "tracing",
    feature = "metrics",
    feature = "anyhow",
    feature = "redis",
    feature = "tokio-postgres",
    feature = "deadpool",
))]
pub mod guide {
    #[doc = include_str!("../docs/why.md")]
    pub mod why {}
    #[doc = include_str!("../docs/storm.md")]
    pub mod storm {}
    #[doc = include_str!("../docs/hedging.md")]
    pub mod hedging {}
    #[doc = include_str!("../docs/http.md")]
    pub mod http {}
    #[doc = include_str!("../docs/clients.md")]
    pub mod clients {}
    #[doc = include_str!("../docs/config.md")]
    pub mod config {}
    #[doc = include_str!("../docs/composing.md")]
    pub mod composing {}
    #[doc = include_str!("../docs/guarantees.md")]
    pub mod guarantees {}
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;
