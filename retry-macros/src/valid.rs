//! Stage 2: rules across options, and between the options and the function.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Block, ReturnType, Signature, Token, Type, Visibility};

use crate::args::{Args, Backoff, Ctxt, Dur, DurLit, HedgeDelay, Num, OrNone, human};

/// The annotated item: a function, a method, or a trait method with a
/// default body. Kept as parsed, so it is re-emitted verbatim.
pub(crate) struct Func {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `#![...]` at the top of the body: they stay at the top of the body.
    pub(crate) inner_attrs: Vec<Attribute>,
    /// `None` for a trait method without a default body.
    pub(crate) block: Option<Block>,
}

impl Func {
    /// The names its parameters bind (`self` not among them).
    pub(crate) fn parameter_names(&self) -> Vec<String> {
        fn bound(pat: &syn::Pat, names: &mut Vec<String>) {
            match pat {
                syn::Pat::Ident(ident) => names.push(ident.ident.to_string()),
                syn::Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bound(p, names)),
                syn::Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bound(p, names)),
                syn::Pat::Struct(fields) => {
                    fields.fields.iter().for_each(|f| bound(&f.pat, names));
                }
                syn::Pat::Reference(reference) => bound(&reference.pat, names),
                syn::Pat::Type(typed) => bound(&typed.pat, names),
                _ => {}
            }
        }
        let mut names = Vec::new();
        for input in &self.sig.inputs {
            if let syn::FnArg::Typed(typed) = input {
                bound(&typed.pat, &mut names);
            }
        }
        names
    }
}

impl Parse for Func {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            return Ok(Self {
                attrs,
                vis,
                sig,
                inner_attrs: Vec::new(),
                block: None,
            });
        }
        let content;
        let brace_token = syn::braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let stmts = content.call(Block::parse_within)?;
        Ok(Self {
            attrs,
            vis,
            sig,
            inner_attrs,
            block: Some(Block { brace_token, stmts }),
        })
    }
}

/// The defaults, for the `base ≤ cap` check when one side is implied:
/// `Policy::DEFAULT`'s, from the file the two crates share.
const DEFAULT_BASE_NANOS: u128 = crate::units::DEFAULT_BASE_MILLIS as u128 * 1_000_000;
const DEFAULT_CAP_NANOS: u128 = crate::units::DEFAULT_CAP_SECS as u128 * 1_000_000_000;

/// The options a `Policy` carries: `policy = expr` replaces all of them.
fn schedule_options(args: &Args) -> [(&'static str, Option<proc_macro2::Span>); 10] {
    [
        (args.attempts.name(), args.attempts.key()),
        (args.deadline.name(), args.deadline.key()),
        (args.backoff.name(), args.backoff.key()),
        (args.base.name(), args.base.key()),
        (args.factor.name(), args.factor.key()),
        (args.cap.name(), args.cap.key()),
        (args.jitter.name(), args.jitter.key()),
        (args.idempotent.name(), args.idempotent.key()),
        (args.retry_after_max.name(), args.retry_after_max.key()),
        (args.attempt_timeout.name(), args.attempt_timeout.key()),
    ]
}

pub(crate) fn check(args: &Args, func: &Func, cx: &mut Ctxt) {
    if check_rewritten(func, cx) {
        // The function is not the one the user wrote: other checks would
        // only add noise about the rewriter's output.
        return;
    }
    check_signature(func, cx);
    check_options(args, cx);
    check_against_fn(args, func, cx);
}

/// Does any token of `tokens`, in any group, satisfy `pred`?
pub(crate) fn any_token(tokens: TokenStream, pred: &impl Fn(&TokenTree) -> bool) -> bool {
    tokens.into_iter().any(|tt| match &tt {
        TokenTree::Group(g) => any_token(g.stream(), pred),
        other => pred(other),
    })
}

fn is_ident(tt: &TokenTree, names: &[&str]) -> bool {
    matches!(tt, TokenTree::Ident(i) if names.iter().any(|n| i == n))
}

/// A function that another attribute rewrote before `#[retry]` saw it, or
/// one that returns a future instead of being `async`: reports it and
/// returns `true`.
fn check_rewritten(func: &Func, cx: &mut Ctxt) -> bool {
    let sig = &func.sig;
    let body = func.block.as_ref().map(ToTokens::to_token_stream);
    let async_trait = sig
        .generics
        .lifetimes()
        .any(|l| l.lifetime.ident == "async_trait");
    if async_trait {
        cx.error_spanned(
            &sig.ident,
            "`#[retry]` does not support methods of an `#[async_trait]` impl: they return a \
             boxed future that cannot be retried. Use native `async fn` in the trait \
             (Rust 1.75+) and remove `#[async_trait]`: `#[retry]` supports it; or, to keep \
             the trait usable as `dyn Trait`, put `#[retry]` on an inherent `async fn` and \
             call it from the method",
        );
        return true;
    }
    // `#[tokio::test]` / `#[tokio::main]` turn the `async fn` into a sync
    // one that builds a runtime: retried, that runtime would be built per
    // attempt and the sleeps would be real. Their output is recognised by
    // its first statement (`let body = async …`) and its runtime's
    // `expect` message together: neither alone is rare enough.
    if sig.asyncness.is_none()
        && let Some(block) = &func.block
        && block.stmts.first().is_some_and(|first| {
            let mut tokens = first.to_token_stream().into_iter();
            tokens.next().is_some_and(|t| is_ident(&t, &["let"]))
                && tokens.next().is_some_and(|t| is_ident(&t, &["body"]))
                && tokens.next().is_some()
                && tokens.next().is_some_and(|t| is_ident(&t, &["async"]))
        })
        && any_token(
            block.to_token_stream(),
            &|tt| matches!(tt, TokenTree::Literal(l) if l.to_string() == "\"Failed building the Runtime\""),
        )
    {
        cx.error_spanned(
            &sig.ident,
            "`#[tokio::test]` or `#[tokio::main]` rewrote this `async fn` before `#[retry]` saw it: \
             each attempt would build a runtime and sleep in real time. \
             Write `#[retry]` above `#[tokio::test]` (or `#[tokio::main]`)",
        );
        return true;
    }
    let instrumented = body.is_some_and(|b| {
        any_token(b, &|tt| {
            is_ident(tt, &["__tracing_attr_span", "__tracing_instrument_future"])
        })
    });
    if instrumented {
        cx.error_spanned(
            &sig.ident,
            "`#[tracing::instrument]` rewrote this function before `#[retry]` saw it: \
             there would be one span per attempt, and an owned argument would be moved \
             by the first. Write `#[retry]` above `#[tracing::instrument]`",
        );
        return true;
    }
    if sig.asyncness.is_none()
        && let ReturnType::Type(_, ty) = &sig.output
        && returns_future(ty)
    {
        cx.error_spanned(
            ty,
            format!(
                "`#[retry]` needs an `async fn`, not a function returning a future: write \
                 `async fn {}(..) -> Result<T, E>`, so that each attempt makes a fresh future",
                sig.ident
            ),
        );
        return true;
    }
    false
}

/// Is the return type itself a future (`impl Future<..>`,
/// `Pin<Box<dyn Future<..>>>`, `BoxFuture<..>`)? Only the outermost type
/// counts: a `Result` whose `Ok` value is a future, or a type of the
/// user's that happens to be named `Future`, is left alone.
fn returns_future(ty: &syn::Type) -> bool {
    let future_bound =
        |bounds: &syn::punctuated::Punctuated<syn::TypeParamBound, syn::Token![+]>| {
            bounds.iter().any(|b| {
                matches!(b, syn::TypeParamBound::Trait(t)
                if t.path.segments.last().is_some_and(|s| s.ident == "Future"))
            })
        };
    match ty {
        syn::Type::ImplTrait(it) => future_bound(&it.bounds),
        syn::Type::Paren(p) => returns_future(&p.elem),
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|last| {
            match last.ident.to_string().as_str() {
                "BoxFuture" | "LocalBoxFuture" => true,
                "Pin" | "Box" => match &last.arguments {
                    syn::PathArguments::AngleBracketed(args) => args.args.iter().any(|a| {
                        matches!(a, syn::GenericArgument::Type(inner)
                            if returns_future(inner)
                                || matches!(inner, syn::Type::TraitObject(o) if future_bound(&o.bounds)))
                    }),
                    _ => false,
                },
                _ => false,
            }
        }),
        _ => false,
    }
}

fn check_signature(func: &Func, cx: &mut Ctxt) {
    let sig = &func.sig;
    for attr in &func.attrs {
        let path = attr.path();
        if path.is_ident("track_caller") {
            cx.error_spanned(
                attr,
                "`#[track_caller]` does not reach the body of a `#[retry]` function: the body \
                 runs in a closure, which does not take the caller's location \
                 (`Location::caller()` would name the body). Read the location in a function \
                 without `#[retry]` that calls this one",
            );
        }
        if path.segments.last().is_some_and(|s| s.ident == "retry") {
            cx.error_spanned(
                attr,
                "`#[retry]` is applied twice: one loop per function (a retry at one layer); \
                 give all the options to one `#[retry(..)]`",
            );
        }
    }
    if let Some(c) = &sig.constness {
        cx.error_spanned(
            c,
            "`#[retry]` cannot be applied to a `const fn`: retrying sleeps, which const evaluation cannot do",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned(
            abi,
            "`#[retry]` cannot be applied to an `extern` function: put `#[retry]` on a plain \
             `fn` and call it from the `extern` one",
        );
    }
    // (A variadic function is an `extern` one, said above.)
    if let ReturnType::Default = sig.output {
        cx.error_spanned(
            &sig.ident,
            format!(
                "`#[retry]` needs a function returning `Result<T, E>`: `{}` returns `()`, \
                 so there is no failure to retry",
                sig.ident
            ),
        );
    }
    if let ReturnType::Type(_, ty) = &sig.output
        && let Type::Never(never) = unwrapped(ty)
    {
        cx.error_spanned(
            never,
            format!(
                "`#[retry]` needs a function returning `Result<T, E>`: `{}` never returns, \
                 so there is no failure to retry",
                sig.ident
            ),
        );
    }
    if func.block.is_none() {
        cx.error_spanned(
            &sig.ident,
            "`#[retry]` needs a function body: put it on the method's implementation, \
             or give the trait method a default body",
        );
    }
}

/// `ty` without the parentheses or the invisible group (a `macro_rules!`
/// `$t:ty`) around it.
fn unwrapped(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => unwrapped(&inner.elem),
        Type::Group(inner) => unwrapped(&inner.elem),
        ty => ty,
    }
}

fn check_options(args: &Args, cx: &mut Ctxt) {
    if args.policy.key().is_some() {
        for (name, key) in schedule_options(args) {
            if let Some(key) = key {
                cx.error(
                    key,
                    format!(
                        "`{name}` cannot be combined with `policy`: set it on the policy \
                         instead (`Policy::new().{name}(..)`)"
                    ),
                );
            }
        }
    }

    for opt in [&args.base, &args.attempt_timeout] {
        if let Some((span, text)) = zero_literal(opt.value()) {
            let name = opt.name();
            let message = match below_a_nanosecond(name, text) {
                Some(below) => format!("{below}: `{name}` must be greater than zero"),
                None if name == "base" => "`base` must be greater than zero: it is the first \
                                           delay, and the later ones grow from it"
                    .to_owned(),
                None => format!("`{name}` must be greater than zero"),
            };
            cx.error(span, message);
        }
    }
    if let Some((span, text)) = zero_literal(args.cap.value())
        && below_a_nanosecond("cap", text).is_none()
    {
        cx.error(
            span,
            "`cap` must be greater than zero: it bounds every delay, and `base` (greater than \
             zero) must be at or below it",
        );
    }
    // Read as zero, though not written as zero: a `cap` or
    // `retry_after_max` so small is a mistake about the unit.
    for opt in [&args.cap, &args.retry_after_max] {
        if let Some((span, text)) = zero_literal(opt.value())
            && let Some(below) = below_a_nanosecond(opt.name(), text)
        {
            cx.error(span, format!("{below}: it would be zero"));
        }
    }
    if let Some(OrNone::Some(dur)) = args.deadline.value()
        && let Some((span, text)) = zero_literal(Some(dur))
    {
        let zero = match below_a_nanosecond("deadline", text) {
            Some(below) => format!("{below}, and"),
            None => "a zero `deadline`".to_owned(),
        };
        cx.error(
            span,
            format!(
                "{zero} leaves no time to retry; for no deadline at all, write `deadline = none`"
            ),
        );
    }

    check_base_below_cap(args, cx);

    // A factor the schedule would ignore is a mistake about the schedule.
    let schedule = match args.backoff.value() {
        Some(Backoff::Fixed) => Some("`fixed` waits `base` before every retry"),
        Some(Backoff::Linear) => Some("`linear` adds `base` at every retry"),
        _ => None,
    };
    if let (Some(schedule), Some(key)) = (schedule, args.factor.key()) {
        cx.error(
            key,
            format!(
                "`factor` applies to `backoff = exponential` only: {schedule}; \
                 remove `factor`, or use `backoff = exponential`"
            ),
        );
    }
}

/// A duration literal read as zero: its span and text.
fn zero_literal(dur: Option<&Dur>) -> Option<(proc_macro2::Span, &str)> {
    match dur {
        Some(Dur::Lit(DurLit {
            nanos: 0,
            span,
            text,
        })) => Some((*span, text.as_str())),
        _ => None,
    }
}

/// For a duration literal read as zero that has a value (`0.1ns`, an
/// exponent far below zero), rather than being zero (`0ms`, `0e3ms`):
/// "`name = text` is below a nanosecond, the smallest `Duration`".
fn below_a_nanosecond(name: &str, text: &str) -> Option<String> {
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    mantissa
        .chars()
        .any(|c| ('1'..='9').contains(&c))
        .then(|| format!("`{name} = {text}` is below a nanosecond, the smallest `Duration`"))
}

/// `base ≤ cap`, with the defaults standing in for whichever is not given;
/// an expression on either side is left to the runtime, which lets the cap
/// win.
fn check_base_below_cap(args: &Args, cx: &mut Ctxt) {
    let is_expr = |d: Option<&Dur>| matches!(d, Some(Dur::Expr(_)));
    if is_expr(args.base.value()) || is_expr(args.cap.value()) {
        return;
    }
    let base = args.base.value().and_then(Dur::as_lit);
    let cap = args.cap.value().and_then(Dur::as_lit);
    let b = base.map_or(DEFAULT_BASE_NANOS, |l| l.nanos);
    let c = cap.map_or(DEFAULT_CAP_NANOS, |l| l.nanos);
    // A `cap` read as zero is said above, once.
    if b <= c || c == 0 {
        return;
    }
    match (base, cap) {
        (Some(base), Some(cap)) => cx.error(
            base.span,
            format!(
                "`base = {}` is above `cap = {}`: no delay may exceed the cap; lower `base` or raise `cap`",
                base.text, cap.text
            ),
        ),
        (Some(base), None) => cx.error(
            base.span,
            format!(
                "`base = {}` is above the default `cap` ({}): raise it with `cap = ..`",
                base.text,
                human(c)
            ),
        ),
        (None, Some(cap)) => cx.error(
            cap.span,
            format!(
                "`cap = {}` is below the default `base` ({}): lower it with `base = ..`",
                cap.text,
                human(b)
            ),
        ),
        (None, None) => {}
    }
}

fn check_against_fn(args: &Args, func: &Func, cx: &mut Ctxt) {
    let is_async = func.sig.asyncness.is_some();
    check_hedge(args, func, cx);
    if let Some(key) = args.attempt_timeout.key()
        && !is_async
    {
        cx.error(
            key,
            "`attempt_timeout` needs an `async fn`: a running sync attempt cannot be interrupted; \
             give the blocking call its own timeout instead",
        );
    }
}

/// The most hedges a round may send: the runtime's `hedge::MAX_HEDGES`
/// (`Hedge::hedges` refuses more; the ui cases `pass/hedge`, which asserts
/// the constant and sends as many, and `hedges-above-max`, which is
/// refused one more, hold the two equal).
const MAX_HEDGES: u32 = 10;

/// Hedges are attempts: a round of one attempt and `hedges` hedges needs
/// `attempts` above `hedges`, or the last would never go out. And a round
/// sends `MAX_HEDGES` at most.
fn check_hedges_fit(args: &Args, cx: &mut Ctxt) {
    let (Some(Num::Lit(hedges)), Some(key)) = (args.hedges.value(), args.hedges.key()) else {
        return;
    };
    if *hedges > MAX_HEDGES {
        cx.error(
            key,
            format!(
                "`hedges = {hedges}`: a round sends {MAX_HEDGES} hedges at most (each is one \
                 more request to a dependency that is already slow; two or three are plenty)"
            ),
        );
        return;
    }
    let attempts = match args.attempts.value() {
        Some(Num::Lit(n)) => Some((*n, "")),
        None if args.policy.value().is_none() => Some((3, " (the default)")),
        _ => None,
    };
    if let Some((attempts, default)) = attempts
        && *hedges >= attempts
    {
        cx.error(
            key,
            format!(
                "`hedges = {hedges}` with `attempts = {attempts}`{default}: hedges are \
                 attempts, so a round of one attempt and {hedges} hedges needs \
                 `attempts = {}` at least (more, to leave a retry after a round that \
                 fails)",
                u64::from(*hedges) + 1
            ),
        );
    }
}

/// A hedge delay of zero sends every hedge at once.
fn check_hedge_delay(args: &Args, cx: &mut Ctxt) {
    if let Some(HedgeDelay::After(dur)) = args.hedge.value()
        && let Some((span, text)) = zero_literal(Some(dur))
    {
        let below = below_a_nanosecond("hedge", text).map_or(String::new(), |b| format!(" ({b})"));
        cx.error(
            span,
            format!(
                "`hedge` must be greater than zero{below}: a zero delay sends every hedge at \
                 once, beside every attempt (if that is meant, write `Duration::ZERO`)"
            ),
        );
    }
}

/// A hedge delay that no hedge could beat: the deadline's (given, or the
/// default when neither it nor `policy` is), less the timer's slack,
/// after which no attempt starts, or the attempt timeout's, which cuts the first attempt off
/// before its hedge is due. Expressions, `deadline = none`, a zero bound
/// (an error of its own) and options `policy` refuses are left alone.
fn check_hedge_in_time(args: &Args, cx: &mut Ctxt) {
    // No hedge goes out within the timer's slack of the deadline (2 ms on
    // tokio's and by default), as no retry sleeps into it.
    const SLACK_NANOS: u128 = 2_000_000;
    let Some(HedgeDelay::After(Dur::Lit(hedge))) = args.hedge.value() else {
        return;
    };
    if args.policy.value().is_some() {
        return;
    }
    let deadline = match args.deadline.value() {
        Some(OrNone::Some(Dur::Lit(deadline))) if deadline.nanos != 0 => {
            Some((deadline.nanos, format!("`deadline = {}`", deadline.text)))
        }
        None => {
            let nanos = u128::from(crate::units::DEFAULT_DEADLINE_SECS) * 1_000_000_000;
            Some((nanos, format!("the default `deadline` ({})", human(nanos))))
        }
        _ => None,
    };
    if let Some((nanos, deadline)) = deadline
        && hedge.nanos.saturating_add(SLACK_NANOS) >= nanos
    {
        cx.error(
            hedge.span,
            format!(
                "`hedge = {}` is not before {deadline}, less the timer's 2 ms of slack: a \
                 hedge is an attempt, and no attempt starts that close to the deadline, so \
                 none could go out; hedge sooner, or give the call more time",
                hedge.text
            ),
        );
        return;
    }
    if let Some(Dur::Lit(timeout)) = args.attempt_timeout.value()
        && timeout.nanos != 0
        && hedge.nanos >= timeout.nanos
    {
        cx.error(
            hedge.span,
            format!(
                "`hedge = {}` is not before `attempt_timeout = {}`: each attempt is cut off \
                 before its hedge is due, and none could go out; hedge sooner than the \
                 attempt timeout",
                hedge.text, timeout.text
            ),
        );
    }
}

/// A `&mut` in `ty`, at its top or inside it (`(&mut T, u8)`,
/// `Option<&mut T>`, `[&mut T; 2]`): an argument one attempt could change
/// under the others.
fn mut_reference(ty: &Type) -> Option<&syn::TypeReference> {
    match ty {
        // (Behind a `&`, a `&mut` gives shared access only.)
        Type::Reference(r) => r.mutability.is_some().then_some(r),
        Type::Tuple(t) => t.elems.iter().find_map(mut_reference),
        Type::Array(a) => mut_reference(&a.elem),
        Type::Slice(s) => mut_reference(&s.elem),
        Type::Paren(p) => mut_reference(&p.elem),
        Type::Group(g) => mut_reference(&g.elem),
        Type::Path(p) => p.path.segments.iter().find_map(|segment| {
            let syn::PathArguments::AngleBracketed(args) = &segment.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::Type(ty) => mut_reference(ty),
                _ => None,
            })
        }),
        _ => None,
    }
}

/// `hedge` runs attempts side by side: an `async fn`, declared
/// idempotent, whose attempts can share its arguments.
fn check_hedge(args: &Args, func: &Func, cx: &mut Ctxt) {
    if let (Some(key), None) = (args.hedges.key(), args.hedge.key()) {
        cx.error(
            key,
            "`hedges` sets how many hedges `hedge` may send: give `hedge = ..` too \
             (a delay such as `50ms`, or a percentile such as `p95`)",
        );
    }
    let Some(key) = args.hedge.key() else {
        return;
    };
    check_hedge_delay(args, cx);
    check_hedge_in_time(args, cx);
    if func.sig.asyncness.is_none() {
        cx.error(
            key,
            "`hedge` needs an `async fn`: it runs attempts side by side, which a sync \
             function cannot",
        );
        return;
    }
    if let (Some(Num::Lit(1)), Some(attempts)) = (args.attempts.value(), args.attempts.key()) {
        cx.error(
            attempts,
            "`attempts = 1` leaves no room for a hedge: hedges are attempts, bounded by \
             `attempts` with the retries; give `attempts = 2` or more",
        );
    } else {
        check_hedges_fit(args, cx);
    }
    // With `policy = ..`, whether the operation is idempotent is the
    // policy's to say, at run time (a policy that is not sends no hedge).
    let idempotent = args.idempotent.value().copied();
    if args.policy.value().is_none() && idempotent != Some(true) {
        let (span, message) = match idempotent {
            Some(false) => (
                args.idempotent.key().unwrap_or(key),
                "`hedge` sends copies of an attempt that may both be carried out: it needs \
                 `idempotent = true`, and this function says `idempotent = false` (set it to \
                 `true` if running the operation twice is harmless, or remove `hedge`)",
            ),
            _ => (
                key,
                "`hedge` sends copies of an attempt that may both be carried out: it needs \
                 `idempotent` (add `idempotent` to the options if running the operation twice \
                 is harmless)",
            ),
        };
        cx.error(span, message);
    }
    for input in &func.sig.inputs {
        // The tokens that give unique access: `&mut self`, `&mut T`, `mut x`;
        // and the name of a `mut` binding of an owned value, which a copy
        // in the body can stand in for.
        let (tokens, binding) = match input {
            syn::FnArg::Receiver(receiver) => {
                let this = &receiver.self_token;
                match (&receiver.kind, &receiver.mutability) {
                    (syn::ReceiverKind::Reference(and, _, Some(mutability)), _) => {
                        (quote::quote!(#and #mutability #this), None)
                    }
                    // `self: &mut Self`
                    (syn::ReceiverKind::Typed(colon, ty), _) if matches!(&**ty, Type::Reference(r) if r.mutability.is_some()) => {
                        (quote::quote!(#this #colon #ty), None)
                    }
                    (_, Some(mutability)) => (quote::quote!(#mutability #this), None),
                    _ => continue,
                }
            }
            syn::FnArg::Typed(typed) => {
                if let Some(r) = mut_reference(&typed.ty) {
                    let (and, mutability) = (&r.and_token, &r.mutability);
                    (quote::quote!(#and #mutability), None)
                } else if let Some(binding) = mut_binding(&typed.pat) {
                    let (mutability, name) = (&binding.mutability, &binding.ident);
                    (quote::quote!(#mutability #name), Some(name))
                } else {
                    continue;
                }
            }
        };
        let message = match binding {
            Some(name) => format!(
                "with `hedge`, attempts run side by side and share the arguments: `mut {name}` \
                 could be changed by one attempt under the others; drop `mut` and copy it in \
                 the body (`let mut {name} = {name}.clone();`), or drop `hedge`"
            ),
            None => "with `hedge`, attempts run side by side and share the arguments: an \
                     argument one attempt could change (`&mut`, or `mut`) cannot be shared; take \
                     it by `&` (with interior mutability if it must change) or drop `hedge`"
                .to_owned(),
        };
        cx.error_spanned(tokens, message);
    }
}

/// The first binding of `pat` that an attempt could change what it binds
/// through (`mut x`, `ref mut x`), nested in a tuple, struct or slice
/// pattern too.
fn mut_binding(pat: &syn::Pat) -> Option<&syn::PatIdent> {
    use syn::Pat;
    match pat {
        Pat::Ident(ident) if ident.mutability.is_some() => Some(ident),
        Pat::Ident(ident) => ident.subpat.as_ref().and_then(|(_, sub)| mut_binding(sub)),
        Pat::Tuple(tuple) => tuple.elems.iter().find_map(mut_binding),
        Pat::TupleStruct(tuple) => tuple.elems.iter().find_map(mut_binding),
        Pat::Struct(fields) => fields.fields.iter().find_map(|f| mut_binding(&f.pat)),
        Pat::Slice(slice) => slice.elems.iter().find_map(mut_binding),
        Pat::Paren(paren) => mut_binding(&paren.pat),
        Pat::Or(or) => or.cases.iter().find_map(mut_binding),
        Pat::Reference(reference) => mut_binding(&reference.pat),
        Pat::Type(typed) => mut_binding(&typed.pat),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(item: TokenStream) -> Option<String> {
        let func: Func = syn::parse2(item).unwrap();
        let mut cx = Ctxt::default();
        check_rewritten(&func, &mut cx).then(|| cx.finish().unwrap_err().to_string())
    }

    #[test]
    fn a_function_rewritten_by_tokio_test_is_recognised() {
        // What `#[tokio::test]` above `#[retry]` hands over in a test build
        // (in other builds, `#[test]` removes the item before `#[retry]`
        // runs, so trybuild cannot show it).
        let message = rewritten(quote::quote! {
            #[::core::prelude::v1::test]
            fn flaky() -> Result<(), std::io::Error> {
                let body = async { Ok(()) };
                let body: ::core::pin::Pin<&mut dyn ::core::future::Future<Output = _>> = body;
                #[allow(clippy::expect_used)]
                {
                    use tokio::runtime::Builder;
                    return Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("Failed building the Runtime")
                        .block_on(body);
                }
            }
        });
        assert!(
            message.is_some_and(|m| m.contains("Write `#[retry]` above `#[tokio::test]`")),
            "not recognised"
        );
    }

    #[test]
    fn the_same_runtime_written_by_hand_is_left_alone() {
        assert_eq!(
            rewritten(quote::quote! {
                fn blocking() -> Result<u8, std::io::Error> {
                    let rt = Builder::new_current_thread().build().expect("Failed building the Runtime");
                    rt.block_on(async { Ok(1) })
                }
            }),
            None
        );
    }

    #[test]
    fn only_the_outermost_type_can_be_a_future() {
        let ty = |t: &str| returns_future(&syn::parse_str(t).unwrap());
        assert!(ty("impl Future<Output = Result<u8, E>>"));
        assert!(ty(
            "impl std::future::Future<Output = Result<u8, E>> + Send"
        ));
        assert!(ty(
            "Pin<Box<dyn Future<Output = Result<u8, E>> + Send + 'a>>"
        ));
        assert!(ty("BoxFuture<'static, Result<u8, E>>"));
        assert!(!ty("Result<Future, E>"));
        assert!(!ty("Result<Pin<Box<dyn Future<Output = ()>>>, E>"));
        assert!(!ty("Result<impl Future<Output = ()>, E>"));
    }

    #[test]
    fn an_ordinary_test_function_is_left_alone() {
        assert_eq!(
            rewritten(quote::quote! {
                #[test]
                fn flaky() -> Result<(), std::io::Error> { Ok(()) }
            }),
            None
        );
    }
}
