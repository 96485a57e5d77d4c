//! The token budget (documented in `limit`).

use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use crate::sync::AtomicU64;
use crate::time::clock::{Anchor, Moment};

/// Tokens are counted in thousandths, as gRPC counts them: a `token_ratio`
/// of 0.1 is exactly 100 milli-tokens per answer.
const MILLI: u64 = 1000;

/// The refill clock's tick: the bucket's word holds the tick of its last
/// change in its high half.
const TICK_NANOS: u64 = 100_000_000;

const TOKEN_BITS: u32 = 32;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;

const fn pack(tokens: u64, tick: u64) -> u64 {
    (tick << TOKEN_BITS) | (tokens & TOKEN_MASK)
}

const fn tokens_of(word: u64) -> u64 {
    word & TOKEN_MASK
}

const fn tick_of(word: u64) -> u64 {
    word >> TOKEN_BITS
}

/// Ticks from `then` to `now` (wrapping); a `then` ahead of `now` (a
/// caller whose clock is ahead wrote it) is none: callers whose clocks
/// disagree by a tick never read a time gone backwards as years.
const fn ticks_since(then: u64, now: u64) -> u64 {
    let elapsed = now.wrapping_sub(then) & TOKEN_MASK;
    if elapsed > TOKEN_MASK / 2 { 0 } else { elapsed }
}

/// The later of two ticks (wrapping): a caller whose clock is behind never
/// moves the bucket's tick back, which would hand the next caller a refill
/// for time that did not pass.
const fn later(a: u64, b: u64) -> u64 {
    let ahead = b.wrapping_sub(a) & TOKEN_MASK;
    if ahead > 0 && ahead <= TOKEN_MASK / 2 {
        b
    } else {
        a
    }
}

/// A token budget: gRPC's retry throttling (gRFC A6), with a slow refill
/// in time so that a quiet function is not left without retries for long.
///
/// - It holds up to `max_tokens` tokens, and starts full.
/// - Every attempt that fails in a way the classifier would retry
///   (`Retry`, `RetryAfter`, `RetryIfIdempotent`), or that an overloaded
///   dependency refused with "do not retry" (`StopOverloaded`), takes one
///   token.
/// - Every call that gets an answer (a success, or a `Stop` verdict: the
///   dependency answered, if only to say no) adds `token_ratio` tokens.
/// - A retry is allowed only while more than `max_tokens / 2` tokens are
///   left after the failure that asks for it; a hedge while more than
///   `max_tokens / 2` are left, taking none. First attempts are never
///   throttled.
/// - One token comes back every `refill` (10 s by default) while the bucket
///   is not full. gRPC's bucket refills from answers alone: a function
///   called once a minute that went through an outage would need 60
///   answers, an hour, before it could retry again; with the refill, from
///   an empty bucket, its first retry comes back one tick (100 ms) after a
///   minute (more than 6 tokens: one to take, more than half left), and
///   both retries of a three-attempt call one tick after 70 s (more than
///   7). Time is read from the retry loop's clock, so virtual time drives
///   it.
///
/// **The bound.** With `n` calls answered over a stretch of time `t`, the
/// retries it allows number fewer than
/// `max_tokens / 2 + token_ratio × n + t / refill`: each retry follows a
/// failure that took a token, and no retry is allowed at or below half.
/// (Checked by a property test over arbitrary outcomes, a loom model of
/// racing callers and a two-thread stress test.) With the
/// defaults (10 tokens, 0.1, one per 10 s), a dependency failing every call
/// gets at most 5 retries (4 with three attempts a call: the failure that
/// ends a call takes a token too), then at most one per 10 s (fewer while
/// calls keep failing: their first attempts take the refilled tokens); one
/// failing one call in `n`, evenly spaced, gets all its retries while
/// `1 / n` is below about 9% (`token_ratio / (1 + token_ratio)`), and fewer
/// and fewer above. Failures at random come in runs that the bucket's
/// level follows: with attempts failing independently, at most 1% of the
/// retries are refused while 4% of attempts fail or fewer, about 10% at
/// 7%.
///
/// **A restart.** A failure classified [`Verdict::Refused`](crate::Verdict::Refused)
/// (refused before any work: a refused connection, a server starting up)
/// whose retry the bucket refuses does not give up when its call has a
/// deadline: the call holds, sending nothing, until the dependency
/// answers again (any caller's first attempt, never held back, succeeds;
/// with no answer at all, one held call goes as a probe about every 200 ms);
/// then held calls retry one at a time, two at a time once a released
/// retry has been answered, and a released call refused again sends the
/// others back to waiting for another answer. A held call gives up at its deadline, or
/// once the bucket has refused retries for [`ride_out`](Self::ride_out)
/// (10 s by default), after which refused calls give up at once again
/// until the dependency answers. So through a refusing outage the budget
/// sends no more than without holds (first attempts, and the retries the
/// bound above allows, and a probe about every 200 ms); after it, at most
/// two requests more at a time than the dependency's other callers send.
/// That also bounds the rescue by the dependency's round trip: one that
/// answers in 50 ms gets back at most 40 held calls a second per budget.
///
/// It is one atomic word: a call that succeeds with the bucket full reads
/// it and writes nothing; every other change is one compare-and-swap, so
/// racing callers never lose an update.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Instant;
/// use backstop::limit::TokenBudget;
///
/// static BUDGET: TokenBudget = TokenBudget::new(10, 0.1);
/// let now = Instant::now();
/// // An outage: every failure takes a token; retries stop above half.
/// let allowed = (0..20).filter(|_| BUDGET.failed(now)).count();
/// assert_eq!(allowed, 4); // 9, 8, 7 and 6 tokens left: above 5
/// // Answers come back: 0.1 token each.
/// for _ in 0..60 {
///     BUDGET.answered(now);
/// }
/// assert_eq!(BUDGET.tokens(), 6.0);
/// assert!(!BUDGET.failed(now), "5 left: not above half, no retry");
/// ```
///
/// Invalid arguments are rejected while the `static` is compiled:
///
/// ```compile_fail
/// # extern crate backstop_runtime as backstop;
/// # use backstop::limit::TokenBudget;
/// static BAD: TokenBudget = TokenBudget::new(0, 0.1);
/// # fn main() { let _ = &BAD; }
/// ```
pub struct TokenBudget {
    /// `max_tokens`, in milli-tokens.
    max: u64,
    /// Added per answer, in milli-tokens.
    ratio: u64,
    /// Milli-tokens refilled per tick (0: no refill in time).
    refill_per_tick: u64,
    /// The tokens (milli) in the low half, the tick of the last change in
    /// the high half.
    state: AtomicU64,
    /// Where its ticks are counted from.
    anchor: Anchor,
    /// Held calls released and out, their retries not yet decided, and
    /// how many may be (1 after a refusal, [`RELEASED_MOST`] once a
    /// released retry has been answered).
    released: AtomicU64,
    places: AtomicU64,
    /// The tick (plus one) at which a held call was last let go (or the
    /// budget began refusing): with no answer, one goes as a probe every
    /// [`PROBE_TICKS`].
    last_grant: AtomicU64,
    /// The tick (plus one) at which it began refusing retries, 0 while it
    /// allows them: how long the dependency has been refusing.
    refusing_since: AtomicU64,
    /// How long a refusal may be ridden out, in ticks (0: never).
    ride_out_ticks: u64,
    /// Answers credited (with the bucket not full: a full one allows
    /// retries anyway), and their count when held calls were last told to
    /// wait for a new one (the budget began refusing, or a released call
    /// failed).
    answers: AtomicU64,
    closed_at: AtomicU64,
}

/// The most held calls released and out at once, once a released retry has
/// been answered (one before): in the storm's restarts three at once sent
/// 1.21× capacity in some 100 ms after the restart, two 1.17× at most.
const RELEASED_MOST: u64 = 2;

/// With no answer to open the way, a held call is let go as a probe once
/// this many ticks have passed since the last was (100 to 200 ms, seen at
/// a held call's next look: about every 200 ms): callers
/// that are all held find out by themselves that the dependency is back.
const PROBE_TICKS: u64 = 2;

/// How long a budget rides a refusing dependency out by default: a
/// restart takes seconds; one refusing longer is down.
const RIDE_OUT_TICKS: u64 = 10_000_000_000 / TICK_NANOS;

impl TokenBudget {
    const_unless_loom! {
    /// A token budget of `max_tokens` tokens, crediting `token_ratio` per
    /// answer (truncated to three decimal places, as gRFC A6 keeps it:
    /// 0.1239 is 0.123; a value within a millionth of a thousandth is
    /// that thousandth, so that `0.3`, stored as 0.29999…, is 0.3),
    /// refilling one token every 10 s. A budget of 1 or 2 tokens never
    /// allows a retry (a failure leaves no more than half).
    ///
    /// # Panics
    ///
    /// If `max_tokens` is zero or above 4,000,000, or `token_ratio` is not
    /// in `(0, max_tokens]`. In a `static` that is a compile error.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::TokenBudget;
    /// static PAYMENTS: TokenBudget = TokenBudget::new(20, 0.2);
    /// assert_eq!((PAYMENTS.max_tokens(), PAYMENTS.token_ratio()), (20, 0.2));
    /// ```
    pub fn new(max_tokens: u32, token_ratio: f64) -> Self {
        assert!(
            max_tokens > 0 && max_tokens <= 4_000_000,
            "TokenBudget::new: `max_tokens` must be in 1..=4000000"
        );
        assert!(
            token_ratio > 0.0 && token_ratio <= max_tokens as f64,
            "TokenBudget::new: `token_ratio` must be above 0 and at most `max_tokens`"
        );
        let max = max_tokens as u64 * MILLI;
        // Truncated to thousandths, at least one; a ratio written with
        // three decimals is kept exactly, though its binary value may lie
        // a hair below (4.35 × 1000 is 4349.999…).
        let scaled = token_ratio * MILLI as f64;
        let nearest = (scaled + 0.5) as u64;
        let ratio = if (nearest as f64 - scaled) < 1e-6 {
            nearest
        } else {
            scaled as u64
        };
        Self {
            max,
            ratio: if ratio == 0 { 1 } else { ratio },
            refill_per_tick: MILLI * TICK_NANOS / 10_000_000_000,
            state: AtomicU64::new(pack(max, 0)),
            anchor: Anchor::new(),
            released: AtomicU64::new(0),
            places: AtomicU64::new(1),
            last_grant: AtomicU64::new(0),
            refusing_since: AtomicU64::new(0),
            ride_out_ticks: RIDE_OUT_TICKS,
            answers: AtomicU64::new(0),
            closed_at: AtomicU64::new(0),
        }
    }
    }

    const_unless_loom! {
    /// The token budget `#[retry]` gives every function by default: 10 tokens,
    /// 0.1 per answer, one token back every 10 s (gRPC's defaults, and the
    /// refill).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::TokenBudget;
    /// static OWN: TokenBudget = TokenBudget::standard();
    /// assert_eq!(OWN.max_tokens(), 10);
    /// ```
    pub fn standard() -> Self {
        Self::new(10, 0.1)
    }
    }

    const_unless_loom! {
    /// One token back every `every` while the bucket is not full (the
    /// default is 10 s); `Duration::ZERO` refills from answers alone, as
    /// gRPC's bucket does. Kept to whole milli-tokens per 100 ms: a refill
    /// slower than a token per 100 s is none.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::TokenBudget;
    /// static FAST: TokenBudget = TokenBudget::new(10, 0.1).refill(Duration::from_secs(1));
    /// assert_eq!(FAST.get_refill(), Some(Duration::from_secs(1)));
    /// ```
    #[must_use]
    pub fn refill(mut self, every: Duration) -> Self {
        self.refill_per_tick = match (MILLI as u128 * TICK_NANOS as u128).checked_div(every.as_nanos()) {
            None => 0,
            Some(per_tick) if per_tick > u32::MAX as u128 => u32::MAX as u64,
            Some(per_tick) => per_tick as u64,
        };
        self
    }
    }

    const_unless_loom! {
    /// How long a dependency that refuses at once
    /// ([`Verdict::Refused`](crate::Verdict::Refused): a refused
    /// connection, a server starting up) is waited for: 10 s by default,
    /// `Duration::ZERO` never (each such call gives up as soon as the
    /// budget refuses its retry, as for any other failure).
    ///
    /// Once the budget refuses retries, a refused call with a deadline
    /// holds instead of giving up: it sends nothing, and retries when the
    /// budget sees the dependency answer again (or as the probe, one about every 200 ms), no more than two held calls at a time, or gives up at
    /// its deadline. A dependency that has refused for
    /// longer than `ride_out` (since the budget began refusing retries, or
    /// since its last answer) is not restarting but down: the held calls
    /// give up, and later ones give up at once until it answers again.
    /// Kept to 100 ms ticks, rounded down: under 100 ms is none (never
    /// hold), which configuration refuses rather than keep; at most about
    /// 6.8 years (2³¹ ticks).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::TokenBudget;
    /// static FAIL_FAST: TokenBudget = TokenBudget::standard().ride_out(Duration::ZERO);
    /// assert_eq!(FAIL_FAST.get_ride_out(), Duration::ZERO);
    /// assert_eq!(TokenBudget::standard().get_ride_out(), Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn ride_out(mut self, ride_out: Duration) -> Self {
        let ticks = ride_out.as_nanos() / TICK_NANOS as u128;
        self.ride_out_ticks = if ticks > TOKEN_MASK as u128 / 2 {
            TOKEN_MASK / 2
        } else {
            ticks as u64
        };
        self
    }
    }

    /// How long a refusing dependency is waited for
    /// ([`ride_out`](Self::ride_out)).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::TokenBudget;
    /// assert_eq!(TokenBudget::standard().get_ride_out(), Duration::from_secs(10));
    /// ```
    pub fn get_ride_out(&self) -> Duration {
        Duration::from_nanos(self.ride_out_ticks.saturating_mul(TICK_NANOS))
    }

    /// Whether a refused call may hold at `now`: the budget rides
    /// refusals out, and has refused retries for less than its
    /// [`ride_out`](Self::ride_out) (or not at all yet).
    pub(crate) fn rides_out(&self, now: Instant) -> bool {
        if self.ride_out_ticks == 0 {
            return false;
        }
        match self.refusing_since.load(Acquire) {
            0 => true,
            since => ticks_since(since - 1, self.tick(now.into())) < self.ride_out_ticks,
        }
    }

    /// One configured as this one, full, as a new process starts it.
    pub(crate) fn unused(&self) -> Self {
        Self {
            max: self.max,
            ratio: self.ratio,
            refill_per_tick: self.refill_per_tick,
            state: AtomicU64::new(pack(self.max, 0)),
            anchor: Anchor::new(),
            released: AtomicU64::new(0),
            places: AtomicU64::new(1),
            last_grant: AtomicU64::new(0),
            refusing_since: AtomicU64::new(0),
            ride_out_ticks: self.ride_out_ticks,
            answers: AtomicU64::new(0),
            closed_at: AtomicU64::new(0),
        }
    }

    /// The most tokens it holds.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::TokenBudget;
    /// assert_eq!(TokenBudget::new(20, 0.5).max_tokens(), 20);
    /// ```
    pub const fn max_tokens(&self) -> u32 {
        (self.max / MILLI) as u32
    }

    /// The tokens each answer adds.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::TokenBudget;
    /// assert_eq!(TokenBudget::new(20, 0.5).token_ratio(), 0.5);
    /// ```
    pub fn token_ratio(&self) -> f64 {
        self.ratio as f64 / MILLI as f64
    }

    /// How often a token comes back in time, if ever.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::TokenBudget;
    /// assert_eq!(TokenBudget::standard().get_refill(), Some(Duration::from_secs(10)));
    /// assert_eq!(TokenBudget::standard().refill(Duration::ZERO).get_refill(), None);
    /// ```
    pub fn get_refill(&self) -> Option<Duration> {
        (self.refill_per_tick > 0).then(|| {
            Duration::from_nanos(
                u64::try_from(
                    u128::from(MILLI) * u128::from(TICK_NANOS) / u128::from(self.refill_per_tick),
                )
                .unwrap_or(u64::MAX),
            )
        })
    }

    /// The tokens now (as last changed: the refill is counted at the next
    /// change).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::TokenBudget;
    /// let budget = TokenBudget::standard();
    /// assert_eq!(budget.tokens(), 10.0);
    /// budget.failed(Instant::now());
    /// assert_eq!(budget.tokens(), 9.0);
    /// ```
    pub fn tokens(&self) -> f64 {
        tokens_of(self.state.load(Relaxed)) as f64 / MILLI as f64
    }

    /// Whether a failure now would be allowed its retry (more than half
    /// left after it takes its token), without taking anything.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::TokenBudget;
    /// let budget = TokenBudget::standard();
    /// let now = Instant::now();
    /// assert!(budget.allows_retry(now));
    /// while budget.failed(now) {} // failures until one is refused its retry
    /// assert!(!budget.allows_retry(now));
    /// assert_eq!(budget.tokens(), 5.0, "half the bucket: nothing was taken by asking");
    /// ```
    pub fn allows_retry(&self, now: Instant) -> bool {
        self.refilled(self.state.load(Acquire), self.tick(now.into()))
            .saturating_sub(MILLI)
            > self.max / 2
    }

    /// Whether a hedge may be sent now: more than `max_tokens / 2` tokens,
    /// as gRFC A6 grants hedges. Nothing is taken: a hedge is not a
    /// failure, and only a failure takes a token.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::TokenBudget;
    ///
    /// let budget = TokenBudget::new(10, 0.1);
    /// let now = Instant::now();
    /// for _ in 0..4 {
    ///     budget.failed(now);
    /// }
    /// assert!(budget.allows_hedge(now), "6 tokens: above half");
    /// assert!(!budget.allows_retry(now), "a failure would leave 5");
    /// budget.failed(now);
    /// assert!(!budget.allows_hedge(now), "5 tokens: not above half");
    /// ```
    pub fn allows_hedge(&self, now: Instant) -> bool {
        self.refilled(self.state.load(Acquire), self.tick(now.into())) > self.max / 2
    }

    /// The tick of `now`, in the 32 bits the word has for it (a tick is
    /// 100 ms: 13 years before it wraps, and a wrapped difference is read
    /// as elapsed).
    fn tick(&self, now: Moment) -> u64 {
        (self.anchor.nanos(now) / TICK_NANOS) & TOKEN_MASK
    }

    /// The tokens in `word` at tick `now`, the refill since its tick
    /// counted (a tick behind the word's counts nothing: callers whose
    /// clocks disagree never take tokens away).
    fn refilled(&self, word: u64, now: u64) -> u64 {
        let elapsed = now.wrapping_sub(tick_of(word)) & TOKEN_MASK;
        // A tick "behind" wraps to a huge difference: read it as none.
        let elapsed = if elapsed > TOKEN_MASK / 2 { 0 } else { elapsed };
        tokens_of(word)
            .saturating_add(elapsed.saturating_mul(self.refill_per_tick))
            .min(self.max)
    }

    /// Full at `now`: as a fresh one is.
    pub(crate) fn is_full(&self, now: Instant) -> bool {
        self.refilled(self.state.load(Acquire), self.tick(now.into())) >= self.max
    }

    /// An attempt failed in a way the classifier would retry: one token
    /// less. Answers whether a retry of it is allowed: more than
    /// `max_tokens / 2` tokens left.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::TokenBudget;
    /// let budget = TokenBudget::standard(); // 10 tokens
    /// let now = Instant::now();
    /// let allowed = (0..6).map(|_| budget.failed(now)).collect::<Vec<_>>();
    /// // 9, 8, 7, 6 left: retried; 5 and 4 are not more than half.
    /// assert_eq!(allowed, [true, true, true, true, false, false]);
    /// ```
    pub fn failed(&self, now: Instant) -> bool {
        let now = self.tick(now.into());
        let mut current = self.state.load(Acquire);
        loop {
            let left = self.refilled(current, now).saturating_sub(MILLI);
            match self.state.compare_exchange_weak(
                current,
                pack(left, later(tick_of(current), now)),
                AcqRel,
                Acquire,
            ) {
                Ok(_) => {
                    let allowed = left > self.max / 2;
                    self.note_refusing(!allowed, now);
                    return allowed;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Keeps when the budget began refusing retries (`refusing` at tick
    /// `now`), for [`rides_out`](Self::rides_out): a failure allowed its
    /// retry, or an answer that brings retries back, ends the refusal.
    #[inline]
    fn note_refusing(&self, refusing: bool, now: u64) {
        if self.ride_out_ticks == 0 {
            return;
        }
        let since = self.refusing_since.load(Relaxed);
        if refusing && since == 0 {
            if self
                .refusing_since
                .compare_exchange(0, now + 1, AcqRel, Relaxed)
                .is_ok()
            {
                // Held calls wait for an answer from now on, or for a
                // probe's turn.
                self.close_release();
                self.last_grant.store(now + 1, Release);
                self.places.store(1, Release);
            }
        } else if !refusing && since != 0 {
            self.refusing_since.store(0, Release);
        }
    }

    /// A call got an answer (a success, or an error that no retry can
    /// fix): `token_ratio` more, up to `max_tokens`. With the bucket full,
    /// a read and nothing else.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::TokenBudget;
    /// let budget = TokenBudget::standard(); // 0.1 a token per answer
    /// let now = Instant::now();
    /// budget.failed(now);
    /// budget.answered(now);
    /// assert!((budget.tokens() - 9.1).abs() < 1e-9);
    /// ```
    #[inline]
    pub fn answered(&self, now: Instant) {
        self.answered_at(|| now.into());
    }

    /// [`answered`](Self::answered) at a moment a call keeps, read only if
    /// the budget is not full.
    #[inline]
    pub(crate) fn answered_at(&self, now: impl FnOnce() -> Moment) {
        let current = self.state.load(Acquire);
        if tokens_of(current) < self.max {
            self.credit(current, now());
        }
    }

    /// A call held after a refusal ([`Verdict::Refused`](crate::Verdict::Refused))
    /// asks to retry now: whether it may. It may when the way is open (the
    /// dependency has answered since the budget began refusing or since a
    /// released retry was last refused, or the budget allows retries
    /// again) and fewer released calls are out than the places: one after
    /// a refusal, two once a released retry has been answered. With the
    /// way closed, one held call goes as a
    /// probe about every 200 ms, alone: callers that are all held find the
    /// dependency back by themselves. A `true` takes a place, which
    /// [`release_ended`](Self::release_ended) gives back.
    pub(crate) fn may_release(&self, now: Instant) -> bool {
        let tick = self.tick(now.into());
        let open =
            self.answers.load(Acquire) > self.closed_at.load(Acquire) || self.allows_retry(now);
        let places = if open {
            self.places.load(Acquire)
        } else {
            let last = self.last_grant.load(Acquire);
            if last != 0 && ticks_since(last - 1, tick) < PROBE_TICKS {
                return false;
            }
            1
        };
        let mut out = self.released.load(Acquire);
        while out < places {
            match self
                .released
                .compare_exchange_weak(out, out + 1, AcqRel, Acquire)
            {
                Ok(_) => {
                    self.last_grant.store(tick + 1, Release);
                    return true;
                }
                Err(actual) => out = actual,
            }
        }
        false
    }

    /// A released call's retry has been decided (or the call dropped):
    /// its place is free. Answered, there are two places; refused again,
    /// one, and the way is closed until another answer.
    pub(crate) fn release_ended(&self, refused: bool) {
        if refused {
            self.places.store(1, Release);
            self.close_release();
        } else {
            self.places.store(RELEASED_MOST, Release);
        }
        self.released.fetch_sub(1, AcqRel);
    }

    /// A released call was dropped before its retry was decided: its place
    /// is free, and nothing was learnt.
    pub(crate) fn release_dropped(&self) {
        self.released.fetch_sub(1, AcqRel);
    }

    /// Held calls wait for an answer newer than those counted so far.
    fn close_release(&self) {
        self.closed_at.fetch_max(self.answers.load(Acquire), AcqRel);
    }

    /// [`answered`](Self::answered) with the bucket not full.
    #[cold]
    fn credit(&self, mut current: u64, now: Moment) {
        let now = self.tick(now);
        loop {
            let tokens = self
                .refilled(current, now)
                .saturating_add(self.ratio)
                .min(self.max);
            match self.state.compare_exchange_weak(
                current,
                pack(tokens, later(tick_of(current), now)),
                AcqRel,
                Acquire,
            ) {
                Ok(_) => {
                    // Counted for held calls only while the budget refuses:
                    // otherwise an answer costs nothing more than its credit.
                    if self.refusing_since.load(Relaxed) != 0 {
                        self.answers.fetch_add(1, AcqRel);
                    }
                    if tokens.saturating_sub(MILLI) > self.max / 2 {
                        self.note_refusing(false, now);
                    } else if self.ride_out_ticks != 0 && self.refusing_since.load(Relaxed) != 0 {
                        // Still refusing retries, but the dependency
                        // answers: it is not down. The ride-out counts from
                        // its last answer.
                        self.refusing_since.store(now + 1, Release);
                    }
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }
}

impl fmt::Debug for TokenBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBudget")
            .field("max_tokens", &self.max_tokens())
            .field("token_ratio", &self.token_ratio())
            .field("refill", &self.get_refill())
            .field("tokens", &self.tokens())
            .finish()
    }
}

impl Default for TokenBudget {
    fn default() -> Self {
        Self::standard()
    }
}

/// How many call sites get a token budget of their own; more share one.
#[cfg(not(loom))]
const SITES: usize = 1024;

/// The token budgets of the call sites of `Retry::new` (and `call`,
/// `call_async`): made on a site's first call, kept for the process's life.
#[cfg(not(loom))]
static SITE_THROTTLES: [std::sync::OnceLock<(
    &'static std::panic::Location<'static>,
    &'static TokenBudget,
)>; SITES] = [const { std::sync::OnceLock::new() }; SITES];

/// What call sites beyond [`SITES`] share.
#[cfg(not(loom))]
static OVERFLOW: TokenBudget = TokenBudget::standard();

/// The token budget of the code at `site`: a call site's own, as
/// `#[retry]` gives each function its own. Lock-free: a site's first call
/// claims a slot of a fixed table (open addressing, by the site's
/// address); every later call finds it with a load or a few.
#[cfg(not(loom))]
#[inline]
pub(crate) fn at_call_site(site: &'static std::panic::Location<'static>) -> &'static TokenBudget {
    // Fibonacci hashing of the address.
    let start = ((std::ptr::from_ref(site) as usize as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        >> 54) as usize
        % SITES;
    // Every call but a site's first finds its slot here, most at once.
    if let Some(&(owner, throttle)) = SITE_THROTTLES[start].get()
        && std::ptr::eq(owner, site)
    {
        return throttle;
    }
    probed(site, start)
}

/// The token budget of `site`, found (or claimed) by probing from `start`.
#[cfg(not(loom))]
#[cold]
#[inline(never)]
fn probed(site: &'static std::panic::Location<'static>, start: usize) -> &'static TokenBudget {
    let same = |a: &std::panic::Location<'_>| {
        std::ptr::eq(a, site)
            || (a.line() == site.line() && a.column() == site.column() && a.file() == site.file())
    };
    for probe in 0..SITES {
        let slot = &SITE_THROTTLES[(start + probe) % SITES];
        let (owner, throttle) = *slot.get_or_init(|| {
            (
                site,
                Box::leak(Box::new(TokenBudget::standard())) as &'static TokenBudget,
            )
        });
        if same(owner) {
            return throttle;
        }
    }
    &OVERFLOW
}

/// A token budget of a layer's own, full when the layer gets it: one of
/// a pool of leaked ones, lent to one layer at a time (its clones, services
/// and calls hold it through the layer's shared part), and back in the
/// pool, to be filled again for another, when the last of them is dropped.
/// So calls may hold a `&'static` reference to it, and the pool is only as
/// large as the most layers ever alive at once (a layer built per request
/// takes one back).
#[cfg(feature = "tower")]
pub(crate) struct OwnBudget(&'static TokenBudget);

#[cfg(feature = "tower")]
static LENDABLE: std::sync::Mutex<Vec<&'static TokenBudget>> = std::sync::Mutex::new(Vec::new());

#[cfg(feature = "tower")]
impl OwnBudget {
    /// A full token budget, of the standard size, lent to one owner.
    pub(crate) fn lend() -> Self {
        let mut free = LENDABLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let throttle = match free.pop() {
            Some(throttle) => {
                // Nobody holds it any more: it starts again, full.
                throttle.state.store(pack(throttle.max, 0), Relaxed);
                throttle.released.store(0, Relaxed);
                throttle.places.store(1, Relaxed);
                throttle.last_grant.store(0, Relaxed);
                throttle.refusing_since.store(0, Relaxed);
                throttle.answers.store(0, Relaxed);
                throttle.closed_at.store(0, Relaxed);
                throttle.anchor.reset();
                throttle
            }
            None => Box::leak(Box::new(TokenBudget::standard())),
        };
        Self(throttle)
    }

    /// The token budget, for as long as this is held.
    pub(crate) fn get(&self) -> &'static TokenBudget {
        self.0
    }
}

#[cfg(feature = "tower")]
impl Drop for OwnBudget {
    fn drop(&mut self) {
        LENDABLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(self.0);
    }
}

/// Under loom (whose models do not use call sites): a token budget per call.
#[cfg(loom)]
pub(crate) fn at_call_site(_: &'static std::panic::Location<'static>) -> &'static TokenBudget {
    Box::leak(Box::new(TokenBudget::standard()))
}
