//! Hedged attempts: one round of a call, its first attempt and the hedges
//! sent beside it, polled side by side until one answers or all have
//! failed. The round only runs attempts and records what each one cost;
//! the decision after it is [`AttemptState::decide`]'s, as for any attempt.

use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::{AttemptState, GiveUp, HoldsPolicy};
use crate::classify::Verdict;
use crate::limit::breaker::Permit;
use crate::limit::{AdaptiveThrottle, BudgetRef};
use crate::run::hedge::Hedge;
use crate::run::scope::Scope;
use crate::state::backoff::Rng;
use crate::state::vocabulary::{Attempted, Elapsed, NotSent};
use crate::time::clock::Clock;
use crate::time::timer::{RuntimeClock, Sleep, Timed};

/// What a round keeps of an attempt in flight besides its future.
struct InFlight {
    scope: Scope,
    /// Its number in the call (1-based).
    attempt: u32,
    started: Instant,
    /// The breaker's leave for it.
    permit: Option<Permit<'static>>,
    /// The adaptive throttle that admitted it, which counts it once its
    /// outcome is known, or as it is dropped in flight.
    admitted: Option<&'static AdaptiveThrottle>,
}

impl<C: Clock, P: HoldsPolicy> AttemptState<'_, C, P> {
    /// Runs one round of a hedged call: an attempt made by `make`, and
    /// after `hedge`'s delay, if it has not answered, another beside it
    /// (up to [`Hedge::get_hedges`], each a delay after the one before),
    /// each granted like a retry (see below) and run with the call's
    /// [`Context`](crate::Context): its own attempt number, the call's
    /// idempotency key and deadline. Each attempt is cut off after
    /// `timeout` (or at the deadline) if given.
    ///
    /// `judge` turns what an attempt gave (`Err(elapsed)` if it was cut
    /// off, saying which limit it was) into its outcome and what the attempt came to. The first answer (a success, or a
    /// [`Stop`](Verdict::Stop)) ends the round and the other attempts are
    /// dropped at once. A retryable failure ends only its attempt (it
    /// counts against the breaker and the token budget as any failure
    /// does), unless it is the last in flight; the next hedge still waits
    /// for its delay. The round returns the outcome that ended it with its
    /// judgement, for [`decide`](Self::decide): retries still apply after
    /// all attempts failed, after the longest `Retry-After` any of them
    /// was given.
    ///
    /// A hedge is sent only for an idempotent policy, never beside a
    /// breaker's half-open probe, never past the policy's `attempts`
    /// (hedges are attempts), and only if it could start before the
    /// deadline, the breaker is closed and admits it, the adaptive
    /// throttle does not shed it, and the budget grants it as it would a
    /// retry (a token budget above half; a windowed budget's token); and
    /// not while a call nested in an attempt in flight has hedged, nor
    /// inside an attempt that a hedged round around this call has copied
    /// (one layer hedges).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{context, hedge::Hedge, macro_support::{AttemptState, Attempted, Decision}, Policy, time::SystemClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::new().idempotent(true).no_budget();
    /// let mut state = AttemptState::new(&policy, backstop::time::RuntimeClock::current());
    /// let hedge = Hedge::after(Duration::from_millis(50));
    /// let (outcome, attempted) = state
    ///     .run_hedged(
    ///         &hedge,
    ///         None,
    ///         || async {
    ///             let attempt = context().unwrap().attempt();
    ///             // The first attempt is slow: the hedge, sent at 50 ms, wins.
    ///             let took = if attempt == 1 { 1_000 } else { 10 };
    ///             tokio::time::sleep(Duration::from_millis(took)).await;
    ///             Ok::<u32, std::io::Error>(attempt)
    ///         },
    ///         |out| {
    ///             let outcome = out.unwrap_or_else(|_| unreachable!("no timeout"));
    ///             (outcome, Attempted::Succeeded)
    ///         },
    ///     )
    ///     .await;
    /// assert_eq!(outcome.unwrap(), 2);
    /// assert_eq!(state.decide(attempted), Decision::Return);
    /// # }
    /// ```
    pub async fn run_hedged<O, F, Fut, J>(
        &mut self,
        hedge: &Hedge,
        timeout: Option<Duration>,
        mut make: F,
        judge: J,
    ) -> (O, Attempted)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
        J: Fn(Result<O, Elapsed>) -> (O, Attempted),
    {
        // (Pinned in this future: a round that sends no hedge allocates
        // nothing.)
        let mut round = std::pin::pin!(Round::start(self, hedge, timeout, |_| make()));
        #[cfg(feature = "tracing")]
        let span = self.obs.span().clone();
        std::future::poll_fn(|task| {
            #[cfg(feature = "tracing")]
            let _span = span.enter();
            round
                .as_mut()
                .poll(self, hedge, &mut |_| make(), &judge, task)
        })
        .await
    }

    /// Polls every attempt in flight, the first one first, each in its
    /// own frame: the first that is over, taken out of the round.
    fn poll_attempts<Fut: Future>(
        &mut self,
        mut primary: Pin<&mut Option<Fut>>,
        primary_meta: &mut Option<InFlight>,
        hedges: &mut Vec<(Pin<Box<Fut>>, InFlight)>,
        task: &mut std::task::Context<'_>,
    ) -> Option<(Fut::Output, InFlight)> {
        if let (Some(future), Some(meta)) = (primary.as_mut().as_pin_mut(), primary_meta.as_mut()) {
            let poll = meta.scope.poll(future, task);
            if let Poll::Ready(out) = poll {
                // Dropped in its frame (an attempt cut off is dropped
                // midway): what it leaves is this attempt's.
                meta.scope.enter(|| primary.set(None));
                self.keep(&meta.scope);
                return primary_meta.take().map(|meta| (out, meta));
            }
            self.keep(&meta.scope);
        }
        for i in 0..hedges.len() {
            let (future, meta) = &mut hedges[i];
            let poll = meta.scope.poll(future.as_mut(), task);
            if let Poll::Ready(out) = poll {
                let (future, mut meta) = hedges.swap_remove(i);
                meta.scope.enter(|| drop(future));
                self.keep(&meta.scope);
                return Some((out, meta));
            }
            self.keep(&meta.scope);
        }
        None
    }

    /// `winner` ended the round (an answer, or the last failure), and the
    /// `losers` still in flight are dropped: each told to what counts it,
    /// and the winner's admission kept for the decision on it, which is
    /// made as for any attempt.
    fn end_round(
        &mut self,
        hedge: &Hedge,
        winner: &InFlight,
        losers: impl Iterator<Item = InFlight>,
        answered: bool,
        now: Instant,
    ) {
        let first = self.attempt();
        for loser in losers {
            Self::dropped(hedge, loser, first, answered, now);
        }
        if answered && winner.attempt != first {
            self.obs.hedge_won(winner.attempt);
        }
    }

    /// After a poll of an attempt in `scope`: the call keeps its key (once
    /// drawn), and whether a call nested in it gave up after retrying.
    fn keep(&mut self, scope: &Scope) {
        self.call = scope.call();
        self.retried_below |= scope.retried_below();
    }

    /// May hedge number `attempt` start now? Not if a call nested in an
    /// attempt in flight has hedged (`below`), or if this call runs in an
    /// attempt that a hedged round around it copies: one layer hedges, as
    /// hedges at two would each copy the other's (2 × 2 requests). Else
    /// granted like a retry; if so, counted among the call's hedges, with
    /// the frame it runs in (the call's key drawn for it); the adaptive
    /// throttle counts it once its outcome is known.
    fn admit_hedge(&mut self, attempt: u32, delay: Duration, below: bool) -> Option<InFlight> {
        if below || crate::run::scope::hedged_above() {
            self.obs.hedge_not_sent(if below {
                NotSent::HedgedBelow
            } else {
                NotSent::HedgedAbove
            });
            return None;
        }
        let now = self.clock.now();
        let refused = match self.grant_hedge(now) {
            Ok((permit, admitted)) => {
                if let Some(throttle) = admitted {
                    throttle.sending();
                }
                self.hedges += 1;
                self.obs.hedged(attempt, delay);
                self.call = self.call.with_key();
                return Some(InFlight {
                    scope: Scope::new(self.call, attempt, self.deadline, self.clock.now_fn()),
                    attempt,
                    started: now,
                    permit,
                    admitted,
                });
            }
            Err(reason) => reason,
        };
        self.obs.hedge_not_sent(NotSent::Refused(refused));
        None
    }

    /// The checks of [`admit_hedge`](Self::admit_hedge), the budget last
    /// (a hedge refused for another reason never spends a token): the
    /// breaker's leave and the throttle's admission, or why not.
    fn grant_hedge(
        &mut self,
        now: Instant,
    ) -> Result<(Option<Permit<'static>>, Option<&'static AdaptiveThrottle>), GiveUp> {
        // A hedge that could not start before the deadline, whatever the
        // timer's slack, has no time to answer.
        if let Some(deadline) = self.deadline
            && deadline.saturating_duration_since(now) <= self.clock.sleep_slack()
        {
            return Err(GiveUp::Deadline);
        }
        let permit = match self.breaker_now() {
            Some(breaker) if !breaker.is_closed() => return Err(GiveUp::BreakerOpen),
            Some(breaker) => match breaker.try_acquire(now) {
                Ok(permit) if !permit.is_probe() => Some(permit),
                _ => return Err(GiveUp::BreakerOpen),
            },
            None => None,
        };
        let admitted = match self.throttle {
            Some((throttle, _)) => {
                let draw = self.rng.get_or_insert_with(Rng::new).next_f64();
                throttle.admit(now, draw).map_err(|_| GiveUp::Throttled)?;
                Some(throttle)
            }
            None => None,
        };
        let granted = match self.budget {
            Some(BudgetRef::Token(throttle)) => throttle.allows_hedge(now),
            Some(BudgetRef::Window(budget)) => budget.try_withdraw(now),
            None => true,
        };
        if granted {
            Ok((permit, admitted))
        } else {
            Err(GiveUp::Budget)
        }
    }

    /// An attempt failed retryably while others are still in flight: it
    /// counts against the breaker and the token budget as any failure
    /// does, and the others go on.
    fn failed_beside(&mut self, attempt: InFlight, attempted: Attempted, now: Instant) {
        if let Some(permit) = attempt.permit {
            permit.record(attempted, now);
        }
        if let Some(throttle) = attempt.admitted {
            throttle.sent(now, false);
        }
        if let Some(BudgetRef::Token(throttle)) = self.budget {
            throttle.failed(now);
        }
        self.obs.failed_beside(attempt.attempt, attempted.verdict());
    }

    /// An attempt dropped when another ended the round. A first attempt's
    /// latency so far is a floor of its own, learnt as one: it is above
    /// the hedge delay (it was hedged), as the slow attempts it stands for
    /// are, and that is all a percentile needs of it. If the call got an
    /// answer, the adaptive throttle counts the attempt answered too: it
    /// was not refused, only overtaken (without one, it counts as sent
    /// and not answered, as any attempt dropped in flight).
    fn dropped(hedge: &Hedge, attempt: InFlight, first: u32, answered: bool, now: Instant) {
        if attempt.attempt == first {
            hedge.record(now.saturating_duration_since(attempt.started), now);
        }
        if let Some(throttle) = attempt.admitted {
            throttle.sent(now, answered);
        }
        // Its leave, if any, goes back unused (a probe's only if the
        // breaker closed while it was out, and its hedge then went).
        drop(attempt.permit);
    }
}

/// A call given a hedge runs under a policy not declared idempotent (a
/// `#[retry(policy = ..)]` function's, a `Retry`'s for `call_async`): it
/// sends none, which would otherwise go without a word where no
/// subscriber listens at DEBUG. Said once a process, in debug builds.
#[cfg(debug_assertions)]
#[cold]
fn note_hedge_not_idempotent() {
    #[cfg(test)]
    tests::NOT_IDEMPOTENT.with(|said| said.set(said.get() + 1));
    note_once!(
        "backstop: a call given a hedge runs under a policy not declared idempotent, and sends \
         no hedge (hedges are copies of an attempt, both of which may be carried out); declare \
         the policy `.idempotent(true)` if running the operation twice is harmless. Said once; \
         debug builds only."
    );
}

#[cfg(all(test, debug_assertions))]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// How many rounds of this thread's calls were given a hedge
        /// under a policy not declared idempotent.
        pub(crate) static NOT_IDEMPOTENT: Cell<u32> = const { Cell::new(0) };
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_a_policy_not_idempotent_forbids_is_said() {
        use std::time::Duration;

        use crate::hedge::Hedge;
        use crate::{Policy, Retry};
        let said = || NOT_IDEMPOTENT.with(Cell::get);
        let hedge = Hedge::after(Duration::from_millis(10));
        let ok = || async { Ok::<_, std::io::Error>(1) };
        let idempotent = Policy::new().idempotent(true);
        let _ = Retry::new(&idempotent).hedge(hedge).call_async(ok).await;
        let _ = Retry::new(&Policy::new()).call_async(ok).await;
        assert_eq!(said(), 0, "idempotent, or no hedge");
        let _ = Retry::new(&Policy::new()).hedge(hedge).call_async(ok).await;
        assert_eq!(said(), 1);
    }
}

pin_project_lite::pin_project! {
    /// One round of a hedged call in flight: its first attempt and the
    /// timer of the next hedge, in place (a round that sends no hedge
    /// allocates nothing where it is pinned), the hedges sent beside them,
    /// each boxed (see [`AttemptState::run_hedged`]).
    pub(crate) struct Round<Fut> {
        // The first attempt, and what is kept of it: both `Some` until it
        // is over.
        #[pin]
        primary: Option<Timed<Fut>>,
        primary_meta: Option<InFlight>,
        hedges: Vec<(Pin<Box<Timed<Fut>>>, InFlight)>,
        #[pin]
        timer: Option<Sleep>,
        timeout: Option<Duration>,
        // The hedge delay, if hedges may be sent this round.
        delay: Option<Duration>,
        // The first attempt's number, and the last this round may start:
        // hedges are attempts.
        first: u32,
        last: u32,
        // The number the next attempt started gets.
        next: u32,
        // The longest `Retry-After` of an attempt that failed beside
        // others: the server's word holds for the round's retry.
        pushback: Option<Duration>,
    }

    impl<Fut> PinnedDrop for Round<Fut> {
        // A round dropped before it was over (the call cancelled): its
        // attempts in flight were sent and not answered.
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let in_flight = this.primary_meta.iter_mut();
            for meta in in_flight.chain(this.hedges.iter_mut().map(|(_, meta)| meta)) {
                if let Some(throttle) = meta.admitted.take() {
                    throttle.sent(crate::time::clock::loop_now(), false);
                }
            }
        }
    }
}

impl<Fut: Future> Round<Fut> {
    /// Starts a round for `state`: its first attempt, made by `make`, and
    /// the timer of the first hedge if one may follow.
    pub(crate) fn start<C: Clock, P: HoldsPolicy>(
        state: &mut AttemptState<'_, C, P>,
        hedge: &Hedge,
        timeout: Option<Duration>,
        make: impl FnOnce(Option<Duration>) -> Fut,
    ) -> Self {
        state.record_call();
        let first = state.attempt();
        state.obs.started(first);
        let now = state.clock.now();
        // An operation that may not be repeated is not hedged. A breaker's
        // half-open probe (never retried) is not either, but its hedge
        // falls due: the breaker, not closed, refuses it then, counted and
        // told as any refused hedge is.
        let may_hedge = state.policy.get().idempotent;
        let delay = hedge.delay(now);
        // Said once a call, at its first round, as the layer says it.
        if delay.is_some() && !state.policy.get().idempotent && first == 1 {
            state.obs.hedge_refused(GiveUp::NotIdempotent);
        }
        // (Whatever the delay: an adaptive one has none until it has
        // learnt, as in a test's few calls.)
        #[cfg(debug_assertions)]
        if !state.policy.get().idempotent {
            note_hedge_not_idempotent();
        }
        let delay = delay.filter(|_| may_hedge);
        let last = match delay {
            Some(_) => first
                .saturating_add(hedge.get_hedges())
                .min(state.policy.get().attempts.max(first)),
            None => first,
        };
        let limit = timeout.map(|t| state.attempt_limit(t));
        let primary = Timed::new(limit, timeout, make(limit));
        let meta = InFlight {
            scope: state.scope().cut_by(primary.timer()),
            attempt: first,
            started: now,
            permit: state.permit.take(),
            admitted: state.throttle.map(|(throttle, _)| {
                throttle.sending();
                throttle
            }),
        };
        let timer = delay
            .filter(|_| last > first)
            .map(|delay| RuntimeClock::current().sleep(delay));
        Self {
            primary: Some(primary),
            primary_meta: Some(meta),
            hedges: Vec::new(),
            timer,
            timeout,
            delay,
            first,
            last,
            next: first + 1,
            pushback: None,
        }
    }

    /// Polls the round: `Ready` with the outcome that ended it and its
    /// judgement, once one answers or all have failed. `make` makes the
    /// hedges (each told how long it may run); `judge` turns what an
    /// attempt gave into its outcome and
    /// what the attempt came to.
    pub(crate) fn poll<C: Clock, P: HoldsPolicy, O>(
        self: Pin<&mut Self>,
        state: &mut AttemptState<'_, C, P>,
        hedge: &Hedge,
        make: &mut impl FnMut(Option<Duration>) -> Fut,
        judge: &impl Fn(Result<Fut::Output, Elapsed>) -> (O, Attempted),
        task: &mut std::task::Context<'_>,
    ) -> Poll<(O, Attempted)> {
        let mut this = self.project();
        loop {
            let over =
                state.poll_attempts(this.primary.as_mut(), this.primary_meta, this.hedges, task);
            if let Some((out, meta)) = over {
                let now = state.clock.now();
                let cut_off = out.is_err();
                let (outcome, mut verdict) = judge(out);
                let answered = verdict.answered();
                // The adaptive delay learns from first attempts only: a
                // hedge runs to its end only when it is faster than the
                // attempt it shadows, so its latencies would read the
                // dependency as faster than it is. And from answers, or
                // attempts cut off (at least that slow): a failure that
                // comes at once (a 503, a refused connection) says nothing
                // of how long an answer takes, and learnt, it would hedge
                // every call after an outage at once.
                if meta.attempt == *this.first && (answered || cut_off) {
                    hedge.record(now.saturating_duration_since(meta.started), now);
                }
                let last = verdict.is_final();
                if let Attempted::Failed(Verdict::RetryAfter(asked)) = verdict {
                    *this.pushback = (*this.pushback).max(Some(asked));
                }
                if last || (this.primary_meta.is_none() && this.hedges.is_empty()) {
                    if let (Some(asked), false) = (*this.pushback, last) {
                        verdict = Attempted::Failed(Verdict::RetryAfter(asked));
                    }
                    // The round is over: the others are dropped now, each
                    // in its frame, and what they leave is the round's, as
                    // what they left at each poll was (a call nested in a
                    // loser that retried, and is dropped midway, retried
                    // in this call's attempt as one that gave up did).
                    this.timer.set(None);
                    let mut below = false;
                    match this.primary_meta.as_mut() {
                        Some(loser) => {
                            loser.scope.enter(|| this.primary.set(None));
                            below |= loser.scope.retried_below();
                        }
                        None => this.primary.set(None),
                    }
                    let losers = this.primary_meta.take().into_iter();
                    let losers = losers.chain(this.hedges.drain(..).map(|(future, mut meta)| {
                        meta.scope.enter(|| drop(future));
                        below |= meta.scope.retried_below();
                        meta
                    }));
                    state.end_round(hedge, &meta, losers, answered, now);
                    state.retried_below |= below;
                    state.permit = meta.permit;
                    state.done = *this.next - 2;
                    return Poll::Ready((outcome, verdict));
                }
                state.failed_beside(meta, verdict, now);
                continue;
            }
            // The timer: time for the next hedge.
            let Some(sleep) = this.timer.as_mut().as_pin_mut() else {
                return Poll::Pending;
            };
            if sleep.poll(task).is_pending() {
                return Poll::Pending;
            }
            this.timer.set(None);
            // (A timer runs only with a delay.)
            let delay = this.delay.unwrap_or_default();
            let in_flight = this.primary_meta.iter();
            let below = in_flight
                .chain(this.hedges.iter().map(|(_, meta)| meta))
                .any(|meta| meta.scope.hedged_below());
            let Some(mut meta) = state.admit_hedge(*this.next, delay, below) else {
                // Refused: no more hedges this round.
                return Poll::Pending;
            };
            // Every attempt of the call shares its key (drawn now if the
            // first attempt has not asked for it yet), and calls nested in
            // them, copied by the hedge, send none of their own; the
            // attempt around the call, if any, sends none either.
            let in_flight = this.primary_meta.iter_mut();
            for other in in_flight.chain(this.hedges.iter_mut().map(|(_, meta)| meta)) {
                other.scope.share(state.call);
                other.scope.mark_copied();
            }
            meta.scope.mark_copied();
            crate::run::scope::note_hedged_below();
            let limit = this.timeout.map(|t| state.attempt_limit(t));
            let hedge = Timed::new(limit, *this.timeout, make(limit));
            meta.scope = meta.scope.cut_by(hedge.timer());
            this.hedges.push((Box::pin(hedge), meta));
            *this.next += 1;
            if *this.next <= *this.last
                && let Some(delay) = *this.delay
            {
                this.timer.set(Some(RuntimeClock::current().sleep(delay)));
            }
        }
    }
}
