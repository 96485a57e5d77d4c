//! Testing retries without waiting for them, and without one test's calls
//! changing what another's get.
//!
//! - [`VirtualTime`] makes the sync retry loops of the current thread sleep
//!   in virtual time. Async loops run on their runtime's clock: on tokio,
//!   under `#[tokio::test(start_paused = true)]`, they are virtual already
//!   (on async-io, or the crate's own timer thread where there is no
//!   runtime, the sleeps are real: keep `base` short, or set a timer of
//!   your own that reads a virtual clock with
//!   [`set_timer`](crate::time::set_timer), in a test file of its own). Tokio
//!   pauses time on its current-thread runtime only, so a test of what
//!   time changes (a breaker's cooldown, a budget's refill, a `Retry-After`)
//!   on async calls runs there: `#[tokio::test(start_paused = true)]`, not
//!   `flavor = "multi_thread"`, where every sleep is real.
//! - [`record_sleeps`] lists the delays retry loops slept on this thread,
//!   sync and async: what `VirtualTime::sleeps` tells of sync loops, for
//!   async tests in tokio's paused time too.
//! - [`seed_jitter`] makes the jitter of the retry loops that start on this
//!   thread replay the same delays run after run.
//! - [`isolate`] gives the retry loops called on this thread fresh
//!   protection (their own token budget, and the budgets, adaptive throttles and
//!   breakers they name), so that a test's outcome does not depend on the
//!   tests that ran before it.
//!
//! A paused tokio clock moves on to the next timer whenever the runtime has
//! nothing to run, also while it waits for an answer from outside the
//! runtime: a server on another thread or in another process, a mock server
//! that runs a runtime of its own, a real database. An attempt with a timer
//! beside it (the reqwest middleware's and `within_attempt`'s, at the call's
//! time left; an `attempt_timeout`) is then cut off before the answer can
//! come (in a debug build the cut-off says so on standard error).
//! Serve a test's mock on the test's own runtime (`tokio::spawn` an axum or
//! hyper server on `127.0.0.1:0`), or test against an outside server in
//! real time, with short delays (`base = 1ms`).

use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use crate::limit::isolation::{Fresh, Isolation, isolate, own};
use crate::time::virtual_time::{
    IN_USE, RECORDING, RECORDING_BELOW, VIRTUAL, VIRTUAL_BELOW, Virtual, install, uninstall,
    virtual_now,
};

const GONE: &str = "a VirtualTime's clock is installed while a VirtualTime lives on its thread";

/// Virtual time for the sync retry loops of the current thread.
///
/// `VirtualTime::start()` installs it until the value is dropped: every
/// sleep of a retry loop (the `call` runner, a `#[retry]` sync fn) then
/// returns at once and advances the virtual clock, and everything that reads
/// time through [`SystemClock`](crate::time::SystemClock) (the deadline, the
/// budget's window) reads the virtual clock. A second `start` on the same
/// thread shadows the first until it is dropped, in any order (a clock
/// reassigned for each case takes away only its own). Bind it: `let _ =
/// VirtualTime::start();` drops it at once. Time passes only by the
/// loops' sleeps and [`advance`](Self::advance): an attempt that takes
/// real time (a slow fake, a real server) takes none of the deadline's,
/// which counts only the sleeps and so does not limit how long such
/// attempts take. Async loops sleep on
/// their runtime's timer, which it does not drive (use tokio's paused
/// time): one that sleeps while it is installed on its thread says so on
/// standard error, once a thread. A sync loop that sleeps in real time
/// inside a current-thread tokio runtime (`#[tokio::test]`'s, whose clock
/// a test may have paused, without a `VirtualTime`) says so too, once a
/// thread, in a process that uses these tools.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Jitter, Policy, testing::VirtualTime};
///
/// let vt = VirtualTime::start();
/// let policy = Policy::new().attempts(4).jitter(Jitter::None).no_budget();
/// let mut attempts = 0;
/// let result: Result<(), std::io::Error> = backstop::call(&policy, || {
///     attempts += 1;
///     Err(std::io::ErrorKind::ConnectionRefused.into())
/// });
/// assert!(result.is_err());
/// assert_eq!(attempts, 4);
/// assert_eq!(vt.sleeps(), [100, 200, 400].map(Duration::from_millis));
/// assert_eq!(vt.elapsed(), Duration::from_millis(700));
/// ```
pub struct VirtualTime {
    /// Its number among the thread's guards.
    guard: u64,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

impl VirtualTime {
    /// Installs virtual time on this thread, starting at the real now,
    /// until the value is dropped.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::testing::VirtualTime;
    /// let before = Instant::now();
    /// let vt = VirtualTime::start();
    /// vt.advance(Duration::from_secs(60));
    /// assert!(vt.now() >= before + Duration::from_secs(60));
    /// drop(vt); // real time again
    /// ```
    #[must_use = "virtual time lasts as long as the value: `let vt = VirtualTime::start();`"]
    pub fn start() -> Self {
        let fresh = Virtual {
            start: Instant::now(),
            elapsed: Duration::ZERO,
            sleeps: Vec::new(),
        };
        // Before it is installed: a thread that sees it installed has seen
        // the flag (the same thread), and others never read this thread's.
        IN_USE.store(true, Ordering::Relaxed);
        Self {
            guard: install(&VIRTUAL, &VIRTUAL_BELOW, fresh),
            _thread: PhantomData,
        }
    }

    fn with<R>(f: impl FnOnce(&mut Virtual) -> R) -> R {
        VIRTUAL.with(|v| {
            let mut v = v.borrow_mut();
            f(v.as_mut().expect(GONE))
        })
    }

    /// The virtual now.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::testing::VirtualTime;
    /// let vt = VirtualTime::start();
    /// let start = vt.now();
    /// vt.advance(Duration::from_millis(250));
    /// assert_eq!(vt.now() - start, Duration::from_millis(250));
    /// ```
    ///
    /// This and the other readers read the clock in force on the thread:
    /// while a `VirtualTime` started after this one lives, that one's.
    pub fn now(&self) -> Instant {
        // (Installed while `self` lives: the real now only during a
        // thread's teardown.)
        virtual_now().unwrap_or_else(Instant::now)
    }

    /// Virtual time passed since `start`: slept by retry loops, or
    /// [advanced](Self::advance).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::testing::VirtualTime;
    /// use backstop::{Jitter, Policy};
    /// let vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None).no_budget();
    /// let _ = backstop::call(&policy, || Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
    /// assert_eq!(vt.elapsed(), Duration::from_millis(100)); // one sleep, of `base`
    /// ```
    pub fn elapsed(&self) -> Duration {
        Self::with(|v| v.elapsed)
    }

    /// Moves the clock forward, as a slow attempt would.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::testing::VirtualTime;
    /// let vt = VirtualTime::start();
    /// let t0 = vt.now();
    /// vt.advance(Duration::from_secs(3));
    /// assert_eq!(vt.now() - t0, Duration::from_secs(3));
    /// assert!(vt.sleeps().is_empty()); // advancing is not sleeping
    /// ```
    ///
    /// The clock saturates at the latest instant the platform can
    /// represent: `advance(Duration::MAX)` parks it there, never back.
    pub fn advance(&self, by: Duration) {
        Self::with(|v| v.advance(by));
    }

    /// The delays retry loops slept, in order.
    ///
    /// A call held after a refusal (a refused connection once its budget
    /// refuses retries: the manual's order of decisions, step 6) waits
    /// for its retry in sleeps of half to one and a half `base`, spread
    /// whatever `jitter` says, the last cut short to end at the deadline:
    /// each is listed.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::testing::VirtualTime;
    /// use backstop::{Jitter, Policy};
    /// let vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(3).jitter(Jitter::None).no_budget();
    /// let _ = backstop::call(&policy, || Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
    /// assert_eq!(vt.sleeps(), [100, 200].map(Duration::from_millis));
    /// ```
    pub fn sleeps(&self) -> Vec<Duration> {
        Self::with(|v| v.sleeps.clone())
    }
}

impl Drop for VirtualTime {
    fn drop(&mut self) {
        uninstall(&VIRTUAL, &VIRTUAL_BELOW, self.guard);
    }
}

impl std::fmt::Debug for VirtualTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // (Not `elapsed()`, which expects the clock installed: `Debug`
        // does not panic, even during a thread's teardown.)
        let elapsed = VIRTUAL.with(|v| v.try_borrow().ok()?.as_ref().map(|v| v.elapsed));
        f.debug_struct("VirtualTime")
            .field("elapsed", &elapsed)
            .finish_non_exhaustive()
    }
}

/// Makes jitter reproducible on this thread: every retry loop that starts
/// on this thread afterwards draws its random stream from a sequence fixed
/// by `seed`, so a single-threaded program (a simulation on a
/// current-thread tokio runtime, a test) replays the same delays run after
/// run, on one platform and one build (the generator, `rand`'s
/// `SmallRng`, differs on a 32-bit target and may change with `rand`).
/// Streams stay distinct from call to call.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Policy, testing::{seed_jitter, VirtualTime}};
///
/// let delays = || {
///     let vt = VirtualTime::start();
///     let policy = Policy::new().attempts(4).no_budget();
///     let _ = backstop::call(&policy, || -> Result<(), std::io::Error> {
///         Err(std::io::ErrorKind::ConnectionRefused.into())
///     });
///     vt.sleeps()
/// };
/// seed_jitter(42);
/// let first = delays();
/// seed_jitter(42);
/// assert_eq!(delays(), first);
/// assert_ne!(delays(), first, "the next call draws another stream");
/// seed_jitter(43);
/// assert_ne!(delays(), first, "another seed, other delays");
/// ```
pub fn seed_jitter(seed: u64) {
    crate::state::backoff::Rng::reseed_thread(seed);
}

/// Records the delays retry loops sleep on this thread, until dropped: see
/// [`record_sleeps`], which makes one.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// let sleeps: backstop::testing::SleepRecorder = backstop::testing::record_sleeps();
/// assert!(sleeps.sleeps().is_empty());
/// ```
pub struct SleepRecorder {
    /// Its number among the thread's guards.
    guard: u64,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

/// Starts recording the delays that retry loops sleep on this thread, sync
/// and async, until the returned recorder is dropped. An async retry loop
/// sleeps on the thread that polls it: in a `#[tokio::test]` (one thread
/// unless `flavor = "multi_thread"`; always one with `start_paused`) that
/// is every call the test makes, the tasks it spawns included. A second
/// recorder on the thread shadows the first until it is dropped, in any
/// order. The
/// delays are those the loops asked for: tokio's timer ends each sleep
/// on a whole millisecond, so a paused clock moves on by up to 1 ms more
/// per sleep than the delays add up to.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::time::Duration;
/// use backstop::{testing::record_sleeps, Jitter, Policy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// // In a `#[tokio::test(start_paused = true)]`: the sleeps take no time.
/// let sleeps = record_sleeps();
/// let policy = Policy::new().attempts(3).jitter(Jitter::None).no_budget();
/// let out: Result<(), Error> = backstop::call_async(&policy, || async {
///     Err(ErrorKind::ConnectionRefused.into())
/// })
/// .await;
/// assert!(out.is_err());
/// assert_eq!(sleeps.sleeps(), [100, 200].map(Duration::from_millis));
/// # }
/// ```
#[must_use = "sleeps are recorded as long as the recorder lives: `let sleeps = record_sleeps();`"]
pub fn record_sleeps() -> SleepRecorder {
    crate::limit::isolation::note_worker_threads("record_sleeps()", "sleep unrecorded");
    IN_USE.store(true, Ordering::Relaxed);
    SleepRecorder {
        guard: install(&RECORDING, &RECORDING_BELOW, Vec::new()),
        _thread: PhantomData,
    }
}

impl SleepRecorder {
    /// The delays slept so far, in order, a held call's waits included (as
    /// [`VirtualTime::sleeps`] says).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::testing::{VirtualTime, record_sleeps};
    /// use backstop::{Jitter, Policy};
    /// let _vt = VirtualTime::start();
    /// let sleeps = record_sleeps();
    /// assert!(sleeps.sleeps().is_empty());
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None).no_budget();
    /// let _ = backstop::call(&policy, || Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
    /// assert_eq!(sleeps.sleeps(), [Duration::from_millis(100)]);
    /// ```
    ///
    /// It reads the record in force on the thread: while a recorder
    /// started after this one lives, that one's.
    pub fn sleeps(&self) -> Vec<Duration> {
        // (Installed while `self` lives.)
        RECORDING.with(|r| r.borrow().clone().unwrap_or_default())
    }
}

impl Drop for SleepRecorder {
    fn drop(&mut self) {
        uninstall(&RECORDING, &RECORDING_BELOW, self.guard);
    }
}

impl std::fmt::Debug for SleepRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SleepRecorder").finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::record_sleeps;
    use crate::limit::isolation::tests::says_what_a_multi_thread_runtime_leaves_out;

    #[test]
    fn recording_in_a_multi_thread_runtime_says_what_it_leaves_out() {
        says_what_a_multi_thread_runtime_leaves_out(|| drop(record_sleeps()));
    }
}
