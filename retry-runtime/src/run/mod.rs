//! Retry loops without the macro: [`call`], [`call_async`] and the
//! [`Retry`] builder. `#[retry]` expands to the same state machine.

#[cfg(all(
    any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
    not(loom)
))]
pub(crate) mod drive;
#[cfg(not(loom))]
pub mod hedge;
pub(crate) mod observe;
pub mod scope;

use std::time::Duration;

use crate::classify::{ByClassify, Classifier, Classify, IntoVerdict, NeverRetry, When};
use crate::limit::adaptive::{AdaptiveThrottle, Throttled};
use crate::limit::breaker::{CircuitBreaker, CircuitOpen};
use crate::limit::keyed::key_hash;
use crate::limit::{BudgetRef, Keyed, TokenBudget, WindowBudget};
#[cfg(not(loom))]
use crate::run::hedge::Hedge;
use crate::run::observe::{GiveUpEvent, Ignore, OnGiveUp, OnRetry, RetryEvent};
use crate::state::policy::Policy;
use crate::state::{AttemptState, GiveUp, HoldsPolicy};
use crate::time::clock::SystemClock;
pub(crate) use steps::Steps;

/// Retries `op` under `policy`, classifying errors by [`Classify`].
///
/// Sleeps with [`std::thread::sleep`], or in virtual time under
/// [`VirtualTime`](crate::testing::VirtualTime). Giving up returns the last
/// outcome unchanged. The first attempt always runs.
///
/// # Errors
///
/// The last attempt's error, unchanged, once retrying is over: the error was
/// not retryable, or attempts, deadline or budget ran out.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{testing::VirtualTime, Policy};
///
/// let _vt = VirtualTime::start();
/// let mut failures = 2;
/// let answer = backstop::call(&Policy::new(), || {
///     if failures > 0 {
///         failures -= 1;
///         return Err(Error::from(ErrorKind::ConnectionRefused));
///     }
///     Ok(42)
/// });
/// assert_eq!(answer.unwrap(), 42);
/// ```
#[track_caller]
pub fn call<T, E, F>(policy: &Policy, op: F) -> Result<T, E>
where
    E: Classify,
    F: FnMut() -> Result<T, E>,
{
    Retry::new(policy).call(op)
}

/// Retries the future `op` makes under `policy`, sleeping on the runtime's
/// timer (tokio's, async-io's or one set with [`set_timer`](crate::time::set_timer)).
///
/// Runs in virtual time under a paused tokio clock. Dropping the returned
/// future cancels the loop between or during attempts.
///
/// The future borrows `policy`, as a [`Retry`] does (a copy would make
/// every call's future larger by the size of a `Policy`): to spawn the
/// call with a policy made on the spot (from configuration, say), move
/// the policy into the task and borrow it there, or keep it in a
/// `static`.
///
/// # Errors
///
/// The last attempt's error, unchanged, once retrying is over: the error was
/// not retryable, or attempts, deadline or budget ran out.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::Policy;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let out: Result<u8, Error> = backstop::call_async(&Policy::new(), || async {
///     Err(Error::from(ErrorKind::PermissionDenied)) // Stop: one attempt
/// })
/// .await;
/// assert!(out.is_err());
///
/// // Spawned: the policy moves into the task.
/// let policy = Policy::new().attempts(5);
/// let task = tokio::spawn(async move {
///     backstop::call_async(&policy, || async { Ok::<u8, Error>(7) }).await
/// });
/// assert_eq!(task.await.unwrap().unwrap(), 7);
/// # }
/// ```
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[track_caller]
pub fn call_async<T, E, F, Fut>(policy: &Policy, op: F) -> impl Future<Output = Result<T, E>>
where
    E: Classify,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    // Chosen here, not in the future: the call site is this function's
    // caller.
    let budget = crate::limit::isolation::own_budget(budget_of(policy).1);
    check_attempt_timeout(policy, None);
    let op = drive::Closures::<F, Fut, NoTimeout>::new(op);
    drive::Drive::new(&DEFAULTS, policy, budget, None, op, true)
}

/// What the closure forms' async calls ask of their attempts without a
/// timer feature, where nothing implements it: `call_async` is then this
/// one error, naming the choices, rather than "no method named".
#[diagnostic::on_unimplemented(
    message = "`call_async` and `call_async_with` need a timer to sleep on between attempts",
    label = "this call sleeps between attempts",
    note = "enable one of backstop's features: `tokio` (the default), `async-io` (smol, async-std), \
            or `custom-timer` with a `backstop::time::Timer` of your own (`backstop::time::set_timer`)"
)]
#[doc(hidden)]
pub trait NeedsATimer: needs_a_timer::Sealed {}

/// Nothing implements it, nor can: [`NeedsATimer`] stays unimplemented.
mod needs_a_timer {
    pub trait Sealed {}
}

/// Without a timer feature: one error naming the features that give one.
#[cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]
#[doc(hidden)]
pub fn call_async<T, E, F, Fut>(_: &Policy, _: F) -> std::future::Pending<Result<T, E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>> + NeedsATimer,
{
    unreachable!("nothing implements `NeedsATimer`")
}

/// Without a timer feature: one error naming the features that give one.
#[cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]
#[doc(hidden)]
pub fn call_async_with<S, T, E, F, Fut>(
    _: &Policy,
    _: S,
    _: F,
) -> std::future::Pending<(S, Result<T, E>)>
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Result<T, E>)> + NeedsATimer,
{
    unreachable!("nothing implements `NeedsATimer`")
}

/// Retries an async operation that borrows or owns `value` (`&mut conn`),
/// under `policy`: see [`Retry::call_async_with`].
///
/// # Errors
///
/// The last attempt's error, unchanged, beside `value`, once retrying is
/// over.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::Policy;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let mut sent = Vec::new();
/// let (sent, out) = backstop::call_async_with(&Policy::new(), &mut sent, |sent| async move {
///     sent.push("ping");
///     let out = if sent.len() < 2 { Err(std::io::ErrorKind::ConnectionRefused.into()) } else { Ok(()) };
///     (sent, out)
/// })
/// .await;
/// let _: Result<(), std::io::Error> = out;
/// assert_eq!(*sent, ["ping", "ping"]);
/// # }
/// ```
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[track_caller]
pub fn call_async_with<S, T, E, F, Fut>(
    policy: &Policy,
    value: S,
    op: F,
) -> impl Future<Output = (S, Result<T, E>)>
where
    E: Classify,
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Result<T, E>)>,
{
    let budget = crate::limit::isolation::own_budget(budget_of(policy).1);
    check_attempt_timeout(policy, None);
    let op = drive::WithValue::new(value, op);
    drive::HandsBack::new(drive::Drive::new(
        &DEFAULTS, policy, budget, None, op, false,
    ))
}

/// A policy's `attempt_timeout` that the loop about to run does not apply
/// (`applied`: its own attempt timeout): a closure form or a tower layer
/// not given `.attempt_timeout(..)`, which needs an error type that holds
/// [`Elapsed`] ([`check_attempt_timeout_applied`](crate::state::policy::check_attempt_timeout_applied)).
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
#[inline]
pub(crate) fn check_attempt_timeout(policy: &Policy, applied: Option<Duration>) {
    crate::state::policy::check_attempt_timeout_applied(policy, applied.is_some());
}

/// Sleeps a sync retry loop's delay: in virtual time if installed on this
/// thread, else for real.
///
/// ```
/// use std::time::Duration;
/// use backstop_runtime::{macro_support::sleep, testing::VirtualTime};
///
/// let vt = VirtualTime::start();
/// sleep(Duration::from_secs(3600)); // returns at once
/// assert_eq!(vt.elapsed(), Duration::from_secs(3600));
/// ```
pub fn sleep(delay: Duration) {
    crate::time::sleep_thread(delay);
}

pub use crate::state::vocabulary::Elapsed;

/// A retry loop with more than a policy: its own budget, a `when`
/// classifier for errors, a `when_ok` one for values.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{testing::VirtualTime, Policy, Retry, limit::WindowBudget, Verdict};
///
/// static BUDGET: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));
///
/// let _vt = VirtualTime::start();
/// let policy = Policy::new();
/// let mut statuses = vec![200, 503, 503];
/// let status = Retry::new(&policy)
///     .budget(&BUDGET)
///     .when(|_: &String| Verdict::Stop)
///     .when_ok(|status: &u16| *status == 503)
///     .call(|| Ok::<u16, String>(statuses.pop().unwrap()));
/// assert_eq!(status, Ok(200));
/// assert_eq!(BUDGET.stats().retries, 2);
/// ```
#[derive(Clone, Copy)]
#[must_use = "a Retry does nothing until `.call(..)` or `.call_async(..)`"]
// Each field is named as the method that sets it (`on_retry`, `when`…).
#[allow(clippy::struct_field_names)]
pub struct Retry<
    'a,
    W = ByClassify,
    K = NeverRetry,
    B = NoBreaker,
    R = Ignore,
    G = Ignore,
    L = NoTimeout,
    A = NoThrottle,
> {
    policy: &'a Policy,
    pub(crate) budget: Option<BudgetRef<'a>>,
    /// The budget as it was chosen, for an integration made from this
    /// loop.
    given: Chosen,
    when: W,
    when_ok: K,
    breaker: B,
    on_retry: R,
    on_give_up: G,
    pub(crate) name: &'static str,
    pub(crate) timeout: L,
    throttle: A,
    hedge: HedgeSlot,
    /// The call's key (its hash), for the limiters kept per key.
    pub(crate) key: Option<u64>,
}

/// What a `Retry` is made of, its classifiers and hooks left out (a
/// closure has no `Debug`): a type that holds one can derive `Debug`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use backstop::{Policy, Retry};
/// let policy = Policy::new().attempts(2);
/// let retry = Retry::new(&policy).name("fetch").on_retry(|_: &backstop::RetryEvent<'_, (), std::io::Error>| {});
/// let shown = format!("{retry:?}");
/// assert!(shown.starts_with("Retry { policy: Policy { attempts: 2"), "{shown}");
/// assert!(shown.contains("name: \"fetch\""), "{shown}");
/// ```
impl<W, K, B, R, G, L, A> std::fmt::Debug for Retry<'_, W, K, B, R, G, L, A>
where
    B: std::fmt::Debug,
    L: std::fmt::Debug,
    A: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retry")
            .field("policy", self.policy)
            .field("budget", &self.budget)
            .field("breaker", &self.breaker)
            .field("throttle", &self.throttle)
            .field("attempt_timeout", &self.timeout)
            .field("hedge", &self.hedge)
            .field("name", &self.name)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The hedging of a [`Retry`] loop, if any (no hedging in loom models:
/// their atomics are not `const`, and the adaptive delay's are).
#[cfg(not(loom))]
type HedgeSlot = Option<Hedge>;
#[cfg(loom)]
type HedgeSlot = Option<std::convert::Infallible>;

/// How a [`Retry`]'s budget was chosen, as an integration made from it
/// needs to know.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Chosen {
    /// The default: a closure's call site's token budget; an integration makes
    /// one of its own.
    Default,
    /// The policy's, or the one given, or none.
    Given(Option<BudgetRef<'static>>),
    /// A budget per key, given.
    PerKey(PerKeyBudget),
}

/// A budget kept per key: the key of each call picks its budget.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PerKeyBudget {
    Token(&'static Keyed<TokenBudget>),
    Window(&'static Keyed<WindowBudget>),
}

impl PerKeyBudget {
    /// The budget of a call keyed `key` (the shared one for none), as a
    /// test under `testing::isolate()` sees it.
    pub(crate) fn for_key(self, key: Option<u64>) -> BudgetRef<'static> {
        let budget = self.entry(key);
        crate::limit::isolation::own_budget(Some(budget)).unwrap_or(budget)
    }

    /// The table's own budget of `key`, which a loop built ahead of its
    /// calls keeps: each call draws on it through `own_budget`, the copy
    /// the guard in force then gives.
    pub(crate) fn entry(self, key: Option<u64>) -> BudgetRef<'static> {
        match self {
            Self::Token(table) => BudgetRef::Token(table.for_key(key)),
            Self::Window(table) => BudgetRef::Window(table.for_key(key)),
        }
    }
}

/// What [`Retry::budget`] takes: a `&'static TokenBudget` or
/// `&'static WindowBudget` (or a [`BudgetRef`] to either), one for every
/// call, or a `&'static Keyed` of either, one per key.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{Keyed, TokenBudget, WindowBudget};
/// use backstop::{Policy, Retry};
///
/// static TOKENS: TokenBudget = TokenBudget::standard();
/// static WINDOW: WindowBudget = WindowBudget::new(0.1, 10, Duration::from_secs(10));
/// static PER_TENANT: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
///
/// let policy = Policy::new();
/// let _ = Retry::new(&policy).budget(&TOKENS);
/// let _ = Retry::new(&policy).budget(&WINDOW);
/// let _ = Retry::new(&policy).key("tenant-7").budget(&PER_TENANT);
/// ```
pub trait Budget: budget_sealed::Sealed {}

// The seal is out of reach: what it names need not be.
#[allow(private_interfaces)]
mod budget_sealed {
    use super::{BudgetRef, Chosen, Keyed, PerKeyBudget, TokenBudget, WindowBudget};

    pub trait Sealed {
        /// The budget, as a loop keeps its choice.
        fn chosen(self) -> Chosen;
    }

    impl Sealed for &'static TokenBudget {
        fn chosen(self) -> Chosen {
            Chosen::Given(Some(BudgetRef::Token(self)))
        }
    }

    impl Sealed for &'static WindowBudget {
        fn chosen(self) -> Chosen {
            Chosen::Given(Some(BudgetRef::Window(self)))
        }
    }

    impl Sealed for BudgetRef<'static> {
        fn chosen(self) -> Chosen {
            Chosen::Given(Some(self))
        }
    }

    impl Sealed for &'static Keyed<TokenBudget> {
        fn chosen(self) -> Chosen {
            Chosen::PerKey(PerKeyBudget::Token(self))
        }
    }

    impl Sealed for &'static Keyed<WindowBudget> {
        fn chosen(self) -> Chosen {
            Chosen::PerKey(PerKeyBudget::Window(self))
        }
    }
}

impl Budget for &'static TokenBudget {}
impl Budget for &'static WindowBudget {}
impl Budget for BudgetRef<'static> {}
impl Budget for &'static Keyed<TokenBudget> {}
impl Budget for &'static Keyed<WindowBudget> {}

/// The default token budgets of the calls that give a key, for every call
/// site and every key: one process-wide table, as each call site (each
/// `#[retry]` function, each integration) has its own default budget of
/// the calls without one.
#[cfg(not(loom))]
static DEFAULT_PER_KEY: Keyed<TokenBudget> = Keyed::with_capacity(TokenBudget::standard(), 4096);

/// [`DEFAULT_PER_KEY`].
#[cfg(not(loom))]
pub(crate) fn default_per_key_table() -> &'static Keyed<TokenBudget> {
    &DEFAULT_PER_KEY
}

/// Under loom (whose models do not use keyed defaults): a table per call.
#[cfg(loom)]
pub(crate) fn default_per_key_table() -> &'static Keyed<TokenBudget> {
    Box::leak(Box::new(Keyed::with_capacity(TokenBudget::standard(), 1)))
}

/// The default token budget of a call keyed `key` at the call site (or
/// function, or integration) whose default is `site`: its own, in the
/// process-wide table. A key that finds no place is counted and said as
/// `unplaced` says (`None`: not here, where the budget is chosen ahead of
/// the calls that will draw on it, or may yet be replaced).
#[cold]
pub(crate) fn default_per_key(
    site: &'static TokenBudget,
    key: Option<u64>,
    unplaced: Option<crate::limit::keyed::Unplaced>,
) -> BudgetRef<'static> {
    match key {
        Some(key) => {
            let mixed = mixed_with_site(site, key);
            // A key that finds no place in the table draws on the call
            // site's own default, as a call without a key does: never on a
            // budget shared with other call sites.
            let table = default_per_key_table();
            let budget = table
                .placed(mixed, crate::time::clock::loop_now)
                .unwrap_or_else(|| {
                    if let Some(unplaced) = unplaced {
                        table.unplaced(key, crate::time::clock::loop_now(), unplaced);
                    }
                    site
                });
            BudgetRef::Token(crate::limit::isolation::own(budget))
        }
        None => BudgetRef::Token(site),
    }
}

/// [`default_per_key`]'s budget itself, not a test's copy of it: what a
/// loop built ahead of its calls keeps (each call draws on it through
/// `own_budget`, the copy the guard in force then gives). Not counted if
/// the key finds no place: the calls are not made yet.
#[cold]
pub(crate) fn default_per_key_entry(site: &'static TokenBudget, key: u64) -> &'static TokenBudget {
    default_per_key_table()
        .placed(mixed_with_site(site, key), crate::time::clock::loop_now)
        .unwrap_or(site)
}

/// `key` mixed with its call site's default, for the process-wide table.
fn mixed_with_site(site: &'static TokenBudget, key: u64) -> u64 {
    (std::ptr::from_ref(site) as usize as u64)
        .rotate_left(17)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ key
}

/// What an attempt timeout may be given as: a `Duration`, or an
/// `Option<Duration>` (`None`: no limit of its own, only the deadline), as
/// a policy from configuration holds it
/// ([`Policy::get_attempt_timeout`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Policy, Retry};
///
/// let policy = Policy::new().attempt_timeout(Some(Duration::from_secs(2)));
/// // A `Duration`, or the policy's `Option<Duration>` as configured.
/// let _ = Retry::new(&policy).attempt_timeout(Duration::from_secs(2));
/// let _ = Retry::new(&policy).attempt_timeout(policy.get_attempt_timeout());
/// ```
#[diagnostic::on_unimplemented(
    message = "`attempt_timeout` takes a `Duration` or an `Option<Duration>`, not `{Self}`",
    label = "expected `Duration` or `Option<Duration>`",
    note = "write a literal with a unit (`2s`, `500ms`) or an expression of type `Duration` or `Option<Duration>`"
)]
pub trait AttemptTimeout: sealed::Part {
    /// The timeout, `Duration::MAX` for none.
    fn limit(self) -> Duration;
}

impl AttemptTimeout for Duration {
    fn limit(self) -> Duration {
        self
    }
}

impl AttemptTimeout for Option<Duration> {
    fn limit(self) -> Duration {
        self.unwrap_or(Duration::MAX)
    }
}

/// A [`Retry`] loop whose attempts run as long as they take (the deadline
/// decides only whether they start).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::builder::{Ignore, NoBreaker, NoTimeout};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// /// A loop kept in a struct, its type named: `Retry::new`'s attempts run
/// /// as long as they take.
/// struct Client {
///     retry: Retry<'static, ByClassify, NeverRetry, NoBreaker, Ignore, Ignore, NoTimeout>,
/// }
/// let client = Client { retry: Retry::new(&POLICY) };
/// let out: Result<u8, std::io::Error> = client.retry.call(|| Ok(7));
/// assert_eq!(out.unwrap(), 7);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTimeout;

/// A [`Retry`] loop whose async attempts are cut off after this long (or
/// at the deadline, if sooner).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::builder::{Ignore, NoBreaker, WithTimeout};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let limited: Retry<'static, ByClassify, NeverRetry, NoBreaker, Ignore, Ignore, WithTimeout> =
///     Retry::new(&POLICY).attempt_timeout(Duration::from_secs(2));
/// let out: Result<u8, std::io::Error> = limited.call_async(|| async { Ok(7) }).await;
/// assert_eq!(out.unwrap(), 7);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WithTimeout(Duration);

/// The attempt timeout of a [`Retry`] loop: [`NoTimeout`], or
/// [`WithTimeout`], which needs the error type to hold an [`Elapsed`]
/// (`E: From<Elapsed>`) and an async loop.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Policy, Retry};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// // `std::io::Error` holds a cut-off (`From<Elapsed>`): the loop may have
/// // an attempt timeout.
/// let policy = Policy::new();
/// let limited = Retry::new(&policy).attempt_timeout(Duration::from_secs(1));
/// let out: Result<u8, std::io::Error> = limited.call_async(|| async { Ok(1) }).await;
/// assert_eq!(out.unwrap(), 1);
/// # }
/// ```
///
/// An error type that cannot hold one cannot have an attempt timeout:
///
/// ```compile_fail,E0277
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Classify, Policy, Retry, Verdict};
///
/// #[derive(Debug)]
/// struct Mine;
/// impl Classify for Mine {
///     fn classify(&self) -> Verdict { Verdict::Retry }
/// }
/// # async fn f() {
/// let policy = Policy::new();
/// let limited = Retry::new(&policy).attempt_timeout(Duration::from_secs(1));
/// let _: Result<u8, Mine> = limited.call_async(|| async { Ok(1) }).await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "an attempt timeout needs an error type that can hold it: `{E}: From<Elapsed>`",
    label = "this loop has an `attempt_timeout`",
    note = "implement `From<backstop::Elapsed>` for your error type (`std::io::Error`, `Box<dyn Error + Send + Sync>`, `anyhow::Error`, and with their \
            features `tonic::Status`, `sqlx::Error`, `redis::RedisError`, \
            `backstop::reqwest::Error` and `reqwest_middleware::Error` have it); below a tower \
            layer, box another crate's error with `.map_err(backstop::tower::box_error)`; a \
            sync loop (`call`) cannot interrupt an attempt at all"
)]
pub trait TimeoutSlot<E>: sealed::Part {
    /// How long each attempt may run, if limited.
    fn limit(&self) -> Option<Duration>;
    /// A time limit that ran out (`why`) as the call's error. Only called
    /// when [`limit`](Self::limit) is `Some`.
    fn elapsed(why: Elapsed) -> E;
    /// Whether [`elapsed`](Self::elapsed) may be called.
    #[doc(hidden)]
    const ELAPSES: bool;
}

impl<E> TimeoutSlot<E> for NoTimeout {
    fn limit(&self) -> Option<Duration> {
        None
    }

    fn elapsed(_: Elapsed) -> E {
        unreachable!("a loop without an attempt timeout never times out")
    }

    const ELAPSES: bool = false;
}

#[diagnostic::do_not_recommend]
impl<E: From<Elapsed>> TimeoutSlot<E> for WithTimeout {
    fn limit(&self) -> Option<Duration> {
        Some(self.0)
    }

    fn elapsed(why: Elapsed) -> E {
        E::from(why)
    }

    const ELAPSES: bool = true;
}

/// What a sync loop ([`Retry::call`]) may have: no attempt timeout, since
/// it could not interrupt a running attempt.
///
/// A sync loop without an attempt timeout runs; one with an attempt timeout
/// does not compile:
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Policy, Retry};
/// let out: Result<u8, std::io::Error> = Retry::new(&Policy::new()).call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// ```
///
/// ```compile_fail,E0277
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Policy, Retry};
/// let policy = Policy::new();
/// let limited = Retry::new(&policy).attempt_timeout(Duration::from_secs(1));
/// let out: Result<u8, std::io::Error> = limited.call(|| Ok(1));
/// ```
#[diagnostic::on_unimplemented(
    message = "`attempt_timeout` needs an async loop: `call_async`",
    label = "a sync attempt cannot be interrupted",
    note = "give the blocking call its own timeout instead (`backstop::context()` tells the time left)"
)]
pub trait SyncLoop: sealed::Part {}

impl SyncLoop for NoTimeout {}

/// What [`Retry::call_async_with`] may have: no attempt timeout, since an
/// attempt cut off would take the value it holds with it. Without one, it
/// runs:
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{Policy, Retry};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut conn = vec![0_u8];
/// let (conn, out) = Retry::new(&Policy::new())
///     .call_async_with(&mut conn, |conn| async move {
///         conn.push(1);
///         let len = conn.len();
///         (conn, Ok::<_, std::io::Error>(len))
///     })
///     .await;
/// assert_eq!(out.unwrap(), 2);
/// assert_eq!(*conn, [0, 1]);
/// # }
/// ```
///
/// With one, it does not compile:
///
/// ```compile_fail,E0277
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{Policy, Retry};
/// # async fn f() {
/// let mut conn = vec![0_u8];
/// let _ = Retry::new(&Policy::new())
///     .attempt_timeout(Duration::from_secs(1))
///     .call_async_with(&mut conn, |conn| async move { (conn, Ok::<_, std::io::Error>(())) })
///     .await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`attempt_timeout` cannot cut off an attempt of `call_async_with`",
    label = "an attempt cut off would drop the value it holds, and the next attempt needs it",
    note = "give the operation its own timeout inside the attempt (`backstop::context()` tells the time left)"
)]
pub trait ValueLoop: sealed::Part {}

impl ValueLoop for NoTimeout {}

/// A [`Retry`] loop without an adaptive throttle.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::builder::{Ignore, NoBreaker, NoThrottle, NoTimeout, Static};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::limit::AdaptiveThrottle;
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// static SEARCH: AdaptiveThrottle = AdaptiveThrottle::standard();
/// type Plain = Retry<'static, ByClassify, NeverRetry, NoBreaker, Ignore, Ignore, NoTimeout, NoThrottle>;
/// type Throttled =
///     Retry<'static, ByClassify, NeverRetry, NoBreaker, Ignore, Ignore, NoTimeout, Static<AdaptiveThrottle>>;
/// let _plain: Plain = Retry::new(&POLICY);
/// let _throttled: Throttled = Retry::new(&POLICY).throttle(&SEARCH);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoThrottle;

/// The adaptive throttle of a [`Retry`] loop, if any: [`NoThrottle`], or a
/// [`Static`] of an `AdaptiveThrottle` or a `Keyed<AdaptiveThrottle>`,
/// which needs the error type to represent a shed attempt
/// (`E: From<Throttled>`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::limit::AdaptiveThrottle;
/// use backstop::{Policy, Retry};
///
/// static SEARCH: AdaptiveThrottle = AdaptiveThrottle::standard();
/// // `std::io::Error` holds a shed attempt (`From<Throttled>`): the loop
/// // may have an adaptive throttle.
/// let out: Result<u8, std::io::Error> =
///     Retry::new(&Policy::new()).throttle(&SEARCH).call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// ```
///
/// An error type that cannot hold one cannot have a throttle:
///
/// ```compile_fail,E0277
/// # extern crate backstop_runtime as backstop;
/// use backstop::limit::AdaptiveThrottle;
/// use backstop::{Classify, Policy, Retry, Verdict};
///
/// #[derive(Debug)]
/// struct Mine;
/// impl Classify for Mine {
///     fn classify(&self) -> Verdict { Verdict::Retry }
/// }
/// static SEARCH: AdaptiveThrottle = AdaptiveThrottle::standard();
/// let _: Result<u8, Mine> = Retry::new(&Policy::new()).throttle(&SEARCH).call(|| Ok(1));
/// ```
#[diagnostic::on_unimplemented(
    message = "an adaptive throttle needs an error type that can hold a shed attempt: `{E}: From<Throttled>`",
    label = "this loop has a `throttle`",
    note = "implement `From<backstop::Throttled>` for your error type (`std::io::Error`, `Box<dyn Error + Send + Sync>`, `anyhow::Error`, and with their \
            features `tonic::Status`, `sqlx::Error`, `redis::RedisError`, \
            `backstop::reqwest::Error` and `reqwest_middleware::Error` have it); below a tower \
            layer, box another crate's error with `.map_err(backstop::tower::box_error)`"
)]
pub trait ThrottleSlot<E>: sealed::Part {
    /// The throttle of the call keyed `key` (a hash), if any.
    fn throttle(&self, key: Option<u64>) -> Option<&'static AdaptiveThrottle>;
    /// A shed first attempt as the call's error. Only called when
    /// [`throttle`](Self::throttle) is `Some`.
    fn rejected(shed: Throttled) -> E;
}

impl<E> ThrottleSlot<E> for NoThrottle {
    fn throttle(&self, _: Option<u64>) -> Option<&'static AdaptiveThrottle> {
        None
    }

    fn rejected(_: Throttled) -> E {
        unreachable!("a loop without a throttle sheds nothing")
    }
}

#[diagnostic::do_not_recommend]
impl<E: From<Throttled>> ThrottleSlot<E> for Static<AdaptiveThrottle> {
    fn throttle(&self, _: Option<u64>) -> Option<&'static AdaptiveThrottle> {
        Some(self.0)
    }

    fn rejected(shed: Throttled) -> E {
        E::from(shed)
    }
}

#[diagnostic::do_not_recommend]
impl<E: From<Throttled>> ThrottleSlot<E> for Static<Keyed<AdaptiveThrottle>> {
    fn throttle(&self, key: Option<u64>) -> Option<&'static AdaptiveThrottle> {
        self.0.gate_for(key)
    }

    fn rejected(shed: Throttled) -> E {
        E::from(shed)
    }
}

/// A [`Retry`] loop without a circuit breaker.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::builder::{NoBreaker, Static};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::limit::CircuitBreaker;
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// let _plain: Retry<'static, ByClassify, NeverRetry, NoBreaker> = Retry::new(&POLICY);
/// let _guarded: Retry<'static, ByClassify, NeverRetry, Static<CircuitBreaker>> =
///     Retry::new(&POLICY).breaker(&PAYMENTS);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBreaker;

/// The circuit breaker of a [`Retry`] loop, if any: [`NoBreaker`], or a
/// [`Static`] of a `CircuitBreaker` or a `Keyed<CircuitBreaker>` (breakers
/// are shared: a `static`), which needs the error type to represent a
/// rejection (`E: From<CircuitOpen>`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::CircuitBreaker;
/// use backstop::{Policy, Retry};
///
/// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// // `std::io::Error` holds a rejection (`From<CircuitOpen>`): the loop may
/// // have a breaker.
/// let out: Result<u8, std::io::Error> = Retry::new(&Policy::new()).breaker(&DB).call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// ```
///
/// An error type that cannot hold one cannot have a breaker:
///
/// ```compile_fail,E0277
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::CircuitBreaker;
/// use backstop::{Classify, Policy, Retry, Verdict};
///
/// #[derive(Debug)]
/// struct Mine;
/// impl Classify for Mine {
///     fn classify(&self) -> Verdict { Verdict::Retry }
/// }
/// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// let _: Result<u8, Mine> = Retry::new(&Policy::new()).breaker(&DB).call(|| Ok(1));
/// ```
#[diagnostic::on_unimplemented(
    message = "a circuit breaker needs an error type that can hold its rejection: `{E}: From<CircuitOpen>`",
    label = "this loop has a `breaker`",
    note = "implement `From<backstop::CircuitOpen>` for your error type (`std::io::Error`, `Box<dyn Error + Send + Sync>`, `anyhow::Error`, and with their \
            features `tonic::Status`, `sqlx::Error`, `redis::RedisError`, \
            `backstop::reqwest::Error` and `reqwest_middleware::Error` have it); below a tower \
            layer, box another crate's error with `.map_err(backstop::tower::box_error)`"
)]
pub trait BreakerSlot<E>: sealed::Part {
    /// The breaker of the call keyed `key` (a hash), if any.
    fn breaker(&self, key: Option<u64>) -> Option<&'static CircuitBreaker>;
    /// A rejected first attempt as the call's error. Only called when
    /// [`breaker`](Self::breaker) is `Some`.
    fn rejected(open: CircuitOpen) -> E;
}

impl<E> BreakerSlot<E> for NoBreaker {
    fn breaker(&self, _: Option<u64>) -> Option<&'static CircuitBreaker> {
        None
    }

    fn rejected(_: CircuitOpen) -> E {
        unreachable!("a loop without a breaker is never rejected")
    }
}

#[diagnostic::do_not_recommend]
impl<E: From<CircuitOpen>> BreakerSlot<E> for Static<CircuitBreaker> {
    fn breaker(&self, _: Option<u64>) -> Option<&'static CircuitBreaker> {
        Some(self.0)
    }

    fn rejected(open: CircuitOpen) -> E {
        E::from(open)
    }
}

#[diagnostic::do_not_recommend]
impl<E: From<CircuitOpen>> BreakerSlot<E> for Static<Keyed<CircuitBreaker>> {
    fn breaker(&self, key: Option<u64>) -> Option<&'static CircuitBreaker> {
        self.0.gate_for(key)
    }

    fn rejected(open: CircuitOpen) -> E {
        E::from(open)
    }
}

/// What [`Retry::breaker`] takes a `&'static` of: a [`CircuitBreaker`],
/// one for every call, or a [`Keyed<CircuitBreaker>`], one per key.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{CircuitBreaker, Keyed};
/// use backstop::{Policy, Retry};
///
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// static PER_HOST: Keyed<CircuitBreaker> =
///     Keyed::new(CircuitBreaker::new(5, Duration::from_secs(30)));
///
/// let policy = Policy::new();
/// let one = Retry::new(&policy).breaker(&PAYMENTS);
/// let per_host = Retry::new(&policy).key("db-1.internal").breaker(&PER_HOST);
/// let out: Result<u8, std::io::Error> = one.call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// let out: Result<u8, std::io::Error> = per_host.call(|| Ok(2));
/// assert_eq!(out.unwrap(), 2);
/// ```
#[diagnostic::on_unimplemented(
    message = "`.breaker(..)` takes a `&'static CircuitBreaker` or a `&'static Keyed<CircuitBreaker>`, not a `&{Self}`",
    label = "not a breaker of a `static`",
    note = "give the breaker a `static` and pass `&NAME`: `static NAME: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));`"
)]
pub trait IntoBreaker: sealed::Shared {}
impl IntoBreaker for CircuitBreaker {}
impl IntoBreaker for Keyed<CircuitBreaker> {}

/// What [`Retry::throttle`] takes a `&'static` of: an [`AdaptiveThrottle`],
/// one for every call, or a [`Keyed<AdaptiveThrottle>`], one per key.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::limit::{AdaptiveThrottle, Keyed};
/// use backstop::{Policy, Retry};
///
/// static SEARCH: AdaptiveThrottle = AdaptiveThrottle::standard();
/// static PER_HOST: Keyed<AdaptiveThrottle> = Keyed::new(AdaptiveThrottle::standard());
///
/// let policy = Policy::new();
/// let one = Retry::new(&policy).throttle(&SEARCH);
/// let _per_host = Retry::new(&policy).key("search-3.internal").throttle(&PER_HOST);
/// let out: Result<u8, std::io::Error> = one.call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// ```
#[diagnostic::on_unimplemented(
    message = "`.throttle(..)` takes a `&'static AdaptiveThrottle` or a `&'static Keyed<AdaptiveThrottle>`, not a `&{Self}`",
    label = "not an adaptive throttle of a `static`",
    note = "give the throttle a `static` and pass `&NAME`: `static NAME: AdaptiveThrottle = AdaptiveThrottle::standard();`"
)]
pub trait IntoThrottle: sealed::Shared {}
impl IntoThrottle for AdaptiveThrottle {}
impl IntoThrottle for Keyed<AdaptiveThrottle> {}

/// A breaker or an adaptive throttle a [`Retry`] loop holds: the
/// `&'static` given to [`Retry::breaker`] or [`Retry::throttle`], in a type
/// without a lifetime. The loop's breaker and throttle then put no
/// lifetime in its type, so that the future of a call through a tower
/// layer made from it stays `Send` when awaited inside an `async` block
/// (rustc cannot prove an auto trait of a type whose lifetimes it has
/// erased: rust-lang/rust#110338).
///
/// Only code that names a loop's type, as a struct keeping one does, names
/// it:
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::builder::{Ignore, NoThrottle, NoTimeout, Static};
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::limit::CircuitBreaker;
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// static LEDGER: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
///
/// struct Ledger {
///     retry: Retry<'static, ByClassify, NeverRetry, Static<CircuitBreaker>, Ignore, Ignore, NoTimeout, NoThrottle>,
/// }
/// let ledger = Ledger { retry: Retry::new(&POLICY).breaker(&LEDGER) };
/// // Shown as what it holds.
/// let shown = format!("{:?}", ledger.retry);
/// assert!(shown.contains("breaker: CircuitBreaker {"), "{shown}");
/// ```
pub struct Static<T: 'static>(&'static T);

impl<T> Clone for Static<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Static<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for Static<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<'a, W, K, B, R, G, L, A> Retry<'a, W, K, B, R, G, L, A> {
    /// This loop with its typed parts (`when`, `when_ok`, `breaker`,
    /// `on_retry`, `on_give_up`, `timeout`, `throttle`) replaced by what
    /// `parts` makes of them: what each builder method that changes a
    /// part's type does.
    fn with_parts<W2, K2, B2, R2, G2, L2, A2>(
        self,
        parts: impl FnOnce((W, K, B, R, G, L, A)) -> (W2, K2, B2, R2, G2, L2, A2),
    ) -> Retry<'a, W2, K2, B2, R2, G2, L2, A2> {
        let Retry {
            policy,
            budget,
            given,
            when,
            when_ok,
            breaker,
            on_retry,
            on_give_up,
            name,
            timeout,
            throttle,
            hedge,
            key,
        } = self;
        let (when, when_ok, breaker, on_retry, on_give_up, timeout, throttle) = parts((
            when, when_ok, breaker, on_retry, on_give_up, timeout, throttle,
        ));
        Retry {
            policy,
            budget,
            given,
            when,
            when_ok,
            breaker,
            on_retry,
            on_give_up,
            name,
            timeout,
            throttle,
            hedge,
            key,
        }
    }
}

impl<'a> Retry<'a> {
    /// A loop under `policy`, classifying errors by [`Classify`] and never
    /// retrying `Ok` values.
    ///
    /// Its retries draw on the policy's budget if it has one;
    /// none after [`Policy::no_budget`]; otherwise on a
    /// [`TokenBudget`] of this call site's own
    /// (the line of code calling `Retry::new`, `call` or `call_async`),
    /// as `#[retry]` gives each function its own: the same protection
    /// wherever calls are made. A helper of your own that calls them for
    /// every dependency is one call site, one budget for all of them:
    /// mark it `#[track_caller]` (an `fn`, returning `call_async`'s future
    /// if async) and each line calling the helper has its own, or give
    /// each dependency its budget with [`budget`](Self::budget)
    /// (`a_helper_marked_track_caller_gives_each_line_calling_it_a_budget`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// // (Retrying at once: no time passes, no token comes back in time.)
    /// let policy = Policy::new().base(std::time::Duration::from_nanos(1));
    /// let mut attempts = 0;
    /// for _ in 0..10 {
    ///     // One call site, one token budget: a dependency failing every call
    ///     // gets 3 retries (each failure takes a token, retries only above
    ///     // half: at 9, 8 and 6), then none.
    ///     let _ = Retry::new(&policy).call(|| {
    ///         attempts += 1;
    ///         Err::<(), _>(std::io::Error::from(std::io::ErrorKind::HostUnreachable))
    ///     });
    /// }
    /// assert_eq!(attempts, 10 + 3);
    /// ```
    #[track_caller]
    pub fn new(policy: &'a Policy) -> Self {
        let (given, budget) = budget_of(policy);
        Self {
            policy,
            budget,
            given,
            when: ByClassify,
            when_ok: NeverRetry,
            breaker: NoBreaker,
            on_retry: Ignore,
            on_give_up: Ignore,
            name: crate::run::observe::ANONYMOUS,
            timeout: NoTimeout,
            throttle: NoThrottle,
            hedge: None,
            key: None,
        }
    }
}

/// The budget a loop under `policy` draws on, and how it was chosen: the
/// policy's, or none, or its caller's call site's own token budget. The
/// original: a call draws on it through `own_budget` (under
/// `testing::isolate()`, a fresh copy), at the call.
#[track_caller]
#[inline]
fn budget_of(policy: &Policy) -> (Chosen, Option<BudgetRef<'static>>) {
    if !policy.has_default_budget() {
        let given = policy.get_budget();
        return (Chosen::Given(given), given);
    }
    let site = crate::limit::token::at_call_site(std::panic::Location::caller());
    (Chosen::Default, Some(BudgetRef::Token(site)))
}

/// The steps of a loop with the defaults (`call_async`'s): its policy and
/// budget are the call's, given to the driver beside them.
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
static DEFAULTS: Retry<'static> = Retry::detached();

impl Retry<'static> {
    /// A loop to be run later under a policy of its own (each request's),
    /// with no budget yet: what a layer keeps, and `call_async`'s
    /// defaults.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) const fn detached() -> Self {
        static UNUSED: Policy = Policy::new();
        Self {
            policy: &UNUSED,
            budget: None,
            given: Chosen::Default,
            when: ByClassify,
            when_ok: NeverRetry,
            breaker: NoBreaker,
            on_retry: Ignore,
            on_give_up: Ignore,
            name: crate::run::observe::ANONYMOUS,
            timeout: NoTimeout,
            throttle: NoThrottle,
            hedge: None,
            key: None,
        }
    }
}

impl<'a> From<&'a Policy> for Retry<'a> {
    /// [`Retry::new`]: what a layer or a middleware made from a policy
    /// alone is configured with.
    #[track_caller]
    fn from(policy: &'a Policy) -> Self {
        Retry::new(policy)
    }
}

#[cfg(feature = "tower")]
impl<'a, W, K, B, R, G, L, A> Retry<'a, W, K, B, R, G, L, A> {
    /// What an integration keeps of this loop: the policy, the budget as
    /// it was chosen, and the rest, to be run under a policy made for each
    /// request and the budget the integration settles on.
    // (The three parts an integration keeps apart: no type of their own.)
    #[allow(clippy::type_complexity)]
    pub(crate) fn detach(self) -> (Policy, Chosen, Retry<'static, W, K, B, R, G, L, A>) {
        let detached = Retry::detached();
        let loop_ = Retry {
            policy: detached.policy,
            budget: None,
            given: self.given,
            when: self.when,
            when_ok: self.when_ok,
            breaker: self.breaker,
            on_retry: self.on_retry,
            on_give_up: self.on_give_up,
            name: self.name,
            timeout: self.timeout,
            throttle: self.throttle,
            hedge: self.hedge,
            // Every request's key, if given (a request's destination's
            // otherwise).
            key: self.key,
        };
        (*self.policy, self.given, loop_)
    }

    /// This loop, drawing on `budget`.
    pub(crate) fn budget_chosen(self, budget: Option<BudgetRef<'a>>) -> Self {
        Self { budget, ..self }
    }

    /// This loop with its classifiers made by `when` and `when_ok` from
    /// its own (an integration's defaults for those left unset).
    pub(crate) fn classifying<W2, K2>(
        self,
        when: impl FnOnce(W) -> W2,
        when_ok: impl FnOnce(K) -> K2,
    ) -> Retry<'a, W2, K2, B, R, G, L, A> {
        self.with_parts(|(w, k, breaker, on_retry, on_give_up, timeout, throttle)| {
            (
                when(w),
                when_ok(k),
                breaker,
                on_retry,
                on_give_up,
                timeout,
                throttle,
            )
        })
    }
}

impl<'a, W, K, B, R, G, L, A> Retry<'a, W, K, B, R, G, L, A> {
    /// Draws on `budget` instead of the policy's: a
    /// [`TokenBudget`] or a windowed
    /// [`WindowBudget`], shared by the calls it protects:
    /// a `static` (or a `LazyLock`, or one leaked). A `const` or a local
    /// made for each call would be a fresh one every time, granting every
    /// retry, and does not compile.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::{Policy, Retry, limit::WindowBudget, limit::TokenBudget};
    /// static BUDGET: WindowBudget = WindowBudget::new(0.5, 0, Duration::from_secs(10));
    /// let policy = Policy::new();
    /// let _ = Retry::new(&policy).budget(&BUDGET).call(|| Ok::<_, std::io::Error>(()));
    /// assert_eq!(BUDGET.stats().calls, 1);
    ///
    /// static TOKENS: TokenBudget = TokenBudget::standard();
    /// let _ = Retry::new(&policy).budget(&TOKENS).call(|| Ok::<_, std::io::Error>(()));
    /// ```
    ///
    /// ```compile_fail
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry, limit::TokenBudget};
    /// const FRESH_EVERY_TIME: TokenBudget = TokenBudget::standard();
    /// let policy = Policy::new();
    /// let _ = Retry::new(&policy).budget(&FRESH_EVERY_TIME).call(|| Ok::<_, std::io::Error>(()));
    /// ```
    pub fn budget(mut self, budget: impl Budget) -> Self {
        self.given = budget_sealed::Sealed::chosen(budget);
        self.budget = match self.given {
            // (The originals: a call draws on them through `budget_now`.)
            Chosen::Given(budget) => budget,
            Chosen::PerKey(table) => Some(table.entry(self.key)),
            Chosen::Default => self.budget,
        };
        self
    }

    /// The call's key: its budget, breaker and adaptive throttle are those
    /// of `key` where they are kept per key (a [`Keyed`] table), and its
    /// default token budget is `key`'s own, so that one shard, tenant or
    /// host that fails drains its own budget and no other's. Hashed (a
    /// 64-bit hash tells keys apart); nothing is allocated, but for the
    /// key's name, its `Debug` text (a string's without quotes), made once
    /// per key: `tracing` and `metrics` label the call with it. Made into
    /// a tower layer or a reqwest middleware, the key is every request's,
    /// in place of its destination (with the path, per method), and the
    /// default budget the key's at the line building the layer.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// let policy = Policy::new().base(std::time::Duration::from_nanos(1));
    /// let mut attempts = |shard: u32, fail: bool| {
    ///     let mut n = 0;
    ///     let _ = Retry::new(&policy).key(&shard).call(|| {
    ///         n += 1;
    ///         if fail { Err(Error::from(ErrorKind::HostUnreachable)) } else { Ok(()) }
    ///     });
    ///     n
    /// };
    /// for _ in 0..10 {
    ///     attempts(1, true); // shard 1 is down: its budget runs out
    /// }
    /// assert_eq!(attempts(1, true), 1, "shard 1: no retries left");
    /// assert_eq!(attempts(2, true), 3, "shard 2 has its own");
    /// ```
    #[track_caller]
    pub fn key<Q: std::hash::Hash + std::fmt::Debug + ?Sized>(mut self, key: &Q) -> Self {
        let hash = key_hash(key);
        crate::limit::names::name(hash, || format!("{key:?}"));
        self.key = Some(hash);
        // (The originals: a call draws on them through `budget_now`.)
        self.budget = match self.given {
            Chosen::PerKey(table) => Some(table.entry(self.key)),
            // The default of this call site (the line giving the key), per
            // key.
            Chosen::Default => {
                let site = crate::limit::token::at_call_site(std::panic::Location::caller());
                // (Not counted if it finds no place: `budget` may replace
                // it, and a `Retry` may make one call or many.)
                Some(BudgetRef::Token(default_per_key_entry(site, hash)))
            }
            Chosen::Given(budget) => budget,
        };
        self
    }

    /// Draws on no budget at all.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use std::time::Duration; use backstop::{Policy, Retry, limit::WindowBudget};
    /// static BUDGET: WindowBudget = WindowBudget::new(0.5, 0, Duration::from_secs(10));
    /// let policy = Policy::new().window_budget(&BUDGET);
    /// let _ = Retry::new(&policy).no_budget().call(|| Ok::<_, std::io::Error>(()));
    /// assert_eq!(BUDGET.stats().calls, 0);
    /// ```
    pub fn no_budget(mut self) -> Self {
        self.given = Chosen::Given(None);
        self.budget = None;
        self
    }

    /// Classifies errors with `f`, answering `bool` or [`Verdict`](crate::Verdict)
    /// ([`IntoVerdict`](crate::classify::IntoVerdict)).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// let mut attempts = 0;
    /// let _ = Retry::new(&Policy::new()).when(|e: &String| e == "busy").call(|| {
    ///     attempts += 1;
    ///     Err::<(), _>("busy".to_owned())
    /// });
    /// assert_eq!(attempts, 3);
    /// ```
    pub fn when<E, V, F>(self, f: F) -> Retry<'a, When<F>, K, B, R, G, L, A>
    where
        E: ?Sized,
        F: Fn(&E) -> V,
        V: IntoVerdict,
    {
        self.with_parts(
            |(_, when_ok, breaker, on_retry, on_give_up, timeout, throttle)| {
                (
                    When(f),
                    when_ok,
                    breaker,
                    on_retry,
                    on_give_up,
                    timeout,
                    throttle,
                )
            },
        )
    }

    /// Retries `Ok` values too, when `f` says so (an HTTP 503 response).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// let mut statuses = vec![200, 503];
    /// let status = Retry::new(&Policy::new())
    ///     .when_ok(|s: &u16| *s == 503)
    ///     .call(|| Ok::<_, std::io::Error>(statuses.pop().unwrap()));
    /// assert_eq!(status.unwrap(), 200);
    /// ```
    pub fn when_ok<T, V, F>(self, f: F) -> Retry<'a, W, When<F>, B, R, G, L, A>
    where
        T: ?Sized,
        F: Fn(&T) -> V,
        V: IntoVerdict,
    {
        self.with_parts(
            |(when, _, breaker, on_retry, on_give_up, timeout, throttle)| {
                (
                    when,
                    When(f),
                    breaker,
                    on_retry,
                    on_give_up,
                    timeout,
                    throttle,
                )
            },
        )
    }

    /// Names the function retried, for `tracing` and `metrics` (their
    /// `function` field and label). Unnamed, a call through a `Retry`
    /// (its closures, a layer, a middleware) or through `call_async`
    /// reports as `anonymous`: name each, or calls made in different
    /// places share one label (an HTTP layer's and a middleware's calls
    /// to a destination are told apart by their `key` too). A name's
    /// metric labels are made on its first call and kept, as a
    /// `#[retry]` function's are made at compile time, for the first 64
    /// names of a process; a process that makes names as it goes builds
    /// the labels of the others on each call.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// let policy = Policy::new();
    /// let out = Retry::new(&policy).name("ping").call(|| Ok::<_, std::io::Error>(1));
    /// assert_eq!(out.unwrap(), 1);
    /// ```
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Tells `f` about each retry before its sleep: a
    /// [`RetryEvent`]. The event's type is inferred: a
    /// closure `|e| ...` needs no annotation to read the attempt, the
    /// delay or the verdict, or to format the error with `{:?}` (calling a
    /// method of the error itself needs its type: `|e: &RetryEvent<'_, T,
    /// MyError>|`, or a `fn`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// let mut log = Vec::new();
    /// let seen = std::cell::RefCell::new(&mut log);
    /// let _ = Retry::new(&Policy::new())
    ///     .on_retry(|e| seen.borrow_mut().push(format!("attempt {} failed: {:?}", e.attempt(), e.error())))
    ///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
    /// assert_eq!(log.len(), 2);
    /// ```
    pub fn on_retry<T, E, F>(self, f: F) -> Retry<'a, W, K, B, F, G, L, A>
    where
        F: Fn(&crate::RetryEvent<'_, T, E>),
    {
        self.with_parts(
            |(when, when_ok, breaker, _, on_give_up, timeout, throttle)| {
                (when, when_ok, breaker, f, on_give_up, timeout, throttle)
            },
        )
    }

    /// Tells `f` when a call gives up, with the reason: a
    /// [`GiveUpEvent`], inferred as for
    /// [`on_retry`](Self::on_retry).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{GiveUp, Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// let reason = std::cell::Cell::new(None);
    /// let _ = Retry::new(&Policy::new())
    ///     .on_give_up(|e| reason.set(Some((e.reason(), e.attempts()))))
    ///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
    /// assert_eq!(reason.get(), Some((GiveUp::Attempts, 3)));
    /// ```
    pub fn on_give_up<T, E, F>(self, f: F) -> Retry<'a, W, K, B, R, F, L, A>
    where
        F: Fn(&crate::GiveUpEvent<'_, T, E>),
    {
        self.with_parts(|(when, when_ok, breaker, on_retry, _, timeout, throttle)| {
            (when, when_ok, breaker, on_retry, f, timeout, throttle)
        })
    }

    /// Puts the calls behind `breaker`: a rejected first attempt returns
    /// `Err(E::from(CircuitOpen::new()))`, so the error type must implement
    /// `From<CircuitOpen>`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{limit::CircuitBreaker, CircuitOpen, Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    ///
    /// #[derive(Debug)]
    /// enum Error { Down, Open }
    /// impl From<CircuitOpen> for Error {
    ///     fn from(_: CircuitOpen) -> Self { Error::Open }
    /// }
    ///
    /// static BREAKER: CircuitBreaker = CircuitBreaker::new(2, Duration::from_secs(30));
    /// let policy = Policy::new().attempts(5);
    /// let retry = Retry::new(&policy).when(|_: &Error| true).breaker(&BREAKER);
    /// let mut calls = 0;
    /// let first = retry.call(|| { calls += 1; Err::<(), _>(Error::Down) });
    /// assert!(matches!(first, Err(Error::Down)));
    /// assert_eq!(calls, 2, "the breaker opened after two failures");
    /// let second = retry.call(|| { calls += 1; Err::<(), _>(Error::Down) });
    /// assert!(matches!(second, Err(Error::Open)));
    /// assert_eq!(calls, 2, "rejected without running");
    /// ```
    pub fn breaker<S: IntoBreaker>(
        self,
        breaker: &'static S,
    ) -> Retry<'a, W, K, Static<S>, R, G, L, A> {
        let breaker = Static(breaker);
        self.with_parts(
            |(when, when_ok, _, on_retry, on_give_up, timeout, throttle)| {
                (
                    when, when_ok, breaker, on_retry, on_give_up, timeout, throttle,
                )
            },
        )
    }

    /// Puts the calls behind an adaptive throttle: attempts, the first
    /// included, are shed in proportion to what the dependency has been
    /// refusing. A shed first attempt returns `Err(E::from(Throttled::new()))`, so
    /// the error type must implement `From<Throttled>`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{limit::AdaptiveThrottle, Policy, Retry};
    /// # let _vt = backstop::testing::VirtualTime::start();
    /// static USERS: AdaptiveThrottle = AdaptiveThrottle::standard();
    /// let policy = Policy::new();
    /// let out = Retry::new(&policy)
    ///     .throttle(&USERS)
    ///     .call(|| Ok::<_, std::io::Error>(7));
    /// assert_eq!(out.unwrap(), 7);
    /// ```
    pub fn throttle<S: IntoThrottle>(
        self,
        throttle: &'static S,
    ) -> Retry<'a, W, K, B, R, G, L, Static<S>> {
        let throttle = Static(throttle);
        self.with_parts(
            |(when, when_ok, breaker, on_retry, on_give_up, timeout, _)| {
                (
                    when, when_ok, breaker, on_retry, on_give_up, timeout, throttle,
                )
            },
        )
    }

    /// Cuts each async attempt off after `timeout` (a `Duration`, or a
    /// policy's `Option<Duration>`, `None` meaning only at the deadline),
    /// or at the deadline if that comes first: the attempt then fails with
    /// `E::from(elapsed)` (an [`Elapsed`] saying which limit it was), an
    /// ambiguous failure, retried only for an
    /// idempotent policy. The error type must implement `From<Elapsed>`,
    /// and the loop must be async (`call_async`): a sync attempt cannot be
    /// interrupted.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{Policy, Retry};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::new().idempotent(true);
    /// let mut attempts = 0;
    /// let out: Result<(), std::io::Error> = Retry::new(&policy)
    ///     .attempt_timeout(Duration::from_secs(1))
    ///     .call_async(|| {
    ///         attempts += 1;
    ///         std::future::pending() // hangs
    ///     })
    ///     .await;
    /// assert_eq!(out.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    /// assert_eq!(attempts, 3);
    /// # }
    /// ```
    pub fn attempt_timeout(
        self,
        timeout: impl AttemptTimeout,
    ) -> Retry<'a, W, K, B, R, G, WithTimeout, A> {
        self.with_parts(
            |(when, when_ok, breaker, on_retry, on_give_up, _, throttle)| {
                (
                    when,
                    when_ok,
                    breaker,
                    on_retry,
                    on_give_up,
                    WithTimeout(timeout.limit()),
                    throttle,
                )
            },
        )
    }

    /// Hedges slow attempts: after `hedge`'s delay, another copy of the
    /// attempt starts beside the one not yet answered, and the first answer
    /// wins ([`Hedge`]). For [`call_async`](Self::call_async) with an
    /// idempotent policy (hedges are duplicates), and for the tower layer
    /// and the reqwest middleware made from this loop (requests that may be
    /// repeated and can be copied): a policy not declared
    /// idempotent (for `call_async`, debug builds say so once), a sync
    /// [`call`](Self::call) and
    /// [`call_async_with`](Self::call_async_with) (whose value goes to one
    /// attempt at a time) run one attempt at a time. Every hedge is granted
    /// like a retry, by the budget or token budget, the breaker and the
    /// adaptive throttle, before the deadline; and one layer hedges: none
    /// is sent while a call nested in the attempt has hedged, nor inside
    /// an attempt that a hedged call around this one has copied.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{context, hedge::Hedge, Policy, Retry};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::new().idempotent(true);
    /// let started = tokio::time::Instant::now();
    /// let answer = Retry::new(&policy)
    ///     .hedge(Hedge::after(Duration::from_millis(20)))
    ///     .call_async(|| async {
    ///         // The first attempt stalls; its hedge answers in 5 ms.
    ///         let slow = context().unwrap().attempt() == 1;
    ///         tokio::time::sleep(Duration::from_millis(if slow { 2_000 } else { 5 })).await;
    ///         Ok::<_, std::io::Error>(if slow { "first" } else { "hedge" })
    ///     })
    ///     .await;
    /// assert_eq!(answer.unwrap(), "hedge");
    /// assert_eq!(started.elapsed(), Duration::from_millis(25));
    /// # }
    /// ```
    #[cfg(not(loom))]
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = Some(hedge);
        self
    }

    /// The budget this call draws on: the one it was built with, or,
    /// under `testing::isolate()`, the fresh copy of it that the test's
    /// thread draws on now (a `Retry` built before the guard, or kept from
    /// one case to the next, draws on each case's own).
    #[inline]
    fn budget_now(&self) -> Option<BudgetRef<'a>> {
        crate::limit::isolation::own_budget(self.budget)
    }

    /// A sync call's state under `policy`, drawing on `budget`, started
    /// now.
    pub(crate) fn state_under<T, E, C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        policy: P,
        budget: Option<BudgetRef<'a>>,
        clock: C,
    ) -> AttemptState<'a, C, P>
    where
        Self: Steps<T, E>,
    {
        Steps::<T, E>::gate(self, AttemptState::under(policy, budget, clock), self.key)
    }

    /// Runs the loop around a sync operation.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// let out = Retry::new(&Policy::new()).call(|| Ok::<_, std::io::Error>(7));
    /// assert_eq!(out.unwrap(), 7);
    /// ```
    ///
    /// # Errors
    ///
    /// The last attempt's error, unchanged, once retrying is over: the error was
    /// not retryable, or attempts, deadline or budget ran out.
    pub fn call<T, E, F>(&self, mut op: F) -> Result<T, E>
    where
        Self: Handles<T, E>,
        L: SyncLoop,
        F: FnMut() -> Result<T, E>,
    {
        // (A sync attempt cannot be cut off: said in debug builds.)
        crate::state::policy::check_attempt_timeout_applied(self.policy, false);
        let mut state = self.state_under::<T, E, _, _>(self.policy, self.budget_now(), SystemClock);
        if let Some(rejected) = self.admit(&mut state) {
            return rejected;
        }
        loop {
            let outcome = state.run_attempt(&mut op);
            let verdict = self.judge(&outcome);
            let shown = crate::run::observe::Shown::Nothing;
            let Some(delay) = self.decided(&mut state, &outcome, verdict, shown) else {
                return outcome;
            };
            // A sync loop can keep the outcome through the sleep: if the
            // thread woke at or past the deadline, it is returned rather
            // than start an attempt too late.
            sleep(delay);
            if !self.resumed(&mut state, &outcome) {
                return outcome;
            }
        }
    }

    /// Without a timer feature: one error naming the features that give
    /// one.
    #[cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]
    #[doc(hidden)]
    pub fn call_async<T, E, F, Fut>(&self, _: F) -> std::future::Pending<Result<T, E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>> + NeedsATimer,
    {
        unreachable!("nothing implements `NeedsATimer`")
    }

    /// Without a timer feature: one error naming the features that give
    /// one.
    #[cfg(not(any(feature = "tokio", feature = "async-io", feature = "custom-timer")))]
    #[doc(hidden)]
    pub fn call_async_with<S, T, E, F, Fut>(
        &self,
        _: S,
        _: F,
    ) -> std::future::Pending<(S, Result<T, E>)>
    where
        F: FnMut(S) -> Fut,
        Fut: Future<Output = (S, Result<T, E>)> + NeedsATimer,
    {
        unreachable!("nothing implements `NeedsATimer`")
    }

    /// Runs the loop around an async operation, sleeping on the call's
    /// timer (tokio's, async-io's or one set with
    /// [`set_timer`](crate::time::set_timer)).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let policy = Policy::new();
    /// let out = Retry::new(&policy).call_async(|| async { Ok::<_, std::io::Error>(7) }).await;
    /// assert_eq!(out.unwrap(), 7);
    /// # }
    /// ```
    ///
    /// An operation that needs `&mut` access to something it does not own
    /// (`|| conn.query()`) cannot be an `FnMut` returning a future that
    /// borrows it: pass it through [`call_async_with`](Self::call_async_with).
    ///
    /// The future borrows the `Retry` (one `Retry` serves many calls): to
    /// keep the future rather than await it at once, bind the `Retry`
    /// first (`let retry = Retry::new(&policy).breaker(&B);`), since a
    /// temporary one is dropped at the end of its statement.
    ///
    /// # Errors
    ///
    /// The last attempt's error, unchanged, once retrying is over: the error was
    /// not retryable, or attempts, deadline or budget ran out.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub fn call_async<T, E, F, Fut>(&self, op: F) -> impl Future<Output = Result<T, E>>
    where
        Self: Handles<T, E>,
        L: TimeoutSlot<E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        check_attempt_timeout(self.policy, self.timeout.limit());
        let op = drive::Closures::<F, Fut, L>::new(op);
        drive::Drive::new(self, self.policy, self.budget_now(), self.key, op, true)
    }

    /// Runs the loop around an async operation that borrows or owns
    /// `value`: each attempt gets it by value and hands it back with its
    /// outcome, and the call returns it with the last outcome. Give it
    /// `&mut conn` to retry a method that needs `&mut self`, or a value the
    /// attempts share and you want back.
    ///
    /// (Async closures, `async || conn.query().await`, would say this more
    /// simply; but the future of a call taking an `AsyncFnMut` cannot be
    /// proven `Send` on stable Rust, so it could not be `tokio::spawn`ed.
    /// This form can.)
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// # use backstop::{Policy, Retry};
    /// struct Conn { resets: u32 }
    /// impl Conn {
    ///     async fn query(&mut self) -> Result<&'static str, std::io::Error> {
    ///         if self.resets > 0 {
    ///             self.resets -= 1;
    ///             return Err(std::io::ErrorKind::ConnectionRefused.into());
    ///         }
    ///         Ok("row")
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let mut conn = Conn { resets: 2 };
    /// let policy = Policy::new();
    /// let (_, row) = Retry::new(&policy)
    ///     .call_async_with(&mut conn, |conn| async move {
    ///         let row = conn.query().await;
    ///         (conn, row)
    ///     })
    ///     .await;
    /// assert_eq!(row.unwrap(), "row");
    /// assert_eq!(conn.resets, 0);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The last attempt's error, unchanged, beside `value`, once retrying
    /// is over: the error was not retryable, or attempts, deadline or
    /// budget ran out.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub fn call_async_with<S, T, E, F, Fut>(
        &self,
        value: S,
        op: F,
    ) -> impl Future<Output = (S, Result<T, E>)>
    where
        Self: Handles<T, E>,
        L: ValueLoop,
        F: FnMut(S) -> Fut,
        Fut: Future<Output = (S, Result<T, E>)>,
    {
        check_attempt_timeout(self.policy, None);
        let op = drive::WithValue::new(value, op);
        drive::HandsBack::new(drive::Drive::new(
            self,
            self.policy,
            self.budget_now(),
            self.key,
            op,
            false,
        ))
    }
}

/// What a [`Retry`] loop needs to run calls whose attempts give
/// `Result<T, E>`: classifiers for `E` and `T` (`when`, `when_ok`), hooks
/// for them, and, for a breaker, an adaptive throttle or an attempt
/// timeout, an error type that can hold their rejections
/// (`E: From<CircuitOpen>`, `From<Throttled>`, `From<Elapsed>`).
///
/// Every [`Retry`] whose parts fit has it: it is the one bound of
/// [`call`](Retry::call), [`call_async`](Retry::call_async) and the
/// integrations, and cannot be implemented elsewhere.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{builder::Handles, Policy, Retry};
/// fn runs<R: Handles<u8, std::io::Error>>(_: &R) {}
/// runs(&Retry::new(&Policy::new()));
/// ```
pub trait Handles<T, E>: steps::Steps<T, E> {}

impl<T, E, X: steps::Steps<T, E> + ?Sized> Handles<T, E> for X {}

/// The loop's steps, out of reach: [`Handles`] is sealed by them.
/// Seals the traits of a [`Retry`]'s parts: what its slots can hold is
/// this crate's to say, so that a slot can gain a method in any release.
pub(crate) mod sealed {
    use std::time::Duration;

    use crate::limit::{AdaptiveThrottle, CircuitBreaker, Keyed};
    use crate::run::{NoBreaker, NoThrottle, NoTimeout, Static, WithTimeout};

    /// One of the parts a [`Retry`](crate::Retry) slot holds.
    pub trait Part {
        /// It is kept per key (a [`Keyed`] table).
        const KEYED: bool = false;
    }

    impl Part for Duration {}
    impl Part for Option<Duration> {}
    impl Part for NoTimeout {}
    impl Part for WithTimeout {}
    impl Part for NoThrottle {}
    impl Part for NoBreaker {}
    impl<T: Shared> Part for Static<T> {
        const KEYED: bool = T::KEYED;
    }

    /// What a [`Retry`](crate::Retry) loop holds a `&'static` of.
    pub trait Shared {
        /// It is kept per key (a [`Keyed`] table).
        const KEYED: bool = false;
    }

    impl Shared for AdaptiveThrottle {}
    impl Shared for CircuitBreaker {}
    impl Shared for Keyed<AdaptiveThrottle> {
        const KEYED: bool = true;
    }
    impl Shared for Keyed<CircuitBreaker> {
        const KEYED: bool = true;
    }
}

pub(crate) mod steps {
    use std::time::Duration;

    #[cfg(all(
        any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
        not(loom)
    ))]
    use crate::run::hedge::Hedge;
    use crate::state::{AttemptState, GiveUp, HoldsPolicy};

    /// The steps of a retry loop around attempts giving `Result<T, E>`,
    /// between one attempt and the next. Out of reach outside this crate: [`Handles`](crate::builder::Handles) is
    /// sealed by it.
    pub trait Steps<T, E> {
        /// Before an attempt: the throttle, then the breaker (an attempt the
        /// throttle sheds never takes the breaker's leave). A rejection is the
        /// call's outcome, and `on_give_up` is told.
        #[doc(hidden)]
        fn admit<C: crate::time::clock::Clock, P: HoldsPolicy>(
            &self,
            state: &mut AttemptState<'_, C, P>,
        ) -> Option<Result<T, E>>;

        /// The verdict on an outcome: `when` on an error, `when_ok` on a value.
        #[doc(hidden)]
        fn judge(&self, outcome: &Result<T, E>) -> crate::state::vocabulary::Attempted;

        /// Decides on `outcome`, classified as `verdict`, and tells the hooks:
        /// `Some(delay)` to sleep and attempt again, `None` to return it.
        #[doc(hidden)]
        fn decided<C: crate::time::clock::Clock, P: HoldsPolicy>(
            &self,
            state: &mut AttemptState<'_, C, P>,
            outcome: &Result<T, E>,
            verdict: crate::state::vocabulary::Attempted,
            shown: crate::run::observe::Shown<'_>,
        ) -> Option<Duration>;

        /// After the sleep of a loop that kept `outcome` through it: may
        /// the next attempt start? If not, `on_give_up` is told.
        #[doc(hidden)]
        fn resumed<C: crate::time::clock::Clock, P: HoldsPolicy>(
            &self,
            state: &mut AttemptState<'_, C, P>,
            outcome: &Result<T, E>,
        ) -> bool;

        /// The call gives up between attempts, with `outcome`, for `reason`:
        /// `on_give_up` is told.
        #[doc(hidden)]
        fn gave_up<C: crate::time::clock::Clock, P: HoldsPolicy>(
            &self,
            state: &mut AttemptState<'_, C, P>,
            outcome: &Result<T, E>,
            reason: GiveUp,
        );

        /// The limit of each attempt, if any.
        #[doc(hidden)]
        fn timeout(&self) -> Option<Duration>;

        /// Whether its breaker or adaptive throttle is kept per key.
        #[doc(hidden)]
        fn keys_its_gates(&self) -> bool;

        /// How the loop hedges, if it does.
        #[cfg(all(
            any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
            not(loom)
        ))]
        #[doc(hidden)]
        fn hedging(&self) -> Option<&Hedge>;

        /// `state`, named as this loop is, behind its breaker and adaptive
        /// throttle (those of `key`, when kept per key) if it has them.
        #[doc(hidden)]
        fn gate<'s, C: crate::time::clock::Clock, P: HoldsPolicy>(
            &self,
            state: AttemptState<'s, C, P>,
            key: Option<u64>,
        ) -> AttemptState<'s, C, P>;

        /// A call under `policy`, drawing on `budget`, started now on
        /// `clock` and named as this loop is: its first attempt held lean
        /// (as `#[retry]` holds it) unless the call is `hedged` or behind a
        /// breaker or an adaptive throttle, which need the whole state
        /// machine from the start.
        #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
        #[doc(hidden)]
        fn start<'s, C, P, S>(
            &self,
            policy: P,
            budget: Option<crate::limit::BudgetRef<'s>>,
            key: Option<u64>,
            clock: C,
            hedged: bool,
        ) -> crate::state::Call<'s, C, P, S>
        where
            C: crate::time::clock::Clock,
            P: HoldsPolicy,
            S: crate::state::Holds<'s, C, P>;
    }
}

impl<T, E, W, K, B, R, G, L, A> steps::Steps<T, E> for Retry<'_, W, K, B, R, G, L, A>
where
    W: Classifier<E>,
    K: Classifier<T>,
    B: BreakerSlot<E>,
    A: ThrottleSlot<E>,
    R: OnRetry<T, E>,
    G: OnGiveUp<T, E>,
    L: TimeoutSlot<E>,
{
    #[inline]
    fn admit<C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        state: &mut AttemptState<'_, C, P>,
    ) -> Option<Result<T, E>> {
        let (outcome, reason) = if let Err(shed) = state.admit_throttled() {
            (Err(A::rejected(shed)), GiveUp::Throttled)
        } else if let Err(open) = state.admit() {
            (Err(B::rejected(open)), GiveUp::BreakerOpen)
        } else {
            return None;
        };
        state.gave_up_with(
            outcome.as_ref(),
            reason,
            Some(|event: &GiveUpEvent<'_, T, E>| self.on_give_up.on_give_up(event)),
        );
        Some(outcome)
    }

    #[inline]
    fn judge(&self, outcome: &Result<T, E>) -> crate::state::vocabulary::Attempted {
        crate::classify::of_result(
            outcome,
            |error| self.when.verdict(error),
            |ok| self.when_ok.verdict(ok),
        )
    }

    #[inline]
    fn decided<C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        state: &mut AttemptState<'_, C, P>,
        outcome: &Result<T, E>,
        verdict: crate::state::vocabulary::Attempted,
        shown: crate::run::observe::Shown<'_>,
    ) -> Option<Duration> {
        state.decided_showing(
            outcome.as_ref(),
            verdict,
            shown,
            Some(|event: &RetryEvent<'_, T, E>| self.on_retry.on_retry(event)),
            Some(|event: &GiveUpEvent<'_, T, E>| self.on_give_up.on_give_up(event)),
        )
    }

    fn resumed<C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        state: &mut AttemptState<'_, C, P>,
        outcome: &Result<T, E>,
    ) -> bool {
        state.resumed(
            outcome.as_ref(),
            (
                crate::run::observe::NoDisplay,
                crate::run::observe::NoStatus,
            ),
            Some(|event: &GiveUpEvent<'_, T, E>| self.on_give_up.on_give_up(event)),
        )
    }

    fn gave_up<C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        state: &mut AttemptState<'_, C, P>,
        outcome: &Result<T, E>,
        reason: GiveUp,
    ) {
        state.gave_up_with(
            outcome.as_ref(),
            reason,
            Some(|event: &GiveUpEvent<'_, T, E>| self.on_give_up.on_give_up(event)),
        );
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout.limit()
    }

    #[cfg(all(
        any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
        not(loom)
    ))]
    fn hedging(&self) -> Option<&Hedge> {
        self.hedge.as_ref()
    }

    #[inline]
    fn keys_its_gates(&self) -> bool {
        B::KEYED || A::KEYED
    }

    fn gate<'s, C: crate::time::clock::Clock, P: HoldsPolicy>(
        &self,
        state: AttemptState<'s, C, P>,
        key: Option<u64>,
    ) -> AttemptState<'s, C, P> {
        let mut state = state.name(self.name).key(key);
        if let Some(breaker) = self.breaker.breaker(key) {
            state = state.breaker(breaker);
        }
        if let Some(throttle) = self.throttle.throttle(key) {
            state = state.throttle(throttle);
        }
        state
    }

    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[inline]
    fn start<'s, C, P, S>(
        &self,
        policy: P,
        budget: Option<BudgetRef<'s>>,
        key: Option<u64>,
        clock: C,
        hedged: bool,
    ) -> crate::state::Call<'s, C, P, S>
    where
        C: crate::time::clock::Clock,
        P: HoldsPolicy,
        S: crate::state::Holds<'s, C, P>,
    {
        if hedged || self.breaker.breaker(None).is_some() || self.throttle.throttle(None).is_some()
        {
            let state = AttemptState::under(policy, budget, clock);
            return crate::state::Call::gated(Steps::<T, E>::gate(self, state, key));
        }
        crate::state::Call::first(policy, budget, clock, |obs| {
            obs.set_name(self.name);
            obs.set_key(key);
        })
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::{Policy, Retry};

    use crate::state::policy::tests::UNAPPLIED;

    #[tokio::test(start_paused = true)]
    async fn a_policys_attempt_timeout_a_closure_form_does_not_apply_is_said() {
        let limited = Policy::new().attempt_timeout(Some(Duration::from_millis(300)));
        let ok = || async { Ok::<_, crate::Elapsed>(()) };
        let said = || UNAPPLIED.with(Cell::get);
        let _ = super::call_async(&Policy::new(), ok).await;
        let _ = Retry::new(&limited)
            .attempt_timeout(limited.get_attempt_timeout())
            .call_async(ok)
            .await;
        assert_eq!(said(), 0, "nothing to apply, or applied");
        let _ = super::call_async(&limited, ok).await;
        let _ = Retry::new(&limited).call_async(ok).await;
        assert_eq!(said(), 2);
        // A sync loop cannot cut an attempt off.
        let _ = super::call(&Policy::new(), || Ok::<_, std::io::Error>(()));
        assert_eq!(said(), 2);
        let _ = super::call(&limited, || Ok::<_, std::io::Error>(()));
        assert_eq!(said(), 3);
        let _ = super::call_async_with(&limited, (), |()| async { ((), ok().await) }).await;
        let _ = Retry::new(&limited)
            .call_async_with((), |()| async { ((), ok().await) })
            .await;
        assert_eq!(said(), 5, "never applied by `call_async_with`");
    }
}
