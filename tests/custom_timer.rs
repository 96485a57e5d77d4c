//! Feature `custom-timer`: async retry loops on a timer of the user's own,
//! set once with `backstop::time::set_timer`. This one keeps virtual
//! time: a sleep returns at once and moves its clock.
//! Run with `cargo test -p backstop --features custom-timer --test custom_timer`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{Error, ErrorKind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use backstop::retry;
use backstop::time::{RuntimeClock, Timer, set_timer};

/// Virtual time: an origin and nanoseconds slept since.
struct Virtual {
    origin: std::sync::OnceLock<Instant>,
    nanos: AtomicU64,
}

thread_local! {
    /// Reads of the clock, and every delay slept, on this thread (each
    /// test runs on its own).
    static READS: Cell<u32> = const { Cell::new(0) };
    static SLEEPS: RefCell<Vec<Duration>> = const { RefCell::new(Vec::new()) };
}

fn reads() -> u32 {
    READS.with(Cell::get)
}

impl Timer for Virtual {
    fn now(&self) -> Instant {
        READS.with(|reads| reads.set(reads.get() + 1));
        *self.origin.get_or_init(Instant::now)
            + Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.nanos
            .fetch_add(delay.as_nanos() as u64, Ordering::SeqCst);
        SLEEPS.with(|sleeps| sleeps.borrow_mut().push(delay));
        Box::pin(std::future::ready(()))
    }
}

static VIRTUAL: Virtual = Virtual {
    origin: std::sync::OnceLock::new(),
    nanos: AtomicU64::new(0),
};

/// The virtual timer (one per process: every test sets it first), one
/// test at a time: its clock is the process's, and
/// a test that moves it on (a breaker's cooldown) would otherwise pass the
/// deadline of another's call running meanwhile.
fn virtual_time() -> Exclusive {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = set_timer(&VIRTUAL);
    Exclusive(guard)
}

/// [`VIRTUAL`], held by one test.
struct Exclusive(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl std::ops::Deref for Exclusive {
    type Target = Virtual;
    fn deref(&self) -> &Virtual {
        &VIRTUAL
    }
}

/// Polls `future` to its end: the timer never makes it wait.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
}

#[retry(attempts = 10, base = 1s, factor = 2, jitter = none, deadline = 10s, budget = none)]
async fn down() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_timer_of_ones_own_keeps_the_time_and_the_deadline() {
    let _timer = virtual_time();
    assert!(matches!(RuntimeClock::current(), RuntimeClock::Custom));
    assert!(block_on(down()).is_err());
    let sleeps = SLEEPS.with(|sleeps| sleeps.borrow().clone());
    // 1 + 2 + 4 s; the next 8 s would pass the 10 s deadline.
    let secs = |s: u64| Duration::from_secs(s);
    assert_eq!(sleeps, [secs(1), secs(2), secs(4)]);
}

#[test]
fn a_timer_set_is_used_even_inside_a_tokio_runtime() {
    let _timer = virtual_time();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert!(matches!(RuntimeClock::current(), RuntimeClock::Custom));
    });
}

#[retry]
async fn up() -> Result<u8, Error> {
    Ok(1)
}

#[retry(budget = none)]
async fn flaky(failures: &mut u32) -> Result<u8, Error> {
    if *failures > 0 {
        *failures -= 1;
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(1)
}

#[test]
fn a_call_whose_first_attempt_succeeds_reads_the_clock_once() {
    let _timer = virtual_time();
    let before = reads();
    assert_eq!(block_on(up()).unwrap(), 1);
    assert_eq!(reads() - before, 1, "#[retry] async fn");

    let before = reads();
    let policy = backstop::Policy::new();
    let out = block_on(backstop::call_async(&policy, || async {
        Ok::<_, Error>(2)
    }));
    assert_eq!(out.unwrap(), 2);
    assert_eq!(reads() - before, 1, "call_async");

    // The count sees every read: a call that retries reads the clock again
    // to decide.
    let before = reads();
    assert_eq!(block_on(flaky(&mut 1)).unwrap(), 1);
    assert!(reads() - before > 1, "{}", reads() - before);
}

#[test]
fn a_breakers_state_is_read_on_the_timer_set() {
    // The async loops read the timer set: so does `state()`, or a breaker
    // the timer says has cooled down would read open until real time
    // caught up.
    use backstop::limit::{BreakerState, CircuitBreaker};
    let timer = virtual_time();
    let breaker = CircuitBreaker::new(1, Duration::from_secs(60));
    let now = timer.now();
    breaker
        .try_acquire(now)
        .unwrap()
        .failed(backstop::Verdict::Retry, now);
    assert_eq!(breaker.state(), BreakerState::Open);
    timer.nanos.fetch_add(61_000_000_000, Ordering::SeqCst);
    assert_eq!(
        breaker.state(),
        BreakerState::HalfOpen,
        "cooled down on the timer"
    );
}
