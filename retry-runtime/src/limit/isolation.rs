//! Which instance of a limiter a call draws on: the `static` itself, or
//! the fresh copy a test's [`isolate`] made of it
//! (one relaxed load when no test isolates). Below the state machine,
//! which asks it; `isolate` and its guard are public in
//! [`testing`](crate::testing).

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::limit::BudgetRef;
use crate::time::virtual_time::{Shadowed, install, uninstall};

/// Set once any test isolates: until then, the default protection of a
/// call costs one load of this flag to look up.
static ISOLATING: AtomicBool = AtomicBool::new(false);

/// The fresh defaults of an isolation: each function's own `static`, by
/// address, and what replaces it.
type FreshDefaults = Vec<(usize, &'static (dyn Any + Sync))>;

thread_local! {
    /// The fresh defaults of the isolation in force on this thread.
    static ISOLATED: RefCell<Option<FreshDefaults>> = const { RefCell::new(None) };
    /// What each isolation alive on this thread shadowed.
    static ISOLATED_BELOW: Shadowed<FreshDefaults> = const { RefCell::new(Vec::new()) };
}

/// Gives the retry loops called on this thread fresh protection until the
/// returned guard is dropped.
///
/// A `#[retry]` function without `budget = ..` draws on a token budget
/// of its own, and one with `budget = PG` on the `static` it names, each
/// shared by every call in the process, so one test's failing calls can
/// use up the token budget another test counts on (or open the breaker it
/// calls through): a test asserting three attempts passes alone and fails
/// after a test that made a few failing calls. Under `isolate()`, every
/// token budget, windowed budget, circuit breaker and adaptive throttle
/// a call on this thread uses — a function's default and the statics you
/// name alike, through `#[retry]`, closures, the tower layer or the
/// middleware — is replaced by one fresh for this guard, made with the
/// same configuration: the test sees what a fresh process would. The
/// statics themselves are left as they are; [`own(&PG)`](own) is the
/// instance the calls on this thread draw on in its place. A layer's or
/// middleware's token budget of its own is replaced too, and a `Retry`, a
/// layer or a middleware built before the guard, or kept from one case to
/// the next (a test's client, a `LazyLock`), draws on a fresh copy at each
/// call, as a `#[retry]` function does: the copy `own(&PG)` is, of the
/// guard in place (a key's budget too, `own(PER_TENANT.get("t7"))`).
///
/// It applies to calls that start on this thread: every call of a sync
/// test, and of an async test on a current-thread runtime (the default of
/// `#[tokio::test]`), the tasks it spawns included; not those of tasks
/// another thread runs (a multi-thread runtime's workers, which say so
/// once on standard error, or `smol::spawn`'s global executor, which
/// cannot be told). A guard started inside
/// another shadows it until dropped; guards may be dropped in any order
/// (one reassigned for each case of a table, `_fresh = isolate();`): each
/// takes away only its own
/// (`guards_reassigned_or_dropped_out_of_order_take_away_only_their_own`).
/// Bind it (`let _ = isolate();` drops it at once). Each (guard,
/// original) pair keeps its fresh copy (tens of bytes, a few hundred for
/// an adaptive throttle) until the process exits.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::time::Duration;
/// use backstop::{testing::{isolate, VirtualTime}, Policy, limit::TokenBudget, Retry};
///
/// // What `#[retry]` gives a function by default.
/// static OWN: TokenBudget = TokenBudget::standard();
/// let fail = |attempts: &mut u32| -> Result<(), Error> {
///     let policy = Policy::new();
///     Retry::new(&policy).budget(&OWN).call(|| {
///         *attempts += 1;
///         Err(ErrorKind::ConnectionRefused.into())
///     })
/// };
/// let _vt = VirtualTime::start();
/// {
///     let _fresh = isolate();
///     for _ in 0..20 {
///         let _ = fail(&mut 0); // uses up this test's token budget
///     }
/// }
/// let _fresh = isolate();
/// let mut attempts = 0;
/// let _ = fail(&mut attempts);
/// assert_eq!(attempts, 3, "a fresh token budget: every retry granted");
/// ```
///
/// A `static` the calls name is replaced too, by one configured as it is:
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{testing::{isolate, own, VirtualTime}, Policy, limit::TokenBudget, Retry};
///
/// static PG: TokenBudget = TokenBudget::new(4, 0.1);
/// let policy = Policy::new().attempts(5);
/// let fail = |attempts: &mut u32| -> Result<(), Error> {
///     Retry::new(&policy).budget(&PG).call(|| {
///         *attempts += 1;
///         Err(ErrorKind::HostUnreachable.into())
///     })
/// };
/// let _vt = VirtualTime::start();
/// for _ in 0..2 {
///     let _fresh = isolate();
///     let mut attempts = 0;
///     let _ = fail(&mut attempts);
///     assert_eq!(attempts, 2, "4 tokens: one retry, each time");
///     assert_eq!(own(&PG).tokens(), 2.0, "what this test's calls drew on");
/// }
/// assert_eq!(PG.tokens(), 4.0, "the static itself is untouched");
/// ```
pub fn isolate() -> Isolation {
    note_worker_threads("isolate()", "draw on the process's budgets and breakers");
    ISOLATING.store(true, Ordering::Relaxed);
    Isolation {
        guard: install(&ISOLATED, &ISOLATED_BELOW, Vec::new()),
        _thread: PhantomData,
    }
}

/// Fresh default protection on this thread, until dropped: see
/// [`isolate`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{limit::TokenBudget, testing};
///
/// static PG: TokenBudget = TokenBudget::standard();
/// {
///     let _fresh = testing::isolate();
///     testing::own(&PG).failed(std::time::Instant::now()); // this test's copy
///     assert_eq!(testing::own(&PG).tokens(), 9.0);
/// }
/// // Dropped: the thread draws on the statics again, which nothing spent.
/// assert_eq!(testing::own(&PG).tokens(), 10.0);
/// assert_eq!(PG.tokens(), 10.0);
/// ```
#[must_use = "isolation lasts until the guard is dropped: bind it, `let _fresh = isolate();`"]
pub struct Isolation {
    /// Its number among the thread's guards.
    guard: u64,
    /// Installed on one thread: not `Send`.
    _thread: PhantomData<Rc<()>>,
}

impl Drop for Isolation {
    fn drop(&mut self) {
        uninstall(&ISOLATED, &ISOLATED_BELOW, self.guard);
    }
}

impl std::fmt::Debug for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolation").finish_non_exhaustive()
    }
}

/// Protection that [`isolate`] can replace with a fresh one.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::CircuitBreaker;
/// use backstop::testing::Fresh;
///
/// static DB: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
/// DB.hold_open();
/// // Made like `DB` (its rule and name), closed, as a new process's would be.
/// let fresh = DB.fresh();
/// assert!(fresh.try_acquire(std::time::Instant::now()).is_ok());
/// # DB.reset();
/// ```
pub trait Fresh: Any + Sync + Sized {
    /// A fresh one made like this one, as a new process would start with.
    #[must_use]
    fn fresh(&self) -> Self;
}

impl Fresh for crate::limit::WindowBudget {
    fn fresh(&self) -> Self {
        Self::new(self.ratio(), self.min_per_sec(), self.ttl())
    }
}

impl Fresh for crate::limit::TokenBudget {
    fn fresh(&self) -> Self {
        self.unused()
    }
}

impl Fresh for crate::limit::CircuitBreaker {
    fn fresh(&self) -> Self {
        self.made_like()
    }
}

impl Fresh for crate::limit::AdaptiveThrottle {
    fn fresh(&self) -> Self {
        Self::new(self.k(), self.window())
    }
}

/// A hedged function's adaptive delay: a test under [`isolate`] learns
/// latencies afresh (and on its own clock: a paused tokio runtime of an
/// earlier test may have moved on).
#[cfg(not(loom))]
impl Fresh for crate::run::hedge::LatencyPercentile {
    fn fresh(&self) -> Self {
        Self::new(self.quantile(), self.window())
    }
}

/// The protection the calls on this thread draw on in place of `own`:
/// `own` itself, or, under [`isolate`], the fresh one that replaces it (a
/// fresh one is its own). Read a named `static`'s state in a test through
/// it: `own(&PG).tokens()`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{testing::{isolate, own}, limit::TokenBudget};
/// static PG: TokenBudget = TokenBudget::new(20, 0.2);
/// assert!(std::ptr::eq(own(&PG), &PG));
/// let _fresh = isolate();
/// assert!(!std::ptr::eq(own(&PG), &PG));
/// assert_eq!(own(&PG).max_tokens(), 20, "configured as the static is");
/// assert!(std::ptr::eq(own(own(&PG)), own(&PG)));
/// ```
#[inline]
pub fn own<T: Fresh>(own: &T) -> &T {
    if ISOLATING.load(Ordering::Relaxed) {
        isolated(own)
    } else {
        own
    }
}

/// [`own`] of a budget: what a call draws on, under isolation.
#[inline]
pub(crate) fn own_budget(budget: Option<BudgetRef<'_>>) -> Option<BudgetRef<'_>> {
    if ISOLATING.load(Ordering::Relaxed) {
        isolated_budget(budget)
    } else {
        budget
    }
}

#[cold]
#[inline(never)]
fn isolated_budget(budget: Option<BudgetRef<'_>>) -> Option<BudgetRef<'_>> {
    budget.map(|budget| match budget {
        BudgetRef::Token(throttle) => BudgetRef::Token(isolated(throttle)),
        BudgetRef::Window(window) => BudgetRef::Window(isolated(window)),
    })
}

#[cold]
fn isolated<T: Fresh>(own: &T) -> &T {
    let address = std::ptr::from_ref(own) as usize;
    ISOLATED
        .try_with(|i| {
            let mut i = i.borrow_mut();
            let fresh = i.as_mut()?;
            // The fresh one for `own`, or `own` itself if it is a fresh one
            // already (a budget handed on from one part of a call to the
            // next is replaced once).
            if let Some(found) = fresh
                .iter()
                .find(|(a, f)| {
                    *a == address || std::ptr::from_ref(*f).cast::<()>() as usize == address
                })
                .and_then(|(_, f)| (*f as &dyn Any).downcast_ref::<T>())
            {
                return Some(found);
            }
            // Leaked: calls hold `&'static` references to their budget.
            let made: &'static T = Box::leak(Box::new(own.fresh()));
            fresh.push((address, made));
            Some(made)
        })
        .ok()
        .flatten()
        .unwrap_or(own)
}

/// A testing tool of this thread's (`what`) set up in a multi-thread tokio
/// runtime, whose workers run the tasks a test spawns, outside it (where
/// they `miss`): said once a thread for each tool, on standard error (a
/// test's output, which the harness shows when it fails).
#[cfg_attr(not(feature = "tokio"), allow(unused_variables))]
pub(crate) fn note_worker_threads(what: &'static str, miss: &str) {
    #[cfg(feature = "tokio")]
    {
        thread_local! {
            // The tools said of on this thread.
            static SAID: std::cell::RefCell<Vec<&'static str>> = const {
                std::cell::RefCell::new(Vec::new())
            };
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
            || SAID.with_borrow_mut(|said| {
                let before = said.contains(&what);
                if !before {
                    said.push(what);
                }
                before
            })
        {
            return;
        }
        #[cfg(test)]
        tests::TOLD.with(|told| told.set(told.get() + 1));
        note!(
            "backstop: `{what}` covers the retry loops of its own thread, and this is a \
             multi-thread tokio runtime: the tasks a test spawns run on its workers, where they \
             {miss}. `#[tokio::test]` without `flavor = \"multi_thread\"` runs them all on the \
             test's thread."
        );
    }
}

#[cfg(all(test, feature = "tokio"))]
pub(crate) mod tests {
    use std::cell::Cell;

    use super::isolate;

    thread_local! {
        /// The multi-thread runtimes told of on this thread.
        pub(crate) static TOLD: Cell<u32> = const { Cell::new(0) };
    }

    /// `set_up` (a testing tool of this thread's) in a multi-thread
    /// runtime, whose spawned tasks it does not cover, says so (once a
    /// thread); in a current-thread runtime, or outside any, it says
    /// nothing.
    pub(crate) fn says_what_a_multi_thread_runtime_leaves_out(set_up: impl Fn()) {
        set_up();
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        current.block_on(async { set_up() });
        assert_eq!(TOLD.get(), 0);
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        multi.block_on(async { set_up() });
        assert_eq!(TOLD.get(), 1);
        multi.block_on(async { set_up() });
        assert_eq!(TOLD.get(), 1, "once a thread");
    }

    #[test]
    fn isolating_in_a_multi_thread_runtime_says_what_it_leaves_out() {
        says_what_a_multi_thread_runtime_leaves_out(|| drop(isolate()));
        // Each tool is said of once.
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        multi.block_on(async { super::note_worker_threads("another", "") });
        assert_eq!(TOLD.get(), 2, "each tool");
    }
}
