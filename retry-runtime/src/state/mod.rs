//! The attempt state machine: the only place a retry decision is made.
//!
//! It is told each attempt's outcome and answers "return it" or "sleep for
//! this long, then attempt again". It never sleeps and reads time only
//! through its [`Clock`], so every rule can be tested in virtual time, and
//! sync and async loops differ only in how they sleep.
//!
//! A `#[retry]` call holds less until its first attempt is decided
//! (`first.rs`): most first attempts succeed, and one that fails is then
//! decided by the state machine as if it had been there from the start.

pub mod backoff;
pub(crate) mod policy;
pub(crate) mod vocabulary;

use std::fmt;
use std::time::{Duration, Instant};

use crate::classify::{Classifier, Verdict};
use crate::limit::adaptive::{AdaptiveThrottle, Throttled};
use crate::limit::breaker::{CircuitBreaker, CircuitOpen, Permit};
use crate::limit::{BudgetRef, TokenBudget, WindowBudget};
use crate::run::observe::{ErrorShown, Function, GiveUpEvent, Observe, RetryEvent, Show, Shown};
use crate::run::scope::{self, CallContext, Scope};
use crate::state::backoff::Rng;
use crate::state::policy::Policy;
use crate::state::vocabulary::Attempted;
use crate::time::clock::{Clock, Moment};

mod first;

pub(crate) use holds::HoldsPolicy;

mod holds {
    use crate::state::policy::Policy;

    /// How a call's state holds its policy: borrowed, or its own.
    pub trait HoldsPolicy: Copy {
        /// The policy.
        fn get(&self) -> &Policy;
    }

    impl HoldsPolicy for &Policy {
        #[inline]
        fn get(&self) -> &Policy {
            self
        }
    }

    impl HoldsPolicy for Policy {
        #[inline]
        fn get(&self) -> &Policy {
            self
        }
    }
}
#[cfg(all(
    any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
    not(loom)
))]
pub(crate) mod hedged;

#[doc(hidden)]
pub use first::{Call, Holds, InPlace};

/// Deadlines shorter than this start from the precise clock: the coarse
/// one ([`Clock::start_now`]) can trail by milliseconds.
const PRECISE_START_BELOW: Duration = Duration::from_secs(1);

/// How far the coarse clock may trail the precise one, with a wide margin
/// (it trails by a kernel tick, a few milliseconds): a coarse reading
/// decides a deadline check only when the deadline is further away than
/// this, so that a trailing reading can never let an attempt start after
/// it.
const COARSE_TRAILS_BY_LESS_THAN: Duration = Duration::from_secs(1);

pub use crate::state::vocabulary::{Decision, GiveUp};

/// The state of one retry loop: one per call, never shared.
///
/// Creating it reads the clock once; deciding the first attempt records the
/// call on the budget (a call the breaker rejects never reaches the
/// dependency, and earns no retries). That is all the work a call whose
/// first attempt succeeds costs.
///
/// Set up as a [`Policy`] is: methods that take `self` and are named by
/// what they set ([`budget`](Self::budget), [`breaker`](Self::breaker),
/// [`name`](Self::name)…), getters named `get_*` where a setter has the
/// plain name; `set_*` changes the call as it runs.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{macro_support::{AttemptState, Decision}, classify::{ByClassify, NeverRetry}, GiveUp, Policy, time::SystemClock};
///
/// let policy = Policy::new().attempts(2);
/// let mut state = AttemptState::new(&policy, SystemClock);
/// let failed: Result<(), Error> = Err(ErrorKind::ConnectionRefused.into());
/// assert!(matches!(state.decide_result(&failed, &ByClassify, &NeverRetry), Decision::Retry(_)));
/// assert_eq!(state.attempt(), 2);
/// assert_eq!(
///     state.decide_result(&failed, &ByClassify, &NeverRetry),
///     Decision::GiveUp(GiveUp::Attempts)
/// );
/// ```
pub struct AttemptState<'a, C, P = &'a Policy> {
    /// Borrowed, or (a layer's call, whose policy is made for its
    /// request) its own.
    policy: P,
    budget: Option<BudgetRef<'a>>,
    clock: C,
    start: Instant,
    deadline: Option<Instant>,
    /// Attempts finished.
    done: u32,
    /// The previous backoff delay, for decorrelated jitter.
    prev: Duration,
    /// Drawn on the first retry only: a call that succeeds at once never
    /// touches the random number generator.
    rng: Option<Rng>,
    /// What the call carries from attempt to attempt (its idempotency key).
    call: CallContext,
    /// A call nested in the last attempt gave up after retrying.
    retried_below: bool,
    /// `'static`, as breakers are shared: the permit, which releases a probe
    /// when dropped, then borrows nothing of the call's, and temporaries
    /// such as `&Policy::new()` may still be passed to a state.
    breaker: Option<&'static CircuitBreaker>,
    /// The key the breaker's place in a `Keyed` table was for when the
    /// call was given it (its word; 0: a breaker of no table's, or not
    /// placed yet): a breaker whose place has gone to another key since
    /// is that key's now, not the call's.
    keyed: u64,
    /// The adaptive throttle, if any (`'static`, shared, like breakers),
    /// and whether an attempt it counts is in flight. It counts an attempt
    /// when its outcome is known, then (a request, and an accept if it was
    /// answered), or when it is dropped in flight (a request): an attempt
    /// in flight counts for nothing yet, so that healthy calls sent
    /// together are never shed.
    throttle: Option<(&'static AdaptiveThrottle, bool)>,
    /// The verdict on the last attempt, for the events.
    last_verdict: Option<Verdict>,
    /// What the call reports of itself (`tracing`, `metrics`).
    obs: Observe,
    /// The call has been recorded on the budget (at its first decision: a
    /// call the breaker rejects earns no retries).
    recorded: bool,
    /// The breaker's leave for the attempt running now.
    permit: Option<Permit<'static>>,
    /// Whether the request can be sent again (a streamed body that was not
    /// kept cannot).
    replayable: bool,
    /// Hedges sent so far.
    hedges: u32,
    /// Whether the call is held after a refusal, or was released from it,
    /// or cannot be held.
    hold: Hold,
}

/// Where a call is with holding after a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Not held.
    No,
    /// Never held: the loop could not give up with anything to return
    /// (it kept no outcome, and cannot give an `Elapsed` error instead).
    Never,
    /// The token budget refused the retry of a refusal: the call waits
    /// ([`held`](AttemptState::held)).
    Held,
    /// Released: the token budget's one place for a released call is
    /// this call's until its retry is decided (or the call is dropped).
    Released,
}

impl<C, P> Drop for AttemptState<'_, C, P> {
    #[inline]
    fn drop(&mut self) {
        // (What is rare, out of line, behind one branch: the drop of every
        // call, which the success path of `#[retry]` inlines, stays small.)
        let rare = (self.hold == Hold::Released)
            | matches!(self.throttle, Some((_, true)))
            | !self.obs.started_and_ended().1;
        if rare {
            dropped_midway(self);
        }
    }
}

/// A call dropped with its released retry still out, with an attempt in
/// flight, or before it ended (its caller's own timeout around it, a
/// cancelled task).
#[cold]
#[inline(never)]
fn dropped_midway<C, P>(state: &mut AttemptState<'_, C, P>) {
    // Its released retry still out: its place is free.
    if state.hold == Hold::Released
        && let Some(BudgetRef::Token(budget)) = state.budget
    {
        budget.release_dropped();
    }
    // An attempt in flight: sent, and not answered.
    if let Some((throttle, true)) = state.throttle {
        throttle.sent(crate::time::clock::loop_now(), false);
    }
    // After its request went out more than once, or while it held after a
    // refusal (holding is its retry), or with a call nested in its attempt
    // that retried: it retried, as one that gave up would have said, and
    // the attempt it is dropped in, if any (the one it runs in: the loops
    // drop an attempt cut off, and a hedged round its losers, in their own
    // frames), learns that a call nested in it retried, so that the call
    // around does not retry it again (the one-layer rule).
    let (started, ended) = state.obs.started_and_ended();
    let retried = started > 1 || state.hedges > 0 || state.retried_below;
    if !ended && (retried || matches!(state.hold, Hold::Held | Hold::Released)) {
        scope::note_retried_below();
    }
}

impl<'a, C: Clock> AttemptState<'a, C> {
    /// Starts a call under `policy`, drawing on the policy's budget (or on
    /// another, given to [`budget`](Self::budget)).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::AttemptState, Policy, time::SystemClock};
    ///
    /// let policy = Policy::new();
    /// let state = AttemptState::new(&policy, SystemClock);
    /// assert_eq!(state.attempt(), 1);
    /// ```
    #[inline]
    pub fn new(policy: &'a Policy, clock: C) -> Self {
        let (start, deadline) = start_and_deadline(policy, &clock);
        Self::started(
            policy,
            crate::limit::isolation::own_budget(policy.get_budget()),
            clock,
            start,
            deadline,
            Observe::new(),
        )
    }
}

impl<'a, C: Clock, P: HoldsPolicy> AttemptState<'a, C, P> {
    /// Starts a call under `policy` (borrowed, or an integration's own,
    /// made for its request), drawing on `budget` as it is.
    #[inline]
    pub(crate) fn under(policy: P, budget: Option<BudgetRef<'a>>, clock: C) -> Self {
        let (start, deadline) = start_and_deadline(policy.get(), &clock);
        Self::started(policy, budget, clock, start, deadline, Observe::new())
    }

    /// A state for a call that started at `start`, before its first
    /// attempt was decided.
    #[inline]
    fn started(
        policy: P,
        budget: Option<BudgetRef<'a>>,
        clock: C,
        start: Instant,
        deadline: Option<Instant>,
        obs: Observe,
    ) -> Self {
        Self {
            policy,
            budget,
            deadline,
            clock,
            start,
            done: 0,
            prev: policy.get().base,
            rng: None,
            call: CallContext::default(),
            retried_below: false,
            breaker: None,
            keyed: 0,
            throttle: None,
            last_verdict: None,
            obs,
            recorded: false,
            permit: None,
            replayable: true,
            hedges: 0,
            hold: Hold::No,
        }
    }

    /// Draws on `budget` instead of the policy's own (`None`: no budget).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{macro_support::{AttemptState, Attempted}, Policy, limit::WindowBudget, time::SystemClock};
    ///
    /// let budget = WindowBudget::new(0.1, 1, Duration::from_secs(1));
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock).budget(Some(&budget));
    /// assert_eq!(budget.stats().calls, 0, "recorded when its first attempt runs");
    /// let _ = state.decide(Attempted::Succeeded);
    /// assert_eq!(budget.stats().calls, 1);
    /// ```
    #[must_use]
    #[inline]
    pub fn budget(mut self, budget: impl IntoBudget<'a>) -> Self {
        self.budget = budget.into_budget();
        self
    }

    /// Names the function retried, for `tracing` (the span's and events'
    /// `function` field) and `metrics` (the `function` label). `#[retry]`
    /// names every call after its function.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::AttemptState, Policy, time::SystemClock};
    /// let policy = Policy::new();
    /// let state = AttemptState::new(&policy, SystemClock).name("fetch_user");
    /// assert_eq!(state.get_name(), "fetch_user");
    /// ```
    #[must_use]
    #[inline]
    pub fn name(mut self, name: &'static str) -> Self {
        self.obs.set_name(name);
        self
    }

    /// Like [`name`](Self::name), from a `static` [`Function`],
    /// whose metric labels are built at compile time: reporting the call
    /// then allocates nothing. `#[retry]` does this.
    #[must_use]
    #[inline]
    pub fn function(mut self, function: &'static Function) -> Self {
        self.obs.set_function(function);
        self
    }

    /// The call's key (its hash, as [`call_key`](crate::macro_support::call_key)
    /// gives it), if it gave one: `tracing` and `metrics` label the call
    /// with the key's name.
    #[must_use]
    #[inline]
    pub fn key(mut self, key: Option<u64>) -> Self {
        self.obs.set_key(key);
        self
    }

    /// The call's breaker, unless its place in a `Keyed` table has gone to
    /// another key since the call was given it (the call's key's breaker
    /// held nothing a fresh one would not then). It is that key's now, and
    /// would turn this call away for that key's failures: the call goes on
    /// without one, as a key that finds no place does.
    fn breaker_now(&mut self) -> Option<&'static CircuitBreaker> {
        let breaker = self.breaker?;
        if self.keyed != 0 && breaker.keyed_word() != self.keyed {
            self.breaker = None;
            return None;
        }
        Some(breaker)
    }

    /// Runs `f` inside the call's `tracing` span (feature `tracing`;
    /// without it, just runs `f`): what `f` logs belongs to the call.
    /// `#[retry]` runs `on_retry` and `on_give_up` so.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::AttemptState, Policy, time::SystemClock};
    /// let policy = Policy::new();
    /// let state = AttemptState::new(&policy, SystemClock).name("fetch_user");
    /// let logged = state.in_span(|| "retrying fetch_user");
    /// assert_eq!(logged, "retrying fetch_user");
    /// ```
    pub fn in_span<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "tracing")]
        let _span = self.obs.span().enter();
        f()
    }

    /// The function retried (`"anonymous"` unless named).
    pub fn get_name(&self) -> &'static str {
        self.obs.name()
    }

    /// Puts the call behind `breaker`: ask [`admit`](Self::admit) before
    /// every attempt.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{macro_support::AttemptState, limit::CircuitBreaker, Policy, time::SystemClock};
    /// static USERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock).breaker(&USERS);
    /// assert!(state.admit().is_ok());
    /// ```
    #[must_use]
    #[inline]
    pub fn breaker(mut self, breaker: impl Into<Option<&'static CircuitBreaker>>) -> Self {
        self.breaker = breaker.into().map(crate::limit::isolation::own);
        self.keyed = self.breaker.map_or(0, CircuitBreaker::keyed_word);
        self
    }

    /// Puts the call behind an adaptive throttle: ask
    /// [`admit_throttled`](Self::admit_throttled) before every attempt.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{limit::AdaptiveThrottle, macro_support::AttemptState, Policy, time::SystemClock};
    /// static USERS: AdaptiveThrottle = AdaptiveThrottle::standard();
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock).throttle(&USERS);
    /// assert!(state.admit_throttled().is_ok(), "healthy: never shed");
    /// ```
    #[must_use]
    #[inline]
    pub fn throttle(mut self, throttle: impl Into<Option<&'static AdaptiveThrottle>>) -> Self {
        self.throttle = throttle
            .into()
            .map(|throttle| (crate::limit::isolation::own(throttle), false));
        self
    }

    /// Before each attempt, with an adaptive throttle: sheds it with the
    /// throttle's probability (drawn from the call's random stream); an
    /// attempt sent is counted once its outcome is known (or as it is
    /// dropped in flight). Always `Ok` without one. A shed first attempt
    /// is the call's error (`E: From<Throttled>`); a shed later one ends
    /// the call ([`GiveUp::Throttled`]). Ask it before
    /// [`admit`](Self::admit): a shed attempt never takes a breaker's leave.
    ///
    /// # Errors
    ///
    /// [`Throttled`] when the attempt is shed.
    pub fn admit_throttled(&mut self) -> Result<(), Throttled> {
        if let Some((throttle, _)) = self.throttle {
            let draw = self.rng.get_or_insert_with(Rng::new).next_f64();
            if let Err(shed) = throttle.admit(self.clock.now(), draw) {
                self.gave_up(GiveUp::Throttled);
                return Err(shed);
            }
        }
        Ok(())
    }

    /// Before each attempt: may it run? Always, without a breaker; with
    /// one, `Err(CircuitOpen::new())` while it is open. A rejected first attempt
    /// is the call's error (`E: From<CircuitOpen>`); a rejected later one
    /// ends the call with the last outcome ([`GiveUp::BreakerOpen`]).
    ///
    /// # Errors
    ///
    /// [`CircuitOpen`] when the breaker rejects the attempt.
    pub fn admit(&mut self) -> Result<(), CircuitOpen> {
        if let Some(breaker) = self.breaker_now() {
            // (In the call's span: see `decide_inner`.)
            let acquired = self.in_call_span(|state| breaker.try_acquire(state.clock.now()));
            match acquired {
                Ok(permit) => self.permit = Some(permit),
                Err(open) => {
                    self.gave_up(GiveUp::BreakerOpen);
                    return Err(open);
                }
            }
        }
        Ok(())
    }

    /// Tells the breaker how the attempt its `permit` let through went,
    /// in the call's span: its change of state tells which call made it.
    /// (Out of line: a call without a breaker, most, keeps its decision
    /// short.)
    #[inline(never)]
    fn record_permit(&self, permit: Permit<'_>, attempted: Attempted) {
        self.in_call_span(|state| permit.record(attempted, state.clock.now()));
    }

    /// Runs `f` in the call's span: a sync loop decides between attempts,
    /// outside it; a driver's poll is inside it already, and is not
    /// entered twice (a subscriber would see every entry).
    #[inline]
    fn in_call_span<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        #[cfg(feature = "tracing")]
        {
            let span = self.obs.span();
            if !span.is_disabled() && span.id() != tracing::Span::current().id() {
                let _in_call = span.enter();
                return f(self);
            }
        }
        f(self)
    }

    /// Records the call on the budget, once: when its first attempt starts
    /// (or is decided, for a loop that runs attempts itself). A call the
    /// breaker rejects never gets here.
    fn record_call(&mut self) {
        record_once(&mut self.recorded, self.budget, || self.start);
    }

    /// The loop gave up between attempts for `reason` (the service was
    /// not ready by the deadline, or failed): reported like a decision's
    /// give-up.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn give_up(&mut self, reason: GiveUp) {
        self.gave_up(reason);
    }

    /// A call ending outside [`decide`](Self::decide) (rejected by the
    /// breaker, or waking too late): reported like a decision's give-up.
    fn gave_up(&mut self, reason: GiveUp) {
        self.gave_up_showing(reason, Shown::Nothing);
    }

    /// [`gave_up`](Self::gave_up), the last outcome `shown`.
    fn gave_up_showing(&mut self, reason: GiveUp, shown: Shown<'_>) {
        if self.done == 0 {
            // Turned away before its first attempt: nothing was sent, so
            // nothing was given up (an open breaker turns every call away:
            // one INFO event each would flood the logs of an outage).
            self.obs.rejected(reason);
        } else {
            self.obs.gave_up(reason, shown);
        }
        if self.done > 1 {
            scope::note_retried_below();
        }
    }

    /// Runs one sync attempt with its [`Context`](crate::Context) set, so
    /// that [`context()`](crate::run::scope::context()) answers inside it and calls
    /// nested in it see this call's deadline.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, macro_support::AttemptState, Policy, time::SystemClock};
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// let attempt = state.run_attempt(|| context().map(|cx| cx.attempt()));
    /// assert_eq!(attempt, Some(1));
    /// ```
    #[inline]
    pub fn run_attempt<R>(&mut self, attempt: impl FnOnce() -> R) -> R {
        run_sync(self, attempt)
    }

    /// Runs one async attempt with its [`Context`](crate::Context) set
    /// around each poll of `attempt`: it holds across `.await` points and
    /// when the task moves between worker threads.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, macro_support::AttemptState, Policy, time::SystemClock};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// let attempt = state
    ///     .run_attempt_async(async {
    ///         tokio::task::yield_now().await;
    ///         context().map(|cx| cx.attempt())
    ///     })
    ///     .await;
    /// assert_eq!(attempt, Some(1));
    /// # }
    /// ```
    pub async fn run_attempt_async<F: Future>(&mut self, attempt: F) -> F::Output {
        self.run_attempt_pinned(std::pin::pin!(attempt)).await
    }

    /// [`run_attempt_async`](Self::run_attempt_async) for an attempt the
    /// caller has pinned (`#[retry]` pins it in the call's own future, so
    /// that it is stored once). The attempt starts when this is called.
    #[doc(hidden)]
    pub fn run_attempt_pinned<'s, F: Future>(
        &'s mut self,
        attempt: std::pin::Pin<&'s mut F>,
    ) -> impl Future<Output = F::Output> + 's {
        run_pinned(self, attempt)
    }

    /// Whether the call's policy says its operation is idempotent.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn idempotent(&self) -> bool {
        self.policy.get().idempotent
    }

    /// The call may not hedge, for `reason` (its request is not
    /// idempotent, or cannot be copied): told as a hedge not sent.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn hedge_refused(&self, reason: GiveUp) {
        self.obs.hedge_refused(reason);
    }

    /// What to tell `on_retry` after [`decide`](Self::decide) answered
    /// `Retry(delay)` for `outcome`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{macro_support::{AttemptState, Attempted, Decision}, Jitter, Policy, time::SystemClock, Verdict};
    /// let _vt = backstop::testing::VirtualTime::start();
    /// let policy = Policy::new().jitter(Jitter::None);
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// let outcome: Result<(), &str> = Err("reset");
    /// let Decision::Retry(delay) = state.decide(Attempted::Failed(Verdict::Retry)) else { unreachable!() };
    /// let event = state.retry_event(outcome.as_ref(), delay);
    /// assert_eq!((event.attempt(), event.error()), (1, Some(&"reset")));
    /// ```
    pub fn retry_event<'o, T, E>(
        &self,
        outcome: Result<&'o T, &'o E>,
        delay: Duration,
    ) -> RetryEvent<'o, T, E> {
        RetryEvent {
            attempt: self.done,
            hedges: self.hedges,
            delay,
            verdict: self.last_verdict.unwrap_or(Verdict::Retry),
            outcome,
            elapsed: self.clock.now().saturating_duration_since(self.start),
        }
    }

    /// What to tell `on_give_up` after [`decide`](Self::decide) answered
    /// `GiveUp(reason)` for `outcome`.
    pub fn give_up_event<'o, T, E>(
        &self,
        outcome: Result<&'o T, &'o E>,
        reason: GiveUp,
    ) -> GiveUpEvent<'o, T, E> {
        GiveUpEvent {
            attempts: self.done,
            hedges: self.hedges,
            reason,
            outcome,
            elapsed: self.clock.now().saturating_duration_since(self.start),
        }
    }

    /// How long the next attempt may run under `attempt_timeout`: the
    /// timeout, or the time left before the deadline if that is less, less
    /// the clock's [sleep slack](Clock::sleep_slack): a timer can end up to
    /// that late (tokio's ends on a later millisecond tick), and the call
    /// must return by its deadline whatever the timer's phase.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{macro_support::AttemptState, Policy, time::SystemClock};
    /// let _vt = backstop::testing::VirtualTime::start();
    /// let policy = Policy::new().deadline(Some(Duration::from_secs(2)));
    /// let state = AttemptState::new(&policy, SystemClock);
    /// assert_eq!(state.attempt_limit(Duration::from_secs(5)), Duration::from_secs(2));
    /// assert_eq!(state.attempt_limit(Duration::from_secs(1)), Duration::from_secs(1));
    /// ```
    pub fn attempt_limit(&self, timeout: Duration) -> Duration {
        attempt_limit(self.deadline, &self.clock, timeout)
    }

    /// How long the next attempt may run under `policy`'s own attempt
    /// timeout, if it has one and `applies` (the loop can return a
    /// timed-out attempt as its error): as [`attempt_limit`](Self::attempt_limit).
    #[doc(hidden)]
    pub fn attempt_limit_of(&self, policy: &Policy, applies: bool) -> Option<Duration> {
        attempt_limit_of(self.deadline, &self.clock, policy, applies)
    }

    fn scope(&self) -> Scope {
        Scope::new(
            self.call,
            self.attempt(),
            self.deadline,
            self.clock.now_fn(),
        )
    }

    /// Uses `rng` for jitter instead of a fresh per-call stream (for
    /// reproducible tests).
    #[must_use]
    pub fn rng(mut self, rng: Rng) -> Self {
        self.rng = Some(rng);
        self
    }

    /// Tells the decider whether the request could be sent again: a
    /// retryable failure of one that cannot gives up with
    /// [`GiveUp::NotReplayable`] (a windowed budget is not drawn on; a
    /// token budget still counts the failure, as it counts every one).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::{AttemptState, Attempted, Decision}, GiveUp, Policy, time::SystemClock, Verdict};
    /// let policy = Policy::new();
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// state.set_replayable(false);
    /// assert_eq!(state.decide(Attempted::Failed(Verdict::Retry)), Decision::GiveUp(GiveUp::NotReplayable));
    /// ```
    pub fn set_replayable(&mut self, replayable: bool) {
        self.replayable = replayable;
    }

    /// The 1-based number of the attempt running now (or about to start).
    pub fn attempt(&self) -> u32 {
        self.done.saturating_add(1)
    }

    /// When the call began.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The call's deadline, if it has one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// After sleeping a [`Decision::Retry`] delay: may the next attempt
    /// still start? `Err(GiveUp::Deadline)` if the clock has reached the
    /// deadline meanwhile (a thread can oversleep by its timer slack or by
    /// being descheduled); the caller then returns the outcome it kept.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{macro_support::{AttemptState, Attempted, Decision}, GiveUp, Jitter, Policy, time::SystemClock, Verdict};
    /// let vt = backstop::testing::VirtualTime::start();
    ///
    /// let policy = Policy::new().jitter(Jitter::None).deadline(Some(Duration::from_millis(150)));
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// assert_eq!(state.decide(Attempted::Failed(Verdict::Retry)), Decision::Retry(Duration::from_millis(100)));
    /// vt.advance(Duration::from_millis(150)); // woke late
    /// assert_eq!(state.may_resume(), Err(GiveUp::Deadline));
    /// ```
    ///
    /// With a breaker, this also [admits](Self::admit) the next attempt:
    /// `Err(GiveUp::BreakerOpen)` if the breaker opened meanwhile.
    ///
    /// # Errors
    ///
    /// [`GiveUp::Deadline`] when the deadline has been reached,
    /// [`GiveUp::BreakerOpen`] when the breaker rejects the next attempt.
    pub fn may_resume(&mut self) -> Result<(), GiveUp> {
        if self.gives_up_past_deadline() {
            return Err(GiveUp::Deadline);
        }
        self.admit_throttled().map_err(|_| GiveUp::Throttled)?;
        self.admit().map_err(|_| GiveUp::BreakerOpen)
    }

    /// Whether the deadline has come: if so, the call gives up
    /// ([`GiveUp::Deadline`]), told as any give-up.
    fn gives_up_past_deadline(&mut self) -> bool {
        let past = matches!(self.now_ahead_of(Duration::ZERO), (_, Some(Duration::ZERO)));
        if past {
            self.gave_up(GiveUp::Deadline);
        }
        past
    }

    /// After an attempt, what every loop does: decides, and tells the
    /// hooks what was decided, in the call's span (an event is built only
    /// for a hook that is there). `Some(delay)`: sleep, then attempt again;
    /// `None`: return the outcome.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::macro_support::{AttemptState, Attempted};
    /// use backstop::{GiveUpEvent, Jitter, Policy, RetryEvent, Verdict, time::SystemClock};
    /// # let _vt = backstop::testing::VirtualTime::start();
    ///
    /// let policy = Policy::new().jitter(Jitter::None).no_budget();
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// let outcome: Result<(), &str> = Err("refused");
    /// let mut told = Vec::new();
    /// let next = state.decided(
    ///     outcome.as_ref(),
    ///     Attempted::Failed(Verdict::Retry),
    ///     Some(|event: &RetryEvent<'_, (), &str>| told.push(event.delay())),
    ///     None::<fn(&GiveUpEvent<'_, (), &str>)>,
    /// );
    /// assert_eq!(next, Some(Duration::from_millis(100)));
    /// assert_eq!(told, [Duration::from_millis(100)]);
    /// ```
    #[inline]
    pub fn decided<T, E>(
        &mut self,
        outcome: Result<&T, &E>,
        attempted: Attempted,
        on_retry: Option<impl FnOnce(&RetryEvent<'_, T, E>)>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> Option<Duration> {
        self.decided_showing(outcome, attempted, Shown::Nothing, on_retry, on_give_up)
    }

    /// [`decided`](Self::decided), telling `tracing` what `shown` shows
    /// of the outcome.
    #[inline]
    pub(crate) fn decided_showing<T, E>(
        &mut self,
        outcome: Result<&T, &E>,
        attempted: Attempted,
        shown: Shown<'_>,
        on_retry: Option<impl FnOnce(&RetryEvent<'_, T, E>)>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> Option<Duration> {
        let decision = self.decide_showing(attempted, shown);
        self.told(decision, outcome, on_retry, on_give_up)
    }

    /// Tells the hooks of `decision`, in the call's span: the second half
    /// of [`decided`](Self::decided). Without hooks, nothing but the match.
    #[inline]
    pub(crate) fn told<T, E>(
        &self,
        decision: Decision,
        outcome: Result<&T, &E>,
        on_retry: Option<impl FnOnce(&RetryEvent<'_, T, E>)>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> Option<Duration> {
        match decision {
            Decision::Retry(delay) => {
                if let Some(hook) = on_retry {
                    self.tell_retry(outcome, delay, hook);
                }
                Some(delay)
            }
            Decision::GiveUp(reason) => {
                self.gave_up_with(outcome, reason, on_give_up);
                None
            }
            Decision::Return => None,
        }
    }

    /// Tells `hook`, in the call's span, that the call retries after
    /// `delay`. Out of line: a loop without hooks never builds an event.
    #[inline(never)]
    pub(crate) fn tell_retry<T, E>(
        &self,
        outcome: Result<&T, &E>,
        delay: Duration,
        hook: impl FnOnce(&RetryEvent<'_, T, E>),
    ) {
        let event = self.retry_event(outcome, delay);
        self.in_span(|| hook(&event));
    }

    /// Tells `hook`, in the call's span, that the call gives up with
    /// `outcome` for `reason`.
    #[inline(never)]
    pub(crate) fn tell_give_up<T, E>(
        &self,
        outcome: Result<&T, &E>,
        reason: GiveUp,
        hook: impl FnOnce(&GiveUpEvent<'_, T, E>),
    ) {
        let event = self.give_up_event(outcome, reason);
        self.in_span(|| hook(&event));
    }

    /// After the sleep of a sync loop, which kept its outcome through it:
    /// may the next attempt start ([`may_resume`](Self::may_resume))? A
    /// [held](Self::held) call sleeps the thread until it is released or
    /// its deadline comes (its give-up shows the outcome as `show` does).
    /// `false` when it may not, once `on_give_up` has been told: the
    /// caller returns the outcome it kept.
    #[inline]
    pub fn resumed<T, E, W: Show<T, E>>(
        &mut self,
        outcome: Result<&T, &E>,
        _show: W,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> bool {
        // A call held after a refusal waits here (the loop is sync: its
        // thread sleeps), and gives up at its deadline with the outcome kept.
        while let Some(held) = self.held_showing(|| Some(W::shown(outcome))) {
            match held {
                Ok(wait) => crate::time::sleep_thread(wait),
                Err(reason) => {
                    self.gave_up_with(outcome, reason, on_give_up);
                    return false;
                }
            }
        }
        match self.may_resume() {
            Ok(()) => true,
            Err(reason) => {
                self.gave_up_with(outcome, reason, on_give_up);
                false
            }
        }
    }

    /// Tells `on_give_up`, in the call's span, that the call gives up with
    /// `outcome` for `reason`.
    #[inline]
    pub fn gave_up_with<T, E>(
        &self,
        outcome: Result<&T, &E>,
        reason: GiveUp,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) {
        if let Some(hook) = on_give_up {
            self.tell_give_up(outcome, reason, hook);
        }
    }

    /// Classifies `outcome` (`when_ok` for `Ok`, `when` for `Err`) and
    /// decides.
    pub fn decide_result<T, E, W, K>(
        &mut self,
        outcome: &Result<T, E>,
        when: &W,
        when_ok: &K,
    ) -> Decision
    where
        W: Classifier<E> + ?Sized,
        K: Classifier<T> + ?Sized,
    {
        let attempted = crate::classify::of_result(
            outcome,
            |error| when.verdict(error),
            |value| when_ok.verdict(value),
        );
        self.decide(attempted)
    }

    /// Decides after an attempt that came to `attempted`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{macro_support::{AttemptState, Attempted, Decision}, Jitter, Policy, time::SystemClock, Verdict};
    /// # let _vt = backstop::testing::VirtualTime::start();
    ///
    /// let policy = Policy::new().jitter(Jitter::None).no_budget();
    /// let mut state = AttemptState::new(&policy, SystemClock);
    /// assert_eq!(
    ///     state.decide(Attempted::Failed(Verdict::Retry)),
    ///     Decision::Retry(std::time::Duration::from_millis(100))
    /// );
    /// assert_eq!(state.decide(Attempted::Succeeded), Decision::Return);
    /// ```
    ///
    /// In this order: classification (`Stop`, or an ambiguous failure of
    /// a call not declared idempotent, returns), a request that cannot be
    /// sent again, a nested call that already retried, attempts, the delay (with `Retry-After`), the deadline, the
    /// breaker, the budget. The budget's permission comes last, so that a
    /// retry refused for another reason never takes a windowed budget's
    /// token; a token budget hears of every attempt before all of it (an
    /// answer credits it, a failure a retry could fix debits it, whatever
    /// is decided then), as gRFC A6's retry throttling counts.
    pub fn decide(&mut self, attempted: Attempted) -> Decision {
        self.decide_showing(attempted, Shown::Nothing)
    }

    /// [`decide`](Self::decide), telling `tracing` what `shown` shows of
    /// the outcome (an error's text, a response's status).
    #[inline]
    pub(crate) fn decide_showing(&mut self, attempted: Attempted, shown: Shown<'_>) -> Decision {
        self.done = self.done.saturating_add(1);
        self.last_verdict = attempted.verdict();
        let decision = self.decide_inner(attempted);
        if let (Hold::Held, Decision::Retry(first_wait)) = (self.hold, decision) {
            self.obs.held(self.done, first_wait, shown);
        } else {
            self.obs
                .decided(self.done, self.hedges, decision, attempted.verdict(), shown);
        }
        // Giving up after retrying (or because a nested call had); returning
        // an answer that says the dependency failed (a 5xx, a gRPC
        // `INTERNAL`…: [`Shown::server_failed`]) after the request went out
        // more than once (a retry, or a hedge beside the first attempt); or
        // ending after an attempt in which a nested call gave up after
        // retrying (the call returned what it made of it): tell the
        // enclosing call, if any, not to retry on top, as it would be told
        // with no call between.
        match decision {
            Decision::GiveUp(reason) if self.done > 1 || reason == GiveUp::RetriedBelow => {
                scope::note_retried_below();
            }
            Decision::Return if self.done > 1 && shown.server_failed() => {
                scope::note_retried_below();
            }
            Decision::GiveUp(_) | Decision::Return if self.retried_below => {
                scope::note_retried_below();
            }
            _ => {}
        }
        decision
    }

    /// The time now, for a decision about something `ahead` from now, and
    /// the time left from then to the deadline, if any (zero once it is
    /// reached): the coarse clock (a few nanoseconds) when the deadline is
    /// further away than `ahead` by more than the coarse clock can trail;
    /// the precise clock otherwise.
    #[inline]
    fn now_ahead_of(&self, ahead: Duration) -> (Instant, Option<Duration>) {
        let coarse = self.clock.start_now();
        match self.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(coarse);
                if left <= ahead.saturating_add(COARSE_TRAILS_BY_LESS_THAN) {
                    let now = self.clock.now();
                    (now, Some(deadline.saturating_duration_since(now)))
                } else {
                    (coarse, Some(left))
                }
            }
            None => (coarse, None),
        }
    }

    fn decide_inner(&mut self, attempted: Attempted) -> Decision {
        self.record_call();
        self.release_ended(attempted);
        if let Some(permit) = self.permit.take() {
            self.record_permit(permit, attempted);
        }
        let holder = self.policy;
        let policy = holder.get();
        // The adaptive throttle counts the attempt now that its outcome is
        // known: a request, and an accept if it was answered.
        if let Some((throttle, _)) = self.throttle {
            throttle.sent(self.clock.now(), attempted.answered());
            self.throttle = Some((throttle, false));
        }
        // The token budget hears of every attempt: an answer credits it
        // (with the bucket full, a read), a failure a retry could fix
        // debits it, whether or not this call goes on to retry; the retry
        // itself is allowed only while it stays above half (step 6).
        let throttle_allows = match self.budget {
            Some(BudgetRef::Token(_)) if attempted.answered() => {
                credit_answer(self.budget, || self.start.into());
                true
            }
            // (The coarse clock: the bucket refills by the second.)
            Some(BudgetRef::Token(throttle)) => throttle.failed(self.clock.start_now()),
            _ => true,
        };
        let verdict = match attempted {
            Attempted::Succeeded => return Decision::Return,
            Attempted::Failed(Verdict::Stop | Verdict::StopOverloaded) => {
                return Decision::GiveUp(GiveUp::Stopped);
            }
            Attempted::Failed(Verdict::RetryIfIdempotent) if !policy.idempotent => {
                return Decision::GiveUp(GiveUp::NotIdempotent);
            }
            Attempted::Failed(verdict) => verdict,
        };
        if !self.replayable {
            return Decision::GiveUp(GiveUp::NotReplayable);
        }
        if std::mem::take(&mut self.retried_below) {
            return Decision::GiveUp(GiveUp::RetriedBelow);
        }
        if self.done >= policy.attempts {
            return Decision::GiveUp(GiveUp::Attempts);
        }
        let rng = self.rng.get_or_insert_with(Rng::new);
        let (delay, asked) = if let Verdict::RetryAfter(asked) = verdict {
            if asked > policy.retry_after_max {
                return Decision::GiveUp(GiveUp::RetryAfterTooLong);
            }
            // Spread the herd that got the same header, but never come back
            // earlier than the server asked: over a fifth of its value, or
            // a base delay if that is wider (a `Retry-After: 0`, or a date
            // already past on this clock, is not a herd's cue to come back
            // all at once).
            let draw = rng.next_f64();
            let width = backoff::scale(asked, 0.2).max(policy.base);
            let spread = asked.saturating_add(backoff::scale(width, draw));
            (spread, Some((asked, draw)))
        } else {
            // The backoff counts retries: the attempts before this one,
            // less the hedges sent beside them.
            let delay = policy.delay(self.done - 1 - self.hedges, self.prev, rng);
            self.prev = delay;
            (delay, None)
        };
        let (now, left) = self.now_ahead_of(delay);
        // The latest delay after which the next attempt still starts before
        // the deadline, however much the timer oversleeps within its slack.
        // An attempt that starts at the deadline has no time to succeed and
        // still costs the server: give up rather than sleep into it.
        let latest = left.map(|left| {
            left.checked_sub(self.clock.sleep_slack())
                .and_then(|left| left.checked_sub(Duration::from_nanos(1)))
        });
        // The spread shrinks to fit the deadline: the same draw over what is
        // left between the server's value and the latest start, so that the
        // callers told the same still come back spread out, not together at
        // the last instant. Only the server's own value not fitting gives up.
        let delay = match (asked, latest) {
            (Some((asked, draw)), Some(Some(latest))) if delay > latest && latest >= asked => {
                asked + latest.saturating_sub(asked).mul_f64(draw)
            }
            _ => delay,
        };
        // A refusal the token budget refuses, with a deadline to wait
        // within, holds (sends nothing) until the budget sees answers
        // again, unless the budget has refused for its whole ride-out: its
        // first wait need not be the whole backoff, only fit. Any other
        // failure the budget refuses gives up (after the deadline's step).
        let will_hold = verdict == Verdict::Refused
            && !throttle_allows
            && self.hold != Hold::Never
            && left.is_some()
            && matches!(self.budget, Some(BudgetRef::Token(budget)) if budget.rides_out(now));
        let delay = match latest {
            Some(Some(latest)) if delay <= latest => delay,
            Some(Some(latest)) if will_hold && !latest.is_zero() => latest,
            Some(_) => return Decision::GiveUp(GiveUp::Deadline),
            None => delay,
        };
        // The breaker is not closed: this failure (or another caller's)
        // opened it, a failed probe reopened it, or a probe is out. The
        // call stops here, whatever the delay: even past the cooldown, its
        // next attempt would be a probe, and a probe is never retried.
        if let Some(breaker) = self.breaker_now()
            && !breaker.is_closed()
        {
            return Decision::GiveUp(GiveUp::BreakerOpen);
        }
        let granted = match self.budget {
            Some(BudgetRef::Window(budget)) => budget.try_withdraw(now),
            Some(BudgetRef::Token(_)) => throttle_allows,
            None => true,
        };
        if !granted {
            return self.hold_or_give_up(will_hold, delay);
        }
        Decision::Retry(delay)
    }

    /// A released call's retry is over (it came to `attempted`): its place
    /// goes to another, after a new answer if this one failed.
    #[inline]
    fn release_ended(&mut self, attempted: Attempted) {
        if self.hold == Hold::Released
            && let Some(BudgetRef::Token(budget)) = self.budget
        {
            budget.release_ended(!attempted.answered());
        }
        if self.hold != Hold::Never {
            self.hold = Hold::No;
        }
    }

    /// The budget refused the retry: a call that `will_hold` (as `decide`
    /// reckons it) holds, its first wait at most `most`; any other gives
    /// up.
    fn hold_or_give_up(&mut self, will_hold: bool, most: Duration) -> Decision {
        if will_hold {
            self.hold = Hold::Held;
            // It polls from now on: its first wait is a poll's, not the
            // backoff's (which could outlast the dependency's restart).
            return Decision::Retry(self.poll_wait(most));
        }
        Decision::GiveUp(GiveUp::Budget)
    }

    /// Whether the last attempt was refused ([`Verdict::Refused`]).
    pub(crate) fn last_refused(&self) -> bool {
        self.last_verdict == Some(Verdict::Refused)
    }

    /// After the sleep of a retry, for a loop that dropped its outcome
    /// before it: whether the deadline came while it slept (its task ran
    /// late: an executor blocked, a machine overloaded), and the call gives
    /// up ([`GiveUp::Deadline`]) rather than start an attempt past it.
    /// Only a call that can give an `Elapsed` error in the outcome's place
    /// (as [`set_may_hold`](Self::set_may_hold) says) gives up: one that
    /// cannot, with nothing to return, makes its attempt.
    pub(crate) fn late(&mut self) -> bool {
        self.hold != Hold::Never && self.deadline.is_some() && self.gives_up_past_deadline()
    }

    /// Whether the loop can hold a refused call whose retry the token
    /// budget refuses ([`Verdict::Refused`]): only one that kept the
    /// outcome, or can give an `Elapsed` error in its place, can give up
    /// at the deadline with something to return. `true` unless told.
    pub fn set_may_hold(&mut self, may_hold: bool) {
        match (may_hold, self.hold) {
            (false, Hold::No) => self.hold = Hold::Never,
            (true, Hold::Never) => self.hold = Hold::No,
            _ => {}
        }
    }

    /// After the sleep of a retry: is the call held, waiting for the token
    /// budget to see the dependency answer again? `None` when it is not,
    /// or no longer is (it was released: the next attempt may start, as
    /// [`may_resume`](Self::may_resume) says). `Some(Ok(wait))`: still
    /// held, sleep `wait` and ask again. `Some(Err(reason))`: the call
    /// gives up, for [`GiveUp::Deadline`] (its deadline came first) or
    /// [`GiveUp::Budget`] (the budget has refused retries for its
    /// [`ride_out`](crate::limit::TokenBudget::ride_out) without an
    /// answer).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::macro_support::{AttemptState, Attempted, Decision};
    /// use backstop::{GiveUp, Jitter, Policy, Verdict, limit::TokenBudget, time::SystemClock};
    /// let vt = backstop::testing::VirtualTime::start();
    ///
    /// static BUDGET: TokenBudget = TokenBudget::new(2, 1.0);
    /// let policy = Policy::new().jitter(Jitter::None).deadline(Some(Duration::from_secs(1)));
    /// let mut state = AttemptState::new(&policy, SystemClock).budget(Some(&BUDGET));
    /// // Refused, with half the bucket left: held (a first wait of about a
    /// // base delay), not given up.
    /// let Decision::Retry(wait) = state.decide(Attempted::Failed(Verdict::Refused)) else { panic!() };
    /// assert!(wait >= Duration::from_millis(50) && wait <= Duration::from_millis(150));
    /// vt.advance(wait);
    /// assert!(matches!(state.held(), Some(Ok(_))), "no answer yet");
    /// BUDGET.answered(std::time::Instant::now());
    /// assert_eq!(state.held(), None, "released: the retry goes");
    /// ```
    pub fn held(&mut self) -> Option<Result<Duration, GiveUp>> {
        self.held_showing(|| None)
    }

    /// [`held`](Self::held), by a loop that may have kept the outcome held
    /// after: a give-up shows it (`shown`, asked only then), as the holds
    /// did, or, if it was not kept (`None`), the [`Elapsed`](crate::Elapsed)
    /// the call then returns.
    pub(crate) fn held_showing<'s>(
        &mut self,
        shown: impl FnOnce() -> Option<Shown<'s>>,
    ) -> Option<Result<Duration, GiveUp>> {
        if self.hold != Hold::Held {
            return None;
        }
        let (Some(BudgetRef::Token(budget)), Some(deadline)) = (self.budget, self.deadline) else {
            self.hold = Hold::No;
            return None;
        };
        let now = self.clock.now();
        // The latest start of an attempt, as `decide` reckons it.
        let left = deadline
            .saturating_duration_since(now)
            .saturating_sub(self.clock.sleep_slack());
        // The deadline came, or the dependency has refused too long to be
        // restarting.
        let over = if left <= Duration::from_nanos(1) {
            Some(GiveUp::Deadline)
        } else if !budget.rides_out(now) {
            Some(GiveUp::Budget)
        } else {
            None
        };
        if let Some(reason) = over {
            self.hold = Hold::No;
            let returned = crate::Elapsed::held(reason);
            let shown = shown().unwrap_or(Shown::Error(ErrorShown::Display(&returned)));
            self.gave_up_showing(reason, shown);
            // Holding was its retry, even if no probe went: a call around
            // it is not to retry what this one held for.
            scope::note_retried_below();
            return Some(Err(reason));
        }
        if budget.may_release(now) {
            self.hold = Hold::Released;
            self.obs.released();
            return None;
        }
        let wait = self.poll_wait(left.saturating_sub(Duration::from_nanos(1)));
        self.obs.waits(wait);
        Some(Ok(wait))
    }

    /// How long a held call waits before it looks again: about one base
    /// delay (from half to one and a half, spread so that held calls do not
    /// look together), at least a millisecond, at most `most`.
    fn poll_wait(&mut self, most: Duration) -> Duration {
        let draw = self.rng.get_or_insert_with(Rng::new).next_f64();
        backoff::scale(self.policy.get().base, 0.5 + draw)
            .max(Duration::from_millis(1))
            .min(most)
    }
}

/// What runs attempts: the state machine, or a call before its first
/// attempt is decided ([`Call`]). [`run_sync`] and [`run_pinned`] run an
/// attempt in its frame for either.
trait Attempts {
    /// An attempt starts: the call is recorded on the budget (once), the
    /// attempt counted, and no nested call has given up in it yet.
    fn begin(&mut self);
    /// The frame the attempt runs in, carrying what an earlier poll of it
    /// left.
    fn scope(&self) -> Scope;
    /// Whether a call nested in the attempt gave up after retrying.
    fn retried_below(&self) -> bool;
    /// Keeps what the attempt (or a poll of it) left to the call.
    fn keep(&mut self, call: CallContext, retried_below: bool);
    /// The call's span, which the attempt runs in.
    #[cfg(feature = "tracing")]
    fn span(&self) -> &tracing::Span;
}

impl<C: Clock, P: HoldsPolicy> Attempts for AttemptState<'_, C, P> {
    #[inline]
    fn begin(&mut self) {
        self.record_call();
        if let Some((throttle, _)) = self.throttle {
            throttle.sending();
            self.throttle = Some((throttle, true));
        }
        self.obs.started(self.attempt());
        self.retried_below = false;
    }

    #[inline]
    fn scope(&self) -> Scope {
        AttemptState::scope(self)
    }

    #[inline]
    fn retried_below(&self) -> bool {
        self.retried_below
    }

    #[inline]
    fn keep(&mut self, call: CallContext, retried_below: bool) {
        self.call = call;
        self.retried_below = retried_below;
    }

    #[cfg(feature = "tracing")]
    fn span(&self) -> &tracing::Span {
        self.obs.span()
    }
}

/// Runs one sync attempt for `state` in the attempt's frame.
#[inline]
fn run_sync<R>(state: &mut impl Attempts, attempt: impl FnOnce() -> R) -> R {
    state.begin();
    #[cfg(feature = "tracing")]
    let _span = state.span().clone().entered();
    let (out, call, below) = state.scope().run(attempt);
    state.keep(call, below);
    out
}

/// Runs one async attempt for `state`, with the attempt's frame set around
/// each poll.
fn run_pinned<'s, F: Future>(
    state: &'s mut impl Attempts,
    mut attempt: std::pin::Pin<&'s mut F>,
) -> impl Future<Output = F::Output> + 's {
    state.begin();
    #[cfg(feature = "tracing")]
    let span = state.span().clone();
    let mut shared = None;
    std::future::poll_fn(move |task| {
        #[cfg(feature = "tracing")]
        let _span = span.enter();
        poll_framed(state, &mut shared, None, || attempt.as_mut().poll(task))
    })
}

/// Runs one async attempt for `state` as [`run_pinned`] does, cut off
/// after `cut`, if given, on the call's timer (`Err`: it ran out). Cut
/// off, the attempt is dropped in its frame, as it ran: a call nested in
/// it that is dropped midway after retrying tells this attempt so, not the
/// one around the call (which is polling it now). One future, holding the
/// timer in place, as the driver's attempt does: the call's future does
/// not grow by a layer.
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
fn run_cut<'s, A: Attempts, F: Future>(
    state: &'s mut A,
    cut: Option<Duration>,
    attempt: std::pin::Pin<&'s mut Option<F>>,
) -> RunCut<'s, A, F> {
    state.begin();
    RunCut {
        #[cfg(feature = "tracing")]
        span: state.span().clone(),
        #[cfg(not(feature = "tracing"))]
        span: (),
        state,
        attempt,
        shared: None,
        timer: cut.map(|cut| crate::time::timer::RuntimeClock::current().cut(cut)),
    }
}

/// The call's span, which [`RunCut`] enters around each poll (nothing
/// without `tracing`).
#[cfg(all(
    feature = "tracing",
    any(feature = "tokio", feature = "async-io", feature = "custom-timer")
))]
type RunSpan = tracing::Span;
#[cfg(all(
    not(feature = "tracing"),
    any(feature = "tokio", feature = "async-io", feature = "custom-timer")
))]
type RunSpan = ();

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
pin_project_lite::pin_project! {
    /// The future of [`run_cut`].
    struct RunCut<'s, A, F> {
        state: &'s mut A,
        attempt: std::pin::Pin<&'s mut Option<F>>,
        shared: Option<crate::run::scope::Carried>,
        #[pin]
        timer: Option<crate::time::timer::Sleep>,
        span: RunSpan,
    }
}

#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
impl<A: Attempts, F: Future> Future for RunCut<'_, A, F> {
    type Output = Result<F::Output, crate::Elapsed>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        task: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        #[cfg(feature = "tracing")]
        let _span = this.span.enter();
        #[cfg(not(feature = "tracing"))]
        let &mut () = this.span;
        let attempt = this.attempt;
        // The attempt first, then its timer (as a timeout polls them): an
        // attempt that answers as its time runs out is its answer. (The
        // timer says when it cuts the attempt off: the frame's deadline,
        // if sooner than the call's.)
        let timer = this.timer.as_ref().get_ref().as_ref();
        let polled = poll_framed(*this.state, this.shared, timer, || {
            match attempt.as_mut().as_pin_mut() {
                Some(body) => body.poll(task),
                None => std::task::Poll::Pending,
            }
        });
        if let std::task::Poll::Ready(out) = polled {
            return std::task::Poll::Ready(Ok(out));
        }
        match this
            .timer
            .as_mut()
            .as_pin_mut()
            .map(|timer| timer.poll(task))
        {
            Some(std::task::Poll::Ready(())) => {
                let timer = this.timer.as_ref().get_ref().as_ref();
                poll_framed(*this.state, this.shared, timer, || attempt.set(None));
                std::task::Poll::Ready(Err(crate::time::timer::cut_off(crate::Elapsed::new())))
            }
            _ => std::task::Poll::Pending,
        }
    }
}

/// One poll of an attempt for `state`, in the attempt's frame. The frame
/// is built from the state at every poll (it is a few words): only the flag
/// of work carried out of the attempt, once there is some, is kept between
/// polls, in `shared`.
#[inline]
fn poll_framed<R>(
    state: &mut impl Attempts,
    shared: &mut Option<crate::run::scope::Carried>,
    timer: Option<&crate::time::timer::Sleep>,
    poll: impl FnOnce() -> R,
) -> R {
    let mut scope = state
        .scope()
        .carrying(shared.take(), state.retried_below())
        .cut_by(timer);
    let out = scope.enter(poll);
    // After every poll: an attempt cancelled midway (timed out, or
    // dropped) keeps the key it drew for the next one, and a nested call
    // that gave up after retrying is not forgotten.
    state.keep(scope.call(), scope.retried_below());
    *shared = scope.into_shared();
    out
}

/// How long an attempt may run under `timeout` in a call with `deadline`:
/// see [`AttemptState::attempt_limit`].
fn attempt_limit(deadline: Option<Instant>, clock: &impl Clock, timeout: Duration) -> Duration {
    match deadline {
        Some(deadline) => {
            let left = deadline.saturating_duration_since(clock.now());
            timeout.min(left.saturating_sub(clock.sleep_slack()))
        }
        None => timeout,
    }
}

/// How long an attempt may run under `policy`'s own attempt timeout:
/// see [`AttemptState::attempt_limit_of`].
fn attempt_limit_of(
    deadline: Option<Instant>,
    clock: &impl Clock,
    policy: &Policy,
    applies: bool,
) -> Option<Duration> {
    policy::check_attempt_timeout_applied(policy, applies);
    policy
        .attempt_timeout
        .filter(|_| applies)
        .map(|timeout| attempt_limit(deadline, clock, timeout))
}

/// Records a call that started at `start` on `budget` if that is a
/// windowed budget, once: `recorded` says it was.
#[inline]
fn record_once(
    recorded: &mut bool,
    budget: Option<BudgetRef<'_>>,
    start: impl FnOnce() -> Instant,
) {
    if let Some(BudgetRef::Window(budget)) = budget
        && !std::mem::replace(recorded, true)
    {
        budget.record_call(start());
    }
}

/// An attempt of a call that started at `start` was answered (a success,
/// or an error no retry can fix): a token budget is credited. The one
/// rule for the state machine and for a first attempt decided without it.
#[inline]
fn credit_answer(budget: Option<BudgetRef<'_>>, start: impl FnOnce() -> Moment) {
    if let Some(BudgetRef::Token(throttle)) = budget {
        throttle.answered_at(start);
    }
}

/// When a call under `policy` starts, and its deadline: its own, or the
/// enclosing call's if that is sooner.
#[inline]
fn start_and_deadline(policy: &Policy, clock: &impl Clock) -> (Instant, Option<Instant>) {
    // The coarse clock, as `anchor_and_deadline` reads it; the start is
    // kept, so that it is not found again by a subtraction.
    let start = match policy.deadline {
        Some(deadline) if deadline < PRECISE_START_BELOW => clock.now(),
        _ => clock.start_now(),
    };
    let own = policy.deadline.and_then(|d| start.checked_add(d));
    (start, within_enclosing(own))
}

/// When a call under `policy` starts, as a call keeps it until its first
/// attempt is decided (the anchor), and its deadline: its own, or the
/// enclosing call's if that is sooner. The anchor is the call's own
/// deadline if it has one (`true`), read and added up in one step
/// ([`Clock::start_now_plus`]: one `Instant` made rather than two), and
/// its start otherwise; [`start_of`] gives the start back.
///
/// A call whose budget needs its start at once (a windowed budget records
/// the call as it starts) is anchored at its start: `may_anchor` is
/// `false` for it.
#[inline]
fn anchor_and_deadline(
    policy: &Policy,
    clock: &impl Clock,
    may_anchor: bool,
) -> (Instant, bool, Option<Instant>) {
    if !may_anchor {
        let (start, deadline) = start_and_deadline(policy, clock);
        return (start, false, deadline);
    }
    // The coarse clock: the only read a call whose first attempt succeeds
    // makes. Never late, so the deadline is never late either; but it
    // trails by milliseconds, too much for a deadline of a few.
    let own = match policy.deadline {
        Some(deadline) if deadline < PRECISE_START_BELOW => clock.now().checked_add(deadline),
        Some(deadline) => clock.start_now_plus(deadline),
        None => None,
    };
    let (anchor, anchored) = match own {
        Some(own) => (own, true),
        None => (clock.start_now(), false),
    };
    (anchor, anchored, within_enclosing(own))
}

/// A call's deadline: its own, or the enclosing call's if that is sooner
/// (a call made inside another's attempt never outlives that call).
#[inline]
fn within_enclosing(own: Option<Instant>) -> Option<Instant> {
    match (own, scope::enclosing_deadline()) {
        (Some(own), Some(enclosing)) => Some(own.min(enclosing)),
        (own, enclosing) => own.or(enclosing),
    }
}

/// The start of a call under `policy` whose anchor is `anchor`
/// ([`anchor_and_deadline`]).
#[inline]
fn start_of(anchor: Instant, anchored: bool, policy: &Policy) -> Instant {
    match policy.deadline {
        // The sum was made: the difference is exact.
        Some(deadline) if anchored => anchor.checked_sub(deadline).unwrap_or(anchor),
        _ => anchor,
    }
}

impl<C, P> fmt::Debug for AttemptState<'_, C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttemptState")
            .field("attempt", &self.done.saturating_add(1))
            .field("start", &self.start)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// What [`AttemptState::budget`]
/// takes: `Some(&throttle)`, `Some(&budget)`, `Some(budget_ref)`, or a
/// `None` of any of them.
pub trait IntoBudget<'a> {
    /// The budget, if any.
    fn into_budget(self) -> Option<BudgetRef<'a>>;
}

impl<'a> IntoBudget<'a> for Option<BudgetRef<'a>> {
    fn into_budget(self) -> Option<BudgetRef<'a>> {
        self
    }
}

impl<'a> IntoBudget<'a> for Option<&'a WindowBudget> {
    fn into_budget(self) -> Option<BudgetRef<'a>> {
        self.map(BudgetRef::Window)
    }
}

impl<'a> IntoBudget<'a> for Option<&'a TokenBudget> {
    fn into_budget(self) -> Option<BudgetRef<'a>> {
        self.map(BudgetRef::Token)
    }
}
