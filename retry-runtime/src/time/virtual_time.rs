//! Virtual time's core, below the clock that reads it: the virtual clock
//! of each thread, and the flag that keeps every clock read free of it
//! until a test installs one. [`testing`](crate::testing) is the public
//! face ([`VirtualTime`](crate::testing::VirtualTime), `record_sleeps`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a testing guard (virtual time, a sleep recorder, an isolation)
/// found installed on its thread, kept for it under its number: `below`
/// holds one entry a guard alive, oldest first.
pub(crate) type Shadowed<T> = RefCell<Vec<(u64, Option<T>)>>;

thread_local! {
    /// The number of the next testing guard made on this thread.
    static NEXT_GUARD: Cell<u64> = const { Cell::new(0) };
}

/// Installs `value` in `slot` for a guard, keeping what it shadows in
/// `below`: the guard's number, for [`uninstall`].
pub(crate) fn install<T: 'static>(
    slot: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    below: &'static std::thread::LocalKey<Shadowed<T>>,
    value: T,
) -> u64 {
    let guard = NEXT_GUARD.with(|next| next.replace(next.get() + 1));
    let shadowed = slot.with(|slot| slot.borrow_mut().replace(value));
    below.with(|below| below.borrow_mut().push((guard, shadowed)));
    guard
}

/// Takes guard `guard`'s value away, in whatever order guards are
/// dropped (a guard reassigned is dropped after the one that replaces
/// it): the last one puts back what it shadowed; one that others came
/// after hands what it shadowed to the next, which puts it back in turn,
/// and what is installed stays.
pub(crate) fn uninstall<T: 'static>(
    slot: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    below: &'static std::thread::LocalKey<Shadowed<T>>,
    guard: u64,
) {
    // (During thread teardown either may be gone: nothing to put back.)
    let _ = below.try_with(|below| {
        let mut below = below.borrow_mut();
        let Some(at) = below.iter().position(|(number, _)| *number == guard) else {
            return;
        };
        let (_, shadowed) = below.remove(at);
        match below.get_mut(at) {
            Some((_, next)) => *next = shadowed,
            None => {
                let _ = slot.try_with(|slot| *slot.borrow_mut() = shadowed);
            }
        }
    });
}

pub(crate) struct Virtual {
    pub(crate) start: Instant,
    pub(crate) elapsed: Duration,
    pub(crate) sleeps: Vec<Duration>,
}

thread_local! {
    pub(crate) static VIRTUAL: RefCell<Option<Virtual>> = const { RefCell::new(None) };
    /// What each `VirtualTime` alive on this thread shadowed.
    pub(crate) static VIRTUAL_BELOW: Shadowed<Virtual> = const { RefCell::new(Vec::new()) };
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
/// advances the clock. `false` means real time is in force: the sync
/// loop sleeps its thread (said if that is inside a tokio runtime: see
/// [`note_real_sync_sleep`]).
pub(crate) fn virtual_sleep(d: Duration) -> bool {
    if !in_use() {
        return false;
    }
    let slept = VIRTUAL.with(|v| match v.borrow_mut().as_mut() {
        Some(v) => {
            v.sleeps.push(d);
            v.advance(d);
            true
        }
        None => false,
    });
    if !slept {
        note_real_sync_sleep();
    }
    slept
}

thread_local! {
    /// The delays slept on this thread, while a
    /// [`SleepRecorder`](crate::testing::SleepRecorder) is installed.
    pub(crate) static RECORDING: RefCell<Option<Vec<Duration>>> = const { RefCell::new(None) };
    /// What each `SleepRecorder` alive on this thread shadowed.
    pub(crate) static RECORDING_BELOW: Shadowed<Vec<Duration>> = const { RefCell::new(Vec::new()) };
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

/// A sync retry loop on this thread is about to sleep it for real, in a
/// process that uses the testing tools (`VirtualTime`, `record_sleeps`):
/// inside a current-thread tokio runtime, a test that paused its clock
/// expects the sleep to be virtual, and finds the test slow and a
/// breaker's cooldown not moved by `tokio::time::advance`. Said once a
/// thread, on standard error.
fn note_real_sync_sleep() {
    #[cfg(feature = "tokio")]
    // (A current-thread runtime, as `#[tokio::test]`'s: the only kind
    // whose clock a test pauses.)
    if in_use()
        && tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
        })
    {
        warn_sync_in_runtime();
    }
}

#[cfg(feature = "tokio")]
#[cold]
fn warn_sync_in_runtime() {
    #[cfg(test)]
    tests::SAID_SYNC.with(|said| said.set(said.get() + 1));
    if !WARNED_SYNC.replace(true) {
        note!(
            "backstop: a sync retry loop sleeps its thread in real time inside a tokio runtime, \
             whose clock (paused or not) does not drive it: in a test, \
             `testing::VirtualTime::start()` on the thread makes sync loops' sleeps virtual."
        );
    }
}

/// An async retry loop on this thread is about to sleep `delay` on its
/// runtime's timer: noted as any sleep ([`note_sleep`]), and said once if
/// virtual time is installed here, which does not drive it.
pub(crate) fn note_async_sleep(delay: Duration, on_a_timer_set: bool) {
    if !in_use() {
        return;
    }
    note_sleep(delay);
    if installed() && !on_a_timer_set {
        #[cfg(test)]
        tests::SAID.with(|said| said.set(said.get() + 1));
        warn_async_under_virtual_time();
    }
}

/// Whether virtual time is installed on this thread.
fn installed() -> bool {
    VIRTUAL.try_with(|v| v.borrow().is_some()).unwrap_or(false)
}

thread_local! {
    /// Set once an async loop has slept with virtual time installed on
    /// this thread, and it has been said.
    static WARNED_ASYNC: Cell<bool> = const { Cell::new(false) };
    /// Set once a sync loop has slept this thread for real inside a tokio
    /// runtime, and it has been said.
    static WARNED_SYNC: Cell<bool> = const { Cell::new(false) };
}

/// A `VirtualTime` is installed where an async retry loop sleeps: a test
/// that expects the sleep to be virtual, and finds `vt.sleeps()` empty
/// and the test slow. Said once a thread (the test harness runs each test
/// on a thread of its own, and shows a failing test's output), on
/// standard error, whatever the features: `VirtualTime` is a testing
/// tool, and a test seldom installs a `tracing` subscriber.
#[cold]
fn warn_async_under_virtual_time() {
    if !WARNED_ASYNC.replace(true) {
        note!(
            "backstop: an async retry loop sleeps on its runtime's timer while a `VirtualTime` \
             is installed on its thread, which drives sync loops only: the sleep is real unless \
             the runtime's clock is paused (`#[tokio::test(start_paused = true)]`) or a timer \
             of virtual time is set with `time::set_timer` (on smol, async-std or an executor \
             of your own); `testing::record_sleeps` lists async loops' delays."
        );
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::{
        IN_USE, VIRTUAL, Virtual, WARNED_ASYNC, note_async_sleep, note_sleep, virtual_sleep,
    };

    thread_local! {
        /// The async sleeps on this thread found under virtual time.
        pub(super) static SAID: Cell<u32> = const { Cell::new(0) };
        /// The sync sleeps on this thread found real inside a tokio runtime.
        pub(super) static SAID_SYNC: Cell<u32> = const { Cell::new(0) };
    }

    /// An async loop's sleep where virtual time is installed, which does
    /// not drive it, is said (once a thread); one without it, or a sync
    /// loop's, is not.
    #[test]
    fn an_async_sleep_under_virtual_time_is_said() {
        // (Left set: once set, it stays, as for a test of virtual time.)
        IN_USE.store(true, Ordering::Relaxed);
        note_async_sleep(Duration::from_millis(1), false);
        assert_eq!(SAID.get(), 0, "no virtual time here");
        VIRTUAL.with(|v| {
            // As `testing::VirtualTime::start` installs it.
            *v.borrow_mut() = Some(Virtual {
                start: Instant::now(),
                elapsed: Duration::ZERO,
                sleeps: Vec::new(),
            });
        });
        note_sleep(Duration::from_millis(1));
        assert_eq!(SAID.get(), 0, "a sync loop's sleep");
        note_async_sleep(Duration::from_millis(1), true);
        assert_eq!(
            SAID.get(),
            0,
            "on a timer set with `set_timer`: maybe virtual"
        );
        note_async_sleep(Duration::from_millis(1), false);
        assert_eq!(SAID.get(), 1, "an async loop's");
        assert!(WARNED_ASYNC.get());
        VIRTUAL.with(|v| *v.borrow_mut() = None);
    }

    /// A sync loop's real sleep inside a tokio runtime is said (once a
    /// thread); outside one, or in virtual time, it is not.
    #[cfg(feature = "tokio")]
    #[test]
    fn a_sync_sleep_in_real_time_inside_a_tokio_runtime_is_said() {
        IN_USE.store(true, Ordering::Relaxed);
        // As `testing::VirtualTime::start` installs it, or not.
        let sleep = |vt: bool| {
            if vt {
                VIRTUAL.with(|v| {
                    *v.borrow_mut() = Some(Virtual {
                        start: Instant::now(),
                        elapsed: Duration::ZERO,
                        sleeps: Vec::new(),
                    });
                });
            }
            let slept = virtual_sleep(Duration::from_millis(1));
            VIRTUAL.with(|v| *v.borrow_mut() = None);
            assert_eq!(slept, vt);
        };
        sleep(false);
        assert_eq!(SAID_SYNC.get(), 0, "outside a runtime");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async { sleep(true) });
        assert_eq!(SAID_SYNC.get(), 0, "in virtual time");
        runtime.block_on(async { sleep(false) });
        assert_eq!(SAID_SYNC.get(), 1, "real, inside the runtime");
        assert!(super::WARNED_SYNC.get());
    }
}
