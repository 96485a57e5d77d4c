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
//! In folders by concern:
//!
//! - `time/`: the duration units and defaults shared with the macro,
//!   virtual time's core, the [`clock`]s and the [`timer`];
//! - `limit/`: the [`throttle`], the windowed [`budget`], the
//!   [`adaptive`] throttle and the [`breaker`], lock-free (their atomics
//!   come from `sync.rs`: std's, or loom's for the models);
//! - [`classify`]: which outcomes a retry can fix, with the database
//!   clients' errors and the HTTP rule (`http`);
//! - [`state`]: the one decider, with its vocabulary, the [`policy`] and
//!   the [`backoff`] math;
//! - [`run`]: the loops, the attempt [`context`](mod@context), the
//!   [`observe`] events and the [`hedge`] delay;
//! - `tower/` (the layer, with `tonic`), `reqwest/` (classification, the
//!   error of an HTTP call, the middleware), [`testing`] (with the fresh
//!   copies [`testing::isolate`] hands a test), `config.rs`, and the
//!   `#[retry]` glue in `macro_support.rs`.
//!
//! And in layers, each importing only the ones below it:
//!
//! 1. Leaves: the units, the atomics, virtual time's core, the clock, the
//!    backoff math, and the vocabulary of a decision ([`Verdict`],
//!    [`Classify`], [`Attempted`], [`Decision`], [`GiveUp`]) with the
//!    errors the runtime gives a call ([`Elapsed`], [`CircuitOpen`],
//!    [`Throttled`], and with `reqwest` its error of an HTTP call).
//! 2. Classification.
//! 3. The limiters; then the policy, the events, the attempt context, the
//!    timer, the hedge delay, and the fresh copies of all of them that
//!    [`testing::isolate`] hands a test.
//! 4. The decider.
//! 5. The loops and integrations: [`run`], the `#[retry]` glue,
//!    [`testing`], `http`, `reqwest`, `config`, `tower`, the middleware,
//!    `tonic`.
//!
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod sync;

pub mod classify;
#[cfg(feature = "serde")]
pub mod config;
mod limit;
#[doc(hidden)]
pub mod macro_support;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod run;
pub mod state;
pub mod testing;
mod time;
#[cfg(feature = "tower")]
pub mod tower;

// The modules' paths of the crate's first releases, by concern above.
#[cfg(feature = "http")]
pub use classify::http;
pub use limit::{adaptive, breaker, budget, throttle};
#[cfg(feature = "reqwest-middleware")]
pub use reqwest::middleware as reqwest_middleware;
#[cfg(not(loom))]
pub use run::hedge;
pub use run::{context, observe};
pub use state::{backoff, policy};
pub use time::{clock, timer};
#[cfg(feature = "tonic")]
pub use tower::tonic;

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
    AttemptTimeout, BreakerSlot, Elapsed, Handles, NoBreaker, NoThrottle, NoTimeout, Retry,
    SyncLoop, ThrottleSlot, TimeoutSlot, ValueLoop, WithTimeout, call,
};
#[cfg(feature = "async")]
pub use run::{call_async, call_async_with};
pub use state::vocabulary::Attempted;
pub use state::{AttemptState, Decision, GiveUp};
pub use throttle::RetryThrottle;
