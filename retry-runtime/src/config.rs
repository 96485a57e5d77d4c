//! Retry settings from configuration (feature `serde`): a [`Policy`]
//! deserializes from TOML, JSON or any serde format, with human durations
//! (`"250ms"`, `"1.5s"`, `"2m"`, `"1m 30s"`), as do [`WindowBudgetConfig`],
//! [`TokenBudgetConfig`], [`AdaptiveThrottleConfig`] and [`BreakerConfig`].
//! Unknown fields are rejected; an invalid value is an
//! error naming the field and the reason, never a panic.
//!
//! ```
//! # extern crate backstop_runtime as backstop;
//! use std::time::Duration;
//! use backstop::Policy;
//!
//! let policy: Policy = serde_json::from_str(r#"{ "attempts": 5, "base": "250ms", "deadline": "10s" }"#).unwrap();
//! assert_eq!(policy, Policy::new().attempts(5).base(Duration::from_millis(250)).deadline(Some(Duration::from_secs(10))));
//!
//! let error = serde_json::from_str::<Policy>(r#"{ "attempts": 0 }"#).unwrap_err();
//! assert!(error.to_string().contains("`attempts` must be at least 1"));
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use crate::limit::breaker::CircuitBreaker;
use crate::limit::{AdaptiveThrottle, TokenBudget, WindowBudget};
use crate::state::backoff::{Backoff, Jitter};
use crate::state::policy::Policy;
use crate::time::units::{UNIT_NAMES, human, unit_nanos};

/// Parses a human duration: a decimal number and a unit (`ns`, `us` or
/// `µs`, `ms`, `s`, `m`, `h`), as `"250ms"`, `"1.5 s"` or `"2m"`, or several
/// added up, as `"1h30m"` or `"1m 30s"`.
///
/// # Errors
///
/// [`ParseDurationError`], whose message says what is wrong: no unit, an
/// unknown unit, not a number, an exponent (`"2e3ms"`), too large, or not
/// zero and below a nanosecond (`"0.1ns"`, which would read as zero).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::config::parse_duration;
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("250").unwrap_err().to_string().contains("needs a unit"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ParseDurationError> {
    parse(text).map_err(|message| ParseDurationError { message })
}

/// A duration [`parse_duration`] could not read; its message says why.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::config::parse_duration;
/// let error = parse_duration("2e3ms").unwrap_err();
/// // An error as any other: `?` into `anyhow::Error` or a `Box<dyn Error>`.
/// let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(error.clone());
/// assert_eq!(boxed.to_string(), error.to_string());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseDurationError {
    message: String,
}

impl fmt::Display for ParseDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParseDurationError {}

/// [`parse_duration`], its error a message.
fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let mut rest = text;
    let mut total = Duration::ZERO;
    loop {
        let (term, after) = one_term(text, rest)?;
        total = total
            .checked_add(term)
            .ok_or_else(|| format!("`{text}` is too large for a duration"))?;
        rest = after.trim_start();
        if rest.is_empty() {
            return Ok(total);
        }
    }
}

/// The first term of `rest` (a number and its unit, as `"90s"`) and what
/// follows it; `text`, the whole, is for messages.
fn one_term<'r>(text: &str, rest: &'r str) -> Result<(Duration, &'r str), String> {
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let number = &rest[..split];
    if number.is_empty() || number.starts_with('.') || number.matches('.').count() > 1 {
        return Err(format!(
            "`{text}` is not a duration such as \"250ms\" or \"1.5s\""
        ));
    }
    let after_number = rest[split..].trim_start();
    // (Letters of any script: `µs` is a unit, `µ` not an ASCII letter.)
    let (unit, after) = after_number.split_at(
        after_number
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(after_number.len()),
    );
    let units = format!(
        "{}, or µs; terms add up, as in \"1m30s\"",
        UNIT_NAMES.join(", ")
    );
    let nanos_per_unit: u128 = match unit {
        // A number alone: a suggestion keeps its value.
        "" if number == text => {
            return Err(format!(
                "`{text}` needs a unit: write \"{number}ms\" or \"{number}s\" (units: {units})"
            ));
        }
        // A term of several without a unit (`1m30`).
        "" if after.is_empty() => {
            return Err(format!(
                "`{number}` in `{text}` needs a unit (units: {units})"
            ));
        }
        // Something else after the number (`1_000ms`, `1,5s`).
        "" => {
            return Err(format!(
                "`{text}` is not a duration such as \"250ms\" or \"1.5s\" (units: {units})"
            ));
        }
        // An exponent (`2e3ms`), which `#[retry]`'s literals take: not here.
        "e" | "E" if after.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') => {
            return Err(format!(
                "`{text}`: a duration here is written without an exponent; write the number \
                 out (\"2000ms\", not \"2e3ms\"; units: {units})"
            ));
        }
        // The micro sign and the Greek letter mu, as Go's durations take them.
        "\u{b5}s" | "\u{3bc}s" => 1_000,
        unit => unit_nanos(unit)
            .ok_or_else(|| format!("unknown unit `{unit}` in `{text}` (units: {units})"))?,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let too_large = || format!("`{text}` is too large for a duration");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    // Digits past the twentieth are far below a nanosecond of any unit.
    let fraction = &fraction[..fraction.len().min(20)];
    let fraction_nanos = if fraction.is_empty() {
        0
    } else {
        let digits: u128 = fraction.parse().map_err(|_| too_large())?;
        digits * nanos_per_unit / 10u128.pow(u32::try_from(fraction.len()).unwrap_or(20))
    };
    let nanos = whole
        .checked_mul(nanos_per_unit)
        .and_then(|n| n.checked_add(fraction_nanos))
        .ok_or_else(too_large)?;
    if nanos == 0 && number.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        let term = rest[..rest.len() - after.len()].trim_end();
        return Err(if term == text {
            format!("`{text}` is below a nanosecond, the smallest duration")
        } else {
            format!("`{term}` in `{text}` is below a nanosecond, the smallest duration")
        });
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_large())?;
    Ok((Duration::new(secs, (nanos % 1_000_000_000) as u32), after))
}

/// Writes a duration as configuration reads it: a whole number in the
/// largest unit that holds it exactly (`"250ms"`, `"2m"`, `"1500us"`), so
/// that [`parse_duration`] gives the same duration back.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::config::{format_duration, parse_duration};
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
/// assert_eq!(format_duration(Duration::from_secs(120)), "2m");
/// assert_eq!(format_duration(Duration::ZERO), "0s");
/// let d = Duration::new(3, 7);
/// assert_eq!(parse_duration(&format_duration(d)), Ok(d));
/// ```
pub fn format_duration(duration: Duration) -> String {
    human(duration.as_nanos())
}

/// A duration as configuration writes it: a string with a unit, parsed
/// where it is read, so that a mistake is reported at its value (its line
/// and column), named as the field `F` is.
struct Human<F>(Duration, PhantomData<F>);

impl<'de, F: FieldName> Deserialize<'de> for Human<F> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text<F>(PhantomData<F>);
        impl<F: FieldName> Visitor<'_> for Text<F> {
            type Value = Human<F>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "`{}`: a duration with a unit, as a string such as \"250ms\"",
                    F::NAME
                )
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Human<F>, E> {
                if let Some(none) = F::NONE
                    && text.trim() == "none"
                {
                    return Err(E::custom(format!("`{}`: {none}", F::NAME)));
                }
                read::<F, E>(text, "").map(|d| Human(d, PhantomData))
            }
        }
        deserializer.deserialize_str(Text(PhantomData))
    }
}

/// A duration, or `"none"`: parsed where it is read, as [`Human`].
struct HumanOrNone<F>(Option<Duration>, PhantomData<F>);

impl<'de, F: FieldName> Deserialize<'de> for HumanOrNone<F> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text<F>(PhantomData<F>);
        impl<F: FieldName> Visitor<'_> for Text<F> {
            type Value = HumanOrNone<F>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "`{}`: a duration with a unit, as a string such as \"250ms\", or \"none\"",
                    F::NAME
                )
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<HumanOrNone<F>, E> {
                if text.trim() == "none" {
                    return Ok(HumanOrNone(None, PhantomData));
                }
                // Nothing, or YAML's null (`~`, `null`, an empty value),
                // which its reader gives as text here.
                if matches!(text.trim(), "~" | "null" | "") {
                    return Err(E::custom(format!(
                        "`{}`: an empty value or null says neither \"none\" nor the default: \
                         write \"none\", or leave the field out",
                        F::NAME
                    )));
                }
                read::<F, E>(text, "; or \"none\"").map(|d| HumanOrNone(Some(d), PhantomData))
            }
        }
        deserializer.deserialize_str(Text(PhantomData))
    }
}

/// The duration in `text`, for the field `F`: an error names the field
/// (and ends with `also`, what else it takes), and a zero it refuses.
fn read<F: FieldName, E: de::Error>(text: &str, also: &str) -> Result<Duration, E> {
    let name = F::NAME;
    let d = parse(text).map_err(|reason| E::custom(format!("`{name}`: {reason}{also}")))?;
    match F::ZERO {
        Some(why) if d.is_zero() => Err(E::custom(format!("`{name}` {why}"))),
        _ => match F::refuse(d) {
            Some(why) => Err(E::custom(why)),
            None => Ok(d),
        },
    }
}

/// The name of a configuration's duration field, for its errors, and
/// why it refuses zero, if it does.
trait FieldName {
    const NAME: &'static str;
    const ZERO: Option<&'static str> = None;
    /// What to write for none, where `"none"` is not the word.
    const NONE: Option<&'static str> = None;
    /// Why the field refuses `duration`, if it does (besides a zero).
    fn refuse(_duration: Duration) -> Option<&'static str> {
        None
    }
}

macro_rules! field_names {
    ($($field:ident = $name:literal $(, zero: $zero:literal)? $(, none: $none:literal)?
        $(, refuses |$d:ident| $bad:expr => $why:expr)?;)*) => {$(
        struct $field;
        impl FieldName for $field {
            const NAME: &'static str = $name;
            $(const ZERO: Option<&'static str> = Some($zero);)?
            $(const NONE: Option<&'static str> = Some($none);)?
            $(fn refuse($d: Duration) -> Option<&'static str> {
                ($bad).then_some($why)
            })?
        }
    )*};
}

field_names! {
    Deadline = "deadline", zero: "must be greater than zero (for none, write \"none\")";
    Base = "base", zero: "must be greater than zero";
    Cap = "cap";
    RetryAfterMax = "retry_after_max";
    AttemptTimeout = "attempt_timeout",
        zero: "must be greater than zero (for none, write \"none\")";
    // Shorter, a budget's reserve of `min_per_sec` is a fraction of a
    // retry; longer, a healthy spell's deposits pay for a long storm.
    Ttl = "ttl", zero: "must be greater than zero",
        refuses |ttl| ttl < MIN_TTL || ttl > MAX_TTL
            => if ttl < MIN_TTL {
                "`ttl` must be at least 1s (shorter, the reserve of `min_per_sec` is a fraction \
                 of a retry), e.g. \"10s\""
            } else {
                "`ttl` must be at most 60s (longer, the deposits of a healthy spell pay for a \
                 long storm), e.g. \"10s\""
            };
    // (A budget's counts are whole thousandths of a token, and 100 ms
    // ticks: what they cannot keep would be kept as none, or as more.)
    Refill = "refill", none: "for no refill, write \"0s\" (answers alone give tokens back)",
        refuses |every| every > MAX_REFILL => "`refill` must be at most 100s (a token every \
            100 s, the slowest a budget keeps: it counts thousandths of a token per 100 ms), \
            or \"0s\" for none";
    RideOut = "ride_out", none: "for no ride-out, write \"0s\" (a refused call whose retry \
                                 the budget refuses gives up at once)",
        refuses |ride_out| (!ride_out.is_zero() && ride_out < RIDE_OUT_STEP)
            || ride_out > MAX_RIDE_OUT
            => if ride_out > MAX_RIDE_OUT {
                "`ride_out` must be at most 214748364.7s (about 6.8 years, the longest a budget \
                 counts in 100 ms steps)"
            } else {
                "`ride_out` must be at least 100ms (a budget counts it in 100 ms steps), or \
                 \"0s\" for none"
            };
    Window = "window",
        refuses |window| window < Duration::from_micros(8) => "`window` must be at least 8us, \
            e.g. \"2s\"";
    // (As Polly's: a window of a few slots of microseconds counts nothing
    // useful.)
    Sampling = "sampling",
        refuses |sampling| sampling < Duration::from_millis(500) => "`sampling` must be at \
            least 500ms";
    Cooldown = "cooldown", zero: "must be above zero: a breaker that cools down at once lets \
                                  every call through";
    Longest = "longest";
}

/// A value of `T` that `C` checks as it is read, so that a value out of
/// its range is reported at the value (its line, and its column in JSON)
/// rather than where its table ends. Checks across fields come after the
/// table is read.
struct Checked<T, C>(T, PhantomData<C>);

/// What a field's value must be, on its own.
trait Check<T> {
    /// What the field takes, for an error of the wrong type ("expected
    /// ..."), which names the field.
    const EXPECTING: &'static str;
    /// Why `value` is refused, if it is.
    fn refuse(value: &T) -> Option<String>;
}

impl<T, C: Check<T>> Checked<T, C> {
    /// `value`, or the error of its refusal (made inside the visitor, so
    /// that the deserializer says where the value is).
    fn check<E: de::Error>(value: T) -> Result<Self, E> {
        match C::refuse(&value) {
            Some(why) => Err(E::custom(why)),
            None => Ok(Self(value, PhantomData)),
        }
    }
}

/// Reads a checked `T` with a visitor of its own: the check runs inside
/// the deserializer's call, where it knows the value's position.
struct CheckedVisitor<T, C>(PhantomData<(T, C)>);

impl<T, C: Check<T>> CheckedVisitor<T, C> {
    const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<C: Check<u32>> Visitor<'_> for CheckedVisitor<u32, C> {
    type Value = Checked<u32, C>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(C::EXPECTING)
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        let n =
            u32::try_from(n).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))?;
        Checked::check(n)
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        let n = u32::try_from(n).map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))?;
        Checked::check(n)
    }
}

impl<'de, C: Check<u32>> Deserialize<'de> for Checked<u32, C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_u32(CheckedVisitor::<u32, C>::new())
    }
}

impl<C: Check<f64>> Visitor<'_> for CheckedVisitor<f64, C> {
    type Value = Checked<f64, C>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(C::EXPECTING)
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        Checked::check(x)
    }
    #[allow(clippy::cast_precision_loss)] // (as serde reads a whole number as f64)
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Checked::check(n as f64)
    }
    #[allow(clippy::cast_precision_loss)]
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Checked::check(n as f64)
    }
}

impl<'de, C: Check<f64>> Deserialize<'de> for Checked<f64, C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_f64(CheckedVisitor::<f64, C>::new())
    }
}

impl<C: Check<String>> Visitor<'_> for CheckedVisitor<String, C> {
    type Value = Checked<String, C>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(C::EXPECTING)
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Checked::check(text.to_owned())
    }
    // (As serde's `String` takes UTF-8 bytes, from binary formats.)
    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.visit_str(text),
            Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(bytes), &self)),
        }
    }
}

impl<C: Check<bool>> Visitor<'_> for CheckedVisitor<bool, C> {
    type Value = Checked<bool, C>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(C::EXPECTING)
    }
    fn visit_bool<E: de::Error>(self, yes: bool) -> Result<Self::Value, E> {
        Checked::check(yes)
    }
}

impl<'de, C: Check<bool>> Deserialize<'de> for Checked<bool, C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bool(CheckedVisitor::<bool, C>::new())
    }
}

impl<'de, C: Check<String>> Deserialize<'de> for Checked<String, C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(CheckedVisitor::<String, C>::new())
    }
}

macro_rules! checks {
    ($($check:ident($value:ident: $t:ty) $expecting:literal refuses $bad:expr => $why:expr;)*) => {$(
        struct $check;
        impl Check<$t> for $check {
            const EXPECTING: &'static str = $expecting;
            fn refuse($value: &$t) -> Option<String> {
                ($bad).then(|| $why.into())
            }
        }
    )*};
}

checks! {
    Attempts(n: u32) "`attempts`: a whole number, at least 1" refuses *n == 0
        => "`attempts` must be at least 1: it counts the first attempt too";
    Factor(factor: f64) "`factor`: a number greater than 1"
        refuses !(*factor > 1.0 && factor.is_finite())
        => "`factor` must be a finite number greater than 1: each delay is `factor` times the \
            last";
    BudgetWord(word: String) "`budget`: \"default\" or \"none\""
        refuses !matches!(word.trim(), "default" | "none") => budget_refusal(word.trim());
    Idempotent(_yes: bool) "`idempotent`: true or false" refuses false => "";
    MinPerSec(_n: u32) "`min_per_sec`: a whole number" refuses false => "";
    Ratio(ratio: f64) "`ratio`: a number in (0, 1]" refuses !(*ratio > 0.0 && *ratio <= 1.0)
        => "`ratio` must be in (0, 1], e.g. 0.1 for 10% of calls";
    MaxTokens(n: u32) "`max_tokens`: a whole number from 1 to 4000000"
        refuses !(1..=4_000_000).contains(n)
        => "`max_tokens` must be between 1 and 4000000, e.g. 10";
    // (A budget's counts are whole thousandths of a token.)
    TokenRatio(ratio: f64) "`token_ratio`: a number, at least 0.001" refuses ratio.is_nan() || *ratio < 0.001
        => if *ratio > 0.0 {
            "`token_ratio` must be at least 0.001: a budget counts tokens in thousandths"
        } else {
            "`token_ratio` must be above 0 and at most `max_tokens`, e.g. 0.1 (a tenth of a \
             token back for each answer)"
        };
    ThrottleK(k: f64) "`k`: a number, at least 1" refuses !(*k >= 1.0 && k.is_finite())
        => "`k` must be at least 1 (below, the throttle sheds healthy traffic), e.g. 2";
    Threshold(n: u32) "`failure_threshold`: a whole number, at least 1" refuses *n == 0
        => "`failure_threshold` must be at least 1";
    FailureRatio(ratio: f64) "`failure_ratio`: a number in (0, 1]"
        refuses !(*ratio > 0.0 && *ratio <= 1.0)
        => "`failure_ratio` must be above 0 and at most 1";
    // (The window counts up to about 134 million calls.)
    MinimumThroughput(n: u32) "`minimum_throughput`: a whole number from 1 to 100000000"
        refuses !(1..=100_000_000).contains(n)
        => "`minimum_throughput` must be between 1 and 100000000";
    Trials(n: u32) "`trials`: a whole number from 1 to 1000" refuses !(1..=1000).contains(n)
        => "`trials` must be between 1 and 1000";
    Growing(factor: u32) "`growing`: a whole number, at least 2" refuses *factor < 2
        => "`growing` must be at least 2";
}

/// A field whose value is one of a few words (an enum's lowercase
/// variants, as serde's own `Deserialize` of it names them).
trait Word: Sized {
    /// The field, for its errors.
    const FIELD: &'static str;
    /// The enum, as a format that reads enums by name asks for it.
    const ENUM: &'static str;
    /// The words, in order.
    const WORDS: &'static [&'static str];
    /// What `word` names, if it is one of [`WORDS`](Self::WORDS).
    fn of(word: &str) -> Option<Self>;
}

impl Word for Backoff {
    const FIELD: &'static str = "backoff";
    const ENUM: &'static str = "Backoff";
    const WORDS: &'static [&'static str] = &["exponential", "linear", "fixed"];
    fn of(word: &str) -> Option<Self> {
        match word {
            "exponential" => Some(Self::Exponential),
            "linear" => Some(Self::Linear),
            "fixed" => Some(Self::Fixed),
            _ => None,
        }
    }
}

impl Word for Jitter {
    const FIELD: &'static str = "jitter";
    const ENUM: &'static str = "Jitter";
    const WORDS: &'static [&'static str] = &["none", "full", "equal", "decorrelated"];
    fn of(word: &str) -> Option<Self> {
        match word {
            "none" => Some(Self::None),
            "full" => Some(Self::Full),
            "equal" => Some(Self::Equal),
            "decorrelated" => Some(Self::Decorrelated),
            _ => None,
        }
    }
}

/// A word field, read as an enum is (a string; a tag or a one-key table
/// where a format writes enums so; a variant matched as the format
/// matches it: the `config` crate before 0.15 whatever its case), its
/// errors naming the field and the words it takes. (A value of another
/// type is refused in the format's own words, at its position: read with
/// `deserialize_any`, it would be refused by name, but the one-key tables
/// of TOML and the `config` crate and that crate's case would be lost.)
struct Named<T>(T);

struct WordVisitor<T>(PhantomData<T>);

impl<T: Word> WordVisitor<T> {
    fn refused<E: de::Error>(word: &str) -> E {
        E::custom(format!("`{}`: `{word}` is not {}", T::FIELD, Self::words()))
    }

    /// The words, as a sentence lists them: `"a", "b" or "c"`.
    fn words() -> String {
        let quoted: Vec<String> = T::WORDS.iter().map(|w| format!("\"{w}\"")).collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl<'de, T: Word> Visitor<'de> for WordVisitor<T> {
    type Value = Named<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", T::FIELD, Self::words())
    }
    fn visit_str<E: de::Error>(self, word: &str) -> Result<Self::Value, E> {
        T::of(word).map(Named).ok_or_else(|| Self::refused(word))
    }
    // (The word read as the variant's name, so that a refusal is reported
    // where the word is.)
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let (word, variant) = data.variant_seed(self)?;
        de::VariantAccess::unit_variant(variant)?;
        Ok(word)
    }
}

impl<'de, T: Word> de::DeserializeSeed<'de> for WordVisitor<T> {
    type Value = Named<T>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<'de, T: Word> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_enum(T::ENUM, T::WORDS, WordVisitor(PhantomData))
    }
}

/// Why `budget = word` is refused: it is neither `"default"` nor `"none"`.
fn budget_refusal(word: &str) -> String {
    if word == "custom" {
        "`budget`: \"custom\" names a budget set in code, which configuration cannot give \
         back: write \"default\" or \"none\" here and give the budget in code \
         (`Policy::token_budget`, `Policy::window_budget`)"
            .into()
    } else {
        format!(
            "`budget`: `{word}` is not \"default\" or \"none\" (a budget of your own is built \
             from a TokenBudgetConfig or a WindowBudgetConfig and given in code)"
        )
    }
}

/// The fields a `Policy` may be given, all optional. (Named as the type
/// it is read for, which errors name: "expected struct Policy".)
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Policy")]
struct PolicyFields {
    attempts: Option<Checked<u32, Attempts>>,
    #[serde(default, deserialize_with = "present")]
    deadline: Option<HumanOrNone<Deadline>>,
    backoff: Option<Named<Backoff>>,
    base: Option<Human<Base>>,
    factor: Option<Checked<f64, Factor>>,
    cap: Option<Human<Cap>>,
    jitter: Option<Named<Jitter>>,
    idempotent: Option<Checked<bool, Idempotent>>,
    retry_after_max: Option<Human<RetryAfterMax>>,
    #[serde(default, deserialize_with = "present")]
    attempt_timeout: Option<HumanOrNone<AttemptTimeout>>,
    #[serde(default, deserialize_with = "present")]
    budget: Option<Checked<String, BudgetWord>>,
}

/// A field whose default is not its none, read as `T` when present:
/// `null` there, which would say neither, is refused as a value of the
/// wrong type (`Option`'s own reading takes it for the field left out, as
/// it is elsewhere).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Reads a `Policy`'s fields from a table alone where the format is
/// human-readable (a list of values in the fields' order would read, and
/// read differently were the fields ever reordered).
struct PolicyTable;

impl<'de> Visitor<'de> for PolicyTable {
    type Value = PolicyFields;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a policy: a table of its settings (`attempts`, `deadline`, `base`...)")
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<PolicyFields, A::Error> {
        PolicyFields::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// The settings `Policy`'s `Serialize` writes, in its order.
const POLICY_SETTINGS: &[&str] = &[
    "attempts",
    "deadline",
    "backoff",
    "base",
    "factor",
    "cap",
    "jitter",
    "idempotent",
    "retry_after_max",
    "attempt_timeout",
    "budget",
];

/// A `Policy` from configuration: a table, every field optional (the
/// defaults of [`Policy::new`] stand in; `null` is the same as leaving a
/// field out, but in `deadline`, `attempt_timeout` and `budget`, whose
/// defaults are not their none, where it is refused), durations as
/// strings with a unit, `deadline` and `attempt_timeout` also `"none"`,
/// and `budget` either `"default"` (a token budget of the call site's, or
/// the function's, own) or `"none"` (no budget at all). A budget of your
/// own is not configuration here: build it from a [`TokenBudgetConfig`]
/// or a [`WindowBudgetConfig`] and give it in code.
impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = if deserializer.is_human_readable() {
            deserializer.deserialize_struct("Policy", POLICY_SETTINGS, PolicyTable)?
        } else {
            PolicyFields::deserialize(deserializer)?
        };
        let mut policy = Policy::new();
        if let Some(attempts) = fields.attempts {
            policy = policy.attempts(attempts.0);
        }
        if let Some(deadline) = &fields.deadline {
            policy = policy.deadline(deadline.0);
        }
        if let Some(Named(backoff)) = fields.backoff {
            policy = policy.backoff(backoff);
        }
        if let Some(base) = &fields.base {
            let base = base.0;
            policy = policy.base(base);
        }
        if let Some(factor) = fields.factor {
            if policy.backoff != Backoff::Exponential {
                return Err(de::Error::custom(
                    "`factor` only applies to `backoff = \"exponential\"`: a fixed or linear \
                     schedule has no multiplier",
                ));
            }
            policy = policy.factor(factor.0);
        }
        if let Some(cap) = &fields.cap {
            policy = policy.cap(cap.0);
        }
        if policy.base > policy.cap {
            let which = |given: bool, name: &str| {
                if given {
                    format!("`{name}`")
                } else {
                    format!("the default `{name}`")
                }
            };
            return Err(de::Error::custom(format!(
                "{} ({}) is above {} ({}): no delay may exceed the cap",
                which(fields.base.is_some(), "base"),
                format_duration(policy.base),
                which(fields.cap.is_some(), "cap"),
                format_duration(policy.cap)
            )));
        }
        if let Some(Named(jitter)) = fields.jitter {
            policy = policy.jitter(jitter);
        }
        if let Some(idempotent) = fields.idempotent {
            policy = policy.idempotent(idempotent.0);
        }
        if let Some(max) = &fields.retry_after_max {
            policy = policy.retry_after_max(max.0);
        }
        // (Any other word was refused as it was read.)
        if fields.budget.is_some_and(|word| word.0.trim() == "none") {
            policy = policy.no_budget();
        }
        if let Some(timeout) = &fields.attempt_timeout {
            policy = policy.attempt_timeout(timeout.0);
        }
        Ok(policy)
    }
}

/// A `Policy` as configuration writes it, every field present (durations
/// with a unit, `"none"` for no deadline or attempt timeout), so that a
/// service can log or expose the policy it runs with, and read it back
/// unchanged. `budget` is `"default"`, `"none"`, or `"custom"` for a budget
/// set in code (which configuration cannot give back). A policy made in
/// code with a setting configuration refuses as a mistake (a `cap` below
/// `base`, a `base` or `deadline` of zero, a `factor` of 1) is written as
/// it is, and refused by name when read back.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::Policy;
///
/// let policy = Policy::new().attempts(5).base(Duration::from_millis(250));
/// let json = serde_json::to_string(&policy).unwrap();
/// assert!(json.contains(r#""base":"250ms""#), "{json}");
/// assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), policy);
/// ```
impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let or_none = |d: Option<Duration>| d.map_or_else(|| "none".to_owned(), format_duration);
        // A multiplier only an exponential schedule has (and reads back);
        // another schedule's, set in code, is written to be refused by name
        // when read back, not lost.
        let factor = self.backoff == Backoff::Exponential
            || self.factor.to_bits() != Policy::new().factor.to_bits();
        // (The fields written: a format that counts them, CBOR's, reads
        // back as many.)
        let len = if factor { 11 } else { 10 };
        let mut out = serializer.serialize_struct("Policy", len)?;
        out.serialize_field("attempts", &self.attempts)?;
        out.serialize_field("deadline", &or_none(self.deadline))?;
        out.serialize_field("backoff", &self.backoff)?;
        out.serialize_field("base", &format_duration(self.base))?;
        if factor {
            out.serialize_field("factor", &self.factor)?;
        } else {
            out.skip_field("factor")?;
        }
        out.serialize_field("cap", &format_duration(self.cap))?;
        out.serialize_field("jitter", &self.jitter)?;
        out.serialize_field("idempotent", &self.idempotent)?;
        out.serialize_field("retry_after_max", &format_duration(self.retry_after_max))?;
        out.serialize_field("attempt_timeout", &or_none(self.attempt_timeout))?;
        let budget = if self.has_default_budget() {
            "default"
        } else if self.get_budget().is_none() {
            "none"
        } else {
            "custom"
        };
        out.serialize_field("budget", budget)?;
        out.end()
    }
}

/// Each configuration writes itself back as it reads it, every setting
/// present (durations with a unit; a token budget's refill and ride-out
/// as given, or their defaults, `"0s"` for none), so that a service can
/// expose what it runs with, and read back the same limiter.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::config::{BreakerConfig, TokenBudgetConfig};
/// let token: TokenBudgetConfig =
///     serde_json::from_str(r#"{ "max_tokens": 10, "token_ratio": 0.1 }"#).unwrap();
/// let written = serde_json::to_string(&token).unwrap();
/// assert_eq!(
///     written,
///     r#"{"max_tokens":10,"token_ratio":0.1,"refill":"10s","ride_out":"10s"}"#
/// );
/// let breaker: BreakerConfig =
///     serde_json::from_str(r#"{ "failure_threshold": 5, "cooldown": "30s" }"#).unwrap();
/// let written = serde_json::to_string(&breaker).unwrap();
/// assert_eq!(written, r#"{"failure_threshold":5,"cooldown":"30s","trials":1}"#);
/// assert_eq!(serde_json::from_str::<BreakerConfig>(&written).unwrap(), breaker);
/// ```
impl Serialize for TokenBudgetConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // (The defaults, where none was given, as the budget has them.)
        let (_, _, refill, ride_out) = self.in_effect();
        let mut out = serializer.serialize_struct("TokenBudgetConfig", 4)?;
        out.serialize_field("max_tokens", &self.max_tokens)?;
        out.serialize_field("token_ratio", &self.token_ratio)?;
        out.serialize_field("refill", &format_duration(refill))?;
        out.serialize_field("ride_out", &format_duration(ride_out))?;
        out.end()
    }
}

impl Serialize for WindowBudgetConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("WindowBudgetConfig", 3)?;
        out.serialize_field("ratio", &self.ratio)?;
        out.serialize_field("min_per_sec", &self.min_per_sec)?;
        out.serialize_field("ttl", &format_duration(self.ttl))?;
        out.end()
    }
}

impl Serialize for AdaptiveThrottleConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("AdaptiveThrottleConfig", 2)?;
        out.serialize_field("k", &self.k)?;
        out.serialize_field("window", &format_duration(self.window))?;
        out.end()
    }
}

impl Serialize for BreakerConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("BreakerConfig", 7)?;
        match self.rule {
            BreakerRule::Consecutive(threshold) => {
                out.serialize_field("failure_threshold", &threshold)?;
            }
            BreakerRule::Ratio {
                failure_ratio,
                minimum_throughput,
                sampling,
            } => {
                out.serialize_field("failure_ratio", &failure_ratio)?;
                out.serialize_field("minimum_throughput", &minimum_throughput)?;
                out.serialize_field("sampling", &format_duration(sampling))?;
            }
        }
        out.serialize_field("cooldown", &format_duration(self.cooldown))?;
        out.serialize_field("trials", &self.trials)?;
        if let Some((factor, longest)) = self.growing {
            out.serialize_field("growing", &factor)?;
            out.serialize_field("longest", &format_duration(longest))?;
        }
        out.end()
    }
}

/// Shows the settings by the names configuration gives them, as they are
/// written back.
impl fmt::Debug for BreakerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("BreakerConfig");
        match self.rule {
            BreakerRule::Consecutive(threshold) => out.field("failure_threshold", &threshold),
            BreakerRule::Ratio {
                failure_ratio,
                minimum_throughput,
                sampling,
            } => out
                .field("failure_ratio", &failure_ratio)
                .field("minimum_throughput", &minimum_throughput)
                .field("sampling", &sampling),
        };
        out.field("cooldown", &self.cooldown)
            .field("trials", &self.trials);
        if let Some((factor, longest)) = self.growing {
            out.field("growing", &factor).field("longest", &longest);
        }
        out.finish()
    }
}

/// A [`WindowBudget`]'s settings from configuration; [`build`](Self::build)
/// makes the budget (once, shared, in a `static LazyLock` say): `ratio`, in
/// (0, 1], `min_per_sec`, and `ttl`, from `"1s"` to `"60s"` (shorter, the
/// reserve of `min_per_sec` is a fraction of a retry; longer, the deposits
/// of a healthy spell pay for a long storm), as [`WindowBudget::new`]
/// takes them.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::sync::LazyLock;
/// use backstop::{config::WindowBudgetConfig, limit::WindowBudget};
///
/// let config: WindowBudgetConfig =
///     serde_json::from_str(r#"{ "ratio": 0.1, "min_per_sec": 10, "ttl": "10s" }"#).unwrap();
/// static BUDGET: LazyLock<WindowBudget> = LazyLock::new(|| WindowBudget::standard());
/// assert_eq!(config.build().ratio(), BUDGET.ratio());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowBudgetConfig {
    ratio: f64,
    min_per_sec: u32,
    ttl: Duration,
}

impl WindowBudgetConfig {
    /// The budget, once per configuration: keep it in a `static` (a
    /// `LazyLock`) for `budget =`, as a budget counts the calls it sees.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::config::WindowBudgetConfig;
    /// let config: WindowBudgetConfig =
    ///     serde_json::from_str(r#"{ "ratio": 0.2, "min_per_sec": 5, "ttl": "30s" }"#).unwrap();
    /// let budget = config.build();
    /// assert_eq!((budget.ratio(), budget.min_per_sec(), budget.ttl()), (0.2, 5, Duration::from_secs(30)));
    /// ```
    pub fn build(&self) -> WindowBudget {
        WindowBudget::new(self.ratio, self.min_per_sec, self.ttl)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFields {
    ratio: Checked<f64, Ratio>,
    min_per_sec: Checked<u32, MinPerSec>,
    ttl: Human<Ttl>,
}

impl<'de> Deserialize<'de> for WindowBudgetConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = BudgetFields::deserialize(deserializer)?;
        let ttl = fields.ttl.0;
        Ok(Self {
            ratio: fields.ratio.0,
            min_per_sec: fields.min_per_sec.0,
            ttl,
        })
    }
}

/// A [`TokenBudget`]'s settings from configuration; [`build`](Self::build)
/// makes the budget: `max_tokens` and `token_ratio` (at least 0.001) as
/// [`TokenBudget::new`] takes them, and, if given, `refill` (one token back
/// every so long, at most `"100s"`, `"0s"` for none: [`TokenBudget::refill`])
/// and `ride_out` (at least `"100ms"`, at most `"214748364.7s"`, `"0s"`
/// for none: [`TokenBudget::ride_out`], kept in 100 ms steps, rounded
/// down). A budget counts thousandths of a token per 100 ms: what it
/// cannot keep is refused, not kept as none or as much less, and a refill
/// is kept to the nearest slower one it can (`"30s"` refills every 33.3 s).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::config::TokenBudgetConfig;
/// let config: TokenBudgetConfig =
///     serde_json::from_str(r#"{ "max_tokens": 20, "token_ratio": 0.2, "refill": "1s" }"#).unwrap();
/// let budget = config.build();
/// assert_eq!((budget.max_tokens(), budget.token_ratio()), (20, 0.2));
/// assert_eq!(budget.get_refill(), Some(Duration::from_secs(1)));
/// assert_eq!(budget.get_ride_out(), Duration::from_secs(10), "the default");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokenBudgetConfig {
    max_tokens: u32,
    token_ratio: f64,
    refill: Option<Duration>,
    ride_out: Option<Duration>,
}

/// Two configurations are equal when their settings are, a refill or a
/// ride-out left out being the default: equal to the default written out
/// (as a configuration written and read back names it).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::config::TokenBudgetConfig;
/// let read: TokenBudgetConfig =
///     serde_json::from_str(r#"{ "max_tokens": 10, "token_ratio": 0.1 }"#).unwrap();
/// let again: TokenBudgetConfig =
///     serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
/// assert_eq!(again, read);
/// let other: TokenBudgetConfig =
///     serde_json::from_str(r#"{ "max_tokens": 10, "token_ratio": 0.1, "ride_out": "0s" }"#)
///         .unwrap();
/// assert_ne!(other, read);
/// ```
impl PartialEq for TokenBudgetConfig {
    fn eq(&self, other: &Self) -> bool {
        self.in_effect() == other.in_effect()
    }
}

impl TokenBudgetConfig {
    /// The settings in effect: the refill (zero for none) and the ride-out
    /// given, or the budget's defaults where none was.
    fn in_effect(&self) -> (u32, f64, Duration, Duration) {
        let budget = TokenBudget::new(self.max_tokens, self.token_ratio);
        let refill = self
            .refill
            .unwrap_or_else(|| budget.get_refill().unwrap_or(Duration::ZERO));
        let ride_out = self.ride_out.unwrap_or_else(|| budget.get_ride_out());
        (self.max_tokens, self.token_ratio, refill, ride_out)
    }

    /// The budget, once per configuration: keep it in a `static` (a
    /// `LazyLock`) for `budget =`, as a budget counts the calls it sees.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::config::TokenBudgetConfig;
    /// let config: TokenBudgetConfig = serde_json::from_str(
    ///     r#"{ "max_tokens": 10, "token_ratio": 0.1, "ride_out": "0s" }"#,
    /// )
    /// .unwrap();
    /// assert_eq!(config.build().get_ride_out(), Duration::ZERO);
    /// ```
    pub fn build(&self) -> TokenBudget {
        let budget = TokenBudget::new(self.max_tokens, self.token_ratio);
        let budget = match self.refill {
            Some(every) => budget.refill(every),
            None => budget,
        };
        match self.ride_out {
            Some(ride_out) => budget.ride_out(ride_out),
            None => budget,
        }
    }
}

/// The slowest refill a token budget keeps (a token every 100 s).
const MAX_REFILL: Duration = Duration::from_secs(100);
/// The window a budget from configuration may count over.
const MIN_TTL: Duration = Duration::from_secs(1);
const MAX_TTL: Duration = Duration::from_secs(60);

/// A token budget's ride-out is kept in steps of this.
const RIDE_OUT_STEP: Duration = Duration::from_millis(100);

/// The longest ride-out a token budget keeps: 2³¹ − 1 steps (a longer
/// one would be kept as this, and written back as it was read).
const MAX_RIDE_OUT: Duration = Duration::from_millis((u32::MAX as u64 / 2) * 100);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFields {
    max_tokens: Checked<u32, MaxTokens>,
    token_ratio: Checked<f64, TokenRatio>,
    refill: Option<Human<Refill>>,
    ride_out: Option<Human<RideOut>>,
}

impl<'de> Deserialize<'de> for TokenBudgetConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = TokenFields::deserialize(deserializer)?;
        let (max_tokens, token_ratio) = (fields.max_tokens.0, fields.token_ratio.0);
        if token_ratio > f64::from(max_tokens) {
            return Err(de::Error::custom(
                "`token_ratio` must be at most `max_tokens`, e.g. 0.1 (a tenth of a token back \
                 for each answer)",
            ));
        }
        let refill = fields.refill.as_ref().map(|refill| refill.0);
        let ride_out = fields.ride_out.as_ref().map(|ride_out| ride_out.0);
        Ok(Self {
            max_tokens,
            token_ratio,
            refill,
            ride_out,
        })
    }
}

/// An [`AdaptiveThrottle`]'s settings from configuration;
/// [`build`](Self::build) makes the throttle: `k` (at least 1: how many
/// requests per accepted one it lets through before shedding) and
/// `window` (at least `"8us"`), as [`AdaptiveThrottle::new`] takes them.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::config::AdaptiveThrottleConfig;
/// let config: AdaptiveThrottleConfig =
///     serde_json::from_str(r#"{ "k": 1.5, "window": "1m" }"#).unwrap();
/// let throttle = config.build();
/// assert_eq!((throttle.k(), throttle.window()), (1.5, Duration::from_secs(60)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveThrottleConfig {
    k: f64,
    window: Duration,
}

impl AdaptiveThrottleConfig {
    /// The throttle, once per configuration: keep it in a `static` (a
    /// `LazyLock`) for `throttle =`, as a throttle counts the attempts it
    /// sees.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::config::AdaptiveThrottleConfig;
    /// let config: AdaptiveThrottleConfig =
    ///     serde_json::from_str(r#"{ "k": 2, "window": "2s" }"#).unwrap();
    /// assert_eq!(config.build().k(), 2.0);
    /// ```
    pub fn build(&self) -> AdaptiveThrottle {
        AdaptiveThrottle::new(self.k, self.window)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThrottleFields {
    k: Checked<f64, ThrottleK>,
    window: Human<Window>,
}

impl<'de> Deserialize<'de> for AdaptiveThrottleConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = ThrottleFields::deserialize(deserializer)?;
        Ok(Self {
            k: fields.k.0,
            window: fields.window.0,
        })
    }
}

/// A [`CircuitBreaker`]'s settings from configuration; [`build`](Self::build)
/// makes the breaker. Its rule is `failure_threshold` (consecutive
/// failures: [`CircuitBreaker::new`]) or `failure_ratio` (a share of the
/// calls of a sliding window that failed: [`CircuitBreaker::ratio`], with
/// `minimum_throughput`, 100 unless given, and `sampling`, `"30s"` unless
/// given and at least `"500ms"`, as Polly's), and `cooldown` how long it
/// breaks. It may
/// also give `trials` (how many trials go when half-open, all to succeed:
/// see [`CircuitBreaker::trials`]) and `growing` with `longest` (each
/// failed trial's break that many times the last, up to `longest`, at
/// least `cooldown`: see [`CircuitBreaker::growing`]).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::config::BreakerConfig;
/// let config: BreakerConfig =
///     serde_json::from_str(r#"{ "failure_threshold": 5, "cooldown": "30s" }"#).unwrap();
/// assert_eq!(config.build().failure_threshold(), 5);
/// let config: BreakerConfig = serde_json::from_str(
///     r#"{ "failure_threshold": 5, "cooldown": "1s", "trials": 3, "growing": 2, "longest": "1m" }"#,
/// )
/// .unwrap();
/// assert_eq!(config.build().cooldown(), std::time::Duration::from_secs(1));
/// let config: BreakerConfig = serde_json::from_str(
///     r#"{ "failure_ratio": 0.1, "minimum_throughput": 20, "sampling": "10s", "cooldown": "5s" }"#,
/// )
/// .unwrap();
/// assert_eq!(config.build().failure_ratio(), Some(0.1));
/// ```
#[derive(Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    rule: BreakerRule,
    cooldown: Duration,
    trials: u32,
    growing: Option<(u32, Duration)>,
}

/// When a configured breaker opens.
#[derive(Clone, Copy, Debug, PartialEq)]
enum BreakerRule {
    /// After this many consecutive retryable failures.
    Consecutive(u32),
    /// When this share of the calls of the window failed, the window
    /// having seen at least `minimum_throughput` calls.
    Ratio {
        failure_ratio: f64,
        minimum_throughput: u32,
        sampling: Duration,
    },
}

impl BreakerConfig {
    /// The breaker, once per configuration: keep it in a `static` (a
    /// `LazyLock`) for `breaker =`, as a breaker counts the failures it
    /// sees.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::time::Duration;
    /// use backstop::config::BreakerConfig;
    /// let config: BreakerConfig =
    ///     serde_json::from_str(r#"{ "failure_threshold": 3, "cooldown": "10s" }"#).unwrap();
    /// let breaker = config.build();
    /// assert_eq!((breaker.failure_threshold(), breaker.cooldown()), (3, Duration::from_secs(10)));
    /// ```
    pub fn build(&self) -> CircuitBreaker {
        let breaker = match self.rule {
            BreakerRule::Consecutive(threshold) => CircuitBreaker::new(threshold, self.cooldown),
            BreakerRule::Ratio {
                failure_ratio,
                minimum_throughput,
                sampling,
            } => CircuitBreaker::ratio(failure_ratio, minimum_throughput, sampling, self.cooldown),
        }
        .trials(self.trials);
        match self.growing {
            Some((factor, longest)) => breaker.growing(factor, longest),
            None => breaker,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerFields {
    failure_threshold: Option<Checked<u32, Threshold>>,
    failure_ratio: Option<Checked<f64, FailureRatio>>,
    minimum_throughput: Option<Checked<u32, MinimumThroughput>>,
    sampling: Option<Human<Sampling>>,
    cooldown: Human<Cooldown>,
    trials: Option<Checked<u32, Trials>>,
    growing: Option<Checked<u32, Growing>>,
    longest: Option<Human<Longest>>,
}

impl<'de> Deserialize<'de> for BreakerConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = BreakerFields::deserialize(deserializer)?;
        let rule = breaker_rule(&fields)?;
        let trials = fields.trials.as_ref().map_or(1, |trials| trials.0);
        let growing = match (&fields.growing, &fields.longest) {
            (None, None) => None,
            (Some(factor), Some(longest)) => Some((factor.0, longest.0)),
            _ => {
                return Err(de::Error::custom(
                    "`growing` and `longest` go together: the factor each failed trial's \
                     break grows by, and the longest break",
                ));
            }
        };
        let cooldown = fields.cooldown.0;
        if let Some((_, longest)) = growing
            && longest < cooldown
        {
            return Err(de::Error::custom(
                "`longest` must be at least `cooldown`: the break grows from the \
                 cooldown up to the longest",
            ));
        }
        Ok(Self {
            rule,
            cooldown,
            trials,
            growing,
        })
    }
}

/// A configured breaker's rule: `failure_threshold`, or `failure_ratio`
/// with its window (`minimum_throughput`, `sampling`), not both.
fn breaker_rule<E: de::Error>(fields: &BreakerFields) -> Result<BreakerRule, E> {
    let window = fields.minimum_throughput.is_some() || fields.sampling.is_some();
    let threshold = fields.failure_threshold.as_ref().map(|n| n.0);
    match (
        threshold,
        fields.failure_ratio.as_ref().map(|ratio| ratio.0),
    ) {
        (Some(_), Some(_)) => Err(E::custom(
            "give `failure_threshold` (consecutive failures) or `failure_ratio` (a share of \
             the calls), not both",
        )),
        (None, None) => Err(E::custom(
            "a breaker needs `failure_threshold` (consecutive failures) or `failure_ratio` \
             (a share of the calls, with `minimum_throughput` and `sampling`)",
        )),
        (Some(_), None) if window => Err(E::custom(
            "`minimum_throughput` and `sampling` go with `failure_ratio`, not with \
             `failure_threshold`",
        )),
        (Some(threshold), None) => Ok(BreakerRule::Consecutive(threshold)),
        (None, Some(ratio)) => {
            let minimum_throughput = fields.minimum_throughput.as_ref().map_or(100, |n| n.0);
            let sampling = fields
                .sampling
                .as_ref()
                .map_or(Duration::from_secs(30), |text| text.0);
            Ok(BreakerRule::Ratio {
                failure_ratio: ratio,
                minimum_throughput,
                sampling,
            })
        }
    }
}
