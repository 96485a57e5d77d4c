//! A call before its first attempt is decided: what `#[retry]` holds.
//!
//! Most calls succeed at once. Such a call needs its start, its deadline,
//! its attempt's frame and a word of the throttle, not the twenty fields
//! of an [`AttemptState`]: a [`Call`] holds only those until its first
//! attempt fails, and only then becomes the state machine, which decides
//! that failure as if it had been there from the start.

use std::time::{Duration, Instant};

use super::{AttemptState, Attempts, run_pinned, run_sync, start_and_deadline};
use crate::budget::BudgetRef;
use crate::clock::Clock;
use crate::context::{CallContext, Scope};
use crate::observe::{Function, Observe};
use crate::policy::Policy;
use crate::vocabulary::{Attempted, Decision};

/// One call of a `#[retry]` function: an [`AttemptState`] made only when
/// the first attempt fails. Not a public API.
#[doc(hidden)]
pub struct Call<'a, C>(Phase<'a, C>);

enum Phase<'a, C> {
    /// The first attempt has not been decided yet.
    First(First<'a, C>),
    /// It failed: the state machine decides from here on.
    Going(AttemptState<'a, C>),
    /// Between the two, while the first becomes the second (never seen).
    Moving,
}

/// What a call keeps until its first attempt is decided: the fields of an
/// [`AttemptState`] that attempt reads or writes.
struct First<'a, C> {
    policy: &'a Policy,
    budget: Option<BudgetRef<'a>>,
    clock: C,
    start: Instant,
    deadline: Option<Instant>,
    /// What the attempt left to the call (its idempotency key, once drawn).
    call: CallContext,
    /// A call nested in the attempt gave up after retrying.
    retried_below: bool,
    /// The call has been recorded on the budget.
    recorded: bool,
    obs: Observe,
}

impl<'a, C: Clock> Call<'a, C> {
    /// Starts a call of `function` under `policy`, drawing on `budget`:
    /// as `AttemptState::new(policy, clock).budget(budget).function(function)`
    /// does, reading the same clock once.
    #[inline]
    pub fn new(
        policy: &'a Policy,
        clock: C,
        budget: Option<BudgetRef<'a>>,
        function: &'static Function,
    ) -> Self {
        let (start, deadline) = start_and_deadline(policy, &clock);
        let mut obs = Observe::new();
        obs.set_function(function);
        Self(Phase::First(First {
            policy,
            budget,
            clock,
            start,
            deadline,
            call: CallContext::default(),
            retried_below: false,
            recorded: false,
            obs,
        }))
    }

    /// A call that needs the whole state machine from its first attempt
    /// (behind a breaker or an adaptive throttle).
    pub fn from_state(state: AttemptState<'a, C>) -> Self {
        Self(Phase::Going(state))
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

    /// The state machine, made now if the first attempt has not been
    /// decided yet.
    #[inline]
    pub fn state(&mut self) -> &mut AttemptState<'a, C> {
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
        self.0 = match std::mem::replace(&mut self.0, Phase::Moving) {
            Phase::First(first) => Phase::Going(first.into_state()),
            other => other,
        };
    }
}

/// Attempt 1, as the state machine runs it without a breaker or an
/// adaptive throttle.
impl<C: Clock> Attempts for First<'_, C> {
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
impl<C: Clock> Attempts for Call<'_, C> {
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
            Phase::Going(state) => Attempts::scope(state),
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
            Phase::Going(state) => state.span(),
            Phase::Moving => unreachable!("{MOVING}"),
        }
    }
}

const MOVING: &str = "a call is first or going but for the instant between";

impl<'a, C: Clock> First<'a, C> {
    /// [`AttemptState::decide`] for a first attempt that succeeded.
    #[inline]
    fn succeeded(&mut self) -> Decision {
        self.record_call();
        if let Some(BudgetRef::Throttle(throttle)) = self.budget {
            throttle.answered(self.start);
        }
        self.obs.decided(1, Decision::Return, None);
        Decision::Return
    }

    /// As [`AttemptState::record_call`].
    #[inline]
    fn record_call(&mut self) {
        super::record_once(&mut self.recorded, self.budget, self.start);
    }

    /// The state machine, as if it had run the first attempt itself.
    fn into_state(self) -> AttemptState<'a, C> {
        let mut state = AttemptState::started(
            self.policy,
            self.budget,
            self.clock,
            self.start,
            self.deadline,
            self.obs,
        );
        state.call = self.call;
        state.retried_below = self.retried_below;
        state.recorded = self.recorded;
        state
    }
}

impl<C> std::fmt::Debug for Call<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Phase::Going(state) => state.fmt(f),
            Phase::First(first) => f
                .debug_struct("AttemptState")
                .field("attempt", &1)
                .field("start", &first.start)
                .field("deadline", &first.deadline)
                .finish_non_exhaustive(),
            Phase::Moving => f.write_str("AttemptState"),
        }
    }
}
