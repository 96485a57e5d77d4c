//! Testing retries without waiting for them.
//!
//! [`VirtualTime`] makes the sync retry loops of the current thread sleep in
//! virtual time. Async loops run on tokio's clock: under
//! `#[tokio::test(start_paused = true)]` they are virtual already.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::{Duration, Instant};

struct Virtual {
    start: Instant,
    elapsed: Duration,
    sleeps: Vec<Duration>,
}

thread_local! {
    static VIRTUAL: RefCell<Option<Virtual>> = const { RefCell::new(None) };
}

impl Virtual {
    /// Moves the clock forward by `d`, stopping at the latest instant the
    /// platform can represent rather than wrapping or going back.
    fn advance(&mut self, d: Duration) {
        let wanted = self.elapsed.saturating_add(d);
        self.elapsed = if self.start.checked_add(wanted).is_some() {
            wanted
        } else {
            // The largest elapsed time that still fits: a binary search on
            // nanoseconds, 128 steps at most.
            let (mut fits, mut overflows) = (self.elapsed.as_nanos(), wanted.as_nanos());
            while overflows - fits > 1 {
                let mid = fits + (overflows - fits) / 2;
                if self.start.checked_add(nanos(mid)).is_some() {
                    fits = mid;
                } else {
                    overflows = mid;
                }
            }
            nanos(fits)
        };
    }
}

fn nanos(n: u128) -> Duration {
    let secs = u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (n % 1_000_000_000) as u32)
}

/// The current virtual instant, if virtual time is installed on this thread.
pub(crate) fn virtual_now() -> Option<Instant> {
    VIRTUAL.with(|v| {
        v.borrow()
            .as_ref()
            .map(|v| v.start.checked_add(v.elapsed).unwrap_or(v.start))
        // `advance` keeps `start + elapsed` representable.
    })
}

/// Sleeps in virtual time if it is installed: records the delay and
/// advances the clock. `false` means real time is in force.
pub(crate) fn virtual_sleep(d: Duration) -> bool {
    VIRTUAL.with(|v| match v.borrow_mut().as_mut() {
        Some(v) => {
            v.sleeps.push(d);
            v.advance(d);
            true
        }
        None => false,
    })
}

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
