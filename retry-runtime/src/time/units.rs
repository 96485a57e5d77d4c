//! What the `#[retry]` attribute and the runtime must agree on, in one
//! std-only file: the units a duration is written in, and the defaults of
//! a policy. The runtime compiles it as a module; the attribute (a
//! proc-macro crate, which cannot depend on the runtime) keeps a copy of
//! it, which `feature-tests/tests/sources.rs` keeps the same.

// Each side uses part of it.
#![allow(dead_code)]

/// The units a duration is written in (`250ms`, `1.5s`, `"2m"`), largest
/// first, with their nanoseconds.
pub(crate) const UNITS: [(&str, u128); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// The unit names, smallest first, for messages.
pub(crate) const UNIT_NAMES: [&str; 6] = ["ns", "us", "ms", "s", "m", "h"];

/// The nanoseconds of `unit`, if it is one.
pub(crate) fn unit_nanos(unit: &str) -> Option<u128> {
    UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, nanos)| *nanos)
}

/// Nanoseconds as a user writes them: a whole number in the largest unit
/// that holds them exactly (`100ms`, `2m`, `1500us`; `0s`).
pub(crate) fn human(nanos: u128) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (unit, size) = UNITS
        .iter()
        .find(|(_, size)| nanos.is_multiple_of(*size))
        .map_or(("ns", 1), |(unit, size)| (*unit, *size));
    format!("{}{unit}", nanos / size)
}

/// The default number of attempts, the first included.
pub(crate) const DEFAULT_ATTEMPTS: u32 = 3;
/// The default first delay, in milliseconds.
pub(crate) const DEFAULT_BASE_MILLIS: u64 = 100;
/// The default cap on a delay, in seconds.
pub(crate) const DEFAULT_CAP_SECS: u64 = 20;
/// The default deadline of a call, in seconds.
pub(crate) const DEFAULT_DEADLINE_SECS: u64 = 30;
/// The default longest `Retry-After` honoured, in seconds.
pub(crate) const DEFAULT_RETRY_AFTER_MAX_SECS: u64 = 60;
