//! Virtual time's core, below the clock that reads it: the virtual clock
//! of each thread, and the flag that keeps every clock read free of it
//! until a test installs one. [`testing`](crate::testing) is the public
//! face ([`VirtualTime`](crate::testing::VirtualTime), `record_sleeps`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Virtual {
    pub(crate) start: Instant,
    pub(crate) elapsed: Duration,
    pub(crate) sleeps: Vec<Duration>,
}

thread_local! {
    pub(crate) static VIRTUAL: RefCell<Option<Virtual>> = const { RefCell::new(None) };
}

/// Set once any thread starts virtual time (or records sleeps): until
/// then, reading the clock or sleeping costs one load of this flag more
/// than the real clock, and no look-up of this module's thread-locals. A
/// process that never tests never sets it.
pub(crate) static IN_USE: AtomicBool = AtomicBool::new(false);

/// Whether virtual time or a sleep recorder may be installed on some
/// thread.
#[inline]
pub(crate) fn in_use() -> bool {
    IN_USE.load(Ordering::Relaxed)
}

impl Virtual {
    /// Moves the clock forward by `d`, stopping at the latest instant the
    /// platform can represent rather than wrapping or going back.
    pub(crate) fn advance(&mut self, d: Duration) {
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
#[inline]
pub(crate) fn virtual_now() -> Option<Instant> {
    if !in_use() {
        return None;
    }
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
    if !in_use() {
        return false;
    }
    VIRTUAL.with(|v| match v.borrow_mut().as_mut() {
        Some(v) => {
            v.sleeps.push(d);
            v.advance(d);
            true
        }
        None => false,
    })
}

thread_local! {
    /// The delays slept on this thread, while a
    /// [`SleepRecorder`](crate::testing::SleepRecorder) is installed.
    pub(crate) static RECORDING: RefCell<Option<Vec<Duration>>> = const { RefCell::new(None) };
}

/// A retry loop on this thread is about to sleep `delay`: recorded if a
/// [`SleepRecorder`](crate::testing::SleepRecorder) is installed.
pub(crate) fn note_sleep(delay: Duration) {
    if !in_use() {
        return;
    }
    let _ = RECORDING.try_with(|r| {
        if let Some(sleeps) = r.borrow_mut().as_mut() {
            sleeps.push(delay);
        }
    });
}
