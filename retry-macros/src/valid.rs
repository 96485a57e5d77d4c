//! Stage 2: rules across options, and between the options and the function.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Block, ReturnType, Signature, Token, Visibility};

use crate::args::{Args, Ctxt, Dur, DurLit, OrNone, human};

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

/// DESIGN's defaults, for the `base ≤ cap` check when one side is implied.
/// They mirror `Policy::DEFAULT` in the runtime, which a proc-macro crate
/// cannot depend on; `tests/defaults.rs` checks that the two agree.
const DEFAULT_BASE_NANOS: u128 = 100_000_000;
const DEFAULT_CAP_NANOS: u128 = 20_000_000_000;

/// The options a `Policy` carries: `policy = expr` replaces all of them.
fn schedule_options(args: &Args) -> [(&'static str, Option<proc_macro2::Span>); 9] {
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
fn any_token(tokens: TokenStream, pred: &impl Fn(&TokenTree) -> bool) -> bool {
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
             (Rust 1.75+) and remove `#[async_trait]`: `#[retry]` supports it",
        );
        return true;
    }
    // `#[tokio::test]` / `#[tokio::main]` turn the `async fn` into a sync
    // one that builds a runtime: retried, that runtime would be built per
    // attempt and the sleeps would be real.
    let tokio_test = func.attrs.iter().any(|a| {
        let segments: Vec<String> = a
            .path()
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        a.path().leading_colon.is_some() && segments == ["core", "prelude", "v1", "test"]
    });
    let tokio_entry = body.clone().is_some_and(|b| {
        any_token(b, &|tt| {
            matches!(tt, TokenTree::Literal(l) if l.to_string() == "\"Failed building the Runtime\"")
        })
    });
    if sig.asyncness.is_none() && (tokio_test || tokio_entry) {
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
        && any_token(ty.to_token_stream(), &|tt| is_ident(tt, &["Future"]))
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

fn check_signature(func: &Func, cx: &mut Ctxt) {
    let sig = &func.sig;
    if let Some(c) = &sig.constness {
        cx.error_spanned(
            c,
            "`#[retry]` cannot be applied to a `const fn`: retrying sleeps, which const evaluation cannot do",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned(
            abi,
            "`#[retry]` cannot be applied to an `extern` function: wrap the call in a Rust function and retry that",
        );
    }
    if let Some(v) = &sig.variadic {
        cx.error_spanned(v, "`#[retry]` cannot be applied to a variadic function");
    }
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
    if func.block.is_none() {
        cx.error_spanned(
            &sig.ident,
            "`#[retry]` needs a function body: put it on the method's implementation, \
             or give the trait method a default body",
        );
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
        if let Some(Dur::Lit(DurLit { nanos: 0, span, .. })) = opt.value() {
            cx.error(*span, format!("`{}` must be greater than zero", opt.name()));
        }
    }
    if let Some(OrNone::Some(Dur::Lit(DurLit { nanos: 0, span, .. }))) = args.deadline.value() {
        cx.error(
            *span,
            "a zero `deadline` leaves no time to retry; for no deadline at all, write `deadline = none`",
        );
    }

    check_base_below_cap(args, cx);
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
    if b <= c {
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
    if let Some(key) = args.attempt_timeout.key() {
        if is_async {
            not_yet(cx, key, "attempt_timeout");
        } else {
            cx.error(
                key,
                "`attempt_timeout` needs an `async fn`: a running sync attempt cannot be interrupted; \
                 give the blocking call its own timeout instead",
            );
        }
    }
    if let Some(key) = args.breaker.key() {
        not_yet(cx, key, "breaker");
    }
    if let Some(key) = args.on_retry.key() {
        not_yet(cx, key, "on_retry");
    }
}

/// Options DESIGN defines that this version parses and checks but does not
/// run yet: an error, never a silently ignored option.
fn not_yet(cx: &mut Ctxt, key: proc_macro2::Span, name: &str) {
    cx.error(
        key,
        format!("`{name}` is not supported by this version of backstop yet"),
    );
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
                body.await_somehow()
            }
        });
        assert!(
            message.is_some_and(|m| m.contains("Write `#[retry]` above `#[tokio::test]`")),
            "not recognised"
        );
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
