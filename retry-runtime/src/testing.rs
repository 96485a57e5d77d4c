//! Testing retries without waiting for them, and without one test's calls
//! changing what another's get.
//!
//! - [`VirtualTime`] makes the sync retry loops of the current thread sleep
//!   in virtual time. Async loops run on tokio's clock: under
//!   `#[tokio::test(start_paused = true)]` they are virtual already.
//! - [`record_sleeps`] lists the delays retry loops slept on this thread,
//!   sync and async: what `VirtualTime::sleeps` tells of sync loops, for
//!   async tests in tokio's paused time too.
//! - [`isolate`] gives the `#[retry]` functions called on this thread fresh
//!   default protection (their own retry throttle), so that a test's
//!   outcome does not depend on the tests that ran before it.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::virtual_time::virtual_now;
use crate::virtual_time::{IN_USE, RECORDING, VIRTUAL, Virtual};

const OUT_OF_ORDER: &str =
    "VirtualTime handles on one thread must be dropped in reverse order of `start`";

/// Virtual time for the sync retry loops of the current thread.
///
/// `VirtualTime::start()` installs it until the value is dropped: every
/// sleep of a retry loop (the `call` runner, a `#[retry]` sync fn) then
/// returns at once and advances the virtual clock, and everything that reads
/// time through [`SystemClock`](crate::SystemClock) (the deadline, the
/// budget's window) reads the virtual clock. A second `start` on the same
/// thread shadows the first until it is dropped.
///
/// ```
/// # extern crate retry_runtime as backstop;
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
    shadowed: Option<Virtual>,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

impl VirtualTime {
    /// Installs virtual time on this thread, starting at the real now.
    pub fn start() -> Self {
        let fresh = Virtual {
            start: Instant::now(),
            elapsed: Duration::ZERO,
            sleeps: Vec::new(),
        };
        // Before it is installed: a thread that sees it installed has seen
        // the flag (the same thread), and others never read this thread's.
        IN_USE.store(true, Ordering::Relaxed);
        let shadowed = VIRTUAL.with(|v| v.borrow_mut().replace(fresh));
        Self {
            shadowed,
            _thread: PhantomData,
        }
    }

    fn with<R>(f: impl FnOnce(&mut Virtual) -> R) -> R {
        VIRTUAL.with(|v| {
            let mut v = v.borrow_mut();
            f(v.as_mut().expect(OUT_OF_ORDER))
        })
    }

    /// The virtual now.
    ///
    /// # Panics
    ///
    /// This and the other readers panic if a `VirtualTime` started before
    /// this one was dropped first, taking this one's clock with it.
    pub fn now(&self) -> Instant {
        virtual_now().expect(OUT_OF_ORDER)
    }

    /// Virtual time passed since `start`.
    pub fn elapsed(&self) -> Duration {
        Self::with(|v| v.elapsed)
    }

    /// Moves the clock forward, as a slow attempt would.
    ///
    /// ```
    /// # extern crate retry_runtime as backstop;
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
    pub fn sleeps(&self) -> Vec<Duration> {
        Self::with(|v| v.sleeps.clone())
    }
}

impl Drop for VirtualTime {
    fn drop(&mut self) {
        let shadowed = self.shadowed.take();
        // During thread teardown the slot may already be gone: nothing to restore.
        let _ = VIRTUAL.try_with(|v| *v.borrow_mut() = shadowed);
    }
}

impl std::fmt::Debug for VirtualTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualTime")
            .field("elapsed", &self.elapsed())
            .finish_non_exhaustive()
    }
}

/// Makes jitter reproducible on this thread: every retry loop that starts
/// on this thread afterwards draws its random stream from a sequence fixed
/// by `seed`, so a single-threaded program (a simulation on a
/// current-thread tokio runtime, a test) replays the same delays run after
/// run. Streams stay distinct from call to call.
///
/// ```
/// # extern crate retry_runtime as backstop;
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
    crate::backoff::Rng::reseed_thread(seed);
}

/// Records the delays retry loops sleep on this thread, until dropped: see
/// [`record_sleeps`].
pub struct SleepRecorder {
    shadowed: Option<Vec<Duration>>,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

/// Starts recording the delays that retry loops sleep on this thread, sync
/// and async, until the returned recorder is dropped. An async retry loop
/// sleeps on the thread that polls it: in a `#[tokio::test]` (one thread
/// unless `flavor = "multi_thread"`; always one with `start_paused`) that
/// is every call the test makes, the tasks it spawns included. A second
/// recorder on the thread shadows the first until it is dropped.
///
/// ```
/// # extern crate retry_runtime as backstop;
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
pub fn record_sleeps() -> SleepRecorder {
    IN_USE.store(true, Ordering::Relaxed);
    let shadowed = RECORDING.with(|r| r.borrow_mut().replace(Vec::new()));
    SleepRecorder {
        shadowed,
        _thread: PhantomData,
    }
}

impl SleepRecorder {
    /// The delays slept so far, in order.
    ///
    /// # Panics
    ///
    /// If a recorder started before this one was dropped first, taking
    /// this one's record with it.
    pub fn sleeps(&self) -> Vec<Duration> {
        RECORDING.with(|r| {
            r.borrow()
                .clone()
                .expect("SleepRecorders on one thread must be dropped in reverse order")
        })
    }
}

impl Drop for SleepRecorder {
    fn drop(&mut self) {
        let shadowed = self.shadowed.take();
        let _ = RECORDING.try_with(|r| *r.borrow_mut() = shadowed);
    }
}

impl std::fmt::Debug for SleepRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SleepRecorder").finish_non_exhaustive()
    }
}

/// Set once any test isolates: until then, the default protection of a
/// call costs one load of this flag to look up.
static ISOLATING: AtomicBool = AtomicBool::new(false);

/// The fresh defaults of an isolation: each function's own `static`, by
/// address, and what replaces it.
type FreshDefaults = Vec<(usize, &'static (dyn Any + Sync))>;

thread_local! {
    /// The fresh defaults of the isolation in force on this thread.
    static ISOLATED: RefCell<Option<FreshDefaults>> = const { RefCell::new(None) };
}

/// Gives the `#[retry]` functions called on this thread fresh default
/// protection until the returned guard is dropped.
///
/// A `#[retry]` function without `budget = ..` draws on a retry throttle
/// of its own, shared by every call in the process, so one test's failing
/// calls can use up the throttle another test counts on: a test asserting
/// three attempts passes alone and fails after a test that made a few
/// failing calls. Under `isolate()`, each function draws instead on one
/// fresh for this guard: the test sees what a fresh process would.
/// Throttles, budgets and breakers you name (`budget = SHARED`) are yours,
/// and are not replaced.
///
/// It applies to calls that start on this thread: every call of a sync
/// test, and of an async test on a current-thread runtime (the default of
/// `#[tokio::test]`), spawned tasks included. A guard started inside
/// another shadows it until dropped. Each (guard, function) pair keeps a
/// fresh throttle (a few dozen bytes) until the process exits.
///
/// ```
/// # extern crate retry_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::time::Duration;
/// use backstop::{testing::{isolate, VirtualTime}, Policy, RetryThrottle, Retry};
///
/// // What `#[retry]` gives a function by default.
/// static OWN: RetryThrottle = RetryThrottle::standard();
/// let fail = |attempts: &mut u32| -> Result<(), Error> {
///     let policy = Policy::new();
///     let budget = backstop::testing::own(&OWN);
///     Retry::new(&policy).budget(budget).call(|| {
///         *attempts += 1;
///         Err(ErrorKind::ConnectionRefused.into())
///     })
/// };
/// let _vt = VirtualTime::start();
/// {
///     let _fresh = isolate();
///     for _ in 0..20 {
///         let _ = fail(&mut 0); // uses up this test's throttle
///     }
/// }
/// let _fresh = isolate();
/// let mut attempts = 0;
/// let _ = fail(&mut attempts);
/// assert_eq!(attempts, 3, "a fresh throttle: every retry granted");
/// ```
pub fn isolate() -> Isolation {
    ISOLATING.store(true, Ordering::Relaxed);
    let shadowed = ISOLATED.with(|i| i.borrow_mut().replace(Vec::new()));
    Isolation {
        shadowed,
        _thread: PhantomData,
    }
}

/// Fresh default protection on this thread, until dropped: see
/// [`isolate`].
#[must_use = "isolation lasts until the guard is dropped: bind it, `let _fresh = isolate();`"]
pub struct Isolation {
    shadowed: Option<FreshDefaults>,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

impl Drop for Isolation {
    fn drop(&mut self) {
        let shadowed = self.shadowed.take();
        let _ = ISOLATED.try_with(|i| *i.borrow_mut() = shadowed);
    }
}

impl std::fmt::Debug for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolation").finish_non_exhaustive()
    }
}

/// Default protection that [`isolate`] can replace with a fresh one.
pub trait Fresh: Any + Sync + Sized {
    /// A fresh one made like this one, as a new process would start with.
    #[must_use]
    fn fresh(&self) -> Self;
}

impl Fresh for crate::RetryBudget {
    fn fresh(&self) -> Self {
        Self::standard()
    }
}

impl Fresh for crate::RetryThrottle {
    fn fresh(&self) -> Self {
        Self::standard()
    }
}

/// A hedged function's adaptive delay: a test under [`isolate`] learns
/// latencies afresh (and on its own clock: a paused tokio runtime of an
/// earlier test may have moved on).
#[cfg(not(loom))]
impl Fresh for crate::hedge::LatencyPercentile {
    fn fresh(&self) -> Self {
        Self::new(self.quantile(), self.window())
    }
}

/// A function's own default protection `own` (its `static`), or, under
/// [`isolate`] on this thread, the fresh one that replaces it. `#[retry]`
/// calls it for the budget it gives a function by default.
#[inline]
pub fn own<T: Fresh>(own: &'static T) -> &'static T {
    if ISOLATING.load(Ordering::Relaxed) {
        isolated(own)
    } else {
        own
    }
}

#[cold]
fn isolated<T: Fresh>(own: &'static T) -> &'static T {
    let address = std::ptr::from_ref(own) as usize;
    ISOLATED
        .try_with(|i| {
            let mut i = i.borrow_mut();
            let fresh = i.as_mut()?;
            if let Some(found) = fresh
                .iter()
                .find(|(a, _)| *a == address)
                .and_then(|(_, f)| (*f as &dyn Any).downcast_ref::<T>())
            {
                return Some(found);
            }
            // Leaked: calls hold `&'static` references to their budget.
            let made: &'static T = Box::leak(Box::new(own.fresh()));
            fresh.push((address, made));
            Some(made)
        })
        .ok()
        .flatten()
        .unwrap_or(own)
}
