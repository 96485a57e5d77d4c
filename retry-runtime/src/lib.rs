//! The policy logic behind [`backstop`](https://docs.rs/backstop)'s
//! `#[retry]`: backoff math, classification, deadlines, retry budgets and the
//! attempt state machine. Depend on `backstop`, which re-exports all of it.
//!
//! Every retry decision is made in one place, [`AttemptState`]: it is told
//! each attempt's outcome and answers "return it" or "sleep, then attempt
//! again". It never sleeps and reads time only through a [`Clock`], so the
//! rules are tested in virtual time and sync and async loops are identical
//! but for the one `sleep`.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use retry_runtime::{call, testing::VirtualTime, Policy};
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
//! In layers, each importing only the ones below it:
//!
//! 1. Leaves: the duration units and defaults shared with the macro, the
//!    atomics (std's, or loom's for the models), virtual time's core, the
//!    [`clock`], [`backoff`] math, and the vocabulary of a decision
//!    ([`Verdict`], [`Classify`], [`Attempted`], [`Decision`], [`GiveUp`])
//!    with the errors
//!    the runtime gives a call ([`Elapsed`], [`CircuitOpen`],
//!    [`Throttled`], and with `reqwest` its error of an HTTP call).
//! 2. [`classify`]: which outcomes a retry can fix.
//! 3. The limiters: [`throttle`], [`budget`], [`adaptive`], [`breaker`];
//!    then [`policy`], the [`observe`] events, the attempt
//!    [`context`](mod@context), the [`timer`], the [`hedge`] delay, and
//!    the fresh copies of all of them that [`testing::isolate`] hands a
//!    test.
//! 4. [`state`]: the one decider.
//! 5. The loops and integrations: [`run`], the `#[retry]` glue,
//!    [`testing`], `http`, `reqwest`, `config`, `tower`,
//!    `reqwest_middleware`, `tonic`.
//!
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod sync;
mod clients;
mod isolation;
#[cfg(feature = "reqwest")]
mod reqwest_error;
mod units;
mod virtual_time;
mod vocabulary;

pub mod adaptive;
pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod classify;
pub mod clock;
#[cfg(feature = "serde")]
pub mod config;
pub mod context;
#[cfg(not(loom))]
pub mod hedge;
#[cfg(feature = "http")]
pub mod http;
#[doc(hidden)]
pub mod macro_support;
pub mod observe;
pub mod policy;
#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "reqwest-middleware")]
pub mod reqwest_middleware;
pub mod run;
pub mod state;
pub mod testing;
pub mod throttle;
pub mod timer;
#[cfg(feature = "tonic")]
pub mod tonic;
#[cfg(feature = "tower")]
pub mod tower;

pub use adaptive::{AdaptiveThrottle, Throttled};
pub use backoff::{Backoff, Jitter};
pub use breaker::{BreakerState, CircuitBreaker, CircuitOpen, Permit};
pub use budget::{BudgetRef, BudgetStats, IntoBudget, RetryBudget};
pub use classify::{ByClassify, Classifier, Classify, NeverRetry, Verdict, When};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, SystemClock};
#[cfg(feature = "async")]
pub use context::deadline;
pub use context::{
    CallScope, Context, IdempotencyKey, InCurrentCall, context, current_call, deadline_sync,
};
pub use observe::{GiveUpEvent, Ignore, RetryEvent};
pub use policy::Policy;
pub use run::{
    AttemptTimeout, BreakerSlot, Elapsed, NoBreaker, NoThrottle, NoTimeout, Retry, SyncLoop,
    ThrottleSlot, TimeoutSlot, ValueLoop, WithTimeout, call,
};
#[cfg(feature = "async")]
pub use run::{call_async, call_async_with};
pub use state::{AttemptState, Decision, GiveUp};
pub use throttle::RetryThrottle;
pub use vocabulary::Attempted;
