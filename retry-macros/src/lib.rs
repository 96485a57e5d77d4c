//! The `#[retry]` attribute of [`backstop`](https://docs.rs/backstop). Use
//! it through `backstop` (`use backstop::retry;`), whose documentation is
//! the manual: this crate only turns the attribute into a call to
//! backstop's runtime.
//!
//! Three stages: `args` parses the options, `valid` checks the rules
//! across them and against the function, `expand` writes the loop.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod args;
mod expand;
// The duration units and the defaults: a copy of the runtime's
// `time/units.rs` (a proc-macro crate cannot depend on the runtime, and a
// published package reads no file outside its own directory). The
// workspace's `feature-tests` check that the two stay the same.
mod units;
mod valid;

use proc_macro::TokenStream;

/// Turns a function returning `Result<T, E>`, sync or async, into a retry
/// loop that is safe at fleet scale: backoff with jitter under a cap, a
/// deadline for the whole call, `Retry-After` honoured, retries only for
/// what a retry can fix, and a token budget of the function's own.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use backstop_macros::retry; // `use backstop::retry;` in your crate
/// use std::io::{Error, ErrorKind};
///
/// #[retry(attempts = 4, base = 100ms, cap = 5s, deadline = 10s)]
/// async fn fetch_user(id: u64) -> Result<String, Error> {
///     if id == 0 { Err(ErrorKind::ConnectionRefused.into()) } else { Ok(format!("user {id}")) }
/// }
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// assert_eq!(fetch_user(7).await.unwrap(), "user 7");
/// assert!(fetch_user(0).await.is_err()); // after 4 attempts
/// # }
/// ```
///
/// Every option is optional. A duration is a literal with a unit (`ns`,
/// `us`, `ms`, `s`, `m`, `h`: `250ms`, `1.5s`), checked at compile time,
/// or any expression of type `Duration`; expressions are evaluated on each
/// call and may use the function's arguments.
///
/// | option | value | default | example |
/// |---|---|---|---|
/// | `attempts` | integer ≥ 1: a backstop on attempts, the first included (the default budget lets 4 or 5 retries in a row: above 5, give a budget sized for them or `budget = none`) | `3` | `attempts = 5` |
/// | `deadline` | duration (an expression may be an `Option<Duration>`), or `none`: no attempt starts after it, no sleep runs into it; a refused call (`Verdict::Refused`) may hold within it for its budget's ride-out, 10 s (an async fn only if `E: From<Elapsed>`) | `30s` | `deadline = 10s` |
/// | `backoff` | `exponential` (base·factorⁿ), `linear` (base·(n+1)), `fixed` | `exponential` | `backoff = linear` |
/// | `base` | duration > 0: the first delay | `100ms` | `base = 50ms` |
/// | `factor` | number > 1 (exponential only) | `2` | `factor = 3` |
/// | `cap` | duration ≥ `base`: no delay exceeds it, jitter included | `20s` | `cap = 5s` |
/// | `jitter` | `full`, `equal`, `decorrelated`, `none` | `full` | `jitter = equal` |
/// | `when` | path or closure `Fn(&E) -> bool` or `-> Verdict`: which errors to retry | `E: Classify` | `when = \|e\| e.is_transient()` |
/// | `when_ok` | path or closure `Fn(&T) -> bool` or `-> Verdict`: retry an `Ok` value | never | `when_ok = \|r: &Response\| r.status() == 503` |
/// | `idempotent` | `true`, `false` (bare `idempotent` is `true`): may an ambiguous failure (a timeout) be repeated? | `false` | `idempotent` |
/// | `budget` | path to a `static TokenBudget` or `WindowBudget` (or, with `key`, a `Keyed` of either), or `none` | a token budget of the function's own | `budget = USERS_BUDGET` |
/// | `breaker` | path to a `static CircuitBreaker` (or, with `key`, a `Keyed<CircuitBreaker>`); needs `E: From<CircuitOpen>` | none | `breaker = USERS_BREAKER` |
/// | `throttle` | path to a `static AdaptiveThrottle` (or, with `key`, a `Keyed<AdaptiveThrottle>`); needs `E: From<Throttled>` | none | `throttle = USERS_THROTTLE` |
/// | `key` | expression of a `Hash` type: the call's key. A `budget`, `breaker` or `throttle` kept per key (`Keyed`) is the key's (without a `key`, a `Keyed` one is a compile error), and the default token budget is the key's own | none | `key = shard_id` |
/// | `retry_after_max` | duration: a longer `Retry-After` gives up | `60s` | `retry_after_max = 2m` |
/// | `attempt_timeout` | duration (async fns only); needs `E: From<Elapsed>` | none | `attempt_timeout = 2s` |
/// | `hedge` | duration, or a percentile of the function's recent latencies (`p50`…`p99`, `p999`): after it, another attempt starts beside the slow one, first answer wins (async fns, `idempotent`; hedges count as attempts) | none | `hedge = p95` |
/// | `hedges` | integer from 1 to 10 (`hedge::MAX_HEDGES`), below `attempts`: extra attempts at most beside the first, each a delay after the one before (an expression is checked when the function runs) | `1` | `hedges = 2` |
/// | `on_retry` | path or closure `Fn(&RetryEvent<'_, T, E>)`, before each sleep | none | `on_retry = \|e\| log(e.attempt())` |
/// | `on_give_up` | path or closure `Fn(&GiveUpEvent<'_, T, E>)`, with the reason | none | `on_give_up = report` |
/// | `policy` | expression giving a `Policy` or `&Policy`; excludes the schedule options | — | `policy = CONFIG.users` |
/// | `crate` | path to `backstop`, if renamed or re-exported (without it, E0433: cannot find `backstop`) | `::backstop` | `crate = my_sdk::backstop` |
///
/// Misuse is a compile error on the offending token: an unknown or
/// repeated option, a bad unit, `base` above `cap`, `attempts = 0`,
/// `policy` with schedule options, `attempt_timeout` on a sync fn, a
/// `budget` that is not a `static`, a `Keyed` budget, breaker or throttle
/// without `key`, `#[track_caller]` beside it or a second `#[retry]`, a
/// return type that is not a `Result`,
/// `hedge` on a sync fn, without `idempotent`, or with an argument an
/// attempt could change (`&mut`, `mut`): hedged attempts share the
/// arguments; a zero `hedge` literal (`Duration::ZERO` sends every copy
/// at once); a literal `hedge` not 2 ms before a literal `deadline` (the
/// default 30 s included) or not before `attempt_timeout`; `hedges` at or above
/// `attempts` (hedges are attempts), or above 10.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// # use backstop_macros::retry; // `use backstop::retry;` in your crate
/// use std::time::Duration;
///
/// // A slow answer is hedged after the function's own 95th percentile
/// // (once 100 latencies are known), or after 50 ms here.
/// #[retry(hedge = 50ms, idempotent)]
/// async fn lookup(name: &str) -> Result<usize, std::io::Error> {
///     let attempt = backstop::context().unwrap().attempt();
///     tokio::time::sleep(Duration::from_millis(if attempt == 1 { 1_000 } else { 5 })).await;
///     Ok(name.len())
/// }
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let start = tokio::time::Instant::now();
/// assert_eq!(lookup("users").await.unwrap(), 5);
/// assert_eq!(start.elapsed(), Duration::from_millis(55)); // the hedge answered
/// # }
/// ```
///
/// Put `#[retry]` above other attributes that rewrite the function
/// (`#[tracing::instrument]`, `#[tokio::test]`). The `backstop` crate's
/// documentation gives each option a runnable example, the exact order of
/// decisions, and the guarantees.
#[proc_macro_attribute]
pub fn retry(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let func: valid::Func = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(error) => {
            let error = not_a_function(item.clone()).unwrap_or(error);
            return expand::not_a_function(&item, &error).into();
        }
    };
    let mut cx = args::Ctxt::default();
    let args = args::Args::parse(args.into(), &mut cx, &func.parameter_names());
    valid::check(&args, &func, &mut cx);
    match cx.finish() {
        Ok(()) => expand::expand(&args, &func),
        Err(errors) => expand::with_errors(&func, &errors),
    }
    .into()
}

/// The error for an item that is not a function, spanned on its first
/// token after attributes and visibility (`struct`, `impl`, `mod`…);
/// `None` if it is a function after all (its parse error is the one to show).
fn not_a_function(item: proc_macro2::TokenStream) -> Option<syn::Error> {
    let first = |input: syn::parse::ParseStream<'_>| {
        input.call(syn::Attribute::parse_outer)?;
        input.parse::<syn::Visibility>()?;
        let is_fn = input.fork().parse::<syn::Signature>().is_ok();
        let first = input.parse::<proc_macro2::TokenTree>()?;
        input.parse::<proc_macro2::TokenStream>()?;
        Ok((is_fn, first))
    };
    match syn::parse::Parser::parse2(first, item) {
        Ok((true, _)) => None,
        Ok((false, first)) => Some(error_at(first.span())),
        Err(_) => Some(error_at(proc_macro2::Span::call_site())),
    }
}

fn error_at(span: proc_macro2::Span) -> syn::Error {
    syn::Error::new(
        span,
        "`#[retry]` can only be applied to a function or a method",
    )
}
