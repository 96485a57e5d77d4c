//! The policy logic behind [`backstop`](https://docs.rs/backstop)'s
//! `#[retry]`: backoff math, classification, deadlines, budgets and the
//! attempt state machine. Depend on `backstop`, which re-exports all of it.
//!
//! Every retry decision is made in one place, one state machine (out of
//! sight: the macro's loops and the one driver hold it): it is told
//! each attempt's outcome and answers "return it" or "sleep, then attempt
//! again". It never sleeps and reads time only through a [`Clock`](time::Clock), so the
//! rules are tested in virtual time and sync and async loops are identical
//! but for the one `sleep`.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use backstop_runtime::{call, testing::VirtualTime, Policy};
//!
//! let vt = VirtualTime::start();
//! let mut attempts = 0;
//! let out: Result<(), Error> = call(&Policy::new(), || {
//!     attempts += 1;
//!     Err(ErrorKind::ConnectionRefused.into())
//! });
//! assert!(out.is_err());
//! assert_eq!(attempts, 3); // the default backstop
//! assert_eq!(vt.sleeps().len(), 2);
//! ```
//!
//! # How it is built
//!
//! In folders by concern:
//!
//! - [`time`]: the duration units and defaults shared with the macro,
//!   virtual time's core, the clocks and the timer;
//! - [`limit`]: the token budget, the windowed budget, the adaptive
//!   throttle and the breaker, lock-free (their atomics come from
//!   `sync.rs`: std's, or loom's for the models), which instance of each
//!   a call draws on (the `static`, or a test's fresh copy), and the
//!   tables that keep one per key;
//! - [`classify`]: which outcomes a retry can fix, with the database
//!   clients' errors and the HTTP rule (`http`);
//! - `state/`: the one decider, with its vocabulary, the [`Policy`] and
//!   the [`backoff`] math;
//! - `run/`: the builder ([`Retry`], its parts in [`builder`]), the one
//!   driver, the attempt context and the call's [`scope`], the events
//!   hooks are told and the [`hedge`] delay;
//! - `tower/` (the layer, with `tonic`), `reqwest/` (classification, the
//!   error of an HTTP call, the middleware), [`testing`] (virtual time,
//!   and [`testing::isolate`] for fresh copies), `config.rs`, and the
//!   `#[retry]` glue in `macro_support.rs`.
//!
//! And in layers, each importing only the ones below it:
//!
//! 1. Leaves: the units, the atomics, virtual time's core, the clock, the
//!    backoff math, and the vocabulary of a decision ([`Verdict`],
//!    [`Classify`], `Attempted`, `Decision`, [`GiveUp`]) with the
//!    errors the runtime gives a call ([`Elapsed`], [`CircuitOpen`],
//!    [`Throttled`], and with `reqwest` its error of an HTTP call).
//! 2. Classification.
//! 3. The limiters; then the policy, the events, the attempt context, the
//!    timer, the hedge delay, the lookup of the fresh copies of all of
//!    them that [`testing::isolate`] hands a test, and the tables of them
//!    per key.
//! 4. The decider.
//! 5. The loops and integrations: `run`, the `#[retry]` glue,
//!    [`testing`], `http`, `reqwest`, `config`, `tower`, the middleware,
//!    `tonic`.
//!
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Loom's models are the runtime's own tests: no user builds with `loom`.
#![cfg_attr(docsrs, doc(auto_cfg(hide(loom))))]

/// `eprintln!` for the crate's notes on standard error (captured with a
/// test's output, as `eprintln!` is): one that cannot be written to (a
/// closed pipe, where `eprintln!` panics) loses the note, never the call.
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = std::panic::catch_unwind(|| eprintln!($($arg)*));
    }};
}

/// [`note!`], said once a process from where it is written.
#[allow(unused_macros)]
macro_rules! note_once {
    ($($arg:tt)*) => {{
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            note!($($arg)*);
        }
    }};
}

#[macro_use]
mod sync;

pub mod classify;
#[cfg(feature = "serde")]
pub mod config;
pub mod limit;
#[doc(hidden)]
pub mod macro_support;
/// What `#[retry]`'s generated code names (`crate = ..` may point it at
/// this crate instead of `backstop`): [`macro_support`].
#[doc(hidden)]
pub use macro_support as __private;
#[cfg(feature = "reqwest")]
pub mod reqwest;
mod run;
mod state;
pub mod testing;
pub mod time;
#[cfg(feature = "tower")]
pub mod tower;

#[cfg(feature = "http")]
pub use classify::http;
#[cfg(not(loom))]
pub use run::hedge;
pub use run::scope;
pub use state::backoff;
#[cfg(feature = "tonic")]
pub use tower::tonic;

/// The parts of a [`Retry`]'s type: what its type parameters hold while
/// an option is unset or set, the hook traits, and the one bound
/// ([`Handles`](builder::Handles)) a generic function taking a `Retry`
/// writes.
///
/// A `Retry` is built by its methods; these names matter only to code
/// that names its type, as a struct that keeps one does:
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io;
/// use std::time::Duration;
/// use backstop::builder::{Ignore, NoTimeout, Static};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::limit::CircuitBreaker;
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
///
/// /// A client that keeps its retry: the defaults, and a breaker.
/// struct Payments {
///     retry: Retry<'static, ByClassify, NeverRetry, Static<CircuitBreaker>, Ignore, Ignore, NoTimeout>,
/// }
///
/// impl Payments {
///     fn charge(&self) -> Result<u32, io::Error> {
///         self.retry.call(|| Ok(7))
///     }
/// }
///
/// let payments = Payments { retry: Retry::new(&POLICY).breaker(&PAYMENTS) };
/// assert_eq!(payments.charge().unwrap(), 7);
/// ```
///
/// A client whose policy is its own (read from configuration) keeps the
/// `Policy`, which a `Retry` borrows, and makes its `Retry` where it
/// calls, with closures whose types it never names (cheap: a `Retry` is
/// a few words; its default budget is the line's that makes it, shared by
/// every client, as a kept one's is):
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io;
/// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
/// use backstop::{Policy, Retry, RetryEvent};
///
/// struct Inventory {
///     policy: Policy,
///     retried: AtomicU32,
/// }
///
/// impl Inventory {
///     fn count(&self, mut failures: u32) -> Result<u32, io::Error> {
///         Retry::new(&self.policy)
///             .on_retry(|_: &RetryEvent<'_, u32, io::Error>| {
///                 self.retried.fetch_add(1, Relaxed);
///             })
///             .call(|| match failures {
///                 0 => Ok(7),
///                 _ => {
///                     failures -= 1;
///                     Err(io::ErrorKind::ConnectionRefused.into())
///                 }
///             })
///     }
/// }
///
/// # let _vt = backstop::testing::VirtualTime::start();
/// let inventory = Inventory { policy: Policy::new().attempts(5), retried: AtomicU32::new(0) };
/// assert_eq!(inventory.count(2).unwrap(), 7);
/// assert_eq!(inventory.retried.load(Relaxed), 2);
/// ```
pub mod builder {
    pub use crate::run::observe::{Ignore, OnGiveUp, OnRetry};
    pub use crate::run::{
        AttemptTimeout, BreakerSlot, Budget, Handles, IntoBreaker, IntoThrottle, NoBreaker,
        NoThrottle, NoTimeout, Static, SyncLoop, ThrottleSlot, TimeoutSlot, ValueLoop, WithTimeout,
    };
}

pub use backoff::{Backoff, Jitter};
pub use classify::{Classify, Verdict};
pub use limit::{CircuitOpen, Throttled};
pub use run::observe::{GiveUpEvent, RetryEvent};
pub use run::{Elapsed, Retry, call};
// (Without a timer feature, hidden ones that are an error naming the
// features that give one.)
pub use run::{call_async, call_async_with};
pub use scope::{Context, context};
pub use state::GiveUp;
pub use state::policy::Policy;
