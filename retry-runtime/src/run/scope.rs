//! The call's scope: what an attempt can know about the call it is part
//! of ([`context()`]), a deadline for a block of code ([`deadline`],
//! [`deadline_sync`]), and a call carried into spawned work
//! ([`current_call`], [`InCurrentCall`]).
//!
//! Inside an attempt, [`context()`] gives the attempt's number, the call's
//! idempotency key and its deadline. Nested calls read it too: a call made
//! inside another's attempt never outlives the enclosing deadline, and when
//! it gives up after retrying (or returns, after retrying, an answer saying
//! the dependency failed), the enclosing call does not retry on top of it,
//! also through calls between (one layer retries per failure domain: 3 × 3
//! attempts would be 9).
//!
//! The context lives in a thread-local set around each attempt: around the
//! closure for a sync attempt, around each poll of the attempt's future for
//! an async one, so it follows the task across `.await` points and worker
//! threads.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{self, Poll};
use std::time::{Duration, Instant};

use crate::state::backoff::Rng;

/// What an attempt knows about its call: see [`context()`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::Error;
/// use backstop::{context, Policy};
///
/// let out: Result<u32, Error> = backstop::call(&Policy::new(), || {
///     let cx = context().expect("inside an attempt");
///     Ok(cx.attempt())
/// });
/// assert_eq!(out.unwrap(), 1);
/// assert!(context().is_none(), "outside an attempt");
/// ```
#[derive(Clone, Copy)]
pub struct Context {
    attempt: u32,
    key: IdempotencyKey,
    deadline: Option<Instant>,
    now: fn() -> Instant,
    /// The deadline is the attempt's cut-off, sooner than the call's.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    cut: bool,
}

impl Context {
    /// The 1-based number of this attempt.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, testing::VirtualTime, Policy};
    /// let _vt = VirtualTime::start();
    /// let mut attempts = Vec::new();
    /// let _: Result<(), std::io::Error> = backstop::call(&Policy::new(), || {
    ///     attempts.push(context().unwrap().attempt());
    ///     Err(std::io::ErrorKind::HostUnreachable.into())
    /// });
    /// assert_eq!(attempts, [1, 2, 3]);
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A random key, the same for every attempt of one call and different
    /// for every call: send it as an `Idempotency-Key` header, and a server
    /// that honours it does the work of a retried `POST` once. Sending it
    /// does not make the call idempotent to the loop: declare that
    /// (`idempotent = true`, [`Policy::idempotent`](crate::Policy::idempotent))
    /// when the server honours it, and a timeout or a reset is retried too.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, testing::VirtualTime, Policy};
    /// let _vt = VirtualTime::start();
    /// let mut keys = Vec::new();
    /// let _: Result<(), std::io::Error> = backstop::call(&Policy::new(), || {
    ///     keys.push(context().unwrap().idempotency_key());
    ///     Err(std::io::ErrorKind::ConnectionRefused.into())
    /// });
    /// assert_eq!(keys.len(), 3);
    /// assert!(keys.iter().all(|k| *k == keys[0]), "stable across attempts");
    /// assert_eq!(keys[0].to_string().len(), 36); // UUID text form
    /// ```
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.key
    }

    /// When the call must be over: its own deadline, or the enclosing
    /// call's if that is sooner; in an attempt cut off after an
    /// `attempt_timeout`, when it is cut off, if that is sooner still.
    /// `None` without any.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::{Duration, Instant};
    /// use backstop::{context, Policy};
    /// let policy = Policy::new().deadline(Some(Duration::from_secs(5)));
    /// let deadline = backstop::call(&policy, || Ok::<_, std::io::Error>(context().unwrap().deadline()));
    /// let deadline = deadline.unwrap().expect("a deadline of 5 s");
    /// assert!(deadline <= Instant::now() + Duration::from_secs(5));
    /// let none = Policy::new().deadline(None);
    /// let deadline = backstop::call(&none, || Ok::<_, std::io::Error>(context().unwrap().deadline()));
    /// assert_eq!(deadline.unwrap(), None);
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left before the [deadline](Self::deadline) (an attempt's
    /// cut-off, if sooner), on the call's clock (virtual time included);
    /// zero once it has passed. `None` without a deadline. Give it to the
    /// operation as its own timeout.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::{context, testing::VirtualTime, Policy};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().deadline(Some(Duration::from_secs(5)));
    /// let left = backstop::call(&policy, || {
    ///     Ok::<_, std::io::Error>(context().unwrap().remaining())
    /// });
    /// assert_eq!(left.unwrap(), Some(Duration::from_secs(5)));
    /// ```
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since((self.now)()))
    }

    /// Whether the [deadline](Self::deadline) is the attempt's cut-off
    /// (the loop cuts the attempt off then, with its own error).
    #[cfg(feature = "reqwest")]
    pub(crate) fn is_cut_off(&self) -> bool {
        self.cut
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("attempt", &self.attempt)
            .field("idempotency_key", &self.key)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// The idempotency key of a call: 128 random bits, shown as a UUID
/// (version 4, the random kind).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::scope::IdempotencyKey;
/// let key = IdempotencyKey::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef);
/// assert_eq!(key.to_string(), "01234567-89ab-4def-8123-456789abcdef");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
// Two words rather than a `u128`: a `u128` would align the frame every
// attempt copies in and out of its thread-local to 16 bytes.
pub struct IdempotencyKey([u64; 2]);

impl IdempotencyKey {
    /// A fresh random key (a UUID of version 4).
    ///
    /// Keys are unique, not secret: they come from a fast generator
    /// (`rand`'s `SmallRng`: xoshiro256++ on a 64-bit target) of the calling thread, which the operating system's
    /// randomness seeds once per thread, with 128 bits, so that the keys of
    /// a whole fleet sharing a server's deduplication window do not
    /// collide. A key is not a token: do not use one where guessing it
    /// would grant anything.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::scope::IdempotencyKey;
    /// assert_ne!(IdempotencyKey::random(), IdempotencyKey::random());
    /// ```
    pub fn random() -> Self {
        let bits = KEYS.with(|keys| {
            let mut keys = keys.borrow_mut();
            let keys = keys.get_or_insert_with(seeded_by_the_system);
            (u128::from(keys.next_u64()) << 64) | u128::from(keys.next_u64())
        });
        // The UUID version (4: random) and variant (RFC 9562) bits.
        let bits = (bits & !(0xf << 76) & !(0b11 << 62)) | (0x4 << 76) | (0b10 << 62);
        Self::from_u128(bits)
    }

    /// A key with these bits, as they are (for tests, or a key received
    /// from elsewhere).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::scope::IdempotencyKey;
    /// let key = IdempotencyKey::from_u128(42);
    /// assert_eq!(key.to_u128(), 42);
    /// ```
    pub const fn from_u128(bits: u128) -> Self {
        Self([(bits >> 64) as u64, bits as u64])
    }

    /// The key's bits.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::scope::IdempotencyKey;
    /// let key = IdempotencyKey::random();
    /// assert_eq!(IdempotencyKey::from_u128(key.to_u128()), key);
    /// assert_eq!(key.to_u128() >> 76 & 0xf, 4, "a version 4 UUID");
    /// ```
    pub const fn to_u128(self) -> u128 {
        ((self.0[0] as u128) << 64) | self.0[1] as u128
    }
}

thread_local! {
    /// This thread's generator of idempotency keys, seeded at its first key.
    static KEYS: std::cell::RefCell<Option<Rng>> = const { std::cell::RefCell::new(None) };
}

/// A generator seeded from the operating system's randomness: the 128-bit
/// keys that std's `RandomState` reads from it once per thread (and steps
/// for every `RandomState` made), spread over the generator's state.
fn seeded_by_the_system() -> Rng {
    use std::hash::BuildHasher;
    let keyed = std::collections::hash_map::RandomState::new();
    Rng::from_state(std::array::from_fn(|word| keyed.hash_one(word)))
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.to_u128();
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (b >> 96) as u32,
            (b >> 80) as u16,
            (b >> 64) as u16,
            (b >> 48) as u16,
            b & 0xffff_ffff_ffff,
        )
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The context of the attempt running on this thread (or task), and what
/// nested calls reported back to it.
#[derive(Clone, Copy)]
struct Frame {
    attempt: u32,
    /// Drawn on first use: a call that never asks for its key pays nothing.
    key: MaybeKey,
    deadline: Option<Instant>,
    now: fn() -> Instant,
    /// What the calls nested in this attempt, and the call around it, told
    /// it ([`Flags`]).
    flags: Flags,
}

/// What a frame was told: by a call nested in its attempt (that it gave up
/// after retrying, that it hedged) or by its own call (that the attempt is
/// one of a round that hedged).
#[derive(Clone, Copy)]
struct Flags(u8);

impl Flags {
    const NONE: Self = Self(0);
    /// A call nested in this attempt gave up after retrying.
    const RETRIED_BELOW: Self = Self(1);
    /// A call nested in this attempt, at any depth, sent a hedge: the
    /// attempt's own call sends none (its hedge would copy that one's).
    const HEDGED_BELOW: Self = Self(2);
    /// The attempt is one of a round that sent a hedge, or nested in one:
    /// calls in it send none (the round's copy copies them).
    const HEDGED_ABOVE: Self = Self(4);
    /// The frame's deadline is its attempt's cut-off (an
    /// `attempt_timeout`'s), sooner than the call's.
    const CUT: Self = Self(8);
    /// What work carried out of an attempt tells it back.
    const REPORTED: Self = Self(Self::RETRIED_BELOW.0 | Self::HEDGED_BELOW.0);

    const fn has(self, flags: Self) -> bool {
        self.0 & flags.0 != 0
    }

    const fn with(self, flags: Self) -> Self {
        Self(self.0 | flags.0)
    }

    const fn only(self, flags: Self) -> Self {
        Self(self.0 & flags.0)
    }
}

/// Where work carried out of an attempt ([`current_call`]: a spawned task,
/// a blocking closure) and the attempt tell each other what a frame's
/// [`Flags`] would: the work, that a call in it gave up after retrying or
/// hedged; the attempt, that its round hedged.
pub(crate) type Carried = Arc<AtomicU8>;

/// The frame of the attempt running on this thread, field by field. Every
/// call enters and leaves it: moving whole frames in and out of one `Cell`
/// stalled the processor (a frame stored field by field, then loaded whole,
/// defeats store forwarding), which made the context the largest cost of a
/// call whose first attempt succeeds.
struct Current {
    /// 0 outside every attempt (attempts count from 1).
    attempt: Cell<u32>,
    key: Cell<MaybeKey>,
    deadline: Cell<Option<Instant>>,
    now: Cell<fn() -> Instant>,
    flags: Cell<Flags>,
    /// Whether a server is handling a request on this thread ([`serving`]),
    /// and whether a call nested in it, at any depth, gave up after
    /// retrying. Not an attempt's: attempts do not save or restore it.
    serving: Cell<Handling>,
    /// [`SHARED`] holds this frame's flag: the first `current_call` of an
    /// attempt made one. A frame without (nearly every one) never touches
    /// [`SHARED`].
    has_shared: Cell<bool>,
}

impl Current {
    /// Every field as it is, in an attempt or not: what an attempt or a
    /// deadline scope saves and puts back.
    fn raw(&self) -> Frame {
        Frame {
            attempt: self.attempt.get(),
            key: self.key.get(),
            deadline: self.deadline.get(),
            now: self.now.get(),
            flags: self.flags.get(),
        }
    }

    fn set_raw(&self, frame: Frame) {
        self.attempt.set(frame.attempt);
        self.key.set(frame.key);
        self.deadline.set(frame.deadline);
        self.now.set(frame.now);
        self.flags.set(frame.flags);
    }

    fn frame(&self) -> Option<Frame> {
        let attempt = self.attempt.get();
        (attempt != 0).then(|| Frame {
            attempt,
            key: self.key.get(),
            deadline: self.deadline.get(),
            now: self.now.get(),
            flags: self.flags.get(),
        })
    }
}

thread_local! {
    static CURRENT: Current = const {
        Current {
            attempt: Cell::new(0),
            key: Cell::new(MaybeKey::NONE),
            deadline: Cell::new(None),
            now: Cell::new(Instant::now),
            flags: Cell::new(Flags::NONE),
            serving: Cell::new(Handling::No),
            has_shared: Cell::new(false),
        }
    };
    /// Where work carried out of the current attempt ([`current_call`]: a
    /// spawned task, a blocking closure) says that a call nested in it gave
    /// up after retrying, if that attempt made one (then
    /// `CURRENT.has_shared`). Apart from `CURRENT`: a thread-local that
    /// needs dropping is checked for life at every access, and this one is
    /// rarely needed.
    static SHARED: Cell<Option<Carried>> = const { Cell::new(None) };
}

/// Makes `flag` the current frame's shared flag, returning the one it had.
#[inline]
fn swap_shared(current: &Current, flag: Option<Carried>) -> Option<Carried> {
    if !current.has_shared.get() && flag.is_none() {
        return None;
    }
    swap_shared_slow(current, flag)
}

/// [`swap_shared`], entering an attempt whose work carried out of it
/// (`flag`) is to learn that a round around it hedged: `current` is still
/// the frame around it.
#[inline]
fn swap_shared_entering(current: &Current, flag: Option<Carried>) -> Option<Carried> {
    if !current.has_shared.get() && flag.is_none() {
        return None;
    }
    entering_shared_slow(current, flag)
}

#[cold]
fn entering_shared_slow(current: &Current, flag: Option<Carried>) -> Option<Carried> {
    // A copy of the attempt around this one copies the work carried out
    // of this one too: the calls in it send no hedge.
    if let Some(carried) = &flag
        && current.attempt.get() != 0
        && current.flags.get().has(Flags::HEDGED_ABOVE)
    {
        carried.fetch_or(Flags::HEDGED_ABOVE.0, Ordering::Release);
    }
    swap_shared_slow(current, flag)
}

#[cold]
fn swap_shared_slow(current: &Current, flag: Option<Carried>) -> Option<Carried> {
    current.has_shared.set(flag.is_some());
    SHARED
        .try_with(|shared| shared.replace(flag))
        .ok()
        .flatten()
}

/// The context of the attempt running now, if any: inside a sync attempt
/// or an async attempt's future (across `.await` points and threads).
/// `None` outside every attempt.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{context, Policy};
/// assert!(context().is_none());
/// let attempt = backstop::call(&Policy::new(), || {
///     Ok::<_, std::io::Error>(context().map(|cx| cx.attempt()))
/// });
/// assert_eq!(attempt.unwrap(), Some(1));
/// ```
pub fn context() -> Option<Context> {
    CURRENT
        .try_with(|current| {
            let frame = current.frame()?;
            let key = frame.key.get().unwrap_or_else(|| {
                let key = IdempotencyKey::random();
                current.key.set(MaybeKey(key));
                key
            });
            Some(Context {
                attempt: frame.attempt,
                key,
                deadline: frame.deadline,
                now: frame.now,
                cut: frame.flags.has(Flags::CUT),
            })
        })
        .ok()
        .flatten()
}

/// The time left before the deadline of the code running here: inside
/// an attempt, its [`context()`]'s [`remaining()`](Context::remaining);
/// outside one, the deadline of the scope it runs in (a [`deadline`] or
/// [`deadline_sync`] scope, a request a server handles behind
/// `tonic::ServerLayer`), read inside a tokio runtime on tokio's clock
/// (paused time included), elsewhere on the system's
/// ([`VirtualTime`](crate::testing::VirtualTime) included), and on the
/// custom timer's once one is set: keep a test's scopes on one clock (a
/// `deadline_sync` scope inside a tokio runtime is read on tokio's). The
/// first two: `the_time_left_of_a_scope_is_read_on_its_own_clock`.
/// `None` without a deadline. For work that is no retry call
/// but must end in time: a database's statement timeout, a client's own
/// timeout, a choice of a cheaper answer.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::scope;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// assert_eq!(scope::time_left(), None);
/// let left = scope::deadline(Duration::from_secs(2), async { scope::time_left() }).await;
/// assert_eq!(left.unwrap(), Some(Duration::from_secs(2)));
/// # }
/// ```
pub fn time_left() -> Option<Duration> {
    use crate::time::timer::RuntimeClock;
    match context() {
        Some(cx) => cx.remaining(),
        // In an async runtime's task (a custom timer's clock, or tokio's),
        // on its clock; elsewhere on the system's, as a sync scope's.
        None => match RuntimeClock::current() {
            RuntimeClock::Custom => scope_left(RuntimeClock::Custom),
            #[cfg(feature = "tokio")]
            RuntimeClock::Tokio if crate::time::timer::in_tokio() => {
                scope_left(RuntimeClock::Tokio)
            }
            _ => scope_left(crate::time::clock::SystemClock),
        },
    }
}

/// Outside an attempt, the time left before the deadline of the scope
/// the code runs in, read on `clock` (the async loops' timer for a
/// [`deadline`] scope or a server's request, the system's for a
/// [`deadline_sync`] one); `None` without a deadline.
pub(crate) fn scope_left(clock: impl crate::time::clock::Clock) -> Option<Duration> {
    enclosing_deadline().map(|deadline| deadline.saturating_duration_since(clock.now()))
}

/// The deadline of the enclosing attempt's call or [deadline scope](deadline_sync),
/// if any: a nested call may not outlive it. (Outside both, the field is
/// `None`: attempts and scopes put back what they found.)
#[inline]
pub(crate) fn enclosing_deadline() -> Option<Instant> {
    CURRENT
        .try_with(|current| current.deadline.get())
        .ok()
        .flatten()
}

/// Runs `f` with the deadline `deadline` (or the enclosing one, if sooner)
/// for the calls nested in it, leaving everything else of the current
/// frame as it is (inside an attempt, the attempt's key and what nested
/// calls report are its own).
fn in_deadline_scope<R>(deadline: Option<Instant>, f: impl FnOnce() -> R) -> R {
    /// Puts the previous deadline back, on return and on unwind alike.
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = CURRENT.try_with(|current| current.deadline.set(self.0));
        }
    }
    let previous = CURRENT.with(|current| {
        let previous = current.deadline.get();
        let scoped = match (previous, deadline) {
            (Some(previous), Some(deadline)) => Some(previous.min(deadline)),
            (previous, deadline) => previous.or(deadline),
        };
        current.deadline.set(scoped);
        previous
    });
    let _restore = Restore(previous);
    f()
}

/// The call an attempt (or a [deadline scope](deadline_sync)) belongs to, to
/// carry into work it hands to another task or thread: see
/// [`current_call`].
///
/// Work spawned with `tokio::spawn` or `spawn_blocking` runs on its own
/// task, outside the attempt that spawned it: `#[retry]` calls made there
/// would see no deadline and retry on top of the attempt's own retries.
/// Inside [`in_scope`](Self::in_scope) or a future made with
/// [`in_current_call`](InCurrentCall::in_current_call), they see what
/// they would see in the attempt itself: [`context()`] (the same attempt
/// and idempotency key), the deadline, and the one-layer rule (a call
/// there that gives up after retrying keeps the attempt from retrying).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{context, scope::current_call, Policy};
///
/// let out: Result<bool, std::io::Error> = backstop::call(&Policy::new(), || {
///     let call = current_call(); // the attempt's call, carried to a thread
///     let seen = std::thread::spawn(move || call.in_scope(|| context().is_some()));
///     Ok(seen.join().unwrap())
/// });
/// assert!(out.unwrap(), "the thread saw the attempt");
/// assert!(current_call().in_scope(|| context().is_none()), "outside every call");
/// ```
#[derive(Clone)]
pub struct CallScope {
    /// `None` outside every attempt and deadline scope: a scope that
    /// changes nothing.
    frame: Option<Frame>,
    /// Where the work tells the attempt that a call nested in it gave up
    /// after retrying (`None` outside an attempt and a server's handling of
    /// a request).
    flag: Option<Carried>,
    /// Taken in a server's handling of a request, outside an attempt: the
    /// work's calls that give up after retrying tell it (through `flag`).
    serving: bool,
}

impl fmt::Debug for CallScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallScope")
            .field("attempt", &self.frame.map(|frame| frame.attempt))
            .field("deadline", &self.frame.and_then(|frame| frame.deadline))
            .finish_non_exhaustive()
    }
}

/// The call this code runs in (an attempt of a `#[retry]` call, a
/// deadline scope, or a gRPC server's handling of a request behind
/// `tonic::ServerLayer`), to carry into work spawned from it.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use backstop::{context, scope::{InCurrentCall, current_call}, Policy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::new().no_budget();
/// let out: Result<u32, Error> = backstop::call_async(&policy, || async {
///     // A spawned task, in the attempt's call: same attempt, same deadline.
///     let spawned = tokio::spawn(async { context().map(|cx| cx.attempt()) }.in_current_call());
///     // A blocking closure, too.
///     let call = current_call();
///     let blocking = tokio::task::spawn_blocking(move || call.in_scope(|| context().is_some()));
///     assert!(blocking.await.unwrap());
///     Ok(spawned.await.unwrap().unwrap())
/// })
/// .await;
/// assert_eq!(out.unwrap(), 1);
/// # }
/// ```
pub fn current_call() -> CallScope {
    CURRENT
        .try_with(|current| {
            let raw = current.raw();
            if raw.attempt == 0 {
                if current.serving.get() != Handling::No {
                    // A server's handling of a request carries its deadline,
                    // and learns what the work's calls did (through the
                    // flag: the frame's own, outside an attempt, may be what
                    // an earlier attempt on this thread left).
                    return CallScope {
                        frame: Some(Frame {
                            flags: Flags::NONE,
                            ..raw
                        }),
                        flag: Some(shared_flag(current)),
                        serving: true,
                    };
                }
                // A deadline scope carries its deadline; nothing else.
                let frame = raw.deadline.is_some().then_some(raw);
                return CallScope {
                    frame,
                    flag: None,
                    serving: false,
                };
            }
            // The work shares the attempt's key: draw it now if need be.
            let key = raw.key.or_draw();
            current.key.set(key);
            CallScope {
                frame: Some(Frame {
                    key,
                    // A hedged round's copy of the attempt copies the work
                    // carried out of it too: calls there send no hedge.
                    flags: raw.flags.only(Flags::HEDGED_ABOVE),
                    ..raw
                }),
                flag: Some(shared_flag(current)),
                serving: false,
            }
        })
        .unwrap_or(CallScope {
            frame: None,
            flag: None,
            serving: false,
        })
}

/// The current frame's shared flag, made now if it has none.
fn shared_flag(current: &Current) -> Carried {
    let flag = swap_shared(current, None).unwrap_or_else(|| Arc::new(AtomicU8::new(0)));
    swap_shared(current, Some(Arc::clone(&flag)));
    flag
}

impl CallScope {
    /// Runs `f` in the call: [`context()`], the deadline and the one-layer
    /// rule as in the attempt the scope was taken from.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, scope::current_call, Policy};
    /// let out: Result<u32, std::io::Error> = backstop::call(&Policy::new(), || {
    ///     let call = current_call();
    ///     std::thread::spawn(move || call.in_scope(|| Ok(context().unwrap().attempt())))
    ///         .join()
    ///         .unwrap()
    /// });
    /// assert_eq!(out.unwrap(), 1);
    /// ```
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(mut frame) = self.frame else {
            return f();
        };
        if let Some(flag) = &self.flag
            && frame.attempt != 0
        {
            // The attempt's round may have hedged since the work was
            // carried out of it.
            let told = Flags(flag.load(Ordering::Acquire));
            frame.flags = frame.flags.with(told.only(Flags::HEDGED_ABOVE));
        }
        let previous = CURRENT.with(|current| {
            let previous = (
                current.raw(),
                swap_shared(current, self.flag.clone()),
                current.serving.get(),
            );
            current.set_raw(frame);
            if self.serving {
                current.serving.set(Handling::Yes);
            }
            previous
        });
        let restore = Restore(previous.0);
        let _shared = Shared(previous.1);
        let _serving = RestoreHandling(previous.2);
        let out = f();
        if let Some(flag) = &self.flag {
            let report = CURRENT.with(|current| {
                if !self.serving {
                    current.flags.get().only(Flags::REPORTED)
                } else if current.serving.get() == Handling::Retried {
                    Flags::RETRIED_BELOW
                } else {
                    Flags::NONE
                }
            });
            if report.0 != 0 {
                flag.fetch_or(report.0, Ordering::Release);
            }
        }
        drop(restore);
        out
    }

    /// `future`, polled in the call (see [`in_scope`](Self::in_scope)),
    /// and dropped in it: a retry call inside that is dropped midway (its
    /// task aborted, say) after it retried tells the attempt so, as it
    /// would dropped in the attempt itself, if the drop comes before the
    /// attempt ends (tokio drops an aborted task when it next runs it:
    /// await its handle).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::{context, scope::current_call, Policy};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let out: Result<bool, std::io::Error> = backstop::call_async(&Policy::new(), || async {
    ///     let in_attempt = current_call().instrument(async { context().is_some() });
    ///     Ok(tokio::spawn(in_attempt).await.unwrap())
    /// })
    /// .await;
    /// assert!(out.unwrap(), "the spawned task ran in the attempt");
    /// # }
    /// ```
    pub fn instrument<F: Future>(self, future: F) -> Instrumented<F> {
        Instrumented {
            scope: self,
            future: Some(future),
        }
    }
}

pin_project_lite::pin_project! {
    /// A future polled and dropped in a call: made by
    /// [`CallScope::instrument`] and
    /// [`in_current_call`](InCurrentCall::in_current_call).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::scope::{current_call, Instrumented};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let carried: Instrumented<_> = current_call().instrument(async { 1 + 1 });
    /// assert_eq!(carried.await, 2);
    /// # }
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct Instrumented<F> {
        scope: CallScope,
        // `None` only while it is dropped, in the call.
        #[pin]
        future: Option<F>,
    }

    impl<F> PinnedDrop for Instrumented<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Not in the call while the thread's locals are torn down.
            if this.future.is_some() && CURRENT.try_with(|_| ()).is_ok() {
                let mut future = this.future;
                this.scope.in_scope(|| future.set(None));
            }
        }
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, task: &mut task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let future = this.future.as_pin_mut().expect("polled while dropped");
        this.scope.in_scope(|| future.poll(task))
    }
}

impl<F> fmt::Debug for Instrumented<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instrumented")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Carries the current call into a future, for `tokio::spawn`,
/// `smol::spawn`, async-std's `task::spawn` or any executor's: see
/// [`CallScope`]. In `backstop::prelude` too.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{context, scope::InCurrentCall, Policy};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = Policy::new();
/// let seen = backstop::call_async(&policy, || async {
///     let task = tokio::spawn(async { context().is_some() }.in_current_call());
///     Ok::<_, std::io::Error>(task.await.unwrap())
/// })
/// .await;
/// assert!(seen.unwrap());
/// # }
/// ```
pub trait InCurrentCall: Future + Sized {
    /// This future, polled and dropped in the call that is current now.
    fn in_current_call(self) -> Instrumented<Self> {
        current_call().instrument(self)
    }
}

impl<F: Future> InCurrentCall for F {}

/// Runs the sync code `f` with a deadline `limit` from now that the retry
/// calls inside it keep, without retrying anything. Sync code cannot be
/// cut off: `f` itself runs to its end, however long that takes.
///
/// Every `#[retry]` call made inside it (and in calls nested in those)
/// sees the deadline exactly as it would see an enclosing `#[retry]`
/// call's: it starts no attempt after it and sleeps no retry into it. A
/// deadline inside another, or inside an attempt, never outlives the
/// enclosing deadline. An attempt already running is not interrupted: give
/// its blocking call the time left (`context()`'s `remaining()`). Time is
/// read from [`SystemClock`](crate::time::SystemClock) (virtual under
/// [`VirtualTime`](crate::testing::VirtualTime)).
///
/// The scope ends when `f` returns: a closure returning a future
/// (`|| async { .. }`) would leave it before the future runs. Give a future
/// to [`deadline`] instead.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::time::Duration;
/// use backstop::{testing::VirtualTime, Policy};
///
/// let vt = VirtualTime::start();
/// // A handler bounds the whole request to 1 s; the call inside has 30 s.
/// let out: Result<(), Error> = backstop::scope::deadline_sync(Duration::from_secs(1), || {
///     let policy = Policy::new().attempts(100).no_budget();
///     backstop::call(&policy, || Err(ErrorKind::ConnectionRefused.into()))
/// });
/// assert!(out.is_err());
/// assert!(vt.elapsed() < Duration::from_secs(1));
/// ```
pub fn deadline_sync<R>(limit: Duration, f: impl FnOnce() -> R) -> R {
    use crate::time::clock::Clock;
    let deadline = crate::time::clock::SystemClock.now().checked_add(limit);
    in_deadline_scope(deadline, f)
}

/// Runs `future` for at most `limit` from its first poll: its output, or
/// [`Elapsed`](crate::Elapsed) once the time is up (the future is then
/// dropped, whatever it was waiting for), as `tokio::time::timeout` does.
/// And every retry call inside it keeps the deadline: a `#[retry]` call
/// awaited in it sees it exactly as it would see an enclosing `#[retry]`
/// call's, across `.await` points and worker threads, so that it gives up
/// before the deadline with its own error rather than be cut off in the
/// middle of a backoff. A deadline inside another, or inside an attempt,
/// never outlives the enclosing deadline: `future` is cut off there if it
/// comes first, with an `Elapsed` that says so (read on this scope's
/// clock, as nested calls read theirs: keep a test's scopes and calls on
/// one clock, not a `deadline_sync` in `VirtualTime` around a scope on
/// tokio's paused clock). Time is read from the call's
/// timer ([`RuntimeClock`](crate::time::timer::RuntimeClock): tokio's clock,
/// virtual when paused, inside a tokio runtime).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::io::{Error, ErrorKind};
/// use std::time::Duration;
/// use backstop::{Elapsed, Policy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let started = tokio::time::Instant::now();
/// // The retries inside give up before the deadline, with their error.
/// let out = backstop::scope::deadline(Duration::from_secs(1), async {
///     let policy = Policy::new().attempts(100).no_budget();
///     backstop::call_async(&policy, || async {
///         Err::<(), _>(Error::from(ErrorKind::ConnectionRefused))
///     })
///     .await
/// })
/// .await;
/// assert_eq!(out.unwrap().unwrap_err().kind(), ErrorKind::ConnectionRefused);
/// assert!(started.elapsed() < Duration::from_secs(1));
/// // Anything else is cut off at the deadline.
/// let started = tokio::time::Instant::now();
/// let hung = backstop::scope::deadline(Duration::from_secs(1), tokio::time::sleep(Duration::from_secs(5)));
/// let elapsed: Elapsed = hung.await.unwrap_err();
/// assert_eq!(elapsed.to_string(), "`scope::deadline` of 1s ran out");
/// assert_eq!(started.elapsed(), Duration::from_secs(1));
/// # }
/// ```
///
/// # Errors
///
/// [`Elapsed`](crate::Elapsed) when `future` has not finished by the
/// deadline.
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
pub async fn deadline<F: Future>(limit: Duration, future: F) -> Result<F::Output, crate::Elapsed> {
    use crate::time::clock::Clock;
    let clock = crate::time::timer::RuntimeClock::current();
    // This body runs at the first poll: the deadline starts there.
    let now = clock.now();
    let deadline = now.checked_add(limit);
    // The deadline it runs within (an attempt's, an enclosing scope's, a
    // served request's), if
    // sooner, ends it: a deadline inside another never outlives it.
    let within = CURRENT
        .try_with(|current| current.deadline.get())
        .ok()
        .flatten()
        .map(|enclosing| enclosing.saturating_duration_since(now))
        .filter(|left| *left < limit);
    let mut future = std::pin::pin!(future);
    let scoped =
        std::future::poll_fn(|task| in_deadline_scope(deadline, || future.as_mut().poll(task)));
    clock
        .timeout(within.unwrap_or(limit), scoped)
        .await
        .map_err(|_| match within {
            Some(_) => crate::Elapsed::scope_within(limit),
            None => crate::Elapsed::scope(limit),
        })
}

/// Tells the enclosing attempt, if any, that a call nested in it sent a
/// hedge: the attempt's own call is not to send one (one layer hedges).
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
pub(crate) fn note_hedged_below() {
    let _ = CURRENT.try_with(|current| tell_attempt(current, Flags::HEDGED_BELOW));
}

/// Tells the attempt running here, if any, `flags`.
fn tell_attempt(current: &Current, flags: Flags) {
    if current.attempt.get() != 0 {
        current.flags.set(current.flags.get().with(flags));
    }
}

/// Whether the attempt this code runs in is one of a hedged round's, or
/// nested in one: a call made here is not to hedge (one layer hedges).
#[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
pub(crate) fn hedged_above() -> bool {
    CURRENT
        .try_with(|current| {
            current.attempt.get() != 0 && current.flags.get().has(Flags::HEDGED_ABOVE)
        })
        .unwrap_or(false)
}

/// Tells the enclosing attempt, if any, and the request a server is
/// handling, if any, that a call nested in it gave up after retrying.
/// The request learns it at once, at any depth of calls: each call between
/// would pass it on as it ends, but one dropped in its lean first attempt
/// has no state to pass it on with.
pub(crate) fn note_retried_below() {
    let _ = CURRENT.try_with(|current| {
        tell_attempt(current, Flags::RETRIED_BELOW);
        if current.serving.get() != Handling::No {
            current.serving.set(Handling::Retried);
        }
    });
}

/// Whether a server is handling a request on a thread (only a tonic
/// server's layer says it is).
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "tonic"), allow(dead_code))]
enum Handling {
    No,
    Yes,
    /// And a call nested in it gave up after retrying.
    Retried,
}

/// What a server's handling of a request has learnt of the calls nested
/// in it, from one poll of the handler to the next.
#[cfg(feature = "tonic")]
#[derive(Default)]
pub(crate) struct Served {
    /// A call nested in the handler gave up after retrying.
    retried: bool,
    /// Where work carried out of the handler ([`current_call`]: a spawned
    /// task) says so, once there is some.
    shared: Option<Carried>,
}

#[cfg(feature = "tonic")]
impl Served {
    /// Did a call nested in the handler, or in work carried out of it,
    /// give up after retrying?
    pub(crate) fn retried(&self) -> bool {
        self.retried
            || self
                .shared
                .as_ref()
                .is_some_and(|flag| Flags(flag.load(Ordering::Acquire)).has(Flags::RETRIED_BELOW))
    }
}

/// Runs `f` as part of a server's handling of a request that came with
/// `deadline`: the calls nested in it keep the deadline, and `served`
/// learns if one of them gave up after retrying. The handling is a frame
/// of its own, as across a network: a caller's attempt around it in the
/// same process (a test's) lends it neither its context nor its deadline,
/// and learns what happened from the answer, as a remote caller does.
#[cfg(feature = "tonic")]
pub(crate) fn serving<R>(
    deadline: Option<Instant>,
    served: &mut Served,
    f: impl FnOnce() -> R,
) -> R {
    /// Puts the enclosing frame back, keeping what `f` noted, on return
    /// and on unwind alike.
    struct Restore<'a> {
        outer: Frame,
        outer_handling: Handling,
        outer_shared: Option<Carried>,
        served: &'a mut Served,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let outer_shared = self.outer_shared.take();
            let _ = CURRENT.try_with(|current| {
                self.served.retried |= current.serving.get() == Handling::Retried;
                self.served.shared = swap_shared(current, outer_shared);
                current.serving.set(self.outer_handling);
                current.set_raw(self.outer);
            });
        }
    }
    let restore = CURRENT.with(|current| {
        let outer = current.raw();
        current.set_raw(Frame {
            attempt: 0,
            key: MaybeKey::NONE,
            deadline,
            now: outer.now,
            flags: Flags::NONE,
        });
        Restore {
            outer,
            outer_handling: current.serving.replace(Handling::Yes),
            outer_shared: swap_shared(current, served.shared.take()),
            served,
        }
    });
    let out = f();
    drop(restore);
    out
}

/// Puts the previous frame back, on return and on unwind alike.
struct Restore(Frame);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| current.set_raw(self.0));
    }
}

/// Puts the previous handling of a request back, on return and on unwind.
struct RestoreHandling(Handling);

impl Drop for RestoreHandling {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| current.serving.set(self.0));
    }
}

/// Puts the previous frame's shared flag back, on return and on unwind.
struct Shared(Option<Carried>);

impl Drop for Shared {
    fn drop(&mut self) {
        let flag = self.0.take();
        let _ = CURRENT.try_with(|current| swap_shared(current, flag));
    }
}

/// A call's idempotency key, or none yet (all bits zero: a drawn key has
/// its version bits set). Not an `Option`: every attempt copies it in and
/// out of its thread-local, and an `Option`'s tag, stored alone, then read
/// with the key, stalls the processor's store forwarding.
#[derive(Clone, Copy, PartialEq, Eq)]
struct MaybeKey(IdempotencyKey);

impl MaybeKey {
    const NONE: Self = Self(IdempotencyKey([0; 2]));

    fn get(self) -> Option<IdempotencyKey> {
        (self != Self::NONE).then_some(self.0)
    }

    /// The key, drawn now if it was not yet.
    fn or_draw(self) -> Self {
        if self == Self::NONE {
            Self(IdempotencyKey::random())
        } else {
            self
        }
    }
}

/// What one call carries from attempt to attempt: its key, once drawn.
#[derive(Clone, Copy)]
pub(crate) struct CallContext {
    key: MaybeKey,
}

impl Default for CallContext {
    fn default() -> Self {
        Self {
            key: MaybeKey::NONE,
        }
    }
}

impl CallContext {
    /// The call's key, drawn now if it was not yet: attempts running side
    /// by side (hedges) share it.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn with_key(self) -> Self {
        Self {
            key: self.key.or_draw(),
        }
    }
}

/// The frame an attempt runs in.
pub(crate) struct Scope {
    frame: Frame,
    /// The flag of work carried out of the attempt, once there is some.
    shared: Option<Carried>,
}

impl Scope {
    #[inline]
    pub(crate) fn new(
        call: CallContext,
        attempt: u32,
        deadline: Option<Instant>,
        now: fn() -> Instant,
    ) -> Self {
        Self {
            frame: Frame {
                attempt,
                key: call.key,
                deadline,
                now,
                flags: Flags::NONE,
            },
            shared: None,
        }
    }

    /// This scope, carrying what an earlier poll of the attempt left: the
    /// flag of work carried out of it, and whether a call nested in it gave
    /// up after retrying.
    #[inline]
    pub(crate) fn carrying(mut self, shared: Option<Carried>, retried_below: bool) -> Self {
        self.shared = shared;
        self.frame.flags = if retried_below {
            Flags::RETRIED_BELOW
        } else {
            Flags::NONE
        };
        self
    }

    /// This scope, for an attempt cut off by `timer` (if it is): its
    /// deadline is the sooner of the call's and the timer's, so that what
    /// runs in the attempt (`context()`, nested calls, a header of the
    /// time left) is given no more time than the attempt has. A pointer to
    /// test, the rest out of line (most attempts have no cut-off).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub(crate) fn cut_by(mut self, timer: Option<&crate::time::timer::Sleep>) -> Self {
        if let Some(timer) = timer {
            self.cut_at(timer.deadline());
        }
        self
    }

    #[cold]
    fn cut_at(&mut self, until: Option<Instant>) {
        if let Some(until) = until
            && self.frame.deadline.is_none_or(|deadline| until < deadline)
        {
            self.frame.deadline = Some(until);
            self.frame.flags = self.frame.flags.with(Flags::CUT);
        }
    }

    /// The flag of work carried out of the attempt, if there is some.
    pub(crate) fn into_shared(self) -> Option<Carried> {
        self.shared
    }

    /// Runs `f` in this frame (restoring the previous one even if `f`
    /// panics), then returns what the call must keep and whether a nested
    /// call gave up after retrying.
    // Always inlined: the frame is then written to the thread-local from
    // registers, not built on the stack and copied (which, not inlined,
    // stalled on a store forwarded to a wider load).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub(crate) fn run<R>(mut self, f: impl FnOnce() -> R) -> (R, CallContext, bool) {
        let out = self.enter(f);
        (
            out,
            CallContext {
                key: self.frame.key,
            },
            self.frame.flags.has(Flags::RETRIED_BELOW),
        )
    }

    /// What the call must keep from this attempt so far (its key, once
    /// drawn): read after every poll, so that an attempt cancelled midway
    /// (timed out, or its future dropped) loses nothing.
    pub(crate) fn call(&self) -> CallContext {
        CallContext {
            key: self.frame.key,
        }
    }

    /// Gives this attempt the call's key (drawn for its hedges).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn share(&mut self, call: CallContext) {
        self.frame.key = call.key;
    }

    /// Did a call nested in this attempt give up after retrying?
    pub(crate) fn retried_below(&self) -> bool {
        self.frame.flags.has(Flags::RETRIED_BELOW)
    }

    /// Did a call nested in this attempt, at any depth, send a hedge?
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn hedged_below(&self) -> bool {
        self.frame.flags.has(Flags::HEDGED_BELOW)
    }

    /// This attempt's round sent a hedge, a copy of it: calls nested in
    /// it, and in work carried out of it, send none of their own (the copy
    /// copies them).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn mark_copied(&mut self) {
        self.frame.flags = self.frame.flags.with(Flags::HEDGED_ABOVE);
        if let Some(flag) = &self.shared {
            flag.fetch_or(Flags::HEDGED_ABOVE.0, Ordering::Release);
        }
    }

    /// Polls `fut` once inside this frame.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn poll<F: Future>(
        &mut self,
        fut: std::pin::Pin<&mut F>,
        task: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.enter(|| fut.poll(task))
    }

    /// Installs the frame for `f`, then takes back what `f` (and calls
    /// nested in it) wrote to it.
    ///
    /// One thread-local access on the way in, one on the way out. At the
    /// top level (no attempt or deadline scope around), nothing is saved:
    /// leaving puts back the empty frame, whose other fields nobody reads.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub(crate) fn enter<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let outer = CURRENT.with(|current| {
            let frame =
                (current.attempt.get() != 0 || current.deadline.get().is_some()).then(|| {
                    let frame = current.raw();
                    if frame.attempt != 0 {
                        // A copy of the attempt around this one copies this
                        // one too: the calls in it send no hedge either.
                        let above = frame.flags.only(Flags::HEDGED_ABOVE);
                        self.frame.flags = self.frame.flags.with(above);
                    }
                    frame
                });
            let shared = swap_shared_entering(current, self.shared.take());
            current.set_raw(self.frame);
            Outer { frame, shared }
        });
        let mut leave = Leave { scope: self, outer };
        let out = f();
        leave.restore();
        // Left: nothing is left to drop (`restore` took the outer shared
        // flag). Restored in place rather than by a method taking the
        // guard by value, which would copy it first.
        std::mem::forget(leave);
        out
    }
}

/// The frame an attempt found on entering: `None` for the empty one.
struct Outer {
    frame: Option<Frame>,
    shared: Option<Carried>,
}

/// Leaves an attempt's frame, on return and on unwind alike: takes back
/// what the attempt (or calls nested in it, here or in work carried out of
/// it) wrote to the frame, and puts the outer frame back.
struct Leave<'s> {
    scope: &'s mut Scope,
    outer: Outer,
}

impl Leave<'_> {
    /// Leaves: inline on return (where a guard's `drop`, shared with the
    /// unwinding path, is a call of its own), and from `drop` on unwind.
    #[inline]
    fn restore(&mut self) {
        let scope = &mut *self.scope;
        let outer = &mut self.outer;
        let left = CURRENT.try_with(|current| {
            scope.frame.key = current.key.get();
            scope.shared = swap_shared(current, outer.shared.take());
            let carried = scope.shared.as_ref().map_or(Flags::NONE, |flag| {
                Flags(flag.load(Ordering::Acquire)).only(Flags::REPORTED)
            });
            let flags = current.flags.get().with(carried);
            scope.frame.flags = flags;
            match outer.frame {
                // A hedge sent in this attempt is sent in every attempt
                // around it: a hedge of theirs would copy it. And a call
                // nested in it that gave up after retrying is passed on
                // now, as the call this attempt is one of passes it on
                // when it ends, whatever its end (the call ends on this
                // attempt): so a call dropped midway, even before it has
                // a state machine of its own, has passed it on.
                Some(mut frame) => {
                    frame.flags = frame.flags.with(flags.only(Flags::REPORTED));
                    current.set_raw(frame);
                }
                // Outside every attempt and deadline scope only these two
                // are read.
                None => {
                    current.attempt.set(0);
                    current.deadline.set(None);
                }
            }
        });
        if left.is_err() {
            // The thread is ending and its frame is gone: drop the flag
            // here (the guard is forgotten once restored).
            drop(outer.shared.take());
        }
    }
}

impl Drop for Leave<'_> {
    /// Leaves when the attempt unwinds.
    fn drop(&mut self) {
        self.restore();
    }
}
