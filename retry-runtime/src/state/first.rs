//! A call before its first attempt is decided: what `#[retry]` holds.
//!
//! Most calls succeed at once. Such a call needs its start, its deadline,
//! its attempt's frame and a word of the throttle, not the twenty fields
//! of an [`AttemptState`]: a [`Call`] holds only those until its first
//! attempt fails, and only then becomes the state machine, which decides
//! that failure as if it had been there from the start.

use std::time::{Duration, Instant};

use super::{
    AttemptState, Attempts, HoldsPolicy, anchor_and_deadline, run_pinned, run_sync, start_of,
};
use crate::limit::BudgetRef;
use crate::run::observe::{Function, GiveUpEvent, Observe, RetryEvent, Show};
use crate::run::scope::{CallContext, Scope};
use crate::state::policy::Policy;
use crate::state::vocabulary::{Attempted, Decision};
use crate::time::clock::{Clock, Moment};

/// One call of a `#[retry]` function: an [`AttemptState`] made only when
/// the first attempt fails. Not a public API.
#[doc(hidden)]
pub struct Call<'a, C, P = &'a Policy, S = InPlace<AttemptState<'a, C, P>>>(Phase<'a, C, P, S>);

/// Where a [`Call`] keeps the state machine once it is made: in place
/// ([`InPlace`]: `#[retry]`'s, whose future does not move once it runs), or
/// boxed (the driver's, which its callers move before polling: the box
/// keeps the future small).
pub trait Holds<'a, C, P>:
    std::ops::DerefMut<Target = AttemptState<'a, C, P>> + From<AttemptState<'a, C, P>>
{
}

impl<'a, C, P, S> Holds<'a, C, P> for S where
    S: std::ops::DerefMut<Target = AttemptState<'a, C, P>> + From<AttemptState<'a, C, P>>
{
}

/// A value kept where it is (the [`Holds`] without a box). Not a public
/// API.
#[doc(hidden)]
pub struct InPlace<T>(T);

impl<T> From<T> for InPlace<T> {
    #[inline]
    fn from(value: T) -> Self {
        Self(value)
    }
}

impl<T> std::ops::Deref for InPlace<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for InPlace<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

enum Phase<'a, C, P, S> {
    /// The first attempt has not been decided yet.
    First(First<'a, C, P>),
    /// It failed: the state machine decides from here on.
    Going(S),
    /// Between the two, while the first becomes the second (never seen).
    Moving,
}

/// What a call keeps until its first attempt is decided: the fields of an
/// [`AttemptState`] that attempt reads or writes.
// Its flags are the state machine's own, each read on its own; packed in
// a byte each beside the rest, the future of an async call stays small.
#[allow(clippy::struct_excessive_bools)]
struct First<'a, C, P> {
    policy: P,
    budget: Option<BudgetRef<'a>>,
    clock: C,
    /// When the call started, or its own deadline if `anchored`
    /// ([`start`](Self::start) gives the start).
    anchor: Instant,
    deadline: Option<Instant>,
    /// What the attempt left to the call (its idempotency key, once drawn).
    call: CallContext,
    /// A call nested in the attempt gave up after retrying.
    retried_below: bool,
    /// The call has been recorded on the budget.
    recorded: bool,
    /// The attempt has been decided (it succeeded).
    decided: bool,
    /// `anchor` is the call's own deadline.
    anchored: bool,
    obs: Observe,
}

impl<'a, C: Clock> Call<'a, C> {
    /// Starts a call of `function` under `policy`, drawing on `budget` as
    /// it is (`#[retry]` has asked [`own`](crate::testing::own) for it):
    /// as `AttemptState::new(policy, clock).budget(budget).function(function)`
    /// does, reading the same clock once.
    #[inline]
    pub fn new(
        policy: &'a Policy,
        clock: C,
        budget: Option<BudgetRef<'a>>,
        function: &'static Function,
    ) -> Self {
        Self::first(policy, budget, clock, |obs| obs.set_function(function))
    }

    /// [`new`](Self::new), for a call that gave a key (its hash).
    #[inline]
    pub fn keyed(
        policy: &'a Policy,
        clock: C,
        budget: Option<BudgetRef<'a>>,
        function: &'static Function,
        key: Option<u64>,
    ) -> Self {
        Self::first(policy, budget, clock, |obs| {
            obs.set_function(function);
            obs.set_key(key);
        })
    }

    /// A call that needs the whole state machine from its first attempt
    /// (behind a breaker or an adaptive throttle).
    pub fn from_state(state: AttemptState<'a, C>) -> Self {
        Self::gated(state)
    }
}

impl<'a, C: Clock, P: HoldsPolicy, S: Holds<'a, C, P>> Call<'a, C, P, S> {
    /// Starts a call under `policy`, drawing on `budget`, reported as
    /// `named` names it: its first attempt not decided yet.
    #[inline]
    pub(crate) fn first(
        policy: P,
        budget: Option<BudgetRef<'a>>,
        clock: C,
        named: impl FnOnce(&mut Observe),
    ) -> Self {
        let may_anchor = !matches!(budget, Some(BudgetRef::Window(_)));
        let (anchor, anchored, deadline) = anchor_and_deadline(policy.get(), &clock, may_anchor);
        let mut obs = Observe::new();
        named(&mut obs);
        Self(Phase::First(First {
            policy,
            budget,
            clock,
            anchor,
            deadline,
            call: CallContext::default(),
            retried_below: false,
            recorded: false,
            decided: false,
            anchored,
            obs,
        }))
    }

    /// A call that needs the whole state machine from its first attempt
    /// (behind a breaker or an adaptive throttle), kept as `S` keeps it.
    pub(crate) fn gated(state: AttemptState<'a, C, P>) -> Self {
        Self(Phase::Going(state.into()))
    }

    /// Runs one sync attempt: [`AttemptState::run_attempt`].
    #[inline]
    pub fn run_attempt<R>(&mut self, attempt: impl FnOnce() -> R) -> R {
        match &mut self.0 {
            Phase::First(first) => run_sync(first, attempt),
            _ => run_sync(self.state(), attempt),
        }
    }

    /// Runs one async attempt: [`AttemptState::run_attempt_pinned`].
    #[inline]
    pub fn run_attempt_pinned<'s, F: Future>(
        &'s mut self,
        attempt: std::pin::Pin<&'s mut F>,
    ) -> impl Future<Output = F::Output> + 's {
        run_pinned(self, attempt)
    }

    /// Runs one async attempt, cut off after `cut` if given (`Err`: it ran
    /// out), and then dropped in its own frame, as it ran (`#[retry]` with
    /// an `attempt_timeout`, its own or its policy's; `attempt` is `Some`
    /// until then).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[doc(hidden)]
    pub fn run_attempt_cut<'s, F: Future>(
        &'s mut self,
        cut: Option<Duration>,
        attempt: std::pin::Pin<&'s mut Option<F>>,
    ) -> impl Future<Output = Result<F::Output, crate::Elapsed>> + 's {
        super::run_cut(self, cut, attempt)
    }

    /// Decides after an attempt: [`AttemptState::decide`]. A first
    /// attempt that succeeded ends the call here; one that failed makes
    /// the state machine, which decides it.
    #[inline]
    pub fn decide(&mut self, attempted: Attempted) -> Decision {
        match (&mut self.0, attempted) {
            (Phase::First(first), Attempted::Succeeded) => first.succeeded(),
            _ => self.decide_in_state(attempted),
        }
    }

    /// Out of line: the call's path on success stays short.
    #[inline(never)]
    fn decide_in_state(&mut self, attempted: Attempted) -> Decision {
        self.state().decide(attempted)
    }

    /// [`decide`](Self::decide), the error of `outcome` shown in the
    /// events as `W` (given as its value) shows it.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide_shown<T, E, W: Show<T, E>>(
        &mut self,
        attempted: Attempted,
        outcome: Result<&T, &E>,
        _: W,
    ) -> Decision {
        match (&mut self.0, attempted) {
            (Phase::First(first), Attempted::Succeeded) => first.succeeded(),
            _ if W::SHOWS => self.decide_in_state_shown::<T, E, W>(attempted, outcome),
            _ => self.decide_in_state(attempted),
        }
    }

    /// Out of line, as [`decide_in_state`](Self::decide_in_state).
    #[inline(never)]
    fn decide_in_state_shown<T, E, W: Show<T, E>>(
        &mut self,
        attempted: Attempted,
        outcome: Result<&T, &E>,
    ) -> Decision {
        self.state().decide_showing(attempted, W::shown(outcome))
    }

    /// Decides after an attempt and tells the hooks:
    /// [`AttemptState::decided`]. A first attempt that succeeded ends the
    /// call here; without hooks, nothing is added to the decision. `show`
    /// shows an error in the call's `tracing` events, if the error type
    /// can be shown ([`DisplayOf`](crate::macro_support::DisplayOf)), and
    /// the status of a success judged a failure, if it has one
    /// ([`StatusOf`](crate::macro_support::StatusOf)).
    // Always inlined: out of line, the sync loop's failing call pays a
    // call per attempt (three failures, then Ok: 4,433 → 4,550).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn decided<T, E>(
        &mut self,
        outcome: Result<&T, &E>,
        attempted: Attempted,
        show: impl Show<T, E>,
        on_retry: Option<impl FnOnce(&RetryEvent<'_, T, E>)>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> Option<Duration> {
        // The match of `AttemptState::told`, written out: calling it through
        // `self.state()` costs the success path 16 instructions (cachegrind).
        match self.decide_shown(attempted, outcome, show) {
            Decision::Retry(delay) => {
                if let Some(hook) = on_retry {
                    self.state().tell_retry(outcome, delay, hook);
                }
                Some(delay)
            }
            Decision::GiveUp(reason) => {
                if let Some(hook) = on_give_up {
                    self.state().tell_give_up(outcome, reason, hook);
                }
                None
            }
            Decision::Return => None,
        }
    }

    /// [`decided`](Self::decided), by a loop that drops the outcome before
    /// its sleep: `may_hold` says whether it can give an `Elapsed` error
    /// in its place if the call is held and gives up at its deadline
    /// ([`AttemptState::set_may_hold`]).
    #[inline]
    pub fn decided_holding<T, E>(
        &mut self,
        outcome: Result<&T, &E>,
        attempted: Attempted,
        show: impl Show<T, E>,
        on_retry: Option<impl FnOnce(&RetryEvent<'_, T, E>)>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
        may_hold: bool,
    ) -> Option<Duration> {
        if !may_hold && attempted != Attempted::Succeeded {
            self.state().set_may_hold(false);
        }
        self.decided(outcome, attempted, show, on_retry, on_give_up)
    }

    /// After the sleep of a retry, by a loop that dropped the outcome
    /// before it: still held ([`AttemptState::held`]: `Ok(wait)`), or
    /// gone, with the `Elapsed` the call gives up with in the outcome's
    /// place: a held call's at its deadline or the budget's ride-out, or a
    /// call's whose deadline came while it slept ([`AttemptState::late`]).
    /// `None`: the next attempt may start.
    #[inline]
    pub fn after_sleep(&mut self) -> Option<Result<Duration, crate::Elapsed>> {
        match &mut self.0 {
            Phase::Going(state) => match state.held() {
                Some(Ok(wait)) => Some(Ok(wait)),
                Some(Err(reason)) => Some(Err(crate::Elapsed::held(reason))),
                None if state.late() => Some(Err(crate::Elapsed::late(state.last_refused()))),
                None => None,
            },
            _ => None,
        }
    }

    /// After the sleep of a sync loop: [`AttemptState::resumed`].
    #[inline]
    pub fn resumed<T, E>(
        &mut self,
        outcome: Result<&T, &E>,
        show: impl Show<T, E>,
        on_give_up: Option<impl FnOnce(&GiveUpEvent<'_, T, E>)>,
    ) -> bool {
        self.state().resumed(outcome, show, on_give_up)
    }

    /// How long the next attempt may run: [`AttemptState::attempt_limit`].
    pub fn attempt_limit(&self, timeout: Duration) -> Duration {
        match &self.0 {
            Phase::First(first) => super::attempt_limit(first.deadline, &first.clock, timeout),
            Phase::Going(state) => state.attempt_limit(timeout),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    /// How long the next attempt may run under `policy`'s own attempt
    /// timeout: [`AttemptState::attempt_limit_of`].
    pub fn attempt_limit_of(&self, policy: &Policy, applies: bool) -> Option<Duration> {
        match &self.0 {
            Phase::First(first) => {
                super::attempt_limit_of(first.deadline, &first.clock, policy, applies)
            }
            Phase::Going(state) => state.attempt_limit_of(policy, applies),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    /// Ends the call if this is a first attempt whose outcome is `Ok` and
    /// no `when_ok` judges: as [`decided`](Self::decided) would, answering
    /// `None` and telling no hook. Whether it did: `#[retry]`'s path on
    /// success, which makes no verdict.
    #[inline]
    pub fn first_ok(&mut self) -> bool {
        self.first_succeeded(Attempted::Succeeded)
    }

    /// Ends the call if this is a first attempt that `attempted` says
    /// succeeded (as [`decide`](Self::decide) would, answering `Return`):
    /// whether it did. The driver's path on success.
    #[inline]
    pub(crate) fn first_succeeded(&mut self, attempted: Attempted) -> bool {
        match (&mut self.0, attempted) {
            (Phase::First(first), Attempted::Succeeded) => {
                first.succeeded();
                true
            }
            _ => false,
        }
    }

    /// An async attempt starts (the driver's): counted, sent, reported.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[inline]
    pub(crate) fn begin_attempt(&mut self) {
        Attempts::begin(self);
    }

    /// The state machine, if it has been made.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn going(&mut self) -> Option<&mut AttemptState<'a, C, P>> {
        match &mut self.0 {
            Phase::Going(state) => Some(state),
            _ => None,
        }
    }

    /// One poll of the async attempt running now, in its frame:
    /// [`AttemptState::poll_framed`].
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[inline]
    pub(crate) fn poll_framed<R>(
        &mut self,
        shared: &mut Option<crate::run::scope::Carried>,
        timer: Option<&crate::time::timer::Sleep>,
        poll: impl FnOnce() -> R,
    ) -> R {
        super::poll_framed(self, shared, timer, poll)
    }

    /// The request cannot be sent again (settled after an attempt, for
    /// good): only then does the state machine need to know it (it starts
    /// replayable).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[inline]
    pub(crate) fn set_unreplayable(&mut self) {
        self.state().set_replayable(false);
    }

    /// The call's span.
    #[cfg(all(
        any(feature = "tokio", feature = "async-io", feature = "custom-timer"),
        feature = "tracing"
    ))]
    pub(crate) fn call_span(&self) -> &tracing::Span {
        Attempts::span(self)
    }

    /// The state machine, made now if the first attempt has not been
    /// decided yet.
    #[inline]
    pub fn state(&mut self) -> &mut AttemptState<'a, C, P> {
        if let Phase::First(_) = self.0 {
            self.promote();
        }
        match &mut self.0 {
            Phase::Going(state) => state,
            _ => unreachable!("{MOVING}"),
        }
    }

    /// The first attempt failed (or something only the state machine
    /// answers was asked): make it.
    #[cold]
    #[inline(never)]
    fn promote(&mut self) {
        let Phase::First(first) = &self.0 else {
            return;
        };
        // Read before the move: the state is then made in its place.
        let start = start_of(first.anchor, first.anchored, first.policy.get());
        self.0 = match std::mem::replace(&mut self.0, Phase::Moving) {
            Phase::First(first) => Phase::Going(first.into_state(start).into()),
            other => other,
        };
    }
}

/// Attempt 1, as the state machine runs it without a breaker or an
/// adaptive throttle.
impl<C: Clock, P: HoldsPolicy> Attempts for First<'_, C, P> {
    #[inline]
    fn begin(&mut self) {
        self.record_call();
        self.obs.started(1);
        self.retried_below = false;
    }

    #[inline]
    fn scope(&self) -> Scope {
        Scope::new(self.call, 1, self.deadline, self.clock.now_fn())
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

/// For an async attempt, whose future holds the call: its phase does not
/// change while the attempt runs.
impl<'a, C: Clock, P: HoldsPolicy, S: Holds<'a, C, P>> Attempts for Call<'a, C, P, S> {
    #[inline]
    fn begin(&mut self) {
        match &mut self.0 {
            Phase::First(first) => first.begin(),
            Phase::Going(state) => state.begin(),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    #[inline]
    fn scope(&self) -> Scope {
        match &self.0 {
            Phase::First(first) => first.scope(),
            Phase::Going(state) => Attempts::scope(&**state),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    #[inline]
    fn retried_below(&self) -> bool {
        match &self.0 {
            Phase::First(first) => first.retried_below,
            Phase::Going(state) => state.retried_below,
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    #[inline]
    fn keep(&mut self, call: CallContext, retried_below: bool) {
        match &mut self.0 {
            Phase::First(first) => first.keep(call, retried_below),
            Phase::Going(state) => state.keep(call, retried_below),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }

    #[cfg(feature = "tracing")]
    fn span(&self) -> &tracing::Span {
        match &self.0 {
            Phase::First(first) => first.span(),
            Phase::Going(state) => Attempts::span(&**state),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }
}

const MOVING: &str = "a call is first or going but for the instant between";

impl<'a, C: Clock, P: HoldsPolicy> First<'a, C, P> {
    /// [`AttemptState::decide`] for a first attempt that succeeded, without
    /// a breaker or an adaptive throttle: the call is recorded (if it was
    /// not), the throttle credited, the end reported.
    // Always inlined: rustc keeps it out of line otherwise (the async
    // call's success path: 362 → 382 instructions).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn succeeded(&mut self) -> Decision {
        self.record_call();
        super::credit_answer(self.budget, || self.began());
        self.decided = true;
        self.obs.returned(1);
        // A nested call gave up after retrying in the attempt, and the
        // call returns what it made of it: the enclosing call is told.
        if self.retried_below {
            passed_up();
        }
        Decision::Return
    }

    /// As [`AttemptState::record_call`].
    #[inline]
    fn record_call(&mut self) {
        // (A call with a windowed budget is anchored at its start.)
        let (anchor, anchored, policy) = (self.anchor, self.anchored, &self.policy);
        super::record_once(&mut self.recorded, self.budget, || {
            start_of(anchor, anchored, policy.get())
        });
    }

    /// When the call started, as the limiters read it: the anchor, less
    /// the deadline it is if it is one (no `Instant` subtraction).
    #[inline]
    fn began(&self) -> Moment {
        match self.policy.get().deadline {
            Some(deadline) if self.anchored => Moment::less(self.anchor, deadline),
            _ => self.anchor.into(),
        }
    }

    /// The state machine, as if it had run the first attempt itself,
    /// for a call that started at `start`.
    fn into_state(self, start: Instant) -> AttemptState<'a, C, P> {
        let Self {
            policy,
            budget,
            clock,
            deadline,
            call,
            retried_below,
            recorded,
            decided,
            obs,
            ..
        } = self;
        let mut state = AttemptState::started(policy, budget, clock, start, deadline, obs);
        state.call = call;
        state.retried_below = retried_below;
        state.recorded = recorded;
        state.done = u32::from(decided);
        state
    }
}

/// Tells the enclosing call that a call nested in this one's attempt gave
/// up after retrying. Out of line, as rare.
#[cold]
#[inline(never)]
fn passed_up() {
    crate::run::scope::note_retried_below();
}

impl<C, P: HoldsPolicy> First<'_, C, P> {
    /// When the call started: made by a subtraction, for its `Debug`.
    fn start(&self) -> Instant {
        start_of(self.anchor, self.anchored, self.policy.get())
    }
}

impl<'a, C, P: HoldsPolicy, S: std::ops::Deref<Target = AttemptState<'a, C, P>>> std::fmt::Debug
    for Call<'a, C, P, S>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Phase::Going(state) => f.debug_tuple("Call").field(&**state).finish(),
            Phase::First(first) => f
                .debug_struct("Call")
                .field("attempt", &(u32::from(first.decided) + 1))
                .field("start", &first.start())
                .field("deadline", &first.deadline)
                .finish_non_exhaustive(),
            Phase::Moving => f.write_str("Call"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::classify::Verdict;
    use crate::limit::{TokenBudget, WindowBudget};
    use crate::run::scope as context;

    static FUNCTION: Function = Function::new("tests::call");

    /// A clock standing still.
    #[derive(Clone, Copy)]
    struct Still(Instant);

    impl Clock for Still {
        fn now(&self) -> Instant {
            self.0
        }
    }

    fn still() -> Still {
        Still(Instant::now())
    }

    fn failed() -> Attempted {
        Attempted::Failed(Verdict::Retry)
    }

    #[test]
    fn a_failed_first_attempt_makes_the_state_machine_with_what_it_left() {
        let budget = WindowBudget::new(1.0, 10, Duration::from_secs(10));
        let policy = Policy::new().attempts(3).base(Duration::from_millis(1));
        let mut call = Call::new(
            &policy,
            still(),
            Some(BudgetRef::Window(&budget)),
            &FUNCTION,
        );
        let key = call.run_attempt(|| {
            // A nested call gave up after retrying inside this attempt.
            context::note_retried_below();
            context::context().map(|cx| cx.idempotency_key())
        });
        assert!(matches!(call.0, Phase::First(_)));
        // The nested call's give-up holds: no retry on top of it.
        assert_eq!(
            call.decide(failed()),
            Decision::GiveUp(crate::state::vocabulary::GiveUp::RetriedBelow)
        );
        let state = call.state();
        assert_eq!(state.attempt(), 2);
        assert_eq!(
            budget.stats().calls,
            1,
            "recorded once, by the first attempt"
        );
        // The key drawn in attempt 1 is the call's.
        let again = state.run_attempt(|| context::context().map(|cx| cx.idempotency_key()));
        assert_eq!(again, key);
        assert_eq!(budget.stats().calls, 1);
    }

    #[test]
    fn a_first_attempt_that_succeeds_credits_the_token_budget_and_ends_the_call() {
        let throttle = TokenBudget::new(10, 1.0);
        let now = Instant::now();
        // Two failures: 8 tokens of 10.
        assert!(throttle.failed(now));
        assert!(throttle.failed(now));
        let policy = Policy::new();
        let mut call = Call::new(
            &policy,
            still(),
            Some(BudgetRef::Token(&throttle)),
            &FUNCTION,
        );
        assert_eq!(call.run_attempt(|| 7), 7);
        assert_eq!(call.decide(Attempted::Succeeded), Decision::Return);
        let tokens = throttle.tokens();
        assert!(
            (tokens - 9.0).abs() < 1e-9,
            "one answer, a whole token at ratio 1: {tokens}"
        );
        assert!(format!("{call:?}").starts_with("Call { attempt: 2,"));
        // Asked for the state machine afterwards, it counts the attempt.
        assert_eq!(call.state().attempt(), 2);
    }

    /// A call with a deadline keeps its deadline until its first attempt
    /// is decided, and its start is given back from it exactly.
    #[test]
    fn a_call_with_a_deadline_keeps_its_start_exactly() {
        let clock = still();
        let token = TokenBudget::new(10, 1.0);
        let window = WindowBudget::new(1.0, 10, Duration::from_secs(10));
        let budgets = [
            None,
            Some(BudgetRef::Token(&token)),
            Some(BudgetRef::Window(&window)),
        ];
        for budget in budgets {
            for deadline in [Duration::from_millis(300), Duration::from_secs(30)] {
                let policy = Policy::new()
                    .deadline(Some(deadline))
                    .base(Duration::from_millis(1));
                let mut call = Call::new(&policy, clock, budget, &FUNCTION);
                // Kept as its deadline, but on a windowed budget, which
                // records the call at its start.
                let Phase::First(first) = &call.0 else {
                    panic!("a call starts in its first phase");
                };
                let windowed = matches!(budget, Some(BudgetRef::Window(_)));
                assert_eq!(first.anchored, !windowed);
                assert!(format!("{call:?}").contains(&format!("start: {:?}", clock.0)));
                call.run_attempt(|| ());
                assert!(matches!(call.decide(failed()), Decision::Retry(_)));
                let state = call.state();
                assert_eq!(state.start(), clock.0);
                assert_eq!(state.deadline(), Some(clock.0 + deadline));
            }
        }
    }

    #[test]
    fn attempt_limits_are_the_state_machines_in_either_phase() {
        let policy = Policy::new()
            .deadline(Some(Duration::from_secs(2)))
            .attempt_timeout(Some(Duration::from_secs(5)));
        let mut call = Call::new(&policy, still(), None, &FUNCTION);
        let first = (
            call.attempt_limit(Duration::from_secs(5)),
            call.attempt_limit_of(&policy, true),
        );
        let state = call.state();
        let going = (
            state.attempt_limit(Duration::from_secs(5)),
            state.attempt_limit_of(&policy, true),
        );
        assert_eq!(first, going);
        assert_eq!(
            first,
            (Duration::from_secs(2), Some(Duration::from_secs(2))),
            "the deadline is nearer than the timeout"
        );
        assert_eq!(call.attempt_limit_of(&policy, false), None);
    }
}
