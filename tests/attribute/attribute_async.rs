//! `#[retry]` on async functions, in tokio's paused (virtual) time.

use std::cell::Cell;
use std::io::{Error, ErrorKind};
use std::time::Duration;

use backstop::limit::WindowBudget;
use backstop::{Classify, Verdict, retry};
use tokio::time::Instant;

use crate::support;
use support::refused;

const MS: Duration = Duration::from_millis(1);

#[retry(attempts = 4, jitter = none, budget = none)]
async fn always_fails(
    starts: &std::cell::RefCell<Vec<Duration>>,
    t0: Instant,
) -> Result<(), Error> {
    starts.borrow_mut().push(t0.elapsed());
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn attempts_follow_the_schedule_in_virtual_time() {
    let t0 = Instant::now();
    let starts = std::cell::RefCell::new(Vec::new());
    let err = always_fails(&starts, t0).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(*starts.borrow(), [0, 100, 300, 700].map(|ms| ms * MS));
}

#[retry(attempts = 6, base = 10ms, factor = 3, cap = 200ms, jitter = none, budget = none)]
async fn exponential(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn exponential_with_factor_and_cap() {
    let t0 = Instant::now();
    let calls = Cell::new(0);
    let _ = exponential(&calls).await;
    assert_eq!(calls.get(), 6);
    assert_eq!(t0.elapsed(), (10 + 30 + 90 + 200 + 200) * MS);
}

#[retry(attempts = 5, base = 100ms, cap = 1s, jitter = full, budget = none)]
async fn full_jitter() -> Result<(), Error> {
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn full_jitter_stays_below_the_schedule() {
    // The delays as drawn (the timer's millisecond rounding would make
    // distinct draws collide).
    let recorded = backstop::testing::record_sleeps();
    for _ in 0..100 {
        let _ = full_jitter().await;
    }
    let sleeps = recorded.sleeps();
    assert_eq!(sleeps.len(), 400);
    let mut sequences = std::collections::HashSet::new();
    for call in sleeps.chunks(4) {
        for (delay, ceiling) in call.iter().zip([100, 200, 400, 800]) {
            assert!(*delay <= ceiling * MS, "{delay:?} above {ceiling} ms");
        }
        sequences.insert(call.to_vec());
    }
    assert_eq!(
        sequences.len(),
        100,
        "calls must not share a jitter sequence"
    );
}

#[retry(attempts = 10, base = 400ms, jitter = none, deadline = 1s, budget = none)]
async fn short_deadline(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

#[retry(attempts = 10, deadline = 1s, budget = none)]
async fn slow(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_call() {
    let t0 = Instant::now();
    let calls = Cell::new(0);
    let _ = short_deadline(&calls).await;
    assert_eq!(calls.get(), 2);
    assert_eq!(t0.elapsed(), 400 * MS);

    let t0 = Instant::now();
    calls.set(0);
    let _ = slow(&calls).await;
    assert_eq!(calls.get(), 1, "the slow first attempt ate the deadline");
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
}

#[derive(Debug)]
struct Throttled(Duration);

impl Classify for Throttled {
    fn classify(&self) -> Verdict {
        Verdict::RetryAfter(self.0)
    }
}

#[retry(attempts = 2, deadline = 1m, budget = none)]
async fn throttled(after: Duration) -> Result<(), Throttled> {
    Err(Throttled(after))
}

#[retry(attempts = 2, retry_after_max = 1s, budget = none)]
async fn throttled_with_max(after: Duration) -> Result<(), Throttled> {
    Err(Throttled(after))
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_jittered_and_bounded() {
    let t0 = Instant::now();
    let _ = throttled(Duration::from_secs(5)).await;
    let slept = t0.elapsed();
    assert!(
        slept >= Duration::from_secs(5) && slept <= Duration::from_secs(6),
        "{slept:?}"
    );

    let t0 = Instant::now();
    let _ = throttled_with_max(Duration::from_secs(5)).await;
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "asked for too long: gave up at once"
    );
}

#[retry(attempts = 3, when = String::is_empty, when_ok = |n| *n < 3, budget = none)]
async fn classified(counter: &Cell<u32>, fail_with: Option<&str>) -> Result<u32, String> {
    counter.set(counter.get() + 1);
    match fail_with {
        Some(message) => Err(message.to_owned()),
        None => Ok(counter.get()),
    }
}

#[tokio::test(start_paused = true)]
async fn when_and_when_ok() {
    let counter = Cell::new(0);
    assert_eq!(
        classified(&counter, None).await,
        Ok(3),
        "Ok values below 3 retried"
    );
    counter.set(0);
    let _ = classified(&counter, Some("")).await;
    assert_eq!(counter.get(), 3);
    counter.set(0);
    let _ = classified(&counter, Some("invalid")).await;
    assert_eq!(counter.get(), 1);
}

#[retry(attempts = 3, budget = none)]
async fn timed_out(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(ErrorKind::TimedOut.into())
}

#[retry(attempts = 3, idempotent, budget = none)]
async fn timed_out_idempotent(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(ErrorKind::TimedOut.into())
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_retried_only_when_idempotent() {
    let calls = Cell::new(0);
    let _ = timed_out(&calls).await;
    assert_eq!(calls.get(), 1);
    calls.set(0);
    let _ = timed_out_idempotent(&calls).await;
    assert_eq!(calls.get(), 3);
}

static IO_BREAKER: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(2, Duration::from_secs(60));

// `std::io::Error` takes `attempt_timeout` and `breaker` as it is: the
// runtime converts `Elapsed` and `CircuitOpen` into it.
#[retry(attempts = 5, attempt_timeout = 1s, deadline = none, idempotent, budget = none, breaker = IO_BREAKER)]
async fn hangs(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn io_errors_take_attempt_timeout_and_breaker() {
    let calls = Cell::new(0);
    let t0 = Instant::now();
    let timed_out = hangs(&calls).await.unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::TimedOut);
    let inner = timed_out.into_inner().expect("wraps the Elapsed");
    assert!(inner.downcast::<backstop::Elapsed>().is_ok());
    // Two timeouts open the breaker: the call ends with the last outcome.
    assert_eq!(calls.get(), 2);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let open = hangs(&calls).await.unwrap_err();
    let inner = open.into_inner().expect("wraps the CircuitOpen");
    assert!(inner.downcast::<backstop::CircuitOpen>().is_ok());
    assert_eq!(calls.get(), 2, "rejected without running");
}

static SHARED: WindowBudget = WindowBudget::new(0.5, 0, Duration::from_secs(10));

#[retry(attempts = 5, budget = SHARED)]
async fn budgeted(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn a_shared_budget_bounds_async_retries() {
    let calls = Cell::new(0);
    let _ = budgeted(&calls).await;
    let _ = budgeted(&calls).await;
    assert_eq!(calls.get(), 3, "one retry for two calls at 50%");
}

struct Session {
    tries: u32,
}

impl Session {
    #[retry(attempts = 5, jitter = none, budget = none)]
    async fn login(&mut self, user: &str) -> Result<String, Error> {
        self.tries += 1;
        if self.tries < 3 {
            return Err(refused());
        }
        Ok(format!("{user}:{}", self.tries))
    }
}

trait Fetch {
    async fn raw(&self) -> Result<u32, Error>;

    #[retry(attempts = 3, jitter = none, budget = none)]
    async fn fetch(&self) -> Result<u32, Error> {
        let n = self.raw().await?;
        Ok(n * 2)
    }
}

struct Flaky(Cell<u32>);

impl Fetch for Flaky {
    async fn raw(&self) -> Result<u32, Error> {
        self.0.set(self.0.get() + 1);
        if self.0.get() < 3 {
            Err(refused())
        } else {
            Ok(self.0.get())
        }
    }
}

#[tokio::test(start_paused = true)]
async fn methods_and_async_fn_in_traits() {
    let t0 = Instant::now();
    let mut session = Session { tries: 0 };
    assert_eq!(session.login("ada").await.unwrap(), "ada:3");
    assert_eq!(t0.elapsed(), 300 * MS);

    let flaky = Flaky(Cell::new(0));
    assert_eq!(
        flaky.fetch().await.unwrap(),
        6,
        "`?` ended only the attempt"
    );
}

#[retry(attempts = 10, budget = none)]
async fn forever(calls: &std::sync::atomic::AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_cancels_the_retries() {
    let calls = std::sync::atomic::AtomicU32::new(0);
    let out = tokio::time::timeout(Duration::from_millis(50), forever(&calls)).await;
    assert!(out.is_err());
    let seen = calls.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), seen);
}

#[retry(attempts = 2, budget = none)]
async fn send_future(x: u32) -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(x)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_future_is_send() {
    let handle = tokio::spawn(send_future(7));
    assert_eq!(handle.await.unwrap().unwrap(), 7);
}

#[retry(attempts = 4, backoff = linear, base = 50ms, jitter = none, budget = none)]
async fn linear() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 4, backoff = fixed, base = 50ms, jitter = none, budget = none)]
async fn fixed() -> Result<(), Error> {
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn linear_and_fixed_schedules() {
    let t0 = Instant::now();
    let _ = linear().await;
    assert_eq!(t0.elapsed(), (50 + 100 + 150) * MS);
    let t0 = Instant::now();
    let _ = fixed().await;
    assert_eq!(t0.elapsed(), 150 * MS);
}

#[retry(attempts = 2, base = 1s, jitter = equal, budget = none)]
async fn equal_jitter() -> Result<(), Error> {
    Err(refused())
}

#[retry(attempts = 3, base = 100ms, cap = 250ms, jitter = decorrelated, budget = none)]
async fn decorrelated_jitter() -> Result<(), Error> {
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn equal_and_decorrelated_jitter_bounds() {
    for _ in 0..100 {
        let t0 = Instant::now();
        let _ = equal_jitter().await;
        let slept = t0.elapsed();
        assert!(slept >= 500 * MS && slept <= 1000 * MS, "{slept:?}");

        let t0 = Instant::now();
        let _ = decorrelated_jitter().await;
        let slept = t0.elapsed();
        // Two delays, each in [base, cap].
        assert!(slept >= 200 * MS && slept <= 500 * MS, "{slept:?}");
    }
}

#[retry(attempts = 20, deadline = none, cap = 1h, jitter = none, budget = none)]
async fn no_deadline(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn deadline_none_leaves_only_the_attempts() {
    let calls = Cell::new(0);
    let _ = no_deadline(&calls).await;
    assert_eq!(calls.get(), 20);
}

static POLICY: backstop::Policy = backstop::Policy::new()
    .attempts(3)
    .base(Duration::from_millis(7))
    .jitter(backstop::Jitter::None);

#[retry(policy = POLICY, budget = none)]
async fn with_policy(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

mod facade {
    pub(crate) use backstop as renamed;
}

#[retry(crate = self::facade::renamed, attempts = 2, base = 1ms, budget = none)]
// (A relative path is named once: written out at each use, each `self::`
// would be an unnecessary qualification.)
#[deny(unused_qualifications)]
async fn through_a_renamed_crate(calls: &Cell<u32>) -> Result<(), Error> {
    calls.set(calls.get() + 1);
    Err(refused())
}

#[tokio::test(start_paused = true)]
async fn policy_and_crate_path() {
    let t0 = Instant::now();
    let calls = Cell::new(0);
    let _ = with_policy(&calls).await;
    assert_eq!(calls.get(), 3);
    assert_eq!(t0.elapsed(), (7 + 14) * MS);
    calls.set(0);
    let _ = through_a_renamed_crate(&calls).await;
    assert_eq!(calls.get(), 2);
}

type Starts = std::cell::RefCell<Vec<Instant>>;

#[retry(attempts = 2, base = 10ms, jitter = none, deadline = 10500us, budget = none)]
async fn tight_deadline(starts: &Starts) -> Result<(), Error> {
    starts.borrow_mut().push(Instant::now());
    Err(refused())
}

#[retry(attempts = 2, deadline = 11500us, backoff = fixed, base = 10101us, jitter = none, budget = none)]
async fn odd_offset(starts: &Starts) -> Result<(), Error> {
    starts.borrow_mut().push(Instant::now());
    Err(refused())
}

/// Moves the paused clock `offset` past a millisecond tick, calls `f`, and
/// checks that every attempt started before `deadline` after entry.
async fn starts_before_the_deadline<'a, F: Future<Output = Result<(), Error>>>(
    offset: Duration,
    deadline: Duration,
    starts: &'a Starts,
    f: impl FnOnce(&'a Starts) -> F,
) {
    tokio::time::advance(offset).await;
    let entry = Instant::now();
    let _ = f(starts).await;
    for start in starts.borrow().iter() {
        let after = *start - entry;
        assert!(
            after < deadline,
            "an attempt started {after:?} after entry, past {deadline:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn no_attempt_starts_after_the_deadline_when_the_timer_rounds_up() {
    // tokio's timer fires on whole milliseconds: from +300 µs, a 10 ms
    // sleep ends at 11 ms, past a deadline of 10.5 ms after entry.
    let starts = Starts::default();
    let deadline = Duration::from_micros(10_500);
    starts_before_the_deadline(
        Duration::from_micros(300),
        deadline,
        &starts,
        tight_deadline,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn no_attempt_starts_after_the_deadline_when_the_timer_parks_a_tick_late() {
    // From +900 µs, a 10.101 ms sleep ends at 12.9 ms: two ticks of
    // rounding, past a deadline of 11.5 ms after entry.
    let starts = Starts::default();
    let deadline = Duration::from_micros(11_500);
    starts_before_the_deadline(Duration::from_micros(900), deadline, &starts, odd_offset).await;
}

/// A server that does the work, then resets the connection instead of
/// answering, once; it answers `OK` on the connections after. Returns its
/// address and the writes it applied.
async fn applies_then_resets_once() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let applied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&applied);
    tokio::spawn(async move {
        for n in 0.. {
            let (socket, _) = listener.accept().await.unwrap();
            let mut socket = tokio::io::BufReader::new(socket);
            let mut line = String::new();
            socket.read_line(&mut line).await.unwrap();
            log.lock().unwrap().push(line.trim().to_owned());
            if n == 0 {
                // The work is done; the answer never leaves (a crash, a
                // proxy timing out): the client sees a reset.
                socket.get_ref().set_zero_linger().unwrap();
                drop(socket);
            } else {
                socket.get_mut().write_all(b"OK\n").await.unwrap();
            }
        }
    });
    (addr, applied)
}

/// Sends one write and reads its answer.
async fn insert(addr: std::net::SocketAddr, row: &str) -> Result<String, Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    socket
        .write_all(format!("INSERT {row}\n").as_bytes())
        .await?;
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await?;
    if answer.is_empty() {
        return Err(ErrorKind::UnexpectedEof.into());
    }
    Ok(answer)
}

#[retry(base = 1ms, jitter = none, budget = none)]
async fn insert_once(addr: std::net::SocketAddr) -> Result<String, Error> {
    insert(addr, "order 7").await
}

#[retry(base = 1ms, jitter = none, budget = none, idempotent)]
async fn upsert(addr: std::net::SocketAddr) -> Result<String, Error> {
    insert(addr, "order 7").await
}

#[tokio::test]
async fn a_write_reset_after_it_was_sent_is_not_repeated() {
    let (addr, applied) = applies_then_resets_once().await;
    let error = insert_once(addr).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);
    assert_eq!(*applied.lock().unwrap(), ["INSERT order 7"]);
}

#[tokio::test]
async fn an_idempotent_write_reset_after_it_was_sent_is_repeated() {
    let (addr, applied) = applies_then_resets_once().await;
    assert_eq!(upsert(addr).await.unwrap(), "OK\n");
    assert_eq!(
        *applied.lock().unwrap(),
        ["INSERT order 7", "INSERT order 7"]
    );
}

static LATE_SENT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[retry(attempts = 5, base = 100ms, jitter = none, deadline = 1s, budget = none)]
async fn runs_late() -> Result<(), Error> {
    LATE_SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Err(ErrorKind::NotConnected.into())
}

/// A call whose task runs late (here: the clock moved past its deadline
/// while it slept, as an executor blocked behind another task would make
/// it) starts no attempt past its deadline: it gives up with an `Elapsed`
/// that says so, in place of the outcome it dropped before sleeping.
#[tokio::test(start_paused = true)]
async fn a_call_whose_task_runs_late_starts_no_attempt_past_its_deadline() {
    let call = tokio::spawn(runs_late());
    // Its first attempt fails, and it sleeps 100 ms...
    tokio::task::yield_now().await;
    assert_eq!(LATE_SENT.load(std::sync::atomic::Ordering::Relaxed), 1);
    // ...and wakes 2 s later.
    tokio::time::advance(Duration::from_secs(2)).await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(
        LATE_SENT.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no attempt past the deadline"
    );
    assert_eq!(error.kind(), ErrorKind::TimedOut);
    let elapsed = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<backstop::Elapsed>())
        .expect("an Elapsed");
    assert!(
        elapsed
            .to_string()
            .contains("came while it waited to retry"),
        "{elapsed}"
    );
}

#[retry(attempts = 5, base = 100ms, jitter = none, deadline = 1s, budget = none)]
async fn refused_then_late() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

/// Woken past its deadline after a refusal, a call gives up with an
/// `Elapsed` that says it was refused: it classifies, and converts to an
/// `io::Error`, as the refusal did.
#[tokio::test(start_paused = true)]
async fn a_call_late_after_a_refusal_gives_up_as_refused() {
    let call = tokio::spawn(refused_then_late());
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_secs(2)).await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(error.classify(), Verdict::Refused);
    let elapsed = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<backstop::Elapsed>())
        .expect("an Elapsed");
    assert!(elapsed.is_refused());
    assert!(
        elapsed
            .to_string()
            .contains("after its dependency refused it"),
        "{elapsed}"
    );
}
