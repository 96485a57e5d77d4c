//! Stage 1: parse `#[retry(...)]`'s options into a typed struct.
//!
//! Every mistake is recorded in a [`Ctxt`] and parsing goes on, so a user
//! sees all of them at once; each error is spanned on the offending key or
//! value.

use std::fmt::Display;

use proc_macro2::{Ident, Span, TokenStream};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Expr, Lit, Path, UnOp};

pub(crate) use crate::units::human;
use crate::units::{UNIT_NAMES, unit_nanos};

/// Accumulates errors, like serde's `Ctxt`.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Option<syn::Error>,
}

impl Ctxt {
    pub(crate) fn error(&mut self, span: Span, msg: impl Display) {
        self.push(syn::Error::new(span, msg));
    }

    pub(crate) fn error_spanned(&mut self, tokens: impl ToTokens, msg: impl Display) {
        self.push(syn::Error::new_spanned(tokens, msg));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        self.errors.map_or(Ok(()), Err)
    }
}

/// An option given once: the key's span and the parsed value.
struct Set<T> {
    key: Span,
    value: T,
}

/// The one set-once helper: every option goes through it, so no option can
/// forget its duplicate check.
pub(crate) struct Opt<T> {
    name: &'static str,
    set: Option<Set<T>>,
}

impl<T> Opt<T> {
    const fn new(name: &'static str) -> Self {
        Self { name, set: None }
    }

    fn set(&mut self, cx: &mut Ctxt, key: Span, value: T) {
        if self.set.is_some() {
            cx.error(
                key,
                format!("duplicate option `{}`: give it once", self.name),
            );
        } else {
            self.set = Some(Set { key, value });
        }
    }

    pub(crate) fn value(&self) -> Option<&T> {
        self.set.as_ref().map(|s| &s.value)
    }

    pub(crate) fn key(&self) -> Option<Span> {
        self.set.as_ref().map(|s| s.key)
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

/// A duration: a literal with a unit, validated here, or any expression of
/// type `Duration`, checked by the compiler.
pub(crate) enum Dur {
    Lit(DurLit),
    Expr(Expr),
}

impl Dur {
    pub(crate) fn as_lit(&self) -> Option<&DurLit> {
        match self {
            Self::Lit(lit) => Some(lit),
            Self::Expr(_) => None,
        }
    }
}

/// A duration literal: its value, where it is, and how it was written.
pub(crate) struct DurLit {
    pub(crate) nanos: u128,
    pub(crate) span: Span,
    pub(crate) text: String,
}

/// An integer or float option: a literal, validated here, or an expression.
pub(crate) enum Num<T> {
    Lit(T),
    Expr(Expr),
}

/// When to hedge: after a duration, or an adaptive percentile (`p95`).
pub(crate) enum HedgeDelay {
    After(Dur),
    /// The quantile (`0.95` for `p95`), and how it was written.
    Percentile(f64, Ident),
}

/// `none`, or a value.
pub(crate) enum OrNone<T> {
    None,
    Some(T),
}

/// A path or a closure (`when`, `when_ok`, `on_retry`).
pub(crate) type Callable = Expr;

/// Every option, once, in the order of the documentation's table: its
/// field in [`Args`], its type, its name, a value to show in messages, and
/// whether it takes a duration. Parsing each is `Args::parse_one`'s.
macro_rules! options {
    ($($field:ident: $ty:ty = $name:literal ($example:literal) $($duration:ident)?;)*) => {
        pub(crate) struct Args {
            $(pub(crate) $field: Opt<$ty>,)*
        }

        /// Every option's name, in the order of the documentation's table:
        /// listed in "expected one of".
        pub(crate) const OPTIONS: &[&str] = &[$($name),*];

        impl Args {
            fn new() -> Self {
                Self {
                    $($field: Opt::new($name),)*
                }
            }
        }

        /// A value of option `name`, for messages.
        fn example(name: &str) -> &'static str {
            match name {
                $($name => $example,)*
                _ => "...",
            }
        }

        /// Whether option `name` takes a duration.
        fn takes_duration(name: &str) -> bool {
            match name {
                $($name => options!(@duration $($duration)?),)*
                _ => false,
            }
        }
    };
    (@duration duration) => { true };
    (@duration) => { false };
}

options! {
    attempts: Num<u32> = "attempts" ("4");
    deadline: OrNone<Dur> = "deadline" ("10s") duration;
    backoff: Backoff = "backoff" ("exponential");
    base: Dur = "base" ("100ms") duration;
    factor: Num<f64> = "factor" ("2");
    cap: Dur = "cap" ("5s") duration;
    jitter: Jitter = "jitter" ("full");
    when: Callable = "when" ("|error| error.is_transient()");
    when_ok: Callable = "when_ok" ("|response| response.status() == 503");
    idempotent: bool = "idempotent" ("true");
    budget: OrNone<Path> = "budget" ("MY_BUDGET");
    breaker: Path = "breaker" ("MY_BREAKER");
    throttle: Path = "throttle" ("MY_THROTTLE");
    key: Expr = "key" ("shard_id");
    retry_after_max: Dur = "retry_after_max" ("60s") duration;
    attempt_timeout: Dur = "attempt_timeout" ("2s") duration;
    hedge: HedgeDelay = "hedge" ("p95") duration;
    hedges: Num<u32> = "hedges" ("1");
    on_retry: Callable = "on_retry" ("|event| log(event)");
    on_give_up: Callable = "on_give_up" ("|event| log(event)");
    policy: Expr = "policy" ("MY_POLICY");
    krate: Path = "crate" ("::backstop");
}

#[derive(Clone, Copy)]
pub(crate) enum Backoff {
    Exponential,
    Linear,
    Fixed,
}

#[derive(Clone, Copy)]
pub(crate) enum Jitter {
    Full,
    Equal,
    Decorrelated,
    None,
}

/// Names people bring from other retry crates, and what they mean here.
const ALIASES: &[(&str, &str)] = &[
    ("max_attempts", "`attempts`"),
    (
        "retries",
        "`attempts`, which counts the first attempt too (N retries are `attempts = N + 1`)",
    ),
    (
        "max_retries",
        "`attempts`, which counts the first attempt too (N retries are `attempts = N + 1`)",
    ),
    ("times", "`attempts`"),
    (
        "max_times",
        "`attempts`, which counts the first attempt too (backon's `with_max_times(N)` is `attempts = N + 1`)",
    ),
    (
        "total_delay",
        "`deadline`, which bounds the whole call from its entry (no attempt starts, and no sleep runs, past it)",
    ),
    (
        "max_duration",
        "`deadline`, which bounds the whole call from its entry (no attempt starts, and no sleep runs, past it)",
    ),
    ("notify", "`on_retry`"),
    (
        "adjust",
        "`when`, answering `Verdict::RetryAfter(d)` for a failure to be retried after `d`",
    ),
    (
        "timeout",
        "`deadline` (for the whole call) or `attempt_timeout` (for each attempt)",
    ),
    ("max_elapsed_time", "`deadline`"),
    ("delay", "`base`"),
    ("initial_delay", "`base`"),
    ("min_delay", "`base`"),
    ("max_delay", "`cap`"),
    ("multiplier", "`factor`"),
    ("retry_if", "`when`"),
    ("retry_on", "`when`"),
    ("if", "`when`"),
    ("strategy", "`backoff`"),
];

impl Args {
    /// Parses the attribute's arguments. A syntax error the parser cannot
    /// step over (a malformed expression) ends parsing; every other mistake
    /// is recorded and parsing goes on. `params` are the names the
    /// function's parameters bind: a value named as one of them is the
    /// caller's, never a mistake.
    pub(crate) fn parse(tokens: TokenStream, cx: &mut Ctxt, params: &[String]) -> Self {
        let mut args = Self::new();
        // `#[retry(3)]`, `#[retry(5s)]`: a value without its option's name.
        if let Some(proc_macro2::TokenTree::Literal(lit)) = tokens.clone().into_iter().next() {
            let text = lit.to_string();
            let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let whole =
                |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'_');
            // A count, or a duration (a number and its unit): the option it
            // most likely is; anything else, the form alone.
            let named = if whole(&text) && !text.trim_start_matches(['0', '_']).is_empty() {
                format!("`#[retry(attempts = {text})]`")
            } else if whole(digits) && digits.len() < text.len() {
                format!("`#[retry(deadline = {text})]`")
            } else {
                "`#[retry(attempts = 5, deadline = 10s)]`".to_owned()
            };
            cx.error(
                lit.span(),
                format!("options are given by name, as in {named}"),
            );
            return args;
        }
        let parser = syn::meta::parser(|meta| args.parse_one(&meta, cx, params));
        if let Err(e) = syn::parse::Parser::parse2(parser, tokens) {
            cx.push(e);
        }
        args
    }

    // One flat arm per option: longer than clippy likes, simpler than split.
    #[allow(clippy::too_many_lines)]
    fn parse_one(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        cx: &mut Ctxt,
        params: &[String],
    ) -> syn::Result<()> {
        let Some(key) = meta.path.get_ident() else {
            cx.error_spanned(&meta.path, unknown_message(&path_text(&meta.path)));
            return skip_value(meta);
        };
        let name = key.to_string();
        let span = key.span();
        if name == "idempotent" && !meta.input.peek(syn::Token![=]) {
            // A bare `idempotent` reads as `idempotent = true`.
            self.idempotent.set(cx, span, true);
            return Ok(());
        }
        if !OPTIONS.contains(&name.as_str()) {
            cx.error(span, unknown_message(&name));
            return skip_value(meta);
        }
        if !meta.input.peek(syn::Token![=]) {
            cx.error(
                span,
                format!("`{name}` needs a value: `{name} = {}`", example(&name)),
            );
            return skip_value(meta);
        }
        let value = ungrouped(meta.value()?.parse()?);
        if let Some(unit) = takes_duration(&name)
            .then(|| spaced_unit(&value, meta))
            .flatten()
        {
            let number = value.to_token_stream();
            cx.error(
                unit.span(),
                format!("`{name} = {number} {unit}`: write the unit against the number, `{number}{unit}`"),
            );
            return Ok(());
        }
        if takes_no_none(&name, &value) && !names_a_parameter(&value, params) {
            cx.error_spanned(&value, no_none(&name));
            return Ok(());
        }
        match name.as_str() {
            "attempts" => {
                if let Some(v) = attempts(cx, value) {
                    self.attempts.set(cx, span, v);
                }
            }
            "deadline" => {
                if let Some(v) = or_none(cx, "deadline", value, |cx, v| duration(cx, "deadline", v))
                {
                    self.deadline.set(cx, span, v);
                }
            }
            "backoff" => {
                let v = keyword(
                    cx,
                    "backoff",
                    &value,
                    &[
                        ("exponential", Backoff::Exponential),
                        ("linear", Backoff::Linear),
                        ("fixed", Backoff::Fixed),
                    ],
                );
                if let Some(v) = v {
                    self.backoff.set(cx, span, v);
                }
            }
            "base" => set_duration(cx, &mut self.base, span, value),
            "cap" => set_duration(cx, &mut self.cap, span, value),
            "retry_after_max" => set_duration(cx, &mut self.retry_after_max, span, value),
            "attempt_timeout" => set_duration(cx, &mut self.attempt_timeout, span, value),
            "hedge" => {
                if let Some(v) = hedge_delay(cx, value, params) {
                    self.hedge.set(cx, span, v);
                }
            }
            "hedges" => {
                if let Some(v) = count(cx, "hedges", value, "hedges = 2") {
                    self.hedges.set(cx, span, v);
                }
            }
            "factor" => {
                if let Some(v) = factor(cx, value) {
                    self.factor.set(cx, span, v);
                }
            }
            "jitter" => {
                let v = keyword(
                    cx,
                    "jitter",
                    &value,
                    &[
                        ("full", Jitter::Full),
                        ("equal", Jitter::Equal),
                        ("decorrelated", Jitter::Decorrelated),
                        ("none", Jitter::None),
                    ],
                );
                if let Some(v) = v {
                    self.jitter.set(cx, span, v);
                }
            }
            "when" => set_callable(cx, &mut self.when, span, value, "|error| ..."),
            "when_ok" => set_callable(cx, &mut self.when_ok, span, value, "|value| ..."),
            "on_retry" => set_callable(cx, &mut self.on_retry, span, value, "|event| ..."),
            "on_give_up" => set_callable(cx, &mut self.on_give_up, span, value, "|event| ..."),
            "idempotent" => match value {
                Expr::Lit(syn::ExprLit {
                    lit: Lit::Bool(b), ..
                }) => self.idempotent.set(cx, span, b.value),
                other => cx.error_spanned(
                    other,
                    "`idempotent` takes `true` or `false`: may a timed-out attempt be repeated?",
                ),
            },
            "budget" => {
                let v = or_none(cx, "budget", value, |cx, v| {
                    shared_static_path(cx, v, "budget", "BUDGET", "TokenBudget")
                });
                if let Some(v) = v {
                    self.budget.set(cx, span, v);
                }
            }
            "breaker" => {
                if let Some(p) =
                    shared_static_path(cx, value, "breaker", "BREAKER", "CircuitBreaker")
                {
                    self.breaker.set(cx, span, p);
                }
            }
            "throttle" => {
                if let Some(p) =
                    shared_static_path(cx, value, "throttle", "THROTTLE", "AdaptiveThrottle")
                {
                    self.throttle.set(cx, span, p);
                }
            }
            "policy" => self.policy.set(cx, span, value),
            "key" => self.key.set(cx, span, value),
            "crate" => {
                let message = match &value {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Str(text),
                        ..
                    }) if syn::parse_str::<Path>(&text.value()).is_ok() => format!(
                        "`crate` takes a path, not a string: remove the quotes (`crate = {}`)",
                        text.value()
                    ),
                    _ => "`crate` takes the path of the `backstop` crate, e.g. `crate = ::my_backstop`"
                        .to_owned(),
                };
                if let Some(p) = path(cx, value, &message) {
                    self.krate.set(cx, span, p);
                }
            }
            _ => unreachable!("every name in OPTIONS is handled"),
        }
        Ok(())
    }
}

fn path_text(path: &Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}

/// "unknown option `x`", with the nearest valid one and the full list.
fn unknown_message(name: &str) -> String {
    let alias = ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, o)| (*o).to_owned());
    let suggestion = alias.or_else(|| nearest(name, OPTIONS).map(|o| format!("`{o}`")));
    let list = OPTIONS
        .iter()
        .map(|o| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match suggestion {
        Some(s) => format!("unknown option `{name}`; did you mean {s}? (options: {list})"),
        None => format!("unknown option `{name}`; expected one of {list}"),
    }
}

/// A value passed through a `macro_rules!` fragment (`$x:expr`,
/// `$x:literal`, `$x:path`), which rustc wraps in an invisible group, as
/// if written out: a literal, a path, a closure or a negated literal
/// inside (what the options read). Any other expression keeps its group,
/// which keeps its precedence where it is put.
fn ungrouped(value: Expr) -> Expr {
    match value {
        Expr::Group(group)
            if matches!(
                &*group.expr,
                Expr::Lit(_) | Expr::Path(_) | Expr::Closure(_) | Expr::Group(_)
            ) || matches!(&*group.expr, Expr::Unary(u) if matches!(*u.expr, Expr::Lit(_))) =>
        {
            ungrouped(*group.expr)
        }
        other => other,
    }
}

/// After a number without a unit, the unit written apart (`10 ms`),
/// consumed: one error about the space rather than two about the parts.
fn spaced_unit(value: &Expr, meta: &ParseNestedMeta<'_>) -> Option<Ident> {
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Int(_) | Lit::Float(_),
        ..
    }) = value
    else {
        return None;
    };
    let unit = meta.input.fork().parse::<Ident>().ok()?;
    if !UNIT_NAMES.contains(&unit.to_string().as_str()) {
        return None;
    }
    meta.input.parse::<Ident>().ok()
}

/// The one candidate `name` abbreviates (`exp` for `exponential`), else
/// the nearest.
fn abbreviated_or_nearest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let mut prefixed = candidates
        .iter()
        .filter(|c| name.len() >= 3 && c.starts_with(name));
    match (prefixed.next(), prefixed.next()) {
        (Some(only), None) => Some(only),
        _ => nearest(name, candidates),
    }
}

/// The candidate closest to `name` by edit distance, if close enough to be
/// what was meant.
pub(crate) fn nearest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// After an error, consumes the rest of this option (`= value` or
/// `(...)`), so parsing can go on with the next one.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _: proc_macro2::Group = meta.input.parse()?;
    }
    Ok(())
}

fn or_none<T>(
    cx: &mut Ctxt,
    name: &str,
    value: Expr,
    some: impl FnOnce(&mut Ctxt, Expr) -> Option<T>,
) -> Option<OrNone<T>> {
    if let Expr::Path(p) = &value
        && p.qself.is_none()
    {
        if p.path.is_ident("none") {
            return Some(OrNone::None);
        }
        if p.path.segments.last().is_some_and(|s| s.ident == "None") {
            cx.error_spanned(
                &value,
                format!("for no {name}, write `{name} = none` (lowercase: an option word, not `Option::None`)"),
            );
            return None;
        }
    }
    some(cx, value).map(OrNone::Some)
}

fn set_duration(cx: &mut Ctxt, opt: &mut Opt<Dur>, key: Span, value: Expr) {
    if let Some(d) = duration(cx, opt.name(), value) {
        opt.set(cx, key, d);
    }
}

fn set_callable(cx: &mut Ctxt, opt: &mut Opt<Callable>, key: Span, value: Expr, shape: &str) {
    match value {
        Expr::Path(_) | Expr::Closure(_) => opt.set(cx, key, value),
        other => cx.error_spanned(
            other,
            format!(
                "`{}` takes a path to a function or a closure, e.g. `{} = {shape}`",
                opt.name(),
                opt.name()
            ),
        ),
    }
}

/// The path of a `static` holding shared state (`budget`, `breaker`,
/// `throttle`). A
/// `Self::…` path is an associated const, a fresh value at every call: an
/// error here (a `const` elsewhere is one at the expansion's `static`).
fn shared_static_path(
    cx: &mut Ctxt,
    value: Expr,
    option: &str,
    name: &str,
    ty: &str,
) -> Option<Path> {
    // `budget` takes either kind, and `none` (handled before this is
    // reached).
    let p = path(
        cx,
        value,
        &if option == "budget" {
            "`budget` takes a path to a `static TokenBudget` or `WindowBudget`, or `none`"
                .to_owned()
        } else {
            format!("`{option}` takes a path to a `static {ty}`")
        },
    )?;
    // (A budget is either kind: the declaration suggested says so.)
    let either = if option == "budget" {
        " (or a `WindowBudget`)"
    } else {
        ""
    };
    if p.segments.first().is_some_and(|s| s.ident == "Self") {
        cx.error_spanned(
            &p,
            format!(
                "`{option}` must be a `static`, and `Self::…` is an associated const: \
                 a fresh {option} at every call. Declare `static {name}: {ty} = …;`{either} \
                 outside the impl and write `{option} = {name}`"
            ),
        );
        return None;
    }
    // A lowercase name alone is a variable (a `let` or an argument): rustc
    // would only say that the expansion's `static` cannot read it. A
    // `static` named in lowercase can still be reached as `self::name`.
    if let Some(ident) = p.get_ident()
        && ident.to_string().chars().any(char::is_lowercase)
    {
        let upper = ident.to_string().to_uppercase();
        let upper = upper.strip_prefix("R#").unwrap_or(&upper);
        cx.error_spanned(
            &p,
            format!(
                "`{option}` must name a `static`, shared by every call: `{ident}` is named like \
                 a variable, whose {option} would be a new one at each call. Declare \
                 `static {upper}: {ty} = …;`{either} and write `{option} = {upper}` (a \
                 `static` named in lower case at a module's top level is written \
                 `self::{ident}`)"
            ),
        );
        return None;
    }
    Some(p)
}

fn path(cx: &mut Ctxt, value: Expr, msg: &str) -> Option<Path> {
    match value {
        Expr::Path(p) if p.qself.is_none() => Some(p.path),
        other => {
            cx.error_spanned(other, msg);
            None
        }
    }
}

/// One of a fixed set of words (`backoff = linear`), suggesting the nearest
/// on a typo.
fn keyword<T: Copy>(cx: &mut Ctxt, name: &str, value: &Expr, words: &[(&str, T)]) -> Option<T> {
    let list = words
        .iter()
        .map(|(w, _)| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Expr::Call(call) = value
        && let Expr::Path(f) = &*call.func
        && let Some(word) = f.path.get_ident().map(ToString::to_string)
        && words.iter().any(|(w, _)| *w == word)
    {
        let args = call.args.to_token_stream().to_string();
        let hint = match (name, word.as_str()) {
            ("backoff", "exponential") => {
                format!(": write `backoff = exponential, factor = {args}`")
            }
            ("backoff", _) => {
                format!(": write `backoff = {word}` and set the step with `base = ..`")
            }
            _ => format!(": write `{name} = {word}`"),
        };
        cx.error_spanned(value, format!("`{name} = {word}` takes no arguments{hint}"));
        return None;
    }
    let word = match value {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(ToString::to_string),
        _ => None,
    };
    let Some(word) = word else {
        let unquoted = match value {
            Expr::Lit(syn::ExprLit {
                lit: Lit::Str(s), ..
            }) if words.iter().any(|(w, _)| *w == s.value()) => {
                format!(": write `{name} = {}`, without quotes", s.value())
            }
            _ => String::new(),
        };
        cx.error_spanned(value, format!("`{name}` takes one of {list}{unquoted}"));
        return None;
    };
    if let Some((_, v)) = words.iter().find(|(w, _)| *w == word) {
        return Some(*v);
    }
    let names: Vec<&str> = words.iter().map(|(w, _)| *w).collect();
    let hint = abbreviated_or_nearest(&word, &names)
        .map_or(String::new(), |n| format!("; did you mean `{n}`?"));
    cx.error_spanned(
        value,
        format!("unknown {name} `{word}`{hint} (expected one of {list})"),
    );
    None
}

/// `hedge = 50ms` (or a `Duration` expression), or `hedge = p95`: an
/// adaptive percentile, `p` and two or more digits after the point
/// (`p99`, `p999` for the 99.9th).
fn hedge_delay(cx: &mut Ctxt, value: Expr, params: &[String]) -> Option<HedgeDelay> {
    // `p99.9`, read by Rust as a field of `p99`: a percentile with a point.
    if let Expr::Field(field) = &value
        && let Expr::Path(p) = &*field.base
        && let Some(ident) = p.path.get_ident()
        && let syn::Member::Unnamed(index) = &field.member
        && let Some(digits) = ident.to_string().strip_prefix('p')
        && digits.len() == 2
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        // As written (`p99.09`: the index reads 9), when the source says.
        let after = index
            .span
            .source_text()
            .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()));
        let written = format!("p{digits}.{}", after.as_deref().unwrap_or(".."));
        let message = if let Some(after) = after.as_deref()
            && digits == "99"
            && after.bytes().all(|b| b == b'9')
        {
            format!(
                "`hedge = {written}`: write `p99{after}` (a percentile is written without its point)"
            )
        } else {
            format!(
                "`hedge = {written}`: a percentile is `p` and two digits, from `p01` to `p99`, or \
                 more nines after `99`, written without a point, as `p999` for the 99.9th"
            )
        };
        cx.error_spanned(&value, message);
        return None;
    }
    if let Expr::Path(p) = &value
        && let Some(ident) = p.path.get_ident()
    {
        let text = ident.to_string();
        if let Some(digits) = text.strip_prefix('p')
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            // `p95` is the 95th, `p999` the 99.9th: past two digits, only
            // nines (`p100` would read as the 10th).
            let valid = digits.len() == 2 || (digits.len() > 2 && digits.starts_with("99"));
            let quantile = format!("0.{digits}").parse::<f64>().ok();
            return match quantile {
                Some(q) if valid && q > 0.0 && q < 1.0 => {
                    Some(HedgeDelay::Percentile(q, ident.clone()))
                }
                Some(q) if valid && q >= 1.0 => {
                    // Nines past an `f64`'s precision: 1.
                    cx.error(
                        ident.span(),
                        format!(
                            "`hedge = {text}`: so many nines are the 100th percentile as an \
                             `f64` (it holds about 16 digits), after which nothing is slower: \
                             use fewer, as `p999` for the 99.9th"
                        ),
                    );
                    None
                }
                _ => {
                    let rule = "a percentile is `p` and two digits, from `p01` to `p99`, or \
                                more after `99`, as `p999` for the 99.9th";
                    let two = &digits[..digits.len().min(2)];
                    let start = "; `p95` is a good start";
                    let message = if digits.bytes().all(|b| b == b'0') {
                        // `p0`, `p00`: the fastest latency, every attempt hedged.
                        format!(
                            "`hedge = {text}`: {rule}; a hedge after the fastest latency would \
                             go out beside every attempt{start}"
                        )
                    } else if digits.len() == 1 {
                        // `p5`: `p50` meant, far likelier than the 5th
                        // percentile, which would hedge nearly every call.
                        format!(
                            "`hedge = {text}`: did you mean `p{digits}0`? ({rule}; `p0{digits}` \
                             would hedge nearly every call){start}"
                        )
                    } else if digits.starts_with('1') && digits[1..].bytes().all(|b| b == b'0') {
                        // `p100` and the like: past the slowest latency.
                        format!(
                            "`hedge = {text}`: {rule}; a hedge after the slowest latency \
                             would never go out{start}"
                        )
                    } else if two != "00" {
                        // `p950`: a percentile with a digit too many.
                        format!("`hedge = {text}`: did you mean `p{two}`? ({rule})")
                    } else {
                        format!("`hedge = {text}`: {rule}{start}")
                    };
                    cx.error_spanned(ident, message);
                    None
                }
            };
        }
    }
    if let Some(message) =
        percentile_miswritten(&value).filter(|_| !names_a_parameter(&value, params))
    {
        cx.error_spanned(&value, message);
        return None;
    }
    duration(cx, "hedge", value).map(HedgeDelay::After)
}

/// Whether `value` is the bare name of one of the function's parameters.
fn names_a_parameter(value: &Expr, params: &[String]) -> bool {
    matches!(value, Expr::Path(p) if p.qself.is_none()
        && p.path.get_ident().is_some_and(|ident| params.iter().any(|name| ident == name)))
}

/// The error for a percentile written otherwise than `p95`: `95p`,
/// `p95ms` (`P95` may be a constant of the user's; so may `p95ms`, which
/// the message says how to write).
fn percentile_miswritten(value: &Expr) -> Option<String> {
    let digits_only = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) if lit.suffix() == "p" => {
            let digits = lit.base10_digits();
            Some(format!(
                "`hedge = {digits}p`: a percentile is written `p` first, as `hedge = p{digits}`"
            ))
        }
        Expr::Path(p) if p.qself.is_none() => {
            let text = p.path.get_ident()?.to_string();
            let rest = text.strip_prefix('p')?;
            let split = rest.find(|c: char| !c.is_ascii_digit())?;
            let (digits, unit) = rest.split_at(split);
            (digits_only(digits) && UNIT_NAMES.contains(&unit)).then(|| {
                format!(
                    "`hedge = {text}`: a percentile takes no unit (`hedge = p{digits}`), and a \
                     delay no `p` (`hedge = {digits}{unit}`); a constant of your own by that \
                     name is `self::{text}`"
                )
            })
        }
        _ => None,
    }
}

/// A count of at least 1 (`hedges`): a plain integer, or an expression.
fn count(cx: &mut Ctxt, name: &str, value: Expr, example: &str) -> Option<Num<u32>> {
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Int(lit), ..
    }) = &value
    else {
        return number_or_expr(cx, name, value, "an integer");
    };
    match lit.base10_parse::<u32>() {
        Ok(0) => {
            cx.error_spanned(
                lit,
                format!("`{name}` must be at least 1 (it counts the attempts a call may add beside a slow one)"),
            );
            None
        }
        Ok(n) if lit.suffix().is_empty() => Some(Num::Lit(n)),
        _ => {
            cx.error_spanned(
                lit,
                format!(
                    "`{name}` takes a plain integer from 1 to {}, e.g. `{example}`",
                    u32::MAX
                ),
            );
            None
        }
    }
}

fn attempts(cx: &mut Ctxt, value: Expr) -> Option<Num<u32>> {
    if let Expr::Unary(syn::ExprUnary {
        op: UnOp::Neg(_),
        expr,
        ..
    }) = &value
        && matches!(**expr, Expr::Lit(_))
    {
        cx.error_spanned(
            &value,
            "`attempts` must be at least 1: it counts the first attempt too",
        );
        return None;
    }
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Int(lit), ..
    }) = &value
    else {
        return number_or_expr(cx, "attempts", value, "an integer");
    };
    if !lit.suffix().is_empty() {
        cx.error_spanned(lit, "`attempts` takes a plain integer, e.g. `attempts = 4`");
        return None;
    }
    let parsed = lit.base10_parse::<u64>().ok();
    match parsed.map(u32::try_from) {
        Some(Ok(0)) => {
            cx.error_spanned(
                lit,
                "`attempts` must be at least 1: it counts the first attempt too",
            );
            None
        }
        Some(Ok(n)) => Some(Num::Lit(n)),
        _ => {
            cx.error_spanned(
                lit,
                format!(
                    "`attempts` is at most {}: to keep retrying for a long time, \
                     bound the call with `deadline` instead",
                    u32::MAX
                ),
            );
            None
        }
    }
}

fn factor(cx: &mut Ctxt, value: Expr) -> Option<Num<f64>> {
    let (digits, lit): (String, &dyn ToTokens) = match &value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(l), ..
        }) if l.suffix().is_empty() => (l.base10_digits().to_owned(), l),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Float(l), ..
        }) if l.suffix().is_empty() => (l.base10_digits().to_owned(), l),
        _ => return number_or_expr(cx, "factor", value, "a number"),
    };
    match digits.parse::<f64>() {
        Ok(f) if f > 1.0 && f.is_finite() => Some(Num::Lit(f)),
        Ok(f) if f.is_infinite() => {
            cx.error_spanned(
                lit,
                "`factor` is too large for an `f64` (it reads as infinite): each delay is \
                 `factor` times the last, and a factor of 10 reaches any `cap` fast",
            );
            None
        }
        // Above 1 as written, 1 as an `f64`.
        Ok(f) if f.to_bits() == 1.0_f64.to_bits() && above_one(&digits) => {
            cx.error_spanned(
                lit,
                "`factor` must be greater than 1, and this one is 1 as an `f64` (its last \
                 digits are past an `f64`'s precision): each delay is `factor` times the last",
            );
            None
        }
        _ => {
            cx.error_spanned(
                lit,
                "`factor` must be greater than 1: each delay is `factor` times the last",
            );
            None
        }
    }
}

/// Whether decimal `digits` (no sign) are above 1 as written.
fn above_one(digits: &str) -> bool {
    if digits.contains(['e', 'E']) {
        // (Not read here: no claim either way.)
        return false;
    }
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    match whole.trim_start_matches('0') {
        "" => false,
        "1" => frac.bytes().any(|b| b != b'0'),
        _ => true,
    }
}

/// A non-literal number is passed to the compiler as an expression; a
/// literal of the wrong kind is an error here.
fn number_or_expr<T>(cx: &mut Ctxt, name: &str, value: Expr, kind: &str) -> Option<Num<T>> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(ref text),
            ..
        }) if is_number(text.value().trim()) => {
            cx.error_spanned(
                &value,
                format!(
                    "`{name}` takes {kind}, not a string: remove the quotes (`{name} = {}`)",
                    text.value().trim()
                ),
            );
            None
        }
        Expr::Lit(_) | Expr::Unary(_) => {
            cx.error_spanned(
                &value,
                format!("`{name}` takes {kind}, e.g. `{name} = {}`", example(name)),
            );
            None
        }
        other => Some(Num::Expr(other)),
    }
}

/// Whether `text` is a number as a literal writes it (`3`, `2.5`, `1e3`),
/// not `NaN` or `inf`.
fn is_number(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
        && text.bytes().any(|b| b.is_ascii_digit())
        && text.replace('_', "").parse::<f64>().is_ok()
}

/// Suffixes that make a literal typed rather than give it a unit.
const TYPES: [&str; 14] = [
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32",
    "f64",
];

/// The units, for messages: "`ns`, `us`, `ms`, `s`, `m` or `h`".
fn units() -> String {
    let quoted: Vec<String> = UNIT_NAMES.iter().map(|u| format!("`{u}`")).collect();
    let (last, rest) = quoted.split_last().expect("units");
    format!("{} or {last}", rest.join(", "))
}

/// Whether `value` is a `none` option `name` does not take: the word
/// `none` anywhere but `deadline`, `budget` and `jitter` (and the
/// keywords, which list theirs); `None` (or `Option::None`) where the
/// option takes a number, which is never an `Option` (a duration's is
/// said where it is read: `attempt_timeout` takes one).
fn takes_no_none(name: &str, value: &Expr) -> bool {
    let Expr::Path(p) = value else {
        return false;
    };
    if p.qself.is_some() {
        return false;
    }
    let takes_none = matches!(
        name,
        "deadline" | "budget" | "jitter" | "backoff" | "idempotent"
    );
    (p.path.is_ident("none") && !takes_none)
        || (matches!(name, "attempts" | "hedges" | "factor") && is_option_none(&p.path))
}

/// The error for `name = none`, where only `deadline` and `budget` (and
/// `jitter`) take `none`: what to write instead.
fn no_none(name: &str) -> String {
    let instead = match name {
        "cap" => "every delay has a cap; give a long one, as `cap = 1h`",
        "retry_after_max" => "give a long one, as `retry_after_max = 10m`",
        "attempt_timeout" => "for no attempt timeout, leave it out (or give `None`)",
        "hedge" => "for no hedge, leave it out",
        "hedges" => "for no hedge, leave out `hedge` (and `hedges`)",
        "attempts" => {
            "for no retry, give `attempts = 1`; for no limit but the deadline, a large count"
        }
        "breaker" => "for no circuit breaker, leave it out",
        "throttle" => "for no adaptive throttle, leave it out",
        "key" => "for no key (every call shares one limiter), leave it out",
        "when" => "leave it out to classify errors by their `Classify` impl",
        "when_ok" => "leave it out: no success is retried then",
        "on_retry" | "on_give_up" => "for no hook, leave it out",
        "policy" => "leave it out, and give the options one by one",
        _ => "leave it out for its default",
    };
    // (An option that takes a path of the user's may be given one named
    // `none`.)
    let own = if matches!(
        name,
        "when" | "when_ok" | "on_retry" | "on_give_up" | "key" | "policy" | "breaker" | "throttle"
    ) {
        "; one of your own named `none` is `self::none`"
    } else {
        ""
    };
    format!("`{name}` takes no `none`: {instead}{own}")
}

/// Whether `path` is `None`, `Option::None` or a full path to it.
fn is_option_none(path: &syn::Path) -> bool {
    let mut names = path.segments.iter().rev().map(|s| s.ident.to_string());
    names.next().as_deref() == Some("None")
        && names.next().as_deref().is_none_or(|name| name == "Option")
}

/// Parses `250ms`, `1.5s`, `2m`; passes any other expression through.
fn duration(cx: &mut Ctxt, name: &str, value: Expr) -> Option<Dur> {
    let (digits, suffix, span, text) = match &value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(l), ..
        }) => (l.base10_digits(), l.suffix(), l.span(), l.to_string()),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Float(l), ..
        }) => (l.base10_digits(), l.suffix(), l.span(), l.to_string()),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(quoted),
            ..
        }) => {
            let unquoted = unquoted_duration(&quoted.value()).map_or_else(
                || "e.g. `250ms` or `1.5s`".to_owned(),
                |d| format!("`{name} = {d}`"),
            );
            cx.error_spanned(
                quoted,
                format!("`{name}` takes a duration literal, not a string: remove the quotes ({unquoted})"),
            );
            return None;
        }
        Expr::Lit(other) => {
            cx.error_spanned(
                other,
                format!("`{name}` takes a duration such as `250ms` or `1.5s`, or a `Duration` expression"),
            );
            return None;
        }
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
            let message = match &*u.expr {
                Expr::Lit(lit) => format!(
                    "`{name}` cannot be negative: a duration is zero or more (`{name} = {}`)",
                    quote::ToTokens::to_token_stream(lit)
                ),
                _ => format!("`{name}` cannot be negative: a duration is zero or more"),
            };
            cx.error_spanned(&value, message);
            return None;
        }
        // (`None` itself, or `Option::None`, for an option that takes no
        // `Option`; `attempt_timeout` does, and a path of the user's
        // ending in `None` is theirs.)
        Expr::Path(p)
            if p.qself.is_none()
                && (p.path.is_ident("none")
                    || (name != "attempt_timeout" && is_option_none(&p.path))) =>
        {
            cx.error_spanned(&value, no_none(name));
            return None;
        }
        // `Some(2s)`: a literal with a unit is the option's value itself
        // (rustc would say only "invalid suffix").
        Expr::Call(call)
            if matches!(&*call.func, Expr::Path(f) if f.path.segments.last().is_some_and(|s| s.ident == "Some"))
                && call.args.len() == 1
                && unit_literal(&call.args[0]).is_some() =>
        {
            let literal = unit_literal(&call.args[0]).unwrap_or_default();
            cx.error_spanned(
                &value,
                format!("`{name} = Some({literal})`: write `{name} = {literal}` (a duration with its unit is the value itself)"),
            );
            return None;
        }
        _ => return Some(Dur::Expr(value)),
    };
    if suffix.is_empty() {
        cx.error(
            span,
            format!(
                "`{name} = {digits}` needs a unit: write `{digits}ms` or `{digits}s` (units: {})",
                units()
            ),
        );
        return None;
    }
    if TYPES.contains(&suffix) {
        cx.error(
            span,
            format!("`{text}` has a type suffix, not a unit: write `{digits}ms` or `{digits}s` (units: {})", units()),
        );
        return None;
    }
    let Some(unit) = unit_nanos(suffix) else {
        unknown_unit(cx, span, &format!("`{name} = {text}`: "), suffix, digits);
        return None;
    };
    let Some(nanos) = decimal_times(digits, unit) else {
        cx.error(
            span,
            format!("`{name} = {text}` is too large for a `Duration`"),
        );
        return None;
    };
    Some(Dur::Lit(DurLit { nanos, span, text }))
}

/// The text of a number with a unit's suffix (`2s`, `1.5ms`), if `value`
/// is one.
fn unit_literal(value: &Expr) -> Option<String> {
    let (suffix, text) = match value {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(l), ..
        }) => (l.suffix(), l.to_string()),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Float(l), ..
        }) => (l.suffix(), l.to_string()),
        _ => return None,
    };
    UNIT_NAMES.contains(&suffix).then_some(text)
}

/// The error for a duration literal's unknown unit `suffix`, with the
/// unit meant if it can tell.
fn unknown_unit(cx: &mut Ctxt, span: Span, written: &str, suffix: &str, digits: &str) {
    // Days: in hours, which are a unit (`2d` is `48h`, `1.5d`
    // `36h`), or in a smaller one; none past a `Duration`.
    if matches!(suffix, "d" | "day" | "days") {
        let hint = match decimal_times(digits, 86_400_000_000_000) {
            Some(nanos) if nanos > 0 => {
                format!("; did you mean `{}`?", human(nanos))
            }
            _ => String::new(),
        };
        cx.error(
            span,
            format!(
                "{written}unknown unit `{suffix}`{hint} (units: {})",
                units()
            ),
        );
        return;
    }
    let hint = match suffix {
        "sec" | "secs" | "second" | "seconds" => Some("s"),
        "min" | "mins" | "minute" | "minutes" => Some("m"),
        "hr" | "hrs" | "hour" | "hours" => Some("h"),
        "msec" | "msecs" | "millis" => Some("ms"),
        "µs" | "micros" => Some("us"),
        "nanos" => Some("ns"),
        _ => nearest(suffix, &UNIT_NAMES),
    };
    let hint = hint.map_or(String::new(), |h| format!("; did you mean `{digits}{h}`?"));
    cx.error(
        span,
        format!(
            "{written}unknown unit `{suffix}`{hint} (units: {})",
            units()
        ),
    );
}

/// `"10s"` or `"250 ms"` written as the literal it meant (`10s`, `250ms`),
/// if it is one.
fn unquoted_duration(text: &str) -> Option<String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (digits, suffix) = match syn::parse_str::<Lit>(&compact).ok()? {
        Lit::Int(l) => (l.base10_digits().to_owned(), l.suffix().to_owned()),
        Lit::Float(l) => (l.base10_digits().to_owned(), l.suffix().to_owned()),
        _ => return None,
    };
    UNIT_NAMES
        .contains(&suffix.as_str())
        .then(|| format!("{digits}{suffix}"))
}

/// `digits × unit` exactly, for decimal `digits` such as `1.5` or `2e3`,
/// in nanoseconds; `None` past `Duration::MAX`. Fractions of a
/// nanosecond are dropped: so are a fraction's digits past what the
/// arithmetic holds (beside the unit, about 28 significant digits), far
/// below a nanosecond.
/// Any exponent is read (`1e-99999999999999999999s` is zero).
fn decimal_times(digits: &str, unit: u128) -> Option<u128> {
    let (mantissa, exp) = match digits.split_once(['e', 'E']) {
        Some((m, e)) => match e.parse::<i64>() {
            Ok(exp) => (m, exp),
            // Past an `i64`: nothing for a negative exponent, too large
            // for a positive one.
            Err(_) if e.starts_with('-') => return Some(0),
            Err(_) => return None,
        },
        None => (digits, 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut value: u128 = 0;
    for c in whole.chars() {
        value = value
            .checked_mul(10)?
            .checked_add(u128::from(c.to_digit(10)?))?;
    }
    let mut scale = exp;
    for c in frac.trim_end_matches('0').chars() {
        let digit = u128::from(c.to_digit(10)?);
        // (Kept while the product with `unit` still fits.)
        let Some(next) = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(digit))
            .filter(|v| v.checked_mul(unit).is_some())
        else {
            break;
        };
        value = next;
        scale -= 1;
    }
    if value == 0 {
        return Some(0);
    }
    let nanos = value.checked_mul(unit)?;
    let power = u32::try_from(scale.unsigned_abs()).ok();
    let nanos = if scale >= 0 {
        nanos.checked_mul(10u128.checked_pow(power?)?)?
    } else {
        power
            .and_then(|p| 10u128.checked_pow(p))
            .map_or(0, |p| nanos / p)
    };
    let max = u128::from(u64::MAX) * 1_000_000_000 + 999_999_999;
    (nanos <= max).then_some(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_durations_are_exact() {
        assert_eq!(decimal_times("250", 1_000_000), Some(250_000_000));
        assert_eq!(decimal_times("1.5", 1_000_000_000), Some(1_500_000_000));
        assert_eq!(decimal_times("0.1", 1_000_000_000), Some(100_000_000));
        assert_eq!(decimal_times("2e3", 1_000_000), Some(2_000_000_000));
        assert_eq!(decimal_times("1.5e-3", 1_000_000_000), Some(1_500_000));
        assert_eq!(
            decimal_times("99999999999999999999999", 3_600_000_000_000),
            None
        );
    }

    #[test]
    fn extreme_decimals_are_read_without_overflow() {
        // An `i32`'s smallest exponent, with a fraction: zero, not a panic.
        assert_eq!(decimal_times("10.25e-2147483648", 1_000_000), Some(0));
        assert_eq!(decimal_times("1.5e-2147483648", 1_000_000_000), Some(0));
        assert_eq!(decimal_times("1e-99999999999999999999", 1), Some(0));
        assert_eq!(decimal_times("1e99999999999999999999", 1), None);
        assert_eq!(decimal_times("1e2147483647", 1), None);
        // A fraction's digits past what the arithmetic holds are dropped.
        let one = format!("1.{}", "0".repeat(43));
        assert_eq!(decimal_times(&one, 1_000_000_000), Some(1_000_000_000));
        let a_hair_more = format!("1.{}1", "0".repeat(43));
        assert_eq!(
            decimal_times(&a_hair_more, 1_000_000_000),
            Some(1_000_000_000)
        );
        // Whole digits past it are too large.
        let huge = format!("1{}", "0".repeat(42));
        assert_eq!(decimal_times(&huge, 1_000_000_000), None);
        assert_eq!(decimal_times("0e99999999999", 1), Some(0));
    }

    #[test]
    fn numbers_above_one_are_told_as_written() {
        assert!(above_one("1.0000000000000000000001"));
        assert!(above_one("2") && above_one("10") && above_one("01.5"));
        assert!(!above_one("1") && !above_one("1.000") && !above_one("0.5") && !above_one("0"));
        assert!(!above_one("10e-1"), "exponents are not read");
    }

    #[test]
    fn nearest_suggests_close_names_only() {
        assert_eq!(nearest("atempts", OPTIONS), Some("attempts"));
        assert_eq!(nearest("jiter", OPTIONS), Some("jitter"));
        assert_eq!(nearest("banana", OPTIONS), None);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(100_000_000), "100ms");
        assert_eq!(human(20_000_000_000), "20s");
        assert_eq!(human(1_500_000_000), "1500ms");
        assert_eq!(human(120_000_000_000), "2m");
    }
}
