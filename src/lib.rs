//! # backstop
//!
//! Retries that cannot start a retry storm: exponential backoff with jitter
//! that never breaks its cap, a deadline for the whole call, `Retry-After`
//! honoured, a retry budget, and errors classified so that only what a retry
//! can fix is retried.
//!
//! > The `#[retry(...)]` attribute is not written yet. Until it lands, the
//! > same loop is available as [`call`], [`call_async`] and [`Retry`].
//!
//! ## Quick start
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use std::time::Duration;
//! use backstop::{Policy, RetryBudget};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! static BUDGET: RetryBudget = RetryBudget::new(0.1, 10, Duration::from_secs(10));
//! static POLICY: Policy = Policy::new()
//!     .attempts(4)
//!     .base(Duration::from_millis(100))
//!     .cap(Duration::from_secs(5))
//!     .deadline(Some(Duration::from_secs(10)))
//!     .budget(&BUDGET);
//!
//! let mut resets = 2;
//! let answer = backstop::call(&POLICY, || {
//!     if resets > 0 {
//!         resets -= 1;
//!         return Err(Error::from(ErrorKind::ConnectionReset)); // transient
//!     }
//!     Ok(42)
//! });
//! assert_eq!(answer.unwrap(), 42);
//! ```
//!
//! Giving up returns the last outcome unchanged: callers see their own error
//! type, never a wrapper.
//!
//! ## Classification: retry only what a retry can fix
//!
//! A retried `400 Bad Request` is another `400`, forever. Errors say what
//! they are worth through [`Classify`], or the call says it with `when`:
//!
//! | [`Verdict`] | meaning | retried |
//! |---|---|---|
//! | `Retry` | transient (connection reset, 503) | yes |
//! | `RetryAfter(d)` | the server said when | after `d`…`1.2·d`, unless `d > retry_after_max` |
//! | `RetryIfIdempotent` | ambiguous: the work may have happened (a timeout) | only if the policy is `idempotent` |
//! | `Stop` | retrying cannot help (validation, 4xx) | never |
//!
//! ```
//! use backstop::{Classify, Policy, Verdict};
//! # let _vt = backstop::testing::VirtualTime::start();
//!
//! #[derive(Debug)]
//! enum ApiError { Unavailable, Invalid }
//!
//! impl Classify for ApiError {
//!     fn classify(&self) -> Verdict {
//!         match self {
//!             ApiError::Unavailable => Verdict::Retry,
//!             ApiError::Invalid => Verdict::Stop,
//!         }
//!     }
//! }
//!
//! let mut attempts = 0;
//! let out: Result<(), ApiError> = backstop::call(&Policy::new(), || {
//!     attempts += 1;
//!     Err(ApiError::Invalid)
//! });
//! assert_eq!(attempts, 1); // not retried
//! ```
//!
//! [`std::io::Error`] is classified by kind: refused, reset or aborted
//! connections, broken pipes, `Interrupted` and `WouldBlock` are retried,
//! `TimedOut` only for idempotent operations, everything else stops.
//!
//! ## Backoff and jitter
//!
//! `n` counts retries so far. The ceiling is `min(cap, base·factor^n)`
//! (or `base·(n+1)`, or `base`); [`Jitter`] draws below it and the result is
//! clamped again, so no delay ever exceeds `cap`. Arithmetic saturates: a
//! retry number of `u32::MAX` or a cap of `Duration::MAX` cannot panic.
//!
//! ```
//! use std::time::Duration;
//! use backstop::{Backoff, Jitter, Policy};
//!
//! let policy = Policy::new()
//!     .backoff(Backoff::Exponential)
//!     .base(Duration::from_millis(100))
//!     .factor(3.0)
//!     .cap(Duration::from_secs(2))
//!     .jitter(Jitter::Equal);
//! assert_eq!(policy.ceiling(2), Duration::from_millis(900));
//! assert_eq!(policy.ceiling(100), Duration::from_secs(2));
//! ```
//!
//! ## Deadlines
//!
//! Every call has a deadline (30 s by default), measured from entry. The
//! loop gives up rather than sleep into it, so no attempt starts after it;
//! the attempt count is only a backstop. The first attempt always runs.
//!
//! ```
//! use std::time::Duration;
//! use backstop::{Jitter, Policy, testing::VirtualTime};
//!
//! let vt = VirtualTime::start();
//! let policy = Policy::new()
//!     .attempts(100)
//!     .jitter(Jitter::None)
//!     .deadline(Some(Duration::from_millis(500)));
//! let mut attempts = 0;
//! let _ = backstop::call(&policy, || {
//!     attempts += 1;
//!     Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
//! });
//! // Attempts at 0, 100 and 300 ms; a 400 ms sleep would pass the deadline.
//! assert_eq!(attempts, 3);
//! assert_eq!(vt.elapsed(), Duration::from_millis(300));
//! ```
//!
//! ## Retry budgets
//!
//! A [`RetryBudget`] allows retries as a fraction of calls over a sliding
//! window, plus a small floor per second. It is lock-free and `const`, so a
//! `static` shared by every caller of a dependency bounds the whole
//! process's retries. A [`Policy`] carries no budget until you give it one.
//!
//! ```
//! use std::time::Duration;
//! use backstop::{Policy, RetryBudget};
//!
//! static DB_BUDGET: RetryBudget = RetryBudget::new(0.2, 5, Duration::from_secs(10));
//! static DB: Policy = Policy::new().budget(&DB_BUDGET);
//! # let _ = &DB;
//! ```
//!
//! ## Async
//!
//! With the default `tokio` feature, [`call_async`] sleeps on tokio's timer
//! and reads tokio's clock. Dropping the future cancels the loop.
//!
//! ```
//! use std::io::{Error, ErrorKind};
//! use backstop::Policy;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let mut attempts = 0;
//! let out = backstop::call_async(&Policy::new(), || {
//!     attempts += 1;
//!     let n = attempts;
//!     async move {
//!         if n < 3 { Err(Error::from(ErrorKind::ConnectionReset)) } else { Ok(n) }
//!     }
//! })
//! .await;
//! assert_eq!(out.unwrap(), 3);
//! # }
//! ```
//!
//! ## Testing your retries in virtual time
//!
//! [`testing::VirtualTime`] makes the sync loops of the current thread sleep
//! in virtual time and records the delays; under
//! `#[tokio::test(start_paused = true)]` async loops run in tokio's virtual
//! time. A test of a 30-second retry schedule takes microseconds.
//!
//! ```
//! use std::time::Duration;
//! use backstop::{Jitter, Policy, testing::VirtualTime};
//!
//! let vt = VirtualTime::start();
//! let policy = Policy::new().attempts(3).jitter(Jitter::None);
//! let _ = backstop::call(&policy, || {
//!     Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
//! });
//! assert_eq!(vt.sleeps(), [Duration::from_millis(100), Duration::from_millis(200)]);
//! ```
//!
//! ## Without a runner: the state machine
//!
//! Every decision is made by [`AttemptState`], which never sleeps and reads
//! time only through a [`Clock`]: drive it yourself to retry inside another
//! framework's loop.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[doc(inline)]
pub use retry_macros::retry;
#[doc(inline)]
pub use retry_runtime::{
    AttemptState, Backoff, BudgetStats, ByClassify, Classifier, Classify, Clock, Decision, GiveUp,
    Jitter, NeverRetry, Policy, Retry, RetryBudget, SystemClock, Verdict, When, call,
};
#[cfg(feature = "tokio")]
#[doc(inline)]
pub use retry_runtime::{TokioClock, call_async};

#[doc(inline)]
pub use retry_runtime::{backoff, testing};

/// For code generated by `#[retry]` only: not a public API, may change in
/// any release.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "tokio")]
    pub use retry_runtime::TokioClock;
    pub use retry_runtime::macro_support::*;
    pub use retry_runtime::run::sleep;
    pub use retry_runtime::{
        AttemptState, Backoff, Decision, Jitter, Policy, RetryBudget, SystemClock, Verdict,
    };
}
