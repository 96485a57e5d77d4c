//! Where time comes from: the clocks a call reads and the timer its async
//! loops sleep on.
//!
//! Everything that reads time (the attempt state machine, the budget's
//! window) reads it through a [`Clock`], so tests can drive all of it in
//! virtual time ([`testing::VirtualTime`](crate::testing::VirtualTime)).
//!
//! # The timer
//!
//! The timer async retry loops sleep on and read time from: tokio's
//! (feature `tokio`, the default; its paused clock included), async-io's
//! (feature `async-io`: smol, async-std and other executors built on it),
//! or one of your own ([`Timer`], set with [`set_timer`], feature
//! `custom-timer` where neither of the others is built).
//!
//! Which one a call uses is decided where it runs, when it starts (its
//! clock) and at each sleep: the timer set with [`set_timer`], if any;
//! else tokio's inside a tokio runtime; else async-io's. So a program on
//! smol works even when another crate in the build turns the `tokio`
//! feature on. Where none of them is there (the feature `tokio` alone,
//! outside a tokio runtime; the feature `custom-timer` before a timer is
//! set), the loop's sleeps and its attempts' cut-offs go on a timer
//! thread of the crate's own, started at the first such sleep or cut-off
//! (debug builds say so once on standard error): enable `async-io` on
//! smol or async-std rather than rely on it.
//!
//! ```
//! # extern crate backstop_runtime as backstop;
//! use std::future::Future;
//! use std::pin::Pin;
//! use std::time::{Duration, Instant};
//! use backstop::time::Timer;
//!
//! /// A timer for an executor backstop does not know: its own sleep.
//! struct Embedded;
//!
//! impl Timer for Embedded {
//!     fn now(&self) -> Instant {
//!         Instant::now()
//!     }
//!     fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
//!         Box::pin(async move { std::thread::sleep(delay) }) // (a real one would not block)
//!     }
//! }
//!
//! static EMBEDDED: Embedded = Embedded;
//! // Once, at start-up: `backstop::time::set_timer(&EMBEDDED)`.
//! # let _ = &EMBEDDED;
//! ```

pub(crate) mod clock;
pub(crate) mod own_thread;
pub(crate) mod timer;
pub(crate) mod units;
pub(crate) mod virtual_time;

/// Sleeps the thread for a sync loop's `delay`: in virtual time if
/// installed on this thread, else for real.
pub(crate) fn sleep_thread(delay: std::time::Duration) {
    virtual_time::note_sleep(delay);
    if !virtual_time::virtual_sleep(delay) {
        std::thread::sleep(delay);
    }
}

#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, SystemClock};
pub use timer::{RuntimeClock, SetTimerError, Timer, set_timer};
