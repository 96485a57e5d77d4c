//! The names of keys, for telemetry: a key is told apart by its 64-bit
//! hash, and `tracing` and `metrics` label a keyed call with its key's
//! text, kept here when the key is given (`key = expr`, `Retry::key`, a
//! request's destination).
//!
//! One table for the process, of fixed capacity, kept for its life: a
//! label value a recorder has seen is a series it keeps, so the `key`
//! label takes at most [`CAPACITY`] values in a process, the names of
//! keys that found a place (the first to come, each among the 16 places
//! its hash names), and [`OTHER`] for the others. A key already named
//! costs a few loads and allocates nothing; a new key's text is made
//! once, when it takes a place.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

/// How many keys have a name in a process: the labels' cardinality.
pub(crate) const CAPACITY: usize = 4096;

/// The longest name kept, in bytes (a longer text is cut, and ends in
/// `…`): the names' memory is bounded too.
const LONGEST: usize = 128;

/// The label of a keyed call whose key has no name (it came after the
/// table of names was full, or no call gave it).
pub(crate) const OTHER: &str = "(other)";

/// The places a key's name may sit in, from the one its hash names.
const PLACES: usize = 16;

/// A place no key has taken.
const EMPTY: u64 = 0;

/// A key's name and the key it is of (its [`word`]). A place is taken by
/// one compare-and-swap of its word and never given up; its name is set
/// once, just after, and kept for the process's life (leaked: at most
/// [`CAPACITY`] names of [`LONGEST`] bytes), so that reading it takes no
/// lock and allocates nothing.
struct Place {
    word: AtomicU64,
    name: OnceLock<&'static str>,
}

/// Names of keys, in places of a fixed number.
pub(crate) struct Names {
    places: OnceLock<Box<[Place]>>,
    capacity: usize,
}

/// The process's names of keys.
static NAMES: Names = Names::with_capacity(CAPACITY);

/// A key's hash as this table and telemetry keep it: never [`EMPTY`],
/// the low bit clear (as a [`Keyed`](crate::limit::Keyed) table keeps it).
#[inline]
pub(crate) const fn word(hash: u64) -> u64 {
    match hash & !1 {
        EMPTY => 2,
        word => word,
    }
}

/// Keeps `text()` as the name of the key whose hash is `hash`, unless it
/// has one or the names are full: made once per key, nothing allocated
/// otherwise.
#[inline]
pub(crate) fn name(hash: u64, text: impl FnOnce() -> String) {
    NAMES.name(hash, text);
}

/// The name of the key whose [`word`] is `word`, if it has one.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn named(word: u64) -> Option<&'static str> {
    NAMES.of(word)
}

/// The name of the key whose [`word`] is `word`, [`OTHER`] if it has
/// none: a few loads, no lock, nothing allocated.
pub(crate) fn of(word: u64) -> &'static str {
    NAMES.of(word).unwrap_or(OTHER)
}

impl Names {
    const fn with_capacity(capacity: usize) -> Self {
        Self {
            places: OnceLock::new(),
            capacity,
        }
    }

    fn places(&self) -> &[Place] {
        self.places.get_or_init(|| {
            (0..self.capacity)
                .map(|_| Place {
                    word: AtomicU64::new(EMPTY),
                    name: OnceLock::new(),
                })
                .collect()
        })
    }

    /// The places of `word`, in the order they are looked at.
    #[inline]
    fn places_of(&self, word: u64) -> impl Iterator<Item = &Place> {
        let places = self.places();
        let start = (word.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % places.len();
        (0..PLACES.min(places.len())).map(move |i| &places[(start + i) % places.len()])
    }

    #[inline]
    fn name(&self, hash: u64, text: impl FnOnce() -> String) {
        let word = word(hash);
        for place in self.places_of(word) {
            match place.word.load(Acquire) {
                found if found == word => return,
                // Places are never given up: not further on.
                EMPTY => return self.add(word, &text()),
                _ => {}
            }
        }
        // Its places are all another key's: it stays [`OTHER`].
    }

    /// A new key's name, in the first empty place of its own.
    #[cold]
    fn add(&self, word: u64, text: &str) {
        for place in self.places_of(word) {
            match place.word.compare_exchange(EMPTY, word, AcqRel, Acquire) {
                Ok(_) => {
                    let name: &'static str = Box::leak(kept(text).into_boxed_str());
                    let _ = place.name.set(name);
                    return;
                }
                // Named by a racing caller of the same key.
                Err(found) if found == word => return,
                Err(_) => {}
            }
        }
    }

    /// (`None` also for the instant between a place's taking and its
    /// name's setting.)
    fn of(&self, word: u64) -> Option<&'static str> {
        self.places_of(word)
            .take_while(|place| place.word.load(Acquire) != EMPTY)
            .find(|place| place.word.load(Acquire) == word)
            .and_then(|place| place.name.get().copied())
    }
}

/// The name kept of `text`: a string key's `Debug` text without its
/// quotes, at most [`LONGEST`] bytes.
fn kept(text: &str) -> String {
    let text = clean(text);
    if text.len() <= LONGEST {
        return text.to_owned();
    }
    let mut end = LONGEST - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A string key's `Debug` text without its quotes (an empty string's
/// keeps them: an empty label is no label to a recorder).
fn clean(text: &str) -> &str {
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if text.len() >= 2 && !inner.is_empty() => inner,
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_named_once_and_read_back_by_its_hash() {
        let names = Names::with_capacity(64);
        let mut made = 0;
        for _ in 0..3 {
            names.name(0xfeed_0000, || {
                made += 1;
                "\"db-1\"".to_owned()
            });
        }
        assert_eq!(made, 1);
        assert_eq!(names.of(word(0xfeed_0000)), Some("db-1"));
        assert_eq!(names.of(word(0xfeed_0002)), None);
        names.name(0xbeef_0000, || "\"\"".to_owned());
        assert_eq!(
            names.of(word(0xbeef_0000)),
            Some("\"\""),
            "an empty key is not an empty label"
        );
        names.name(0xcafe_0000, || "é".repeat(100));
        let long = names.of(word(0xcafe_0000)).unwrap();
        assert!(long.len() <= LONGEST && long.ends_with('…'), "{long}");
    }

    #[test]
    fn the_first_keys_keep_their_names_and_later_ones_are_other() {
        let names = Names::with_capacity(64);
        let hash = |key: u64| (key + 1) << 20;
        for key in 0..300 {
            names.name(hash(key), || format!("key-{key}"));
        }
        let kept: Vec<u64> = (0..300)
            .filter(|&key| names.of(word(hash(key))).is_some())
            .collect();
        assert!(kept.len() <= 64 && kept.len() > 32, "{}", kept.len());
        assert!(kept.contains(&0), "the first key keeps its name");
        for key in kept {
            assert_eq!(
                names.of(word(hash(key))),
                Some(format!("key-{key}").as_str())
            );
        }
    }
}
