//! The timer async loops sleep on (documented in `time`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::time::clock::Clock;

/// A timer for async retry loops on an executor of your choice: what time
/// it is, and a future that sleeps.
///
/// Set one with [`set_timer`]; see the [module docs](crate::time).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::future::{Future, poll_fn};
/// use std::pin::Pin;
/// use std::sync::{Arc, Mutex};
/// use std::task::{Poll, Waker};
/// use std::time::{Duration, Instant};
/// use backstop::time::Timer;
///
/// /// A timer for an executor of one's own: a thread per sleep (a real one
/// /// would keep one thread and a heap of deadlines), which wakes the task
/// /// when the delay is over; the task is never blocked.
/// struct Threads;
/// impl Timer for Threads {
///     fn now(&self) -> Instant {
///         Instant::now()
///     }
///     fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
///         // Over yet, and the waker of the task waiting for it.
///         let shared = Arc::new(Mutex::new((false, None::<Waker>)));
///         let timer = Arc::clone(&shared);
///         std::thread::spawn(move || {
///             std::thread::sleep(delay);
///             let mut state = timer.lock().unwrap();
///             state.0 = true;
///             if let Some(waker) = state.1.take() {
///                 waker.wake();
///             }
///         });
///         Box::pin(poll_fn(move |cx| {
///             let mut state = shared.lock().unwrap();
///             if state.0 {
///                 return Poll::Ready(());
///             }
///             state.1 = Some(cx.waker().clone());
///             Poll::Pending
///         }))
///     }
/// }
/// static THREADS: Threads = Threads;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// assert_eq!(THREADS.sleep_slack(), Duration::from_millis(2));
/// let started = Instant::now();
/// THREADS.sleep(Duration::from_millis(5)).await;
/// assert!(started.elapsed() >= Duration::from_millis(5));
/// # }
/// // `backstop::time::set_timer(&THREADS)` makes it every async loop's.
/// ```
pub trait Timer: Send + Sync + 'static {
    /// Now, on the timer's clock (a clock that stands still under test is
    /// fine: every decision reads time from here).
    fn now(&self) -> Instant;

    /// A future that completes `delay` after it is first polled, or later.
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// How late a sleep may end, at most: the loop gives up rather than
    /// sleep so close to the deadline that the next attempt could start
    /// after it. Two milliseconds unless said otherwise.
    fn sleep_slack(&self) -> Duration {
        Duration::from_millis(2)
    }
}

/// `Timer { .. }`: so that [`SetTimerError`], which holds one, is `Debug`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use std::{future::Future, pin::Pin, time::{Duration, Instant}};
/// # struct Embedded;
/// # impl backstop::time::Timer for Embedded {
/// #     fn now(&self) -> Instant { Instant::now() }
/// #     fn sleep(&self, _: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) }
/// # }
/// let timer: &dyn backstop::time::Timer = &Embedded;
/// assert_eq!(format!("{timer:?}"), "Timer { .. }");
/// ```
impl fmt::Debug for dyn Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

static CUSTOM: OnceLock<&'static dyn Timer> = OnceLock::new();

/// Makes `timer` the one every async retry loop uses from now on, whatever
/// runtime it runs on. Once per process. A timer with state of its own
/// (a thread, a heap of deadlines) is a `static` made by a `const fn`, or
/// one made at start-up and leaked: `set_timer(Box::leak(Box::new(timer)))`.
///
/// # Errors
///
/// [`SetTimerError`] if a timer was set before: that one stays, and the
/// error gives `timer` back ([`SetTimerError::timer`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use std::{future::Future, pin::Pin, time::{Duration, Instant}};
/// # struct Embedded(u8);
/// # impl backstop::time::Timer for Embedded {
/// #     fn now(&self) -> Instant { Instant::now() }
/// #     fn sleep(&self, _: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) }
/// # }
/// static EMBEDDED: Embedded = Embedded(1);
/// static OTHER: Embedded = Embedded(2);
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// backstop::time::set_timer(&EMBEDDED)?;
/// let refused = backstop::time::set_timer(&OTHER).unwrap_err();
/// assert_eq!(refused.to_string(), "a timer was set before: the first one set stays");
/// assert!(std::ptr::addr_eq(refused.timer(), &OTHER), "given back");
/// assert!(!std::ptr::addr_eq(refused.timer(), &EMBEDDED), "EMBEDDED stays");
/// # Ok(()) }
/// ```
pub fn set_timer(timer: &'static dyn Timer) -> Result<(), SetTimerError> {
    CUSTOM.set(timer).map_err(|_| SetTimerError { timer })?;
    crate::time::clock::set_timer_clock(custom_now);
    Ok(())
}

/// The error of [`set_timer`] when a timer was set before (the first one
/// set stays), as `log::SetLoggerError` is `log`'s: an [`Error`](std::error::Error), so that `?`
/// takes it into a boxed error or `anyhow`. It gives back the timer it
/// refused.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use std::{future::Future, pin::Pin, time::{Duration, Instant}};
/// # struct Embedded;
/// # impl backstop::time::Timer for Embedded {
/// #     fn now(&self) -> Instant { Instant::now() }
/// #     fn sleep(&self, _: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) }
/// # }
/// static EMBEDDED: Embedded = Embedded;
/// let _ = backstop::time::set_timer(&EMBEDDED);
/// let again: Result<(), Box<dyn std::error::Error>> =
///     backstop::time::set_timer(&EMBEDDED).map_err(Into::into);
/// assert!(again.is_err(), "once per process");
/// ```
#[derive(Debug)]
pub struct SetTimerError {
    timer: &'static dyn Timer,
}

impl SetTimerError {
    /// The timer [`set_timer`] was given and did not set.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::{future::Future, pin::Pin, time::{Duration, Instant}};
    /// # struct Embedded;
    /// # impl backstop::time::Timer for Embedded {
    /// #     fn now(&self) -> Instant { Instant::now() }
    /// #     fn sleep(&self, _: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) }
    /// # }
    /// static EMBEDDED: Embedded = Embedded;
    /// static SECOND: Embedded = Embedded;
    /// let _ = backstop::time::set_timer(&EMBEDDED);
    /// let refused = backstop::time::set_timer(&SECOND).unwrap_err();
    /// assert!(std::ptr::addr_eq(refused.timer(), &SECOND));
    /// ```
    pub fn timer(&self) -> &'static dyn Timer {
        self.timer
    }
}

impl fmt::Display for SetTimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a timer was set before: the first one set stays")
    }
}

impl std::error::Error for SetTimerError {}

/// The timer a call uses, chosen when its clock is read (see the
/// [module docs](crate::time)): a timer set with [`set_timer`] wins from then on.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::time::{Clock, RuntimeClock};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let clock = RuntimeClock::current();
/// assert!(matches!(clock, RuntimeClock::Tokio), "inside a tokio runtime");
/// let before = clock.now();
/// tokio::time::advance(std::time::Duration::from_secs(5)).await;
/// assert_eq!(clock.now() - before, std::time::Duration::from_secs(5), "tokio's paused clock");
/// # }
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum RuntimeClock {
    /// tokio's, on the runtime the call runs in (paused time included).
    /// Outside a tokio runtime (with no async-io built to take over), it
    /// reads the system's time and sleeps as [`Missing`](Self::Missing)
    /// does, on the crate's own timer thread.
    #[cfg(feature = "tokio")]
    Tokio,
    /// async-io's (smol, async-std).
    #[cfg(feature = "async-io")]
    AsyncIo,
    /// The one set with [`set_timer`] (set once: read where it is used,
    /// which keeps the clock, and every call's future, two words smaller).
    /// Made by hand before a timer is set, it is [`Missing`](Self::Missing).
    Custom,
    /// None at all: the call's sleeps (and the cut-offs of its attempts) go
    /// on a timer thread of the crate's own, started at the first.
    Missing,
}

impl std::fmt::Debug for RuntimeClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            #[cfg(feature = "tokio")]
            Self::Tokio => "Tokio",
            #[cfg(feature = "async-io")]
            Self::AsyncIo => "AsyncIo",
            Self::Custom => "Custom",
            Self::Missing => "Missing",
        })
    }
}

impl RuntimeClock {
    /// The timer for a call starting now, on this thread: the one set
    /// with [`set_timer`] if there is one, else async-io's outside a tokio
    /// runtime where both are built, else tokio's where it is built
    /// (outside a runtime too: telling costs a thread-local read that a
    /// call's success path does not make), else async-io's, else
    /// [`Missing`](Self::Missing).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::time::RuntimeClock;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// assert!(matches!(RuntimeClock::current(), RuntimeClock::Tokio));
    /// # }
    /// ```
    #[inline]
    pub fn current() -> Self {
        if CUSTOM.get().is_some() {
            return Self::Custom;
        }
        #[cfg(all(feature = "tokio", feature = "async-io"))]
        if tokio::runtime::Handle::try_current().is_err() {
            return Self::AsyncIo;
        }
        #[cfg(feature = "tokio")]
        return Self::Tokio;
        #[cfg(all(not(feature = "tokio"), feature = "async-io"))]
        return Self::AsyncIo;
        #[allow(unreachable_code)]
        Self::Missing
    }

    /// Sleeps `delay` on this timer (on the crate's own timer thread
    /// where there is none: tokio's outside a tokio runtime, none set).
    pub(crate) fn sleep(self, delay: Duration) -> Sleep {
        match self {
            #[cfg(feature = "tokio")]
            Self::Tokio if in_tokio() => Sleep::Tokio {
                sleep: tokio::time::sleep(delay),
            },
            #[cfg(feature = "async-io")]
            Self::AsyncIo => Sleep::AsyncIo {
                sleep: async_io::Timer::after(delay),
                until: None,
            },
            Self::Custom => match CUSTOM.get() {
                Some(timer) => Sleep::Boxed {
                    sleep: timer.sleep(delay),
                    until: None,
                },
                None => own_thread_sleep(delay),
            },
            _ => own_thread_sleep(delay),
        }
    }

    /// An attempt's cut-off after `delay`: a [`sleep`](Self::sleep) that
    /// knows when it ends ([`Sleep::deadline`]; tokio's knows by itself,
    /// the others read the clock now).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn cut(self, delay: Duration) -> Sleep {
        let mut sleep = self.sleep(delay);
        match &mut sleep {
            Sleep::Tokio { .. } => {}
            Sleep::AsyncIo { until, .. } | Sleep::Boxed { until, .. } => {
                *until = self.now().checked_add(delay);
            }
        }
        sleep
    }

    /// `future`, or `Err` once `limit` has passed.
    #[cfg_attr(
        not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")),
        allow(dead_code)
    )]
    pub(crate) async fn timeout<F: Future>(
        self,
        limit: Duration,
        future: F,
    ) -> Result<F::Output, crate::Elapsed> {
        #[cfg(feature = "tokio")]
        if let Self::Tokio = self
            && in_tokio()
        {
            return tokio::time::timeout(limit, future)
                .await
                .map_err(|_| cut_off(crate::Elapsed::new()));
        }
        let mut future = std::pin::pin!(future);
        let mut timer = std::pin::pin!(self.sleep(limit));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            timer
                .as_mut()
                .poll(cx)
                .map(|()| Err(cut_off(crate::Elapsed::new())))
        })
        .await
    }
}

/// tokio's sleep, where it is built.
#[cfg(feature = "tokio")]
type TokioSleep = tokio::time::Sleep;
#[cfg(not(feature = "tokio"))]
type TokioSleep = std::future::Pending<()>;

/// async-io's timer, where it is built.
#[cfg(feature = "async-io")]
type AsyncIoSleep = async_io::Timer;
#[cfg(not(feature = "async-io"))]
type AsyncIoSleep = std::future::Pending<()>;

pin_project_lite::pin_project! {
    /// A sleep on a call's timer, as a type the loops can hold: tokio's
    /// and async-io's in place (a call that succeeds at once allocates
    /// nothing for its attempt's cut-off); a timer of your own boxed.
    #[project = SleepProj]
    pub(crate) enum Sleep {
        Tokio { #[pin] sleep: TokioSleep },
        // (`until`: when it ends, if it was made to cut an attempt off.)
        AsyncIo { sleep: AsyncIoSleep, until: Option<Instant> },
        Boxed { sleep: Pin<Box<dyn Future<Output = ()> + Send>>, until: Option<Instant> },
    }
}

impl Sleep {
    /// When it ends, on the clock of the timer it is on, if it knows
    /// (tokio's does; the others if made by [`RuntimeClock::cut`]).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            #[cfg(feature = "tokio")]
            Self::Tokio { sleep } => Some(sleep.deadline().into_std()),
            #[cfg(not(feature = "tokio"))]
            Self::Tokio { .. } => None,
            Self::AsyncIo { until, .. } | Self::Boxed { until, .. } => *until,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        match self.project() {
            SleepProj::Tokio { sleep } => sleep.poll(cx),
            // (Both `Unpin`: async-io's `Timer`, and `Pending` without it.)
            SleepProj::AsyncIo { sleep, .. } => Pin::new(sleep).poll(cx).map(drop),
            SleepProj::Boxed { sleep, .. } => sleep.as_mut().poll(cx),
        }
    }
}

pin_project_lite::pin_project! {
    /// An attempt's cut-off: a sleep on the call's timer, and the error it
    /// ends with (which limit it was, told when the limit was made).
    pub(crate) struct Cut {
        #[pin]
        sleep: Sleep,
        why: crate::Elapsed,
    }
}

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
impl Cut {
    /// A cut-off after `cut`, under `timeout` (the attempt's timeout, if
    /// it has one; `cut` is shorter when the time left was).
    pub(crate) fn after(cut: Duration, timeout: Option<Duration>) -> Self {
        Self {
            sleep: RuntimeClock::current().cut(cut),
            why: crate::Elapsed::cut_after(cut, timeout),
        }
    }

    /// Its timer, which says when it cuts the attempt off
    /// ([`Sleep::deadline`]).
    pub(crate) fn sleep(&self) -> &Sleep {
        &self.sleep
    }
}

impl Future for Cut {
    type Output = crate::Elapsed;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<crate::Elapsed> {
        let this = self.project();
        std::task::ready!(this.sleep.poll(cx));
        Poll::Ready(cut_off(*this.why))
    }
}

pin_project_lite::pin_project! {
    /// `future`, cut off once its limit has passed, if it has one: `Err`
    /// then.
    pub(crate) struct Timed<F> {
        #[pin]
        future: F,
        #[pin]
        cut: Option<Cut>,
    }
}

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
impl<F: Future> Timed<F> {
    /// `future`, cut off after `limit` if given, on the call's timer, under
    /// `timeout` (see [`Cut::after`]).
    pub(crate) fn new(limit: Option<Duration>, timeout: Option<Duration>, future: F) -> Self {
        Self {
            future,
            cut: limit.map(|limit| Cut::after(limit, timeout)),
        }
    }
}

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
impl<F> Timed<F> {
    /// The timer that cuts its future off, if one does.
    pub(crate) fn timer(&self) -> Option<&Sleep> {
        self.cut.as_ref().map(Cut::sleep)
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = Result<F::Output, crate::Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match this.cut.as_pin_mut() {
            Some(cut) => cut.poll(cx).map(Err),
            None => Poll::Pending,
        }
    }
}

/// The time on the timer set with [`set_timer`] (the real time if none
/// is: a `Custom` clock made by hand before one was set).
fn custom_now() -> Instant {
    CUSTOM.get().map_or_else(Instant::now, |timer| timer.now())
}

/// Whether a sleep on tokio's timer is in a tokio runtime (outside one,
/// it goes on the crate's own timer thread instead).
#[cfg(feature = "tokio")]
pub(crate) fn in_tokio() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// A sleep with no runtime's timer to go on: on the crate's own timer
/// thread, started at the first.
#[cold]
fn own_thread_sleep(delay: Duration) -> Sleep {
    match crate::time::own_thread::sleep(delay) {
        Some(sleep) => Sleep::Boxed {
            sleep: Box::pin(sleep),
            until: None,
        },
        None => panic!(
            "an async retry loop has no timer to sleep on, and no thread could be started \
             for one: run it in a tokio runtime (feature `tokio`), enable the feature \
             `async-io`, or set a timer with `backstop::time::set_timer`"
        ),
    }
}

impl Clock for RuntimeClock {
    fn now(&self) -> Instant {
        match self {
            #[cfg(feature = "tokio")]
            Self::Tokio => tokio::time::Instant::now().into_std(),
            #[cfg(feature = "async-io")]
            Self::AsyncIo => Instant::now(),
            Self::Custom => custom_now(),
            Self::Missing => Instant::now(),
        }
    }

    fn now_fn(&self) -> fn() -> Instant {
        match self {
            #[cfg(feature = "tokio")]
            Self::Tokio => || tokio::time::Instant::now().into_std(),
            #[cfg(feature = "async-io")]
            Self::AsyncIo => Instant::now,
            Self::Custom => custom_now,
            Self::Missing => Instant::now,
        }
    }

    fn sleep_slack(&self) -> Duration {
        // tokio's wheel ticks in milliseconds and can end a sleep two ticks
        // late (see `TokioClock`); async-io's reactor parks in whole
        // milliseconds too. The crate's own timer thread (where there is
        // no timer) wakes a sleep within a fraction of a millisecond of
        // its instant (p99 under 0.2 ms with 32 threads sleeping at once,
        // measured): as late as tokio's at most, before the executor runs
        // the task, as on any timer.
        if let (Self::Custom, Some(timer)) = (self, CUSTOM.get()) {
            timer.sleep_slack()
        } else {
            Duration::from_millis(2)
        }
    }
}

/// An attempt limited to `limit` (`attempt_timeout`), on the call's
/// timer: `Err` if it ran out.
#[cfg(test)]
pub(crate) fn timeout<F: Future>(
    limit: Duration,
    attempt: F,
) -> impl Future<Output = Result<F::Output, crate::Elapsed>> {
    RuntimeClock::current().timeout(limit, attempt)
}

/// The sleep of an async retry loop, on the call's timer (recorded under
/// [`record_sleeps`](crate::testing::record_sleeps)).
///
/// Boxed: a timer's sleep (tokio's is 96 bytes) would otherwise take room
/// in the future of every call, for its whole life, though only the calls
/// that retry sleep; a retry pays one allocation instead, beside a sleep of
/// milliseconds.
pub(crate) fn sleep_async(delay: Duration) -> Pin<Box<Sleep>> {
    let clock = RuntimeClock::current();
    // (A timer set with `set_timer` may be one of virtual time: nothing to
    // warn of.)
    crate::time::virtual_time::note_async_sleep(delay, matches!(clock, RuntimeClock::Custom));
    Box::pin(clock.sleep(delay))
}

/// An attempt's time limit ran out on the call's timer: its error, `why`
/// (which limit it was, where the caller knows).
///
/// With tokio's clock paused, a limit can run out in no real time: tokio
/// moves a paused clock on to the next timer whenever the runtime has
/// nothing to run, also while it waits for an answer from outside the
/// runtime (a server on another thread or in another process, a real
/// database), which then never comes in time. A test that finds its
/// attempts cut off so is told why, once a thread on standard error (a
/// test's output, which the harness shows when it fails), in a debug
/// build: a release build on a paused clock is a simulation (the storm
/// example), whose cut-offs are meant.
#[cold]
pub(crate) fn cut_off(why: crate::Elapsed) -> crate::Elapsed {
    #[cfg(all(feature = "tokio", debug_assertions))]
    note_paused_cut_off();
    why
}

/// Says (once a thread) that an attempt was cut off on a paused tokio
/// clock which ran ahead of real time: tokio's clock reads its pause's
/// instant plus what it was moved on, never ahead of the real one unless
/// it was moved on.
#[cfg(all(feature = "tokio", debug_assertions))]
fn note_paused_cut_off() {
    thread_local! {
        static SAID: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let virtual_now = tokio::time::Instant::now().into_std();
    let Some(ahead) = virtual_now.checked_duration_since(Instant::now()) else {
        return;
    };
    if ahead < Duration::from_millis(1) || SAID.with(|said| said.replace(true)) {
        return;
    }
    #[cfg(test)]
    tests::TOLD.with(|told| told.set(told.get() + 1));
    note!(
        "backstop: an attempt was cut off at its time limit on tokio's paused clock, \
         {ahead:.1?} ahead of real time. A paused clock moves on to the next timer whenever \
         the runtime has nothing to run, also while it waits for an answer from outside the \
         runtime (a server on another thread or in another process, a mock server with a \
         runtime of its own, a real database), which then cannot come in time. Serve the \
         test's mock on the test's runtime (`tokio::spawn`), or run the test in real time \
         with short delays. (An attempt meant to hang, in a test of the time limit, is cut \
         off as it should be.)"
    );
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    #[cfg(debug_assertions)]
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    use super::RuntimeClock;
    #[cfg(debug_assertions)]
    use super::timeout;
    use crate::time::own_thread::tests::block_on;

    /// Outside any tokio runtime (a program on another executor, with the
    /// feature `tokio` alone), tokio's timer is not there: a sleep and an
    /// attempt's cut-off go on the crate's own timer thread, and end when
    /// due, rather than panic.
    #[test]
    fn outside_a_tokio_runtime_sleeps_and_cut_offs_go_on_a_thread_of_the_crates_own() {
        let start = Instant::now();
        block_on(RuntimeClock::Tokio.sleep(Duration::from_millis(10)));
        assert!(start.elapsed() >= Duration::from_millis(10));
        let start = Instant::now();
        let out = block_on(
            RuntimeClock::Tokio.timeout(Duration::from_millis(10), std::future::pending::<()>()),
        );
        assert!(out.is_err(), "cut off");
        assert!(start.elapsed() >= Duration::from_millis(10));
        let out =
            block_on(RuntimeClock::Missing.timeout(Duration::from_secs(60), std::future::ready(7)));
        assert_eq!(out.ok(), Some(7));
    }

    #[cfg(debug_assertions)]
    thread_local! {
        /// The cut-offs told on this thread.
        pub(super) static TOLD: Cell<u32> = const { Cell::new(0) };
    }

    /// An attempt waiting for an answer from outside the runtime while
    /// tokio's clock is paused: the runtime, with nothing to run, moves
    /// the clock on to the attempt's limit, and the cut-off says why (once
    /// a thread). The same cut-off on a clock that runs says nothing.
    #[test]
    #[cfg(debug_assertions)]
    fn an_attempt_cut_off_on_a_paused_clock_ahead_of_real_time_says_why() {
        // (The sender stays here, outside the runtime, and never answers.)
        let (_answer, answered) = tokio::sync::oneshot::channel::<()>();
        let mut answered = std::pin::pin!(answered);
        let real = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // (The timer chosen inside the runtime, as a call chooses it.)
        let out =
            real.block_on(async { timeout(Duration::from_millis(5), answered.as_mut()).await });
        assert!(out.is_err(), "cut off in real time");
        assert_eq!(TOLD.get(), 0, "a clock that runs is not ahead of itself");

        let paused = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let out =
            paused.block_on(async { timeout(Duration::from_secs(5), answered.as_mut()).await });
        assert!(out.is_err(), "cut off at once, the clock moved on");
        assert_eq!(TOLD.get(), 1);
        let out =
            paused.block_on(async { timeout(Duration::from_secs(5), answered.as_mut()).await });
        assert!(out.is_err());
        assert_eq!(TOLD.get(), 1, "once a thread");
    }
}
