//! Limiters per key (documented in `limit`): a bounded table of
//! independent instances, looked up lock-free.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Instant;

use crate::limit::adaptive::AdaptiveThrottle;
use crate::limit::breaker::CircuitBreaker;
use crate::limit::isolation::Fresh;
use crate::limit::token::TokenBudget;
use crate::limit::window::WindowBudget;
use crate::sync::AtomicU64;

/// The places a key may sit in, from the one its hash names: a lookup
/// reads at most this many slots.
const PLACES: usize = 16;

/// A slot no key has claimed. Keys are never removed, only replaced: the
/// places before a key's, in its probe order, are never empty.
const EMPTY: u64 = 0;

/// The bit of a place's word set when its key is used, cleared by a look
/// for a place that passes it over: a key used since the last look keeps
/// its place through one more.
const USED: u64 = 1;

/// The keys a table holds unless told otherwise.
const CAPACITY: usize = 256;

/// A limiter that can be kept per key: one that can say whether it holds
/// anything a fresh one would not (a key whose limiter does may not be
/// forgotten). Implemented by the four limiters of [`limit`](crate::limit).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{AdaptiveThrottle, CircuitBreaker, Keyed, PerKey, TokenBudget, WindowBudget};
///
/// fn per_key<T: PerKey>(_: &Keyed<T>) {}
/// static BUDGETS: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
/// static WINDOWS: Keyed<WindowBudget> =
///     Keyed::new(WindowBudget::new(0.1, 10, Duration::from_secs(10)));
/// static BREAKERS: Keyed<CircuitBreaker> =
///     Keyed::new(CircuitBreaker::new(5, Duration::from_secs(30)));
/// static THROTTLES: Keyed<AdaptiveThrottle> = Keyed::new(AdaptiveThrottle::standard());
/// per_key(&BUDGETS);
/// per_key(&WINDOWS);
/// per_key(&BREAKERS);
/// per_key(&THROTTLES);
/// ```
pub trait PerKey: Fresh + Send + sealed::Sealed {
    /// Holds nothing a fresh one would not at `now`: its place may go to
    /// another key without anything being forgotten.
    #[doc(hidden)]
    fn is_fresh(&self, now: Instant) -> bool;

    /// Its place goes to another key from the one whose hash is `was`
    /// (none: `0`): what calls of the key before it report from now on is
    /// not to count for the new one, where the limiter can tell (a
    /// breaker's new generation ignores the permits given before it).
    #[doc(hidden)]
    fn reassigned(&self, was: u64) {
        let _ = was;
    }

    /// Its place is the key's whose hash is `word` now (what telemetry
    /// labels its changes with, where it tells them).
    #[doc(hidden)]
    fn placed(&self, word: u64) {
        let _ = word;
    }

    /// The name telemetry gives it (a breaker's [`named`](CircuitBreaker::named)),
    /// empty for none.
    #[doc(hidden)]
    fn telemetry_name(&self) -> &'static str {
        ""
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::TokenBudget {}
    impl Sealed for super::WindowBudget {}
    impl Sealed for super::CircuitBreaker {}
    impl Sealed for super::AdaptiveThrottle {}
}

impl PerKey for TokenBudget {
    fn is_fresh(&self, now: Instant) -> bool {
        self.is_full(now)
    }
}

impl PerKey for WindowBudget {
    fn is_fresh(&self, now: Instant) -> bool {
        self.is_idle(now)
    }
}

impl PerKey for CircuitBreaker {
    // (Or given up: open, and its key not come for a whole cooldown past
    // its trial's time.)
    fn is_fresh(&self, now: Instant) -> bool {
        self.is_pristine(now) || self.is_stale(now)
    }

    fn reassigned(&self, was: u64) {
        self.renew(was);
    }

    fn placed(&self, word: u64) {
        self.keyed_as(word);
    }

    fn telemetry_name(&self) -> &'static str {
        self.name()
    }
}

impl PerKey for AdaptiveThrottle {
    fn is_fresh(&self, now: Instant) -> bool {
        self.is_idle(now)
    }
}

/// `T`'s name without its path (`CircuitBreaker`).
fn short_type_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

struct Slot<T> {
    /// The key's hash with its low bit [`USED`] ([`EMPTY`]: no key yet).
    key: AtomicU64,
    limiter: T,
}

/// A limiter per key: a [`TokenBudget`], [`WindowBudget`],
/// [`CircuitBreaker`] or [`AdaptiveThrottle`] for each destination, shard
/// or tenant, made like the one it is built from, in a table of fixed
/// capacity. One host that goes down then drains its own budget and opens
/// its own breaker, and the others keep theirs.
///
/// Give it where the limiter goes (`budget = PER_HOST`,
/// `.breaker(&PER_HOST)`), with the call's key (`key = host`,
/// [`Retry::key`](crate::Retry::key)); the tower layer and the
/// middleware key by destination (scheme, host and port) by themselves.
/// `#[retry]` refuses a `Keyed` table without a `key = ..` at compile
/// time: every call would draw on its shared limiter.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::{Duration, Instant};
/// use backstop::limit::{CircuitBreaker, Keyed};
/// use backstop::Verdict;
///
/// static PER_HOST: Keyed<CircuitBreaker> =
///     Keyed::new(CircuitBreaker::new(1, Duration::from_secs(30)));
/// let now = Instant::now();
/// let down = PER_HOST.get(&"db-1.internal");
/// down.try_acquire(now).unwrap().failed(Verdict::Retry, now);
/// assert!(down.try_acquire(now).is_err(), "db-1's breaker opened");
/// assert!(PER_HOST.get(&"db-2.internal").try_acquire(now).is_ok(), "db-2's did not");
/// assert!(std::ptr::eq(down, PER_HOST.get(&"db-1.internal")), "one per key");
/// ```
///
/// **When the table is full.** A key sits in one of 16 places of the
/// table, from the one its hash names. A new key takes the first empty
/// one; when there is none, one whose limiter holds nothing a fresh one
/// would not (a full token budget, a closed breaker with no failure
/// counted, a windowed budget or adaptive throttle with nothing in its
/// window), preferring one whose key was not used since the last such
/// look: that key is forgotten, and nothing with it. A key whose
/// limiter remembers failures keeps its place, and an adaptive throttle or
/// a ratio breaker its window of calls: the table must hold every key
/// active within it. Two exceptions: an open breaker whose key has not
/// come for a whole cooldown past its trial's time (a destination gone
/// away) gives its place up, closed again (told as
/// [`ChangeReason::Forgotten`](crate::limit::ChangeReason::Forgotten));
/// and so does a closed one (silently) whose key's failures in a row
/// stopped two cooldowns ago (a tenant that failed, then stopped calling).
/// A key that finds no place
/// in a table of budgets draws on the table's shared budget (the one it
/// was built from), with the other keys that found none and the calls
/// that gave no key: its retries protected together with theirs. A key
/// that finds no place in a table of breakers or adaptive throttles goes
/// without one until a place frees (its retries still bounded by its
/// budget, if it has one), rather than share one: a breaker shared by the keys without a
/// place is opened by those that fail, and would turn every healthy one
/// away. A table says so at most once a minute, with how many calls found
/// no place (a WARN event with `tracing`, else on standard error in debug
/// builds): give it more places ([`with_capacity`](Self::with_capacity))
/// than the keys it must keep at once. [`get`](Self::get) itself answers
/// the shared limiter for such a key; the calls of a breaker's or a
/// throttle's key do not use it. (Through a tower layer, a
/// request without a destination, as a tonic client sends below its
/// `Channel`, is keyed by the layer: a place of the layer's own.) (The default token budgets of
/// keyed calls are a table of 4096 for the whole process: there, a key
/// that finds no place draws on its call site's own budget, or the layer's,
/// as a call without a key does.) Keys are told apart by a 64-bit hash,
/// under keys drawn at random once per process (as a `HashMap`'s are): which
/// keys share places cannot be worked out ahead of a run.
///
/// **Telemetry.** With the `tracing` and `metrics` features, a keyed
/// call's events and counters carry its key's name (the `Debug` text of a
/// `key = ..` or [`Retry::key`](crate::Retry::key), a [`Destination`]'s
/// `scheme://host:port`), and a table's breaker tells its changes and its
/// `backstop_breakers_open` gauge with it
/// ([`BreakerChange::key`](crate::limit::BreakerChange::key)). A key is
/// named by the first call that gives it (a breaker's key that no call
/// named, reached only through [`get`](Self::get), by its hash when the
/// breaker first changes: a hash of this process's, which differs after a
/// restart); names are kept for up to 4096 keys of a
/// process, and a key without one is labelled `(other)`: the label's
/// values stay bounded whatever the keys.
///
/// A call looks its limiter up once, when it starts. If its key's place
/// goes to another key while it runs (the key's limiter held nothing a
/// fresh one would not, or was given up), a breaker does not count what it reports for the new key, nor turns it
/// away for the new key's failures (its later attempts go without a
/// breaker, as a key without a place does); a budget or throttle counts
/// it, once.
///
/// **The cost.** A key that has a place is found with a hash and a few
/// loads, lock-free, allocating nothing (the table itself is allocated
/// once, at its first use). A new key takes an empty place with one
/// compare-and-swap; when its places are all held, new keys look for one
/// a key at a time, under a lock, so that callers bringing the same new
/// key at once take one place between them.
pub struct Keyed<T> {
    /// The limiter of calls without a key, and of keys the table cannot
    /// hold; every key's is made like it.
    shared: T,
    capacity: usize,
    /// Held while a new key looks for a place in a full window.
    looking: crate::sync::Mutex<()>,
    /// When a key that found no place for a gate was last said (seconds
    /// from the clock's origin, plus one: 0 for never), and how many have
    /// found none since.
    unplaced_said: std::sync::atomic::AtomicU64,
    unplaced: std::sync::atomic::AtomicU64,
    #[cfg(not(loom))]
    table: std::sync::OnceLock<Box<[Slot<T>]>>,
    #[cfg(loom)]
    table: Box<[Slot<T>]>,
}

impl<T: PerKey> Keyed<T> {
    const_unless_loom! {
        /// A table of up to 256 keys, each with a limiter made like
        /// `limiter` (which the calls without a key draw on).
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use backstop::limit::{Keyed, TokenBudget};
        /// static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
        /// assert_eq!(PER_SHARD.capacity(), 256);
        /// ```
        pub fn new(limiter: T) -> Self {
            Self::with_capacity(limiter, CAPACITY)
        }
    }

    const_unless_loom! {
        /// A table of up to `capacity` keys.
        ///
        /// # Panics
        ///
        /// If `capacity` is zero, or more keys than a table can hold in
        /// memory (its slots past `isize::MAX` bytes). In a `static` that
        /// is a compile error.
        ///
        /// ```
        /// # extern crate backstop_runtime as backstop;
        /// use backstop::limit::{Keyed, TokenBudget};
        /// static PER_TENANT: Keyed<TokenBudget> =
        ///     Keyed::with_capacity(TokenBudget::standard(), 4096);
        /// assert_eq!(PER_TENANT.capacity(), 4096);
        /// ```
        pub fn with_capacity(limiter: T, capacity: usize) -> Self {
            assert!(capacity > 0, "Keyed::with_capacity: `capacity` must be at least 1");
            assert!(
                capacity <= isize::MAX as usize / std::mem::size_of::<Slot<T>>(),
                "Keyed::with_capacity: `capacity` is more keys than a table can hold in memory"
            );
            #[cfg(not(loom))]
            let table = std::sync::OnceLock::new();
            #[cfg(loom)]
            let table = (0..capacity)
                .map(|_| Slot { key: AtomicU64::new(EMPTY), limiter: limiter.fresh() })
                .collect();
            Self {
                shared: limiter,
                capacity,
                looking: crate::sync::Mutex::new(()),
                unplaced_said: std::sync::atomic::AtomicU64::new(0),
                unplaced: std::sync::atomic::AtomicU64::new(0),
                table,
            }
        }
    }

    /// How many keys it holds at most.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// static PER_TENANT: Keyed<TokenBudget> = Keyed::with_capacity(TokenBudget::standard(), 1024);
    /// assert_eq!(PER_TENANT.capacity(), 1024);
    /// ```
    pub const fn capacity(&self) -> usize {
        self.capacity
    }

    /// The limiter of calls without a key, and, in a table of budgets, of
    /// keys the full table cannot hold (a key without a place goes without
    /// a breaker or an adaptive throttle, rather than share this one).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::new(20, 0.1));
    /// assert_eq!(PER_SHARD.shared().max_tokens(), 20);
    /// ```
    pub const fn shared(&self) -> &T {
        &self.shared
    }

    /// The limiter of `key`: its own, given a place now if it had none, or
    /// the shared one when the table has no place for it (which the key's
    /// calls draw on for a budget; for a breaker or an adaptive throttle
    /// they go without one; see
    /// [`peek`](Self::peek) to look without adding a key, and to tell the
    /// two apart). A key is the value the calls give, of the same type:
    /// `7u64` and `7u32` are two keys.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
    /// assert!(std::ptr::eq(PER_SHARD.get(&7u32), PER_SHARD.get(&7u32)));
    /// assert!(!std::ptr::eq(PER_SHARD.get(&7u32), PER_SHARD.get(&8u32)));
    /// ```
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> &T {
        self.get_hashed(key_hash(key), crate::time::clock::loop_now)
    }

    /// [`get`](Self::get), with `now` on the clock the calls read (what a
    /// full table asks to find the key a place: which limiters hold
    /// nothing a fresh one would not, at `now`).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Instant;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
    /// let now = Instant::now();
    /// assert!(std::ptr::eq(PER_SHARD.get_at(&7u32, now), PER_SHARD.get(&7u32)));
    /// ```
    pub fn get_at<K: Hash + ?Sized>(&self, key: &K, now: Instant) -> &T {
        self.get_hashed(key_hash(key), || now)
    }

    /// The limiter of `key` only if it is the key's own: given a place now
    /// if it had none, or `None` when the table has no place for it (its
    /// calls then draw on [`shared`](Self::shared) for a budget, and go
    /// without a breaker or an adaptive throttle). For an operator's
    /// control on one key: a breaker held open through `get` on a key
    /// without a place would be the shared one, which turns away the calls
    /// without a key, and not the key's.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::limit::{CircuitBreaker, Keyed};
    /// static PER_SHARD: Keyed<CircuitBreaker> =
    ///     Keyed::with_capacity(CircuitBreaker::new(5, Duration::from_secs(30)), 1);
    /// // Shard 1 is down for maintenance: it takes the one place.
    /// PER_SHARD.own(&1u32).expect("a place for shard 1").hold_open();
    /// // Shard 2 finds none (a breaker held open is never given away).
    /// assert!(PER_SHARD.own(&2u32).is_none());
    /// assert!(std::ptr::eq(PER_SHARD.get(&2u32), PER_SHARD.shared()));
    /// ```
    pub fn own<K: Hash + ?Sized>(&self, key: &K) -> Option<&T> {
        self.placed(key_hash(key), crate::time::clock::loop_now)
    }

    /// The limiter of `key` if it has one of its own, without giving it a
    /// place (what [`get`](Self::get) does for a key not seen yet): for an
    /// operator, or a probe of state that must not add keys.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// static PER_SHARD: Keyed<TokenBudget> = Keyed::new(TokenBudget::standard());
    /// assert!(PER_SHARD.peek(&7u32).is_none());
    /// let seven = PER_SHARD.get(&7u32);
    /// assert!(std::ptr::eq(PER_SHARD.peek(&7u32).unwrap(), seven));
    /// ```
    pub fn peek<K: Hash + ?Sized>(&self, key: &K) -> Option<&T> {
        self.peek_hashed(key_hash(key))
    }

    /// How many keys have a limiter of their own now.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// let per_shard = Keyed::new(TokenBudget::standard());
    /// per_shard.get(&1u8);
    /// per_shard.get(&2u8);
    /// assert_eq!(per_shard.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.made().map_or(0, |slots| {
            slots
                .iter()
                .filter(|slot| slot.key.load(Acquire) != EMPTY)
                .count()
        })
    }

    /// No key has a limiter of its own yet.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::{Keyed, TokenBudget};
    /// let per_tenant = Keyed::new(TokenBudget::standard());
    /// assert!(per_tenant.is_empty());
    /// let _ = per_tenant.get("tenant-7");
    /// assert!(!per_tenant.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The places, if the table was made (at its first use).
    fn made(&self) -> Option<&[Slot<T>]> {
        #[cfg(not(loom))]
        {
            self.table.get().map(|table| &**table)
        }
        #[cfg(loom)]
        {
            Some(&self.table)
        }
    }

    fn slots(&self) -> &[Slot<T>] {
        #[cfg(not(loom))]
        {
            self.table.get_or_init(|| {
                (0..self.capacity)
                    .map(|_| Slot {
                        key: AtomicU64::new(EMPTY),
                        limiter: self.shared.fresh(),
                    })
                    .collect()
            })
        }
        #[cfg(loom)]
        {
            &self.table
        }
    }

    /// The limiter of the key whose hash is `hash`, the shared one if it
    /// finds no place; `now` is read only when a full table must find the
    /// key a place.
    pub(crate) fn get_hashed(&self, hash: u64, now: impl FnOnce() -> Instant) -> &T {
        self.placed(hash, now).unwrap_or(&self.shared)
    }

    /// The key's own limiter if it has a place, without giving it one.
    pub(crate) fn peek_hashed(&self, hash: u64) -> Option<&T> {
        let hash = match hash & !USED {
            EMPTY => 2,
            hash => hash,
        };
        let slots = self.made()?;
        let len = slots.len();
        let start = (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % len;
        (0..PLACES.min(len))
            .map(|i| &slots[(start + i) % len])
            .take_while(|slot| slot.key.load(Acquire) != EMPTY)
            .find(|slot| slot.key.load(Acquire) & !USED == hash)
            .map(|slot| &slot.limiter)
    }

    /// The limiter of the key whose hash is `hash`: its own, found or
    /// given a place now; none if every place is held by a key whose
    /// limiter holds something a fresh one would not.
    pub(crate) fn placed(&self, hash: u64, now: impl FnOnce() -> Instant) -> Option<&T> {
        // The low bit of a place's word is its key's second chance.
        let hash = match hash & !USED {
            EMPTY => 2,
            hash => hash,
        };
        let slots = self.slots();
        let len = slots.len();
        // Fibonacci hashing spreads keys whose hashes differ in high bits.
        let start = (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % len;
        let places = PLACES.min(len);
        let place = |i: usize| &slots[(start + i) % len];
        let found = |slot: &Slot<T>, word: u64| {
            if word & USED == 0 {
                // Used since the last look for a place: one more chance.
                slot.key.fetch_or(USED, Relaxed);
            }
        };
        for i in 0..places {
            let slot = place(i);
            let mut word = slot.key.load(Acquire);
            if word == EMPTY {
                // Not further on (places before a key are never empty):
                // claim this place, or the one the racing claimant left.
                match slot
                    .key
                    .compare_exchange(EMPTY, hash | USED, AcqRel, Acquire)
                {
                    Ok(_) => {
                        slot.limiter.placed(hash);
                        return Some(&slot.limiter);
                    }
                    Err(actual) => word = actual,
                }
            }
            if word & !USED == hash {
                found(slot, word);
                return Some(&slot.limiter);
            }
        }
        // Every place is held: one looks for a place at a time (rare: a
        // new key when its places are all held), so that callers bringing
        // the same new key at once take one place between them.
        let _looking = self
            .looking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Placed by a caller that looked just before?
        for i in 0..places {
            let slot = place(i);
            if slot.key.load(Acquire) & !USED == hash {
                return Some(&slot.limiter);
            }
        }
        // A place goes to this key only if its limiter is as a fresh
        // one's: the first such place whose key was not used since the
        // last look (a second chance, as a clock cache gives), else, their
        // chances taken, the first such place.
        let now = now();
        for pass in 0..2 {
            for i in 0..places {
                let slot = place(i);
                let word = slot.key.load(Acquire);
                if !slot.limiter.is_fresh(now) {
                    continue;
                }
                if pass == 0 && word & USED != 0 {
                    slot.key.fetch_and(!USED, Relaxed);
                    continue;
                }
                // A use racing this keeps the place for its key. Once the
                // place is this key's, calls of the key it held report to
                // it no more (a breaker's new generation).
                if slot
                    .key
                    .compare_exchange(word, hash | USED, AcqRel, Acquire)
                    .is_ok()
                {
                    // Its key first: a call of the key it held that comes
                    // to it now finds it another key's (and goes on without
                    // it), as early as can be.
                    slot.limiter.placed(hash);
                    // (Told under the key it was.)
                    slot.limiter.reassigned(word & !USED);
                    return Some(&slot.limiter);
                }
            }
        }
        None
    }

    /// The gate (a breaker, an adaptive throttle) of a call keyed `key`:
    /// the key's own; the shared one for a call without a key; none for a
    /// key that finds no place. A gate shared by the keys that found none
    /// would turn healthy keys away because others fail (a table full of
    /// failing keys opens it): such a key's calls go ungated, protected by
    /// their retry budget, until a place frees.
    pub(crate) fn gate_for(&self, key: Option<u64>) -> Option<&T> {
        match key {
            Some(hash) => {
                let gate = self.placed(hash, crate::time::clock::loop_now);
                if gate.is_none() {
                    // (Cold: the clock is read again.)
                    self.unplaced(hash, crate::time::clock::loop_now(), Unplaced::GoesWithout);
                }
                gate
            }
            None => Some(&self.shared),
        }
    }

    /// A key (its hash) found no place for its limiter at `now`, and its
    /// call goes on as `instead` says: counted, and said at most once a
    /// minute a table (a WARN event with `tracing`, else on standard error
    /// in debug builds), with how many found none since.
    #[cold]
    pub(crate) fn unplaced(&self, hash: u64, now: Instant, instead: Unplaced) {
        use std::sync::atomic::Ordering::Relaxed;
        const EVERY_SECS: u64 = 60;
        let name = match instead {
            Unplaced::SiteDefault | Unplaced::LayerOwn => "default",
            _ => self.shared.telemetry_name(),
        };
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "backstop_keys_unplaced_total",
            "limiter" => short_type_name::<T>(),
            "name" => name
        )
        .increment(1);
        let unplaced = self.unplaced.fetch_add(1, Relaxed) + 1;
        let secs = crate::time::clock::nanos_since_origin(now) / 1_000_000_000 + 1;
        let said = self.unplaced_said.load(Relaxed);
        if said != 0 && secs < said.saturating_add(EVERY_SECS)
            || self
                .unplaced_said
                .compare_exchange(said, secs, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        self.unplaced.fetch_sub(unplaced, Relaxed);
        let what = short_type_name::<T>();
        let key = crate::limit::names::of(crate::limit::names::word(hash));
        let capacity = self.capacity;
        let (goes, remedy) = instead.said();
        let calls = if unplaced == 1 { "call" } else { "calls" };
        #[cfg(feature = "tracing")]
        tracing::warn!(
            name,
            key,
            capacity,
            unplaced,
            "a `Keyed<{what}>` table has no place for a key: the places it may take are held \
             by keys whose {what} is not as a fresh one's (failures counted, an open breaker, \
             a budget's tokens spent, a window of requests); its calls {goes} until a place \
             frees ({unplaced} {calls} found none since the last warning); {remedy}"
        );
        #[cfg(all(not(feature = "tracing"), debug_assertions))]
        note!(
            "backstop: a `Keyed<{what}>` table (`{name}`) of {capacity} places has no place \
             for key `{key}`: the places it may take are held by keys whose {what} is not as a fresh \
             one's; its calls {goes} until a place frees ({unplaced} {calls} found none \
             since the last warning); {remedy}"
        );
        #[cfg(all(not(feature = "tracing"), not(debug_assertions)))]
        let _ = (what, key, capacity, unplaced, name, goes, remedy, calls);
    }

    /// The limiter for `key` (a hash from [`key_hash`]), or the shared one
    /// for none.
    pub(crate) fn for_key(&self, key: Option<u64>) -> &T {
        match key {
            Some(hash) => match self.placed(hash, crate::time::clock::loop_now) {
                Some(limiter) => limiter,
                None => {
                    // (Cold: the clock is read again.)
                    self.unplaced(hash, crate::time::clock::loop_now(), Unplaced::Shared);
                    &self.shared
                }
            },
            None => &self.shared,
        }
    }
}

/// How a call whose key found no place in a full table goes on.
#[derive(Clone, Copy)]
pub(crate) enum Unplaced {
    /// Without a gate (a breaker, an adaptive throttle): a shared one
    /// would turn healthy keys away because others fail.
    GoesWithout,
    /// On the table's shared limiter (a budget).
    Shared,
    /// On its call site's own default budget (the process's table of
    /// default budgets per key).
    SiteDefault,
    /// On its layer's own budget (the process's table of default budgets
    /// per destination).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    LayerOwn,
}

impl Unplaced {
    /// How its calls go on, and what to do, as a warning says them.
    fn said(self) -> (&'static str, &'static str) {
        match self {
            Self::GoesWithout => (
                "go without one",
                "give the table more places (`Keyed::with_capacity`) than the keys it keeps at once",
            ),
            Self::Shared => (
                "draw on the table's shared budget",
                "give the table more places (`Keyed::with_capacity`) than the keys it keeps at once",
            ),
            Self::SiteDefault => (
                "draw on their call site's own default budget, with the calls that give no key",
                "give the calls a `Keyed` budget of their own, with more places \
                 (`Keyed::with_capacity`), as `budget`",
            ),
            Self::LayerOwn => (
                "draw on their layer's own budget, with the requests that name no destination",
                "give the layer a `Keyed` budget of its own, with more places \
                 (`Keyed::with_capacity`), as `budget`",
            ),
        }
    }
}

/// The key the tower layer and the middleware give a request: its
/// destination, scheme, host (told apart without case) and port (the
/// scheme's default when none is written; a `host:port` is split). Give
/// one to [`Keyed::peek`] or [`Keyed::get`] to reach the limiter of a
/// destination, as an operator would. A request whose URI is a path alone
/// (as a gRPC client sends below its channel) goes by its `Host` header,
/// without a scheme: `Destination::new("", host, None)`.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::limit::{CircuitBreaker, Destination, Keyed};
/// static PER_HOST: Keyed<CircuitBreaker> =
///     Keyed::new(CircuitBreaker::new(5, Duration::from_secs(30)));
/// // Down for maintenance: every call to it turned away until reset (its
/// // own breaker: `get` would give a destination without a place the
/// // table's shared one, which its calls do not use).
/// let db1 = Destination::new("https", "db-1.internal", None);
/// PER_HOST.own(&db1).expect("a place for db-1").hold_open();
/// let same = Destination::new("HTTPS", "DB-1.internal:443", None);
/// assert!(PER_HOST.peek(&same).is_some());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Destination<'a> {
    scheme: &'a str,
    host: &'a str,
    port: Option<u16>,
}

impl<'a> Destination<'a> {
    /// The destination `scheme://host:port`: `port` `None` for the
    /// scheme's default (80 for `http`, 443 for `https`) or the port
    /// written in `host` (`"db-1:5432"`, `"[::1]:8080"`). Named for
    /// telemetry as it [displays](#impl-Display-for-Destination%3C'_%3E)
    /// (once per destination), so that a breaker an operator reaches
    /// through it tells its changes with that name.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::limit::Destination;
    /// assert_eq!(Destination::new("https", "db-1.internal", None).to_string(), "https://db-1.internal:443");
    /// assert_eq!(Destination::new("http", "db-1:5432", None).to_string(), "http://db-1:5432");
    /// ```
    pub fn new(scheme: &'a str, host: &'a str, port: Option<u16>) -> Self {
        let destination = Self::unnamed(scheme, host, port);
        destination.named();
        destination
    }

    /// Its hash, as a [`Keyed`] table tells it apart, its name kept for
    /// telemetry (once per destination).
    pub(crate) fn named(&self) -> u64 {
        // (Hashed once: a layer's request is named here, not in `new`.)
        let hash = key_hash(self);
        crate::limit::names::name(hash, || self.to_string());
        hash
    }

    /// [`new`](Self::new), not named yet.
    pub(crate) fn unnamed(scheme: &'a str, host: &'a str, port: Option<u16>) -> Self {
        let (host, port) = match port {
            Some(port) => (host, Some(port)),
            None => match host.rsplit_once(':') {
                // (An IPv6 address is bracketed before its port.)
                Some((name, digits)) if !name.contains(':') || name.ends_with(']') => {
                    match digits.parse() {
                        Ok(port) => (name, Some(port)),
                        Err(_) => (host, None),
                    }
                }
                _ => (host, None),
            },
        };
        let port = port.or(if scheme.eq_ignore_ascii_case("https") {
            Some(443)
        } else if scheme.eq_ignore_ascii_case("http") {
            Some(80)
        } else {
            None
        });
        Self { scheme, host, port }
    }
}

impl Hash for Destination<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        write_lowercase(state, self.scheme);
        state.write_u8(0xff);
        write_lowercase(state, self.host);
        state.write_u8(0xff);
        state.write_u32(self.port.map_or(u32::MAX, u32::from));
    }
}

/// Hashes `text` without case, a few words at a time (not a byte at a
/// time: a hasher's write costs the same for one byte as for eight).
fn write_lowercase<H: Hasher>(state: &mut H, text: &str) {
    let mut buffer = [0u8; 64];
    for chunk in text.as_bytes().chunks(buffer.len()) {
        let lower = &mut buffer[..chunk.len()];
        lower.copy_from_slice(chunk);
        lower.make_ascii_lowercase();
        state.write(lower);
    }
}

/// `scheme://host:port` as it is told apart: without case, the port
/// written out (`https://db-1.internal:443`); what `tracing` and `metrics`
/// label a layer's or middleware's call with.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::limit::Destination;
/// assert_eq!(Destination::new("HTTPS", "DB-1.internal", None).to_string(), "https://db-1.internal:443");
/// assert_eq!(Destination::new("", "[::1]:8080", None).to_string(), "[::1]:8080");
/// ```
impl fmt::Display for Destination<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.scheme.is_empty() {
            write!(f, "{}://", self.scheme.to_ascii_lowercase())?;
        }
        f.write_str(&self.host.to_ascii_lowercase())?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// The 64-bit hash a key is told apart by: std's `SipHash` under keys
/// drawn at random once per process, as a `HashMap`'s are, so that keys
/// which share a table's places cannot be worked out ahead of a run.
pub(crate) fn key_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    std::hash::BuildHasher::hash_one(KEYS.get_or_init(std::hash::RandomState::new), key)
}

impl<T: PerKey> Fresh for Keyed<T> {
    fn fresh(&self) -> Self {
        Self::with_capacity(self.shared.fresh(), self.capacity)
    }
}

impl<T: PerKey + fmt::Debug> fmt::Debug for Keyed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("shared", &self.shared)
            .field("capacity", &self.capacity)
            .field("keys", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_keys_hash_is_drawn_under_the_processs_own_keys() {
        // Not std's `SipHash` under its fixed keys, whose collisions can be
        // worked out ahead of any run (a chance of 2^-64 each to agree).
        let fixed = |key: &dyn Fn(&mut std::hash::DefaultHasher)| {
            let mut hasher = std::hash::DefaultHasher::new();
            key(&mut hasher);
            hasher.finish()
        };
        assert_ne!(key_hash(&7_u64), fixed(&|h| 7_u64.hash(h)));
        assert_ne!(key_hash("db-1"), fixed(&|h| "db-1".hash(h)));
        // The same for every call of the process.
        assert_eq!(key_hash("db-1"), key_hash(&String::from("db-1")));
        // A destination is hashed without case, as it is told apart.
        assert_eq!(
            key_hash(&Destination::unnamed("HTTPS", "DB-1.internal", None)),
            key_hash(&Destination::unnamed("https", "db-1.internal:443", None))
        );
        let long = "x".repeat(200);
        assert_eq!(
            key_hash(&Destination::unnamed("http", &long.to_uppercase(), Some(1))),
            key_hash(&Destination::unnamed("http", &long, Some(1)))
        );
        assert_ne!(
            key_hash(&Destination::unnamed("http", &long, Some(1))),
            key_hash(&Destination::unnamed("http", &long[1..], Some(1)))
        );
    }
}
