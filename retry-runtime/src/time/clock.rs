//! The clocks a call reads (documented in `time`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A monotonic clock.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::time::{Clock, SystemClock};
/// let a = SystemClock.now();
/// let b = SystemClock.now();
/// assert!(b >= a);
/// ```
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;

    /// How much later than asked a sleep on this clock's timer may end, at
    /// most. The state machine gives up rather than sleep within this much
    /// of the deadline, so that a timer rounding up can never start an
    /// attempt after it.
    ///
    /// Zero for [`SystemClock`]: a thread's oversleep has no bound, so the
    /// sync loop checks the deadline again after waking instead.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::time::{Clock, SystemClock};
    /// assert_eq!(SystemClock.sleep_slack(), Duration::ZERO);
    /// ```
    fn sleep_slack(&self) -> Duration {
        Duration::ZERO
    }

    /// A function reading this clock, for
    /// [`Context::remaining`](crate::Context::remaining) (a context is
    /// `Copy` and outlives no clock). Real time unless overridden.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{time::{Clock, SystemClock}, testing::VirtualTime};
    /// let vt = VirtualTime::start();
    /// assert_eq!((SystemClock.now_fn())(), vt.now());
    /// ```
    fn now_fn(&self) -> fn() -> Instant {
        Instant::now
    }

    /// The instant a call starts at: never later than [`now`](Self::now),
    /// and allowed to be earlier by the resolution of a cheaper clock. A
    /// call whose first attempt succeeds reads only this clock, once.
    ///
    /// [`SystemClock`] reads the operating system's coarse monotonic clock
    /// where it has one (Linux: `CLOCK_MONOTONIC_COARSE`, a few nanoseconds
    /// instead of tens). It trails the precise clock by a few milliseconds:
    /// a kernel tick, more on a tickless virtual machine (up to 10 ms
    /// measured). A deadline measured from it can only end early, never
    /// late, and the state machine reads the precise clock instead for a
    /// deadline under a second, where those milliseconds would matter.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::time::{Clock, SystemClock};
    /// let start = SystemClock.start_now();
    /// assert!(start <= SystemClock.now());
    /// ```
    fn start_now(&self) -> Instant {
        self.now()
    }

    /// [`start_now`](Self::start_now) plus `after`: the deadline of a call
    /// starting now, or `None` if that is past the platform's last
    /// `Instant`. [`SystemClock`] reads and adds in one step, where a
    /// reading and then an addition would make two `Instant`s.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{time::{Clock, SystemClock}, testing::VirtualTime};
    /// let vt = VirtualTime::start();
    /// let deadline = SystemClock.start_now_plus(Duration::from_secs(30));
    /// assert_eq!(deadline, Some(vt.now() + Duration::from_secs(30)));
    /// assert_eq!(SystemClock.start_now_plus(Duration::MAX), None);
    /// ```
    fn start_now_plus(&self, after: Duration) -> Option<Instant> {
        self.start_now().checked_add(after)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Instant {
        (**self).now()
    }

    fn start_now(&self) -> Instant {
        (**self).start_now()
    }

    fn start_now_plus(&self, after: Duration) -> Option<Instant> {
        (**self).start_now_plus(after)
    }

    fn sleep_slack(&self) -> Duration {
        (**self).sleep_slack()
    }

    fn now_fn(&self) -> fn() -> Instant {
        (**self).now_fn()
    }
}

/// The thread's clock: [`Instant::now`], or the virtual clock while a
/// [`VirtualTime`](crate::testing::VirtualTime) is installed on this thread.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{time::{Clock, SystemClock}, testing::VirtualTime};
///
/// let vt = VirtualTime::start();
/// let before = SystemClock.now();
/// vt.advance(Duration::from_secs(60));
/// assert_eq!(SystemClock.now() - before, Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        crate::time::virtual_time::virtual_now().unwrap_or_else(Instant::now)
    }

    fn now_fn(&self) -> fn() -> Instant {
        || SystemClock.now()
    }

    fn start_now(&self) -> Instant {
        crate::time::virtual_time::virtual_now().unwrap_or_else(coarse_now)
    }

    fn start_now_plus(&self, after: Duration) -> Option<Instant> {
        match crate::time::virtual_time::virtual_now() {
            Some(now) => now.checked_add(after),
            None => coarse_now_plus(after),
        }
    }
}

/// The coarse monotonic clock as an [`Instant`], never ahead of
/// [`Instant::now`].
#[cfg(target_os = "linux")]
fn coarse_now() -> Instant {
    let (instant, offset) = coarse_offset();
    match offset {
        Ok(after) => instant.checked_add(after),
        Err(before) => instant.checked_sub(before),
    }
    // Unrepresentable only at the ends of the platform's range.
    .unwrap_or_else(Instant::now)
}

/// [`coarse_now`] plus `after`, added up as durations first: one
/// `Instant` made rather than two.
#[cfg(target_os = "linux")]
fn coarse_now_plus(after: Duration) -> Option<Instant> {
    let (instant, offset) = coarse_offset();
    match offset {
        Ok(since) => instant.checked_add(since.checked_add(after)?),
        Err(before) => instant.checked_sub(before)?.checked_add(after),
    }
}

/// An `Instant` and where a reading of the coarse monotonic clock is from
/// it: after it (`Ok`), or before it (`Err`).
#[cfg(target_os = "linux")]
#[inline]
fn coarse_offset() -> (Instant, Result<Duration, Duration>) {
    use rustix::time::{ClockId, clock_gettime};

    /// `Instant` and `CLOCK_MONOTONIC` are one timeline (std reads that
    /// clock), but an `Instant` cannot be built from a reading: pair one
    /// `Instant` with a reading of the precise clock taken after it, and
    /// place coarse readings relative to the pair. Taken in this order the
    /// pair can only place a reading early.
    static PAIR: OnceLock<(Instant, rustix::time::Timespec)> = OnceLock::new();
    let (instant, at) = *PAIR.get_or_init(|| {
        let instant = Instant::now();
        (instant, clock_gettime(ClockId::Monotonic))
    });
    let coarse = clock_gettime(ClockId::MonotonicCoarse);
    // Seconds and nanoseconds apart, without a 64-bit division.
    let (mut secs, mut nanos) = (coarse.tv_sec - at.tv_sec, coarse.tv_nsec - at.tv_nsec);
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    let offset = match u64::try_from(secs) {
        Ok(secs) => Ok(Duration::new(secs, nanos as u32)),
        // Coarse readings trail precise ones by up to a tick: one taken
        // just after the pair can read before it.
        Err(_) => {
            let before = Duration::new(0, 1_000_000_000 - nanos as u32);
            let whole = u64::try_from(-1 - secs).unwrap_or(u64::MAX);
            Err(before.saturating_add(Duration::from_secs(whole)))
        }
    };
    (instant, offset)
}

#[cfg(not(target_os = "linux"))]
fn coarse_now() -> Instant {
    Instant::now()
}

#[cfg(not(target_os = "linux"))]
fn coarse_now_plus(after: Duration) -> Option<Instant> {
    Instant::now().checked_add(after)
}

/// tokio's clock, which stands still and jumps under a paused runtime
/// (`#[tokio::test(start_paused = true)]`), so async retries run in virtual
/// time too.
///
/// tokio's timer fires on whole milliseconds: a sleep can end up to two
/// ticks after it was asked to, so its [`sleep_slack`](Clock::sleep_slack)
/// is two milliseconds.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::time::{Clock, TokioClock};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// // On a paused clock, a second passes at once and exactly.
/// let before = TokioClock.now();
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// assert_eq!(TokioClock.now() - before, Duration::from_secs(1));
/// assert_eq!(TokioClock.sleep_slack(), Duration::from_millis(2));
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn now_fn(&self) -> fn() -> Instant {
        || tokio::time::Instant::now().into_std()
    }

    fn sleep_slack(&self) -> Duration {
        // The timer wheel's resolution, twice: a sleep's end is rounded up
        // to the next millisecond tick, and the driver computes how long to
        // park from the current tick rounded down, so a sleep can end up to
        // two ticks (less a nanosecond) after it was asked to, even on a
        // paused clock.
        Duration::from_millis(2)
    }
}

/// The process-wide origin that shared state (a `static` budget) measures
/// time from, as it cannot hold an `Instant` itself.
///
/// It is placed a day before its first use, so that instants read a little
/// earlier (a paused tokio runtime started first) still land after it.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let now = Instant::now();
        [86_400, 3_600, 60, 1]
            .into_iter()
            .find_map(|s| now.checked_sub(Duration::from_secs(s)))
            .unwrap_or(now)
    })
}

/// Nanoseconds from the origin to `now`, saturating (0 before it).
pub(crate) fn nanos_since_origin(now: Instant) -> u64 {
    let since = now.saturating_duration_since(origin());
    since
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(since.subsec_nanos()))
}

/// An instant as the limiters read it: `at`, less a duration. A call
/// keeps its start as its own deadline until its first attempt is
/// decided; the limiters read that start so, without an `Instant`
/// subtraction (an out-of-line call on the path of a success).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Moment {
    at: Instant,
    /// Nanoseconds before `at` (saturating).
    less: u64,
}

impl Moment {
    /// `at`, less `less`.
    #[inline]
    pub(crate) fn less(at: Instant, less: Duration) -> Self {
        Self {
            at,
            less: u64::try_from(less.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Nanoseconds from the origin, saturating (0 before it).
    #[inline]
    pub(crate) fn nanos_since_origin(self) -> u64 {
        nanos_since_origin(self.at).saturating_sub(self.less)
    }
}

impl From<Instant> for Moment {
    #[inline]
    fn from(at: Instant) -> Self {
        Self { at, less: 0 }
    }
}

/// Where a shared limiter's time starts: half a day before its first
/// caller's instant (the process origin lies a day before its first use),
/// so that its slots and ticks follow the callers' clock (a paused tokio
/// clock included) rather than the moment the process started: a run in
/// virtual time then makes the same decisions every time. Callers whose
/// clocks read earlier, by up to that much, still land after it.
pub(crate) struct Anchor(crate::sync::AtomicU64);

impl Anchor {
    const_unless_loom! {
        /// Not yet anchored.
        pub(crate) fn new() -> Self {
            Self(crate::sync::AtomicU64::new(0))
        }
    }

    /// Not anchored again: for a limiter made fresh for a new owner.
    #[cfg(feature = "tower")]
    pub(crate) fn reset(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Nanoseconds from the anchor to `now` (0 for a caller further back).
    pub(crate) fn nanos(&self, now: Moment) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        const MARGIN: u64 = 12 * 3600 * 1_000_000_000;
        let nanos = now.nanos_since_origin();
        let mut base = self.0.load(Relaxed);
        if base == 0 {
            let want = nanos.saturating_sub(MARGIN).saturating_add(1);
            base = match self.0.compare_exchange(0, want, Relaxed, Relaxed) {
                Ok(_) => want,
                Err(set) => set,
            };
        }
        nanos.saturating_sub(base - 1)
    }
}

/// The clock of the timer set with `time::set_timer`, once one is: the
/// timer's module gives it here (this one stands below it).
static SET_TIMER_CLOCK: OnceLock<fn() -> Instant> = OnceLock::new();

/// Makes `now` the clock of the timer set with `time::set_timer`.
pub(crate) fn set_timer_clock(now: fn() -> Instant) {
    let _ = SET_TIMER_CLOCK.set(now);
}

/// Now, on the clock the retry loops of this thread read: virtual time
/// under `testing::VirtualTime` (sync loops read it), else the timer set
/// with `time::set_timer`, else tokio's inside a tokio runtime, paused or
/// not (async loops read them), else the system's.
pub(crate) fn loop_now() -> Instant {
    if let Some(now) = crate::time::virtual_time::virtual_now() {
        return now;
    }
    if let Some(now) = SET_TIMER_CLOCK.get() {
        return now();
    }
    #[cfg(all(feature = "tokio", not(loom)))]
    if tokio::runtime::Handle::try_current().is_ok() {
        return tokio::time::Instant::now().into_std();
    }
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coarse reading, as an `Instant`, is never ahead of the precise
    /// clock read after it, and trails it by far less than the second the
    /// deadline checks allow.
    #[test]
    fn the_coarse_clock_trails_the_precise_one_by_a_tick() {
        for _ in 0..100_000 {
            // (Read before the coarse one too: a thread descheduled
            // between the two readings does not widen the gap measured.)
            let before = Instant::now();
            let coarse = coarse_now();
            let precise = Instant::now();
            assert!(coarse <= precise, "{coarse:?} ahead of {precise:?}");
            assert!(before.saturating_duration_since(coarse) < Duration::from_millis(100));
        }
    }

    /// A deadline read in one step is a coarse reading plus the duration:
    /// between the readings taken before and after it, never ahead of the
    /// precise clock; none past the last `Instant`.
    #[test]
    fn a_deadline_read_in_one_step_is_a_coarse_reading_plus_the_duration() {
        let after = Duration::from_secs(30);
        for _ in 0..100_000 {
            let before = coarse_now();
            let deadline = coarse_now_plus(after).expect("representable");
            let precise = Instant::now();
            let start = deadline.checked_sub(after).expect("added above");
            assert!(before <= start, "{start:?} before {before:?}");
            assert!(start <= precise, "{start:?} ahead of {precise:?}");
        }
        assert_eq!(coarse_now_plus(Duration::MAX), None);
        assert_eq!(SystemClock.start_now_plus(Duration::MAX), None);
    }
}
