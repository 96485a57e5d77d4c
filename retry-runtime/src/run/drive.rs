//! The async retry loop, once: [`Drive`], a future that runs a call's
//! attempts (one at a time, or in hedged rounds), sleeps between them and
//! gives up as the state machine decides. `Retry::call_async`, the tower
//! layer and the reqwest middleware each give it an [`Operation`]: how an
//! attempt is made, and what the call keeps of it. `#[retry]` writes its
//! loop inline (its attempts borrow the function's arguments) around the
//! same steps.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crate::classify::Verdict;
use crate::limit::BudgetRef;
use crate::run::Steps;
use crate::run::observe::Shown;
use crate::run::scope::Carried;
use crate::state::hedged::Round;
use crate::state::policy::Policy;
use crate::state::vocabulary::{Attempted, Elapsed};
use crate::state::{AttemptState, Call, GiveUp, HoldsPolicy};
use crate::time::timer::{Cut, RuntimeClock, Sleep};

/// How a [`Drive`] holds the loop it runs: borrowed, or shared with an
/// integration's other calls.
pub(crate) trait Lends {
    /// The loop (a `Retry`).
    type Loop: ?Sized;
    /// The loop, for a step.
    fn lent(&self) -> &Self::Loop;
}

impl<R: ?Sized> Lends for &R {
    type Loop = R;

    fn lent(&self) -> &R {
        self
    }
}

/// What a call does, attempt after attempt, for the [`Drive`] that runs
/// it.
pub(crate) trait Operation {
    /// What an attempt gives.
    type Ok;
    /// How an attempt fails.
    type Err;
    /// What the loop keeps of an outcome it retries, through the sleep:
    /// nothing (`()`: the outcome is dropped at once, which releases a
    /// response's connection and keeps the future `Send` whatever the
    /// outcome), or the outcome, returned if the retry cannot be made.
    type Kept: Kept<Result<Self::Ok, Self::Err>>;
    /// An attempt of a hedged round, sent beside others.
    type Hedge: Future<Output = Result<Self::Ok, Self::Err>>;
    /// Whether [`elapsed`](Self::elapsed) gives an error (an attempt
    /// timeout is set): what a call that kept no outcome returns when it
    /// was held and its deadline came.
    const ELAPSES: bool = false;
    /// Whether an attempt may be cut off ([`start`](Self::start) may give
    /// a limit): `false` spares each poll asking (`call_async` without an
    /// attempt timeout).
    const CUTS: bool = true;
    /// Whether an attempt with no time at all is not started: a request,
    /// which would reach its server only to be cut off at once. The call
    /// is then turned away before its first attempt, with the cut-off's
    /// error, or gives up with the outcome kept before a later one
    /// ([`GiveUp::Deadline`]), as a breaker's rejection would: nothing was
    /// sent, and no limiter hears of it.
    const UNSENT_WITHOUT_TIME: bool = false;

    /// Starts an attempt that may run `limit` (the attempt timeout, within
    /// the deadline), if limited: how long the loop is to let it run
    /// before cutting it off.
    fn start(self: Pin<&mut Self>, limit: Option<Duration>) -> Option<Duration>;

    /// Polls the attempt started, in its frame.
    fn poll_attempt(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Ok, Self::Err>>;

    /// The attempt ran out of time: it is dropped now, and this is its
    /// outcome ([`elapsed`](Self::elapsed)).
    fn cut_off(self: Pin<&mut Self>, why: Elapsed) -> Self::Err;

    /// What a time limit that ran out (`why`) ends the call with.
    fn elapsed(why: Elapsed) -> Self::Err;

    /// After an attempt: whether the request can be sent again (settled
    /// now, for good).
    fn replayable(self: Pin<&mut Self>) -> bool {
        true
    }

    /// Before a retry: waits until another attempt can be sent (a tower
    /// service's readiness). Asked only of an operation that keeps its
    /// outcome.
    fn poll_ready(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Err>> {
        Poll::Ready(Ok(()))
    }

    /// Before a call that may hedge, under a policy that says whether the
    /// operation is `idempotent`: whether it will (a request made
    /// copyable, if it can be).
    fn poll_prepare(self: Pin<&mut Self>, _cx: &mut Context<'_>, _idempotent: bool) -> Poll<bool> {
        Poll::Ready(true)
    }

    /// An attempt of a hedged round, which the round cuts off after
    /// `limit`, if given.
    fn hedge(self: Pin<&mut Self>, limit: Option<Duration>) -> Self::Hedge;

    /// The call is over, with `outcome`.
    fn finish(self: Pin<&mut Self>, _outcome: &mut Result<Self::Ok, Self::Err>) {}

    /// What the call's `tracing` events show of `outcome` (an error's
    /// text, a response's status), if the operation knows how.
    fn shown(_outcome: &Result<Self::Ok, Self::Err>) -> Shown<'_> {
        Shown::Nothing
    }
}

/// What a loop keeps of an outcome through its sleep: `()`, nothing, or
/// [`Keeps`], all of it.
pub(crate) trait Kept<O> {
    /// Whether the outcome is kept.
    const KEEPS: bool;
    /// Keeps what is kept of `outcome`.
    fn keep(outcome: O) -> Self;
    /// The outcome, if it was kept.
    fn take(self) -> Option<O>;
    /// The outcome, if it was kept, where it is.
    fn peek(&self) -> Option<&O>;
}

impl<O> Kept<O> for () {
    const KEEPS: bool = false;

    fn keep(_: O) {}

    fn take(self) -> Option<O> {
        None
    }

    fn peek(&self) -> Option<&O> {
        None
    }
}

/// An outcome kept through the sleep: boxed, as only a call that retries
/// keeps one, and the loop's future is moved before it runs.
#[cfg(feature = "tower")]
pub(crate) struct Keeps<O>(Box<O>);

#[cfg(feature = "tower")]
impl<O> Kept<O> for Keeps<O> {
    const KEEPS: bool = true;

    fn keep(outcome: O) -> Self {
        Self(Box::new(outcome))
    }

    fn take(self) -> Option<O> {
        Some(*self.0)
    }

    fn peek(&self) -> Option<&O> {
        Some(&self.0)
    }
}

/// Where a call is.
enum Phase<K, H> {
    /// Not started: made copyable (if it may hedge), then admitted.
    Start,
    /// Admitted: the next attempt, or round, starts.
    Next,
    /// An attempt is running, cut off when its timer (if any) fires
    /// (boxed: a call without an attempt timeout carries no timer).
    Attempt(Option<Pin<Box<Cut>>>),
    /// A hedged round is running.
    Round(Pin<Box<Round<H>>>),
    /// Sleeping before a retry, with what is kept of the last outcome.
    Sleep(Pin<Box<Sleep>>, K),
    /// Waiting, until the deadline at most, for the operation to be ready
    /// for the retry.
    Ready(K, Option<Pin<Box<Sleep>>>),
    /// Over.
    Done,
}

impl<K, H> Phase<K, H> {
    /// Goes on to `next` from a phase that holds nothing to drop (not
    /// started, between attempts, an attempt over and its timer gone,
    /// over): the success path runs no drop glue.
    #[inline]
    fn leave_empty(&mut self, next: Self) {
        debug_assert!(matches!(
            self,
            Phase::Start | Phase::Next | Phase::Attempt(None) | Phase::Done
        ));
        // Nothing is lost: the phase left holds nothing.
        std::mem::forget(std::mem::replace(self, next));
    }
}

/// A [`Drive`]'s phase, dropped by a check inline when it holds nothing
/// (the call is over, or never started an attempt): a call that ended
/// pays no call to the phase's drop glue.
struct Slot<K, H>(std::mem::ManuallyDrop<Phase<K, H>>);

impl<K, H> Drop for Slot<K, H> {
    #[inline]
    fn drop(&mut self) {
        if !matches!(
            *self.0,
            Phase::Start | Phase::Next | Phase::Attempt(None) | Phase::Done
        ) {
            drop_held(&mut self.0);
        }
    }
}

/// Drops what a phase holds (a timer, a round, a kept outcome): a call
/// cancelled, or dropped while it sleeps.
#[inline(never)]
fn drop_held<K, H>(phase: &mut Phase<K, H>) {
    drop(std::mem::replace(phase, Phase::Done));
}

/// A call, made at the first poll of its [`Drive`], as an `async fn`'s
/// locals are: the call starts then (its clock chosen, its span entered, its
/// deadline counted), and a future never polled is no call.
enum Run<'a, P> {
    /// Not polled yet: the policy and the budget it will start under, and
    /// the call's key.
    Unstarted(P, Option<BudgetRef<'a>>, Option<u64>),
    /// Started: lean until its first attempt fails, as `#[retry]`'s; then
    /// the state machine, boxed (the driver's callers move it, and the
    /// fewer bytes the cheaper).
    Started(Lazy<'a, P>),
}

impl<'a, P: HoldsPolicy> Run<'a, P> {
    /// The call, started now (under `steps`, `hedged` or not, its span
    /// kept in `span`) if it has not been.
    #[inline]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn started<T, E, S: Steps<T, E> + ?Sized>(
        &mut self,
        steps: &S,
        hedged: bool,
        span: &mut LoopSpan,
    ) -> &mut Lazy<'a, P> {
        if let Run::Unstarted(policy, budget, key) = *self {
            let state = steps.start(policy, budget, key, RuntimeClock::current(), hedged);
            #[cfg(feature = "tracing")]
            {
                *span = state.call_span().clone();
            }
            // (What is left holds nothing to drop: a policy, a budget's
            // reference and a key.)
            std::mem::forget(std::mem::replace(self, Run::Started(state)));
        }
        match self {
            Run::Started(state) => state,
            Run::Unstarted(..) => unreachable!("started above"),
        }
    }
}

/// A call of the driver's.
type Lazy<'a, P> = Call<'a, RuntimeClock, P, Box<AttemptState<'a, RuntimeClock, P>>>;

/// A span the loop enters (the call's, an attempt's): nothing without
/// `tracing`.
#[cfg(feature = "tracing")]
pub(crate) type LoopSpan = tracing::Span;
#[cfg(not(feature = "tracing"))]
pub(crate) type LoopSpan = ();

/// No span yet: the call's is made at its first poll, an attempt's when it
/// starts.
#[cfg(feature = "tracing")]
pub(crate) fn no_span() -> LoopSpan {
    tracing::Span::none()
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn no_span() -> LoopSpan {}

pin_project_lite::pin_project! {
    /// The async retry loop around `op`, under the classifiers, hooks and
    /// limits of `steps` (a `Retry`, borrowed or shared).
    pub(crate) struct Drive<'a, X, D, K, H, P = &'a Policy> {
        state: Run<'a, P>,
        #[pin]
        op: D,
        // The attempt timeout, if any.
        timeout: Option<Duration>,
        // Whether the call may hedge (a `Retry` with a hedge, and an
        // operation that can).
        hedges: bool,
        phase: Slot<K, H>,
        // What a poll of the attempt leaves to the next.
        shared: Option<Carried>,
        span: LoopSpan,
        // Last, so dropped last: a layer's loop may own the budget its
        // call draws on (lent from a pool when the last `Arc` of the layer
        // goes), and the call's state, dropped before it, may still give
        // that budget back a held call's place.
        steps: X,
    }
}

impl<'a, X, D, P> Drive<'a, X, D, D::Kept, D::Hedge, P>
where
    D: Operation,
    P: HoldsPolicy,
    X: Lends,
    X::Loop: Steps<D::Ok, D::Err>,
{
    /// The loop around `op`, under `policy`, drawing on `budget`, behind
    /// the breaker and throttle of `key`.
    #[inline]
    pub(crate) fn new(
        steps: X,
        policy: P,
        budget: Option<BudgetRef<'a>>,
        key: Option<u64>,
        op: D,
        hedges: bool,
    ) -> Self {
        let timeout = steps.lent().timeout();
        let hedges = hedges && steps.lent().hedging().is_some();
        Self {
            steps,
            state: Run::Unstarted(policy, budget, key),
            op,
            timeout,
            hedges,
            phase: Slot(std::mem::ManuallyDrop::new(Phase::Start)),
            shared: None,
            span: no_span(),
        }
    }

    /// This loop, with attempts limited to `timeout` (within the
    /// deadline) rather than to the `Retry`'s attempt timeout.
    #[cfg(feature = "reqwest-middleware")]
    pub(crate) fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
}

impl<X, D, P> Future for Drive<'_, X, D, D::Kept, D::Hedge, P>
where
    D: Operation,
    P: HoldsPolicy,
    X: Lends,
    X::Loop: Steps<D::Ok, D::Err>,
{
    type Output = Result<D::Ok, D::Err>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let steps = this.steps.lent();
        let state = this.state.started(steps, *this.hedges, this.span);
        let phase = &mut *this.phase.0;
        #[cfg(feature = "tracing")]
        let _span = this.span.enter();
        // Where an attempt's outcome is put once, and read by reference
        // until it is returned or kept: a response (150 bytes and more) is
        // not moved from step to step.
        let mut out: Option<Outcome<D>> = None;
        loop {
            let verdict = match phase {
                Phase::Start | Phase::Next => {
                    let mut limit = None; // (the first attempt's, if read to admit it)
                    let admit = (&mut *this.hedges, *this.timeout, &mut limit);
                    if let Phase::Start = phase
                        && let Some(mut rejected) =
                            ready!(admitted(this.op.as_mut(), state, steps, admit, cx))
                    {
                        *phase = Phase::Done;
                        this.op.as_mut().finish(&mut rejected);
                        return Poll::Ready(rejected);
                    }
                    let (timeout, hedges) = (*this.timeout, *this.hedges);
                    let attempt = next(this.op.as_mut(), state, steps, timeout, limit, hedges);
                    phase.leave_empty(attempt);
                    continue;
                }
                Phase::Attempt(cut) => {
                    let verdict = ready!(attempted(
                        this.op.as_mut(),
                        state,
                        steps,
                        this.shared,
                        cut,
                        &mut out,
                        cx,
                    ));
                    phase.leave_empty(Phase::Done); // (its timer dropped)
                    verdict
                }
                Phase::Round(round) => {
                    let hedge = steps.hedging().expect("a hedged call has a hedge");
                    let mut op = this.op.as_mut();
                    let (outcome, verdict) = ready!(round.as_mut().poll(
                        state.state(),
                        hedge,
                        &mut |limit| op.as_mut().hedge(limit),
                        &|out| judge_hedged::<D, _>(steps, out),
                        cx,
                    ));
                    *phase = Phase::Done;
                    out = Some(outcome);
                    verdict
                }
                Phase::Sleep(sleep, _) => {
                    ready!(sleep.as_mut().poll(cx));
                    let Phase::Sleep(_, kept) = std::mem::replace(phase, Phase::Done) else {
                        unreachable!("matched above")
                    };
                    let going = (*this.hedges, *this.timeout);
                    match resumed::<D, _, _>(kept, state.state(), steps, going) {
                        Ok(next) => phase.leave_empty(next),
                        Err(mut over) => {
                            this.op.as_mut().finish(&mut over);
                            return Poll::Ready(over);
                        }
                    }
                    continue;
                }
                Phase::Ready(_, limit) => {
                    let why = ready!(readied(this.op.as_mut(), state.state(), limit, cx));
                    if let Readied::Ready = why {
                        // (Its timer and the outcome kept dropped: the retry goes.)
                        *phase = Phase::Next;
                        continue;
                    }
                    let Phase::Ready(kept, _) = std::mem::replace(phase, Phase::Done) else {
                        unreachable!("matched above")
                    };
                    let mut outcome = waited_in_vain::<D, _, _>(why, kept, state.state(), steps);
                    this.op.as_mut().finish(&mut outcome);
                    return Poll::Ready(outcome);
                }
                Phase::Done => polled_after_it_returned(),
            };
            // After an attempt or a round (the phase is `Done`).
            let Some(outcome) = out.as_mut() else {
                no_outcome()
            };
            let delay = decided::<D, _, _>(state, steps, outcome, verdict);
            if delay.is_none() {
                this.op.as_mut().finish(outcome);
            }
            let Some(outcome) = out.take() else {
                no_outcome()
            };
            match delay {
                Some(delay) => {
                    let sleep = crate::time::timer::sleep_async(delay);
                    phase.leave_empty(Phase::Sleep(sleep, Kept::keep(outcome)));
                }
                None => return Poll::Ready(outcome),
            }
        }
    }
}

/// An attempt or a round ended without its outcome: never (out of line,
/// as the loop's other panics, so that the loop carries no message).
#[cold]
#[inline(never)]
fn no_outcome() -> ! {
    unreachable!("an attempt or a round is over")
}

/// A loop polled after it returned (tower's `Future` contract says it may
/// panic).
#[cold]
#[inline(never)]
fn polled_after_it_returned() -> ! {
    panic!("a retry loop polled after it returned")
}

/// After an attempt or a round: the delay before a retry, if one is to
/// be made (a lean first attempt that succeeded ends the call at once).
#[inline]
fn decided<D, S, P>(
    state: &mut Lazy<'_, P>,
    steps: &S,
    outcome: &Outcome<D>,
    verdict: Attempted,
) -> Option<Duration>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    if state.first_succeeded(verdict) {
        return None;
    }
    let state = state.state();
    if !(<D::Kept as Kept<_>>::KEEPS || D::ELAPSES) {
        // Held to its deadline, it would have nothing to return.
        state.set_may_hold(false);
    }
    // What the events show of a failure (without `tracing`, nothing), and
    // of an answer after the request went out again, which the one-layer
    // rule reads (a status saying the dependency failed): a first answer
    // shows nothing, and is not looked into.
    let shown = if verdict == Attempted::Succeeded {
        if state.attempt() > 1 {
            D::shown(outcome)
        } else {
            Shown::Nothing
        }
    } else if cfg!(feature = "tracing") {
        D::shown(outcome)
    } else {
        Shown::Nothing
    };
    steps.decided(state, outcome, verdict, shown)
}

/// Before the first attempt: the request made copyable if the call may
/// hedge, then the call admitted (a lean call has nothing to admit it: no
/// breaker, no adaptive throttle). Its rejection, if it is turned away.
fn admitted<D, S, P>(
    op: Pin<&mut D>,
    state: &mut Lazy<'_, P>,
    steps: &S,
    (hedges, timeout, limit): (&mut bool, Option<Duration>, &mut Option<Duration>),
    cx: &mut Context<'_>,
) -> Poll<Option<Outcome<D>>>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    if D::UNSENT_WITHOUT_TIME
        && let Some(why) = spent(|t| *limit.insert(state.attempt_limit(t)), timeout)
    {
        return Poll::Ready(Some(unsent::<D, _, _>(state.state(), steps, why)));
    }
    if *hedges {
        let idempotent = state.state().idempotent();
        *hedges = ready!(op.poll_prepare(cx, idempotent));
        if !*hedges {
            // (A request that may not be repeated, or cannot be copied.)
            state.state().hedge_refused(if idempotent {
                GiveUp::NotReplayable
            } else {
                GiveUp::NotIdempotent
            });
        }
    }
    Poll::Ready(state.going().and_then(|gated| steps.admit(gated)))
}

/// The next attempt starts, or the next hedged round: limited to the
/// attempt timeout within the deadline, if either applies (`read`, if the
/// caller read it in this poll).
fn next<D, S, P>(
    mut op: Pin<&mut D>,
    state: &mut Lazy<'_, P>,
    steps: &S,
    timeout: Option<Duration>,
    read: Option<Duration>,
    hedges: bool,
) -> Phase<D::Kept, D::Hedge>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    if hedges && let Some(hedge) = steps.hedging() {
        let round = Round::start(state.state(), hedge, timeout, |limit| {
            op.as_mut().hedge(limit)
        });
        return Phase::Round(Box::pin(round));
    }
    // (`read`: the limit already read in this poll, if it was.)
    let limit = timeout.map(|timeout| read.unwrap_or_else(|| state.attempt_limit(timeout)));
    let cut = op.start(limit);
    state.begin_attempt();
    Phase::Attempt(cut.map(|cut| Box::pin(Cut::after(cut, timeout))))
}

pin_project_lite::pin_project! {
    /// The attempts of `call_async`: futures made by a closure, each cut
    /// off as the loop's attempt timeout `L` says.
    pub(crate) struct Closures<F, Fut, L> {
        make: F,
        #[pin]
        attempt: Option<Fut>,
        timeout: std::marker::PhantomData<fn() -> L>,
    }
}

impl<F, Fut, L> Closures<F, Fut, L> {
    #[inline]
    pub(crate) fn new(make: F) -> Self {
        Self {
            make,
            attempt: None,
            timeout: std::marker::PhantomData,
        }
    }
}

impl<T, E, F, Fut, L> Operation for Closures<F, Fut, L>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    L: crate::run::TimeoutSlot<E>,
{
    type Ok = T;
    type Err = E;
    type Kept = ();
    type Hedge = Fut;
    const ELAPSES: bool = L::ELAPSES;
    const CUTS: bool = L::ELAPSES;

    fn start(self: Pin<&mut Self>, limit: Option<Duration>) -> Option<Duration> {
        let mut this = self.project();
        this.attempt.set(Some((this.make)()));
        limit
    }

    fn poll_attempt(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let mut this = self.project();
        let attempt = this.attempt.as_mut().as_pin_mut();
        let outcome = ready!(attempt.expect("an attempt was started").poll(cx));
        this.attempt.set(None);
        Poll::Ready(outcome)
    }

    fn cut_off(self: Pin<&mut Self>, why: Elapsed) -> E {
        self.project().attempt.set(None);
        L::elapsed(why)
    }

    fn elapsed(why: Elapsed) -> E {
        L::elapsed(why)
    }

    fn hedge(self: Pin<&mut Self>, _: Option<Duration>) -> Fut {
        (self.project().make)()
    }
}

pin_project_lite::pin_project! {
    /// The attempts of `call_async_with`: each gets the value and hands it
    /// back with its outcome.
    pub(crate) struct WithValue<S, F, Fut> {
        value: Option<S>,
        make: F,
        #[pin]
        attempt: Option<Fut>,
    }
}

impl<S, F, Fut> WithValue<S, F, Fut> {
    pub(crate) fn new(value: S, make: F) -> Self {
        Self {
            value: Some(value),
            make,
            attempt: None,
        }
    }

    /// The value, handed back by the last attempt.
    pub(crate) fn take(self: Pin<&mut Self>) -> S {
        self.project()
            .value
            .take()
            .expect("every attempt hands the value back")
    }
}

impl<S, T, E, F, Fut> Operation for WithValue<S, F, Fut>
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Result<T, E>)>,
{
    type Ok = T;
    type Err = E;
    type Kept = ();
    type Hedge = std::future::Pending<Result<T, E>>;

    fn start(self: Pin<&mut Self>, limit: Option<Duration>) -> Option<Duration> {
        let mut this = self.project();
        let value = this
            .value
            .take()
            .expect("every attempt hands the value back");
        this.attempt.set(Some((this.make)(value)));
        limit
    }

    fn poll_attempt(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let mut this = self.project();
        let attempt = this.attempt.as_mut().as_pin_mut();
        let (value, outcome) = ready!(attempt.expect("an attempt was started").poll(cx));
        this.attempt.set(None);
        *this.value = Some(value);
        Poll::Ready(outcome)
    }

    fn cut_off(self: Pin<&mut Self>, _: Elapsed) -> E {
        unreachable!("`call_async_with` has no attempt timeout")
    }

    fn elapsed(_: Elapsed) -> E {
        unreachable!("`call_async_with` has no attempt timeout")
    }

    fn hedge(self: Pin<&mut Self>, _: Option<Duration>) -> Self::Hedge {
        unreachable!("`call_async_with` does not hedge")
    }
}

/// What a call ends with.
type Outcome<D> = Result<<D as Operation>::Ok, <D as Operation>::Err>;

/// What an attempt of a hedged round gave, as its outcome and the verdict
/// on it: cut off, it is the operation's `Elapsed` error, ambiguous.
fn judge_hedged<D, S>(steps: &S, out: Result<Outcome<D>, Elapsed>) -> (Outcome<D>, Attempted)
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
{
    match out {
        Ok(outcome) => {
            let verdict = steps.judge(&outcome);
            (outcome, verdict)
        }
        Err(why) => (
            Err(D::elapsed(why)),
            Attempted::Failed(Verdict::RetryIfIdempotent),
        ),
    }
}

/// After the sleep before a retry: where the call goes next, or what it
/// ends with. An outcome that was not kept is gone: a throttle that sheds
/// or a breaker that opened meanwhile makes the rejection the error. One
/// that was kept is returned if the retry cannot be made (the deadline
/// passed, a breaker opened, a throttle sheds).
fn resumed<D, S, P>(
    kept: D::Kept,
    state: &mut AttemptState<'_, RuntimeClock, P>,
    steps: &S,
    (hedges, timeout): (bool, Option<Duration>),
) -> Result<Phase<D::Kept, D::Hedge>, Outcome<D>>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    // Held after a refusal: sleep on, until released or the deadline.
    match state.held_showing(|| kept.peek().map(D::shown)) {
        None => {}
        Some(Ok(wait)) => return Ok(Phase::Sleep(crate::time::timer::sleep_async(wait), kept)),
        Some(Err(reason)) => {
            // (Its last outcome, a refusal, was not kept: the `Elapsed`
            // says so.)
            let outcome = kept
                .take()
                .unwrap_or_else(|| Err(D::elapsed(Elapsed::held(reason))));
            steps.gave_up(state, &outcome, reason);
            return Err(outcome);
        }
    }
    let Some(outcome) = kept.take() else {
        // The deadline came while it slept (its task ran late): no attempt
        // starts past it, where the call can say why in an `Elapsed`.
        if state.late() {
            let outcome = Err(D::elapsed(Elapsed::late(state.last_refused())));
            steps.gave_up(state, &outcome, GiveUp::Deadline);
            return Err(outcome);
        }
        return match steps.admit(state) {
            Some(rejected) => Err(rejected),
            None => Ok(Phase::Next),
        };
    };
    // No time at all for the next attempt (its task woke late): nothing
    // is sent, and the call ends with its last outcome.
    if D::UNSENT_WITHOUT_TIME && spent(|t| state.attempt_limit(t), timeout).is_some() {
        state.give_up(GiveUp::Deadline);
        steps.gave_up(state, &outcome, GiveUp::Deadline);
        return Err(outcome);
    }
    if let Err(reason) = state.may_resume() {
        steps.gave_up(state, &outcome, reason);
        return Err(outcome);
    }
    // Each attempt of a hedged round makes its own service ready.
    Ok(if hedges {
        Phase::Next
    } else {
        Phase::Ready(Kept::keep(outcome), None)
    })
}

/// One poll of the attempt running, in its frame, then of its cut-off
/// timer: once it is over, its outcome (put in `out`) and what it came to
/// (cut off, it is ambiguous whatever its error says).
fn attempted<D, S, P>(
    mut op: Pin<&mut D>,
    state: &mut Lazy<'_, P>,
    steps: &S,
    shared: &mut Option<Carried>,
    cut: &mut Option<Pin<Box<Cut>>>,
    out: &mut Option<Outcome<D>>,
    cx: &mut Context<'_>,
) -> Poll<Attempted>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    let attempt = op.as_mut();
    // (The timer says when it cuts the attempt off: the frame's deadline,
    // if sooner than the call's.)
    let timer = cut.as_deref().filter(|_| D::CUTS).map(Cut::sleep);
    let over = state.poll_framed(shared, timer, || match attempt.poll_attempt(cx) {
        Poll::Ready(outcome) => {
            *out = Some(outcome);
            true
        }
        Poll::Pending => false,
    });
    // The attempt was cut off: ambiguous, whatever its error says.
    let timed_out = !over;
    if timed_out {
        let Some(timer) = cut else {
            return Poll::Pending;
        };
        let why = ready!(timer.as_mut().poll(cx));
        // Dropped in its frame, as it ran.
        let attempt = op.as_mut();
        let timer = Some(timer.sleep());
        *out = Some(Err(
            state.poll_framed(shared, timer, || attempt.cut_off(why))
        ));
    }
    *cut = None;
    *shared = None;
    if !op.as_mut().replayable() {
        state.set_unreplayable();
    }
    Poll::Ready(if timed_out {
        Attempted::Failed(Verdict::RetryIfIdempotent)
    } else {
        steps.judge(out.as_ref().expect("put above"))
    })
}

/// No time at all for the first attempt: nothing is sent, and the call
/// ends as if turned away before it, with the cut-off's error (`why`).
#[cold]
fn unsent<D, S, P>(
    state: &mut AttemptState<'_, RuntimeClock, P>,
    steps: &S,
    why: Elapsed,
) -> Outcome<D>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    state.give_up(GiveUp::Deadline);
    let rejected = Err(D::elapsed(why));
    steps.gave_up(state, &rejected, GiveUp::Deadline);
    rejected
}

/// Why the next attempt, cut off after `timeout` within the deadline,
/// would have no time at all, if it would.
/// (`limit`: the state's `attempt_limit`.)
fn spent(limit: impl FnOnce(Duration) -> Duration, timeout: Option<Duration>) -> Option<Elapsed> {
    let timeout = timeout?;
    limit(timeout)
        .is_zero()
        .then(|| Elapsed::cut_after(Duration::ZERO, Some(timeout)))
}

/// What waiting for the operation to be ready for a retry came to.
enum Readied<E> {
    Ready,
    Failed(E),
    /// The deadline came first.
    Late,
}

/// The call ends while waiting for the operation to be ready for a
/// retry: with the readiness error (a service that failed its readiness is
/// to be discarded, tower's contract), or, past the deadline, with the
/// outcome kept.
fn waited_in_vain<D, S, P>(
    why: Readied<D::Err>,
    kept: D::Kept,
    state: &mut AttemptState<'_, RuntimeClock, P>,
    steps: &S,
) -> Outcome<D>
where
    D: Operation,
    S: Steps<D::Ok, D::Err> + ?Sized,
    P: HoldsPolicy,
{
    let (outcome, reason) = match why {
        Readied::Failed(error) => (Err(error), GiveUp::Stopped),
        Readied::Late | Readied::Ready => (
            kept.take().expect("only a kept outcome waits"),
            GiveUp::Deadline,
        ),
    };
    state.give_up(reason);
    steps.gave_up(state, &outcome, reason);
    outcome
}

/// One poll of the wait for the operation to be ready for a retry,
/// bounded by the time left (the timer set at the first poll).
fn readied<D: Operation, P: HoldsPolicy>(
    op: Pin<&mut D>,
    state: &AttemptState<'_, RuntimeClock, P>,
    limit: &mut Option<Pin<Box<Sleep>>>,
    cx: &mut Context<'_>,
) -> Poll<Readied<D::Err>> {
    // (Set: it waited before this poll, within a deadline.)
    let waited = limit.is_some();
    if !waited {
        let left = state.attempt_limit(Duration::MAX);
        if left != Duration::MAX {
            *limit = Some(Box::pin(RuntimeClock::current().sleep(left)));
        }
    }
    match op.poll_ready(cx) {
        // Ready only when the deadline came (both woke together): no
        // attempt starts past it.
        Poll::Ready(Ok(())) if waited && state.attempt_limit(Duration::MAX).is_zero() => {
            Poll::Ready(Readied::Late)
        }
        Poll::Ready(Ok(())) => Poll::Ready(Readied::Ready),
        Poll::Ready(Err(error)) => Poll::Ready(Readied::Failed(error)),
        Poll::Pending => match limit {
            Some(sleep) => sleep.as_mut().poll(cx).map(|()| Readied::Late),
            None => Poll::Pending,
        },
    }
}

/// The loop of `call_async_with`.
type WithValueDrive<'a, X, S, F, Fut, T, E> =
    Drive<'a, X, WithValue<S, F, Fut>, (), std::future::Pending<Result<T, E>>>;

pin_project_lite::pin_project! {
    /// The future of `call_async_with`: the loop, then the value its last
    /// attempt handed back, beside the outcome.
    pub(crate) struct HandsBack<'a, X, S, F, Fut, T, E> {
        #[pin]
        drive: WithValueDrive<'a, X, S, F, Fut, T, E>,
    }
}

impl<'a, X, S, F, Fut, T, E> HandsBack<'a, X, S, F, Fut, T, E> {
    pub(crate) fn new(drive: WithValueDrive<'a, X, S, F, Fut, T, E>) -> Self {
        Self { drive }
    }
}

impl<X, S, F, Fut, T, E> Future for HandsBack<'_, X, S, F, Fut, T, E>
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Result<T, E>)>,
    X: Lends,
    X::Loop: Steps<T, E>,
{
    type Output = (S, Result<T, E>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut drive = self.project().drive;
        let outcome = ready!(drive.as_mut().poll(cx));
        Poll::Ready((drive.project().op.take(), outcome))
    }
}
