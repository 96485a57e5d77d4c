//! Stage 3: write the retry loop around the function's body.
//!
//! The signature, attributes and visibility are re-emitted verbatim; only
//! the block changes. Each attempt re-evaluates the original body as a
//! non-`move` closure (sync) or a non-`move` `async` block (async), so `?`
//! and `return` inside it end that attempt only. Every decision is the
//! runtime's: the loop here only asks it and sleeps.

use proc_macro2::{Ident, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{ReturnType, Type};

use crate::args::{Args, Backoff, Dur, DurLit, HedgeDelay, Jitter, Num, OrNone};
use crate::valid::{Func, any_token};

/// Names of the generated locals. They live in the macro's hygiene context
/// (`Span::mixed_site()`): a user's `state` or `policy` can neither see nor
/// shadow them.
struct Names {
    policy: Ident,
    policy_value: Ident,
    budget: Ident,
    own_budget: Ident,
    key: Ident,
    state: Ident,
    outcome: Ident,
    verdict: Ident,
    delay: Ident,
    pinned: Ident,
    /// A hedged attempt's cut-off (an `Elapsed`).
    why: Ident,
}

impl Names {
    fn new() -> Self {
        let m = Span::mixed_site();
        Self {
            policy: format_ident!("__backstop_policy", span = m),
            policy_value: format_ident!("__backstop_policy_value", span = m),
            budget: format_ident!("__backstop_budget", span = m),
            own_budget: format_ident!("__BACKSTOP_BUDGET"),
            key: format_ident!("__backstop_key", span = m),
            state: format_ident!("__backstop_state", span = m),
            outcome: format_ident!("__backstop_outcome", span = m),
            verdict: format_ident!("__backstop_verdict", span = m),
            delay: format_ident!("__backstop_delay", span = m),
            pinned: format_ident!("__backstop_pinned", span = m),
            why: format_ident!("__backstop_why", span = m),
        }
    }
}

/// The name a relative `crate = path` is given in the body. It is always
/// the macro's token (mixed-site), even where a path starting with it is
/// put on the user's tokens: rustc's `unused_qualifications` passes over a
/// path whose first segment the macro wrote, and a path the user could
/// have written shorter (`__backstop_crate::__private::Classify`, with
/// `Classify` imported) would otherwise be reported on the user's code.
const CRATE_ALIAS: &str = "__backstop_crate";

/// The path to the runtime's macro support (`::backstop::__private`), and
/// the `use` that names a relative `crate = path` once, at the top of the
/// body: written out at each use, on the user's tokens, it would meet
/// rustc's `unused_qualifications` wherever its `crate::`, or the path to
/// an item the user imported, is redundant.
fn runtime_path(args: &Args) -> (TokenStream, TokenStream) {
    match args.krate.value() {
        None => (quote!(), quote!(::backstop::__private)),
        // (A path from the root, or one keyword, which a `use` cannot
        // name alone: `self`, `super`, `$crate`, written out as before.)
        Some(path)
            if path.leading_colon.is_some()
                || (path.segments.len() == 1
                    && ["self", "super", "crate", "$crate"]
                        .iter()
                        .any(|keyword| path.segments[0].ident == keyword)) =>
        {
            (quote!(), quote!(#path::__private))
        }
        Some(path) => {
            let alias = Ident::new(CRATE_ALIAS, Span::mixed_site());
            (
                quote!(#[allow(unused_imports)] use #path as #alias;),
                quote!(#alias::__private),
            )
        }
    }
}

pub(crate) fn expand(args: &Args, func: &Func) -> TokenStream {
    let (Some(block), ReturnType::Type(_, ret)) = (&func.block, &func.sig.output) else {
        unreachable!("validation rejects bodiless functions and missing return types")
    };
    let (krate_use, rt) = runtime_path(args);
    let ret_span = ret.span();
    let ret = erase_impl_trait(ret);
    let n = Names::new();
    let Names {
        state,
        outcome,
        verdict,
        delay,
        ..
    } = &n;

    let setup = setup(args, &rt, &n);
    let (on_retry, on_give_up) = hooks(args, &rt, &ret);
    let view = outcome_view(&rt, &n, &ret, ret_span);
    let show = show_error(&rt, &view);
    let (with_gates, admit_first, admit_after_sleep) =
        breaker(args, &rt, &n, &ret, &view, &on_give_up);
    let classify = classify(args, &rt, &n, &ret, ret_span);
    let (items, stmts) = split_items(block);
    let is_async = func.sig.asyncness.is_some();
    let clock = if is_async {
        async_clock(func, &rt)
    } else {
        quote!(#rt::SystemClock)
    };
    let function = function(func, &rt);
    let init = init(
        &rt,
        &n,
        &clock,
        &function,
        with_gates.as_ref(),
        args.key.value().is_some(),
    );
    let prologue = quote! {
        #krate_use
        #(#items)*
        #setup
        let mut #state = #init;
        #admit_first
    };
    let (sig, captures) = unique_captures(func, args);
    let first_ok = first_ok(args, &rt, &n, &view, ret_span);
    let body = if is_async {
        let (round, bind, judge) = async_round(args, &rt, &n, &ret, &captures, &stmts, classify);
        // The outcome lives in the inner block only: it is dropped before
        // the sleep (a retried response releases its connection at once) and
        // is never held across an `.await` of the loop, so the future is
        // `Send` whenever the plain function's would be.
        let (may_hold, hold) = held_wait(&rt, &n, &ret, &view, &on_give_up);
        quote! {
            #prologue
            #round
            loop {
                let #delay = {
                    #bind
                    #first_ok
                    #judge
                    match #rt::Call::decided_holding(
                        &mut #state, #view, #verdict, #show, #on_retry, #on_give_up, #may_hold,
                    ) {
                        ::core::option::Option::Some(#delay) => #delay,
                        ::core::option::Option::None => return #outcome,
                    }
                };
                #rt::sleep_async(#delay).await;
                #hold
                // The outcome is gone (dropped before the sleep): a breaker
                // that opened meanwhile makes the rejection the error.
                #admit_after_sleep
            }
        }
    } else {
        // A sync loop keeps the outcome through the sleep, and returns it if
        // the thread woke at or past the deadline. It cannot cut an attempt
        // off: a policy's `attempt_timeout` is not applied (said in debug
        // builds).
        let policy = &n.policy;
        let unapplied = args
            .policy
            .value()
            .map(|_| quote!(let _ = #rt::policy_attempt_timeout(#policy, false);));
        quote! {
            #prologue
            #unapplied
            loop {
                let #outcome: #ret =
                    #rt::Call::run_attempt(&mut #state, || -> #ret { #(#stmts)* });
                #first_ok
                let #verdict = #classify;
                match #rt::Call::decided(&mut #state, #view, #verdict, #show, #on_retry, #on_give_up) {
                    ::core::option::Option::Some(#delay) => {
                        #rt::sleep(#delay);
                        // Late for the deadline, or the breaker opened:
                        // return the outcome kept through the sleep.
                        if !#rt::Call::resumed(&mut #state, #view, #show, #on_give_up) {
                            return #outcome;
                        }
                    }
                    ::core::option::Option::None => return #outcome,
                }
            }
        }
    };
    with_body(func, &sig, Some(block.brace_token), body)
}

/// Without `when_ok` (and without `hedge`, whose round judges its
/// attempts as they end), an `Ok` first attempt ends the call before any
/// verdict is made: the success path takes one branch to its return
/// (cachegrind: the async call 366 → 362 instructions; the sync call
/// within the ±2 a rebuild moves it).
fn first_ok(
    args: &Args,
    rt: &TokenStream,
    n: &Names,
    view: &TokenStream,
    ret_span: Span,
) -> TokenStream {
    if args.when_ok.value().is_some() || args.hedge.value().is_some() {
        return quote!();
    }
    let Names { state, outcome, .. } = n;
    // (At the return type, for an error there, but of the macro: a lint
    // such as `clippy::absolute_paths` does not read it as the user's.)
    let is_ok = respan(
        quote!(::core::result::Result::is_ok),
        Span::mixed_site().located_at(ret_span),
    );
    let mut arg = proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, quote!(&#view));
    arg.set_span(ret_span);
    quote! {
        if #is_ok #arg && #rt::Call::first_ok(&mut #state) {
            return #outcome;
        }
    }
}

/// An async loop's wait while its call is held after a refusal (the
/// budget refused its retry): it sleeps on until the call is released; if
/// the deadline comes first, the call's error is an `Elapsed`, which only
/// an error type that can hold one allows (autoref specialization on the
/// concrete type, as for a policy's attempt timeout): without it, the
/// call is never held and gives up at once. A call whose deadline came
/// while it slept (its task ran late) gives up there too, with an
/// `Elapsed` that says so, rather than start an attempt past its
/// deadline (one whose error cannot hold an `Elapsed` starts it). Whether
/// it may hold (a constant once inlined, asked where it is needed and
/// never kept across an `.await`: the future does not grow by it), and
/// the wait.
fn held_wait(
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    view: &TokenStream,
    on_give_up: &TokenStream,
) -> (TokenStream, TokenStream) {
    let Names {
        state,
        outcome,
        delay,
        ..
    } = n;
    let m = Span::mixed_site();
    let (into, held, reason) = (
        format_ident!("__backstop_into", span = m),
        format_ident!("__backstop_held", span = m),
        format_ident!("__backstop_reason", span = m),
    );
    // (On the return type, as the classification's: an error type rustc
    // cannot find is one error there, not a second on the attribute.)
    let ret_span = ret.span();
    let error = error_type_tokens(ret, rt, ret_span);
    let elapsed_into = elapsed_into(rt, ret, &error, ret_span);
    let gone = format_ident!("__backstop_gone", span = m);
    let held_err = from_elapsed(rt, ret, &into, &quote!(#gone));
    let wait = quote! {
        while let ::core::option::Option::Some(#held) = #rt::Call::after_sleep(&mut #state) {
            let #delay = match #held {
                ::core::result::Result::Ok(#delay) => #delay,
                ::core::result::Result::Err(#gone) => {
                    let #reason = #rt::gave_up_for(&#gone);
                    let #outcome: #ret = match #elapsed_into {
                        // (Its last outcome was dropped before it slept:
                        // the `Elapsed` says why it gave up.)
                        ::core::option::Option::Some(#into) => {
                            #held_err
                        }
                        ::core::option::Option::None => ::core::unreachable!(
                            "a call gives up after a sleep only when it can say why"
                        ),
                    };
                    #rt::AttemptState::gave_up_with(
                        #rt::Call::state(&mut #state),
                        #view,
                        #reason,
                        #on_give_up,
                    );
                    return #outcome;
                }
            };
            #rt::sleep_async(#delay).await;
        }
    };
    (holds_elapsed(ret, &elapsed_into), wait)
}

/// How the call's `tracing` events show its error: in its own words
/// (`ByOwnText`: reqwest's errors), by its `Display` (`ByDisplay`) if the
/// concrete error type has one, else not at all (`NoDisplay`), asked by
/// autoref specialization, as for `From<Elapsed>`; and, beside it, a
/// success a `when_ok` classifier judged a failure by its status
/// (`ByStatus`: an HTTP response) or not at all (`NoStatus`). The answer
/// is a pair of zero-sized types: nothing is asked at run time. The error
/// type is the outcome's (`view`), as the loop reads it: a return type
/// that is not a `Result` is said once, there.
fn show_error(rt: &TokenStream, view: &TokenStream) -> TokenStream {
    quote! {{
        #[allow(unused_imports)]
        use #rt::{ViaDisplay as _, ViaNoDisplay as _, ViaNoStatus as _, ViaOwnText as _, ViaStatus as _};
        ((&&#rt::DisplayOf::of(#view)).display_fn(), (&&#rt::StatusOf::of(#view)).status_fn())
    }}
}

/// The call's state. Without a gate before every attempt, the state
/// machine is made only if the first attempt fails.
fn init(
    rt: &TokenStream,
    n: &Names,
    clock: &TokenStream,
    function: &TokenStream,
    with_gates: Option<&WithGate>,
    keyed: bool,
) -> TokenStream {
    let Names {
        policy,
        budget,
        key,
        ..
    } = n;
    match (with_gates, keyed) {
        (Some(with_gates), _) => {
            let mut state = quote! {
                #rt::AttemptState::function(
                    #rt::AttemptState::budget(#rt::AttemptState::new(#policy, #clock), #budget),
                    #function,
                )
            };
            if keyed {
                state = quote!(#rt::AttemptState::key(#state, #key));
            }
            let state = with_gates(quote!({ #state }));
            quote!(#rt::Call::from_state(#state))
        }
        // (A call without a key is started as it always was: its path
        // gains nothing.)
        (None, false) => quote!(#rt::Call::new(#policy, #clock, #budget, #function)),
        (None, true) => quote!(#rt::Call::keyed(#policy, #clock, #budget, #function, #key)),
    }
}

/// The function's `&'static Function`, for `tracing` and `metrics`: a
/// `static` per function, whose metric labels are built at compile time.
/// A free function is named by its module path; a method (it has a
/// receiver or names `Self`: it is in an `impl` or a trait) by the type it
/// is called on, which only `Self` knows.
fn function(func: &Func, rt: &TokenStream) -> TokenStream {
    let name = function_name(func);
    if is_method(func) {
        quote! {{
            static __BACKSTOP_FUNCTION: #rt::Function = #rt::Function::new(#name);
            #rt::Function::of_type(&__BACKSTOP_FUNCTION, ::core::any::type_name::<Self>())
        }}
    } else {
        quote! {{
            static __BACKSTOP_FUNCTION: #rt::Function = #rt::Function::new(
                ::core::concat!(::core::module_path!(), "::", #name)
            );
            &__BACKSTOP_FUNCTION
        }}
    }
}

/// The function's name (a raw identifier without its `r#`).
fn function_name(func: &Func) -> Literal {
    let name = func.sig.ident.to_string();
    Literal::string(name.strip_prefix("r#").unwrap_or(&name))
}

/// Whether the function is in an `impl` or a trait, where `Self` names the
/// type it is called on: it has a receiver, or its signature names `Self`.
/// (An associated function that does neither is named like a free one.)
fn is_method(func: &Func) -> bool {
    func.sig.receiver().is_some()
        || any_token(
            func.sig.to_token_stream(),
            &|tt| matches!(tt, TokenTree::Ident(i) if i == "Self"),
        )
}

/// Statements making each attempt's `async` block hold the arguments by
/// unique reference (`&mut`) rather than by shared one: `&mut T` is `Send`
/// when `T` is, as the plain function's future holding `T` would be, where
/// `&T` needs `T: Sync`. An owned argument becomes a `mut` binding for
/// that (a binding's `mut` is no part of the function's type); a `&mut`
/// argument is reborrowed; a shared one is left alone (`&&T` and the plain
/// function's `&T` are `Send` alike).
///
/// Left alone as well, held by shared reference as the body alone would
/// hold them: arguments the body never names (the future holds them, not
/// the attempt), `_`-prefixed or attributed (`#[cfg]`) ones, those the
/// `policy` expression names (it may borrow them for the whole call),
/// patterns other than a plain name, and `&mut` arguments when the return
/// type may borrow (a `&`, a lifetime or an `impl`): a value borrowed from
/// an argument held uniquely by one attempt could not be returned. A sync
/// function is left as written.
fn unique_captures(func: &Func, args: &Args) -> (syn::Signature, Vec<TokenStream>) {
    let mut sig = func.sig.clone();
    let mut captures = Vec::new();
    // Hedged attempts run side by side: they share the arguments.
    let Some(block) = func
        .block
        .as_ref()
        .filter(|_| sig.asyncness.is_some() && args.hedge.value().is_none())
    else {
        return (sig, captures);
    };
    let mut in_body = Vec::new();
    variables(block.to_token_stream(), &mut in_body);
    let mut in_policy = Vec::new();
    if let Some(expr) = args.policy.value() {
        variables(expr.to_token_stream(), &mut in_policy);
    }
    let output = sig.output.to_token_stream();
    let may_borrow = any_token(output, &|tt| match tt {
        TokenTree::Punct(p) => p.as_char() == '&' || p.as_char() == '\'',
        TokenTree::Ident(i) => i == "impl",
        _ => false,
    });
    let m = Span::mixed_site();
    for input in &mut sig.inputs {
        // The name, its `mut` if it has none yet, and whether the argument
        // is a reference (`Some(true)` for `&mut`).
        let (name, mutability, by_ref) = match input {
            syn::FnArg::Receiver(receiver) => {
                let by_ref = match &receiver.kind {
                    syn::ReceiverKind::Reference(_, _, mutability) => Some(mutability.is_some()),
                    syn::ReceiverKind::Typed(_, ty) => reference(ty),
                    _ => None,
                };
                if !receiver.attrs.is_empty() {
                    continue;
                }
                let span = receiver.self_token.span;
                let name = receiver.self_token.to_token_stream();
                (name, (&mut receiver.mutability, span), by_ref)
            }
            syn::FnArg::Typed(typed) => {
                let syn::Pat::Ident(binding) = &mut *typed.pat else {
                    continue;
                };
                if binding.by_ref.is_some()
                    || binding.subpat.is_some()
                    || !typed.attrs.is_empty()
                    || !binding.attrs.is_empty()
                    || binding.ident.to_string().starts_with('_')
                {
                    continue;
                }
                // On the name: diagnostics about the binding then quote
                // the user's code, not the attribute.
                let span = binding.ident.span();
                let name = binding.ident.to_token_stream();
                (name, (&mut binding.mutability, span), reference(&typed.ty))
            }
        };
        let name_text = name.to_string();
        if !in_body.contains(&name_text) || in_policy.contains(&name_text) {
            continue;
        }
        match by_ref {
            Some(true) if !may_borrow => {
                captures.push(quote_spanned!(m=> let _ = &mut *#name;));
            }
            Some(_) => {}
            None => {
                let (mutability, span) = mutability;
                mutability.get_or_insert(syn::Token![mut](span));
                captures.push(quote_spanned!(m=> let _ = &mut #name;));
            }
        }
    }
    (sig, captures)
}

/// `Some(true)` for a type written `&mut T`, `Some(false)` for `&T`, `None`
/// otherwise.
fn reference(ty: &Type) -> Option<bool> {
    match ty {
        Type::Reference(r) => Some(r.mutability.is_some()),
        Type::Group(g) => reference(&g.elem),
        Type::Paren(p) => reference(&p.elem),
        _ => None,
    }
}

/// Every identifier in `tokens` that may name a variable, groups included:
/// not a path's leading segment (`conn` in `conn::POLICY`).
fn variables(tokens: TokenStream, out: &mut Vec<String>) {
    let mut tokens = tokens.into_iter().peekable();
    while let Some(tt) = tokens.next() {
        match tt {
            TokenTree::Ident(i) => {
                let path = matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == proc_macro2::Spacing::Joint);
                if !path {
                    out.push(i.to_string());
                }
            }
            TokenTree::Group(g) => variables(g.stream(), out),
            TokenTree::Literal(literal) => format_names(&literal.to_string(), out),
            TokenTree::Punct(_) => {}
        }
    }
}

/// The names a string literal's text (as written, quotes included) gives
/// inline as a format string's arguments (`{name}`, `{name:?}`; `{{` is
/// a brace): a body may use an argument only there. (A string that is no
/// format string may name one too: an argument taken as used when it is
/// not is captured by a borrow the future holds anyway.)
fn format_names(text: &str, out: &mut Vec<String>) {
    if !(text.starts_with('"') || text.starts_with("r\"") || text.starts_with("r#")) {
        return;
    }
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after;
            continue;
        }
        let end = rest.find(['}', ':']).unwrap_or(rest.len());
        let name = &rest[..end];
        let mut chars = name.chars();
        if chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
            && chars.all(|c| c == '_' || c.is_alphanumeric())
        {
            out.push(name.to_owned());
        }
    }
}

/// Before an async loop, what a hedged round needs; in the loop, how an
/// attempt (or a hedged round) binds its outcome, and the verdict on it
/// (bound with the outcome, for a hedged round).
fn async_round(
    args: &Args,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    captures: &[TokenStream],
    stmts: &[&syn::Stmt],
    classify: TokenStream,
) -> (TokenStream, TokenStream, TokenStream) {
    let Names {
        outcome, verdict, ..
    } = n;
    match args.hedge.value() {
        Some(hedge) => {
            let (round, run) = hedged_round(args, hedge, rt, n, ret, stmts, &classify);
            (
                round,
                quote!(let (#outcome, #verdict) = #run.await;),
                quote!(),
            )
        }
        None => {
            // (Under an attempt timeout, its own or its policy's: the limit,
            // an `Option<Duration>`.)
            let cut_v = cut_ident();
            let cut = if args.attempt_timeout.value().is_some() {
                Some(quote!(::core::option::Option::Some(#cut_v)))
            } else if args.policy.value().is_some() {
                Some(quote!(#cut_v))
            } else {
                None
            };
            let attempt = async_attempt(rt, n, ret, captures, stmts, cut);
            let (before, bind, verdict_expr) = timed_attempt(args, rt, n, ret, &attempt, classify);
            (before, bind, quote!(let #verdict = #verdict_expr;))
        }
    }
}

/// The limit an attempt is cut off after, under `attempt_timeout`.
fn cut_ident() -> Ident {
    format_ident!("__backstop_cut", span = Span::mixed_site())
}

/// One async attempt: the body as an `async` block, run with its context
/// set around each poll (see `backstop::context()`); with `cut` (under
/// `attempt_timeout`), cut off after it, and then dropped in its context,
/// as it ran (a call nested in it that retried tells this attempt, not the
/// one around the function).
fn async_attempt(
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    captures: &[TokenStream],
    stmts: &[&syn::Stmt],
    cut: Option<TokenStream>,
) -> TokenStream {
    let Names { state, pinned, .. } = n;
    let body = quote! {
        async {
            // Pins the block's return type before the body is checked, so
            // `?` inside it knows what to convert into.
            #[allow(unreachable_code)]
            if false {
                let #pinned: #ret = loop {};
                return #pinned;
            }
            #(#captures)*
            // The body's statements, not its block: a block as the tail
            // would trip `unused_braces` on one-line bodies.
            #(#stmts)*
        }
    };
    match cut {
        None => quote! {
            #rt::Call::run_attempt_pinned(&mut #state, ::core::pin::pin!(#body))
        },
        Some(cut) => quote! {
            #rt::Call::run_attempt_cut(
                &mut #state,
                #cut,
                ::core::pin::pin!(::core::option::Option::Some(#body)),
            )
        },
    }
}

/// A hedged function's round, before its loop: the `Hedge`, each
/// attempt's timeout, the attempt (the body in an `async` block, made
/// anew for each attempt of a round: attempts side by side share the
/// arguments) and the judge of what an attempt gave (a timed-out attempt
/// is the function's error through `E: From<Elapsed>`, and ambiguous).
fn hedged_round(
    args: &Args,
    hedge: &HedgeDelay,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    stmts: &[&syn::Stmt],
    classify: &TokenStream,
) -> (TokenStream, TokenStream) {
    let Names {
        outcome,
        verdict,
        pinned,
        state,
        why,
        ..
    } = n;
    let m = Span::mixed_site();
    let (hedge_v, timeout, attempt, judge) = (
        format_ident!("__backstop_hedge", span = m),
        format_ident!("__backstop_timeout", span = m),
        format_ident!("__backstop_attempt", span = m),
        format_ident!("__backstop_judge", span = m),
    );
    let base = match hedge {
        HedgeDelay::After(d) => {
            let delay = duration(rt, d);
            quote!(#rt::Hedge::after(#delay))
        }
        HedgeDelay::Percentile(q, ident) => {
            let q = Literal::f64_suffixed(*q);
            quote_spanned! {ident.span()=> {
                static __BACKSTOP_LATENCY: #rt::LatencyPercentile =
                    #rt::LatencyPercentile::new(#q, #rt::Duration::from_secs(10));
                // Through `own`: a test under `testing::isolate()` learns
                // latencies afresh.
                #rt::Hedge::at(#rt::own(&__BACKSTOP_LATENCY))
            }}
        }
    };
    let hedges = match args.hedges.value() {
        Some(Num::Lit(n)) => quote!(.hedges(#n)),
        Some(Num::Expr(e)) => quote!(.hedges(#e)),
        None => quote!(),
    };
    let (limit, elapsed) = hedged_timeout(args, rt, n, ret);
    // The judge is written in the call, its types inferred from the
    // attempt's: annotated with the return type, a closure would read each
    // elided lifetime in it (`Result<&str, E>`) as a lifetime of its own.
    let run = quote! {
        #rt::AttemptState::run_hedged(
            #rt::Call::state(&mut #state),
            &#hedge_v,
            #timeout,
            &#attempt,
            |#judge| match #judge {
                ::core::result::Result::Ok(#outcome) => {
                    let #verdict = #classify;
                    (#outcome, #verdict)
                }
                ::core::result::Result::Err(#why) => #elapsed,
            },
        )
    };
    let setup = quote! {
        let #hedge_v: #rt::Hedge = #base #hedges;
        let #timeout: ::core::option::Option<::core::time::Duration> = #limit;
        let #attempt = || async {
            #[allow(unreachable_code)]
            if false {
                let #pinned: #ret = loop {};
                return #pinned;
            }
            #(#stmts)*
        };
    };
    (setup, run)
}

/// A hedged round's attempt timeout (`Option<Duration>`), and what an
/// attempt that ran out gives: the function's error through
/// `E: From<Elapsed>`, ambiguous.
fn hedged_timeout(
    args: &Args,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
) -> (TokenStream, TokenStream) {
    let m = Span::mixed_site();
    let policy = &n.policy;
    let why = &n.why;
    // A timed-out attempt: the function's error, ambiguous.
    let timed_out = |error: TokenStream| {
        let error = from_err(rt, ret, error);
        quote! {(
            #error,
            #rt::Attempted::Failed(#rt::Verdict::RetryIfIdempotent),
        )}
    };
    match args.attempt_timeout.value() {
        Some(t) => {
            let span = match t {
                Dur::Lit(lit) => lit.span,
                Dur::Expr(e) => e.span(),
            };
            let t = duration(rt, t);
            let held = hold(rt, ret, &quote!(Elapsed), span, quote!(#why));
            (
                {
                    // (Located on the value: a wrong type is said there.)
                    let f = respan(quote!(#rt::attempt_timeout), span);
                    quote_spanned!(span=> #rt::Some(#f(#t)))
                },
                timed_out(held),
            )
        }
        None if args.policy.value().is_some() => {
            // A policy's own `attempt_timeout`, applied when the error type
            // can hold an `Elapsed` (see `timed_attempt`).
            let into = format_ident!("__backstop_into", span = m);
            let ret_span = ret.span();
            let error = error_type_tokens(ret, rt, ret_span);
            let elapsed_into = elapsed_into(rt, ret, &error, ret_span);
            let holds = holds_elapsed(ret, &elapsed_into);
            (
                quote!(#rt::policy_attempt_timeout(#policy, #holds)),
                timed_out(quote! {
                    match #elapsed_into {
                        ::core::option::Option::Some(#into) => #into(#why),
                        ::core::option::Option::None => ::core::unreachable!(),
                    }
                }),
            )
        }
        None => (
            quote!(::core::option::Option::None),
            quote!({
                let _ = #why;
                ::core::unreachable!("an attempt without a timeout never times out")
            }),
        ),
    }
}

/// Binds the outcome of the async `attempt`, and the verdict on it. With
/// `attempt_timeout`, each attempt is limited to min(timeout, time left);
/// running out is the function's error, through `E: From<Elapsed>`
/// (spanned on the option's value), and ambiguous.
fn timed_attempt(
    args: &Args,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    attempt: &TokenStream,
    classify: TokenStream,
) -> (TokenStream, TokenStream, TokenStream) {
    let Names { state, outcome, .. } = n;
    match args.attempt_timeout.value() {
        Some(timeout) => {
            let timed_out = format_ident!("__backstop_timed_out", span = Span::mixed_site());
            let limit_v = format_ident!("__backstop_limit", span = Span::mixed_site());
            let cut_v = cut_ident();
            let span = match timeout {
                Dur::Lit(lit) => lit.span,
                Dur::Expr(e) => e.span(),
            };
            // A `Duration` or an `Option<Duration>` (from a policy).
            let limit = duration(rt, timeout);
            let f = respan(quote!(#rt::attempt_timeout), span);
            let limit = quote_spanned!(span=> #f(#limit));
            let held = hold(
                rt,
                ret,
                &quote!(Elapsed),
                span,
                quote!(#rt::cut_off(
                    ::core::option::Option::Some(#cut_v),
                    ::core::option::Option::Some(#limit_v),
                )),
            );
            let cut = from_err(rt, ret, held);
            (
                // Read once a call, before the first attempt, as every
                // option is. (Kept: the error says which limit ran out.)
                quote!(let #limit_v: ::core::time::Duration = #limit;),
                quote! {
                    let #cut_v = #rt::Call::attempt_limit(&#state, #limit_v);
                    let (#outcome, #timed_out): (#ret, bool) = match #attempt.await {
                        ::core::result::Result::Ok(#outcome) => (#outcome, false),
                        ::core::result::Result::Err(_) => (#cut, true),
                    };
                },
                quote! {
                    if #timed_out {
                        #rt::Attempted::Failed(#rt::Verdict::RetryIfIdempotent)
                    } else {
                        #classify
                    }
                },
            )
        }
        None if args.policy.value().is_some() => {
            // A policy's own `attempt_timeout` (from configuration): applied
            // when the error type can hold an `Elapsed`, which the concrete
            // type written in the signature tells (autoref specialization:
            // `ViaFrom` for `E: From<Elapsed>`, else `ViaNothing`).
            let m = Span::mixed_site();
            let timed_out = format_ident!("__backstop_timed_out", span = m);
            let into = format_ident!("__backstop_into", span = m);
            let cut_v = cut_ident();
            let policy = &n.policy;
            let ret_span = ret.span();
            let error = error_type_tokens(ret, rt, ret_span);
            let elapsed_into = elapsed_into(rt, ret, &error, ret_span);
            let cut = from_elapsed(
                rt,
                ret,
                &into,
                &quote!(#rt::cut_off(#cut_v, #rt::Policy::get_attempt_timeout(#policy))),
            );
            (
                quote!(),
                quote! {
                    let #into = #elapsed_into;
                    let #cut_v = #rt::Call::attempt_limit_of(&#state, #policy, #into.is_some());
                    let (#outcome, #timed_out): (#ret, bool) = match #attempt.await {
                        ::core::result::Result::Ok(#outcome) => (#outcome, false),
                        ::core::result::Result::Err(#rt::Elapsed { .. }) => match #into {
                            ::core::option::Option::Some(#into) => (#cut, true),
                            ::core::option::Option::None => ::core::unreachable!(),
                        },
                    };
                },
                quote! {
                    if #timed_out {
                        #rt::Attempted::Failed(#rt::Verdict::RetryIfIdempotent)
                    } else {
                        #classify
                    }
                },
            )
        }
        None => (
            quote!(),
            quote!(let #outcome: #ret = #attempt.await;),
            classify,
        ),
    }
}

/// The async loop's clock, checked to be one and spanned on `async`:
/// without a timer feature that is the one error, naming the choices.
fn async_clock(func: &Func, rt: &TokenStream) -> TokenStream {
    let async_span = func.sig.asyncness.map_or_else(Span::call_site, |a| a.span);
    respan(
        quote!(#rt::async_clock(#rt::RuntimeClock::current())),
        async_span,
    )
}

/// The body's items and its other statements. Items (a `static` budget, a
/// helper fn, a `use`) go before the loop: they capture nothing, so nothing
/// changes for the body, and the options (`budget = INNER`) can name them.
/// A `macro_rules!` after the body's first statement stays where it is: it
/// may name the locals before it, and shadow a macro used before it, which
/// its place decides; so do the items after it, which may use it.
fn split_items(block: &syn::Block) -> (Vec<&syn::Stmt>, Vec<&syn::Stmt>) {
    let (mut statements, mut in_place) = (false, false);
    block.stmts.iter().partition(|stmt| match stmt {
        syn::Stmt::Item(syn::Item::Macro(_)) if statements => {
            in_place = true;
            false
        }
        syn::Stmt::Item(_) => !in_place,
        _ => {
            statements = true;
            false
        }
    })
}

/// The hooks as the closures the runtime's steps call with an event
/// (`None` without a hook: no event is built). The hook expression is
/// called directly, so a closure's argument type is inferred, and the call
/// is located on it: a hook of the wrong shape is reported there.
fn hooks(args: &Args, rt: &TokenStream, ret: &Type) -> (TokenStream, TokenStream) {
    let event_name = format_ident!("__backstop_event", span = Span::mixed_site());
    // The event's type in full: a closure in `Some(..)` is general over
    // the event's lifetimes only where its parameter says so.
    let closure =
        |hook: Option<&syn::Expr>, call: TokenStream, event: (TokenStream, TokenStream)| {
            let (typed, open) = event;
            hook.map_or_else(
                || quote!(::core::option::Option::None::<fn(&#open)>),
                |hook| {
                    let call = located_call(call, &event_name, hook, quote!(&));
                    quote!(::core::option::Option::Some(|#event_name: &#typed| { #call; }))
                },
            )
        };
    // The event's outcome types are the function's, so that a hook taking
    // another function's event is told so at the hook: where they can be
    // named (a `Result`, with no `impl Trait` in it, erased to `_`).
    // (Located on the return type: one that is not an outcome is said
    // there, once.)
    let (ok, err) = if names_result(ret) && !has_inferred(ret) {
        (
            respan(quote!(<#ret as #rt::Outcome>::Ok), ret.span()),
            respan(quote!(<#ret as #rt::Outcome>::Err), ret.span()),
        )
    } else {
        (quote!(_), quote!(_))
    };
    (
        closure(
            args.on_retry.value(),
            quote!(#rt::on_retry),
            (
                quote!(#rt::RetryEvent<'_, #ok, #err>),
                quote!(#rt::RetryEvent<'_, _, _>),
            ),
        ),
        closure(
            args.on_give_up.value(),
            quote!(#rt::on_give_up),
            (
                quote!(#rt::GiveUpEvent<'_, #ok, #err>),
                quote!(#rt::GiveUpEvent<'_, _, _>),
            ),
        ),
    )
}

/// A function turning the state's constructor into one behind a gate (the
/// breaker, the adaptive throttle, or both).
type WithGate = Box<dyn Fn(TokenStream) -> TokenStream>;

/// What a gate before every attempt is: the breaker or the adaptive
/// throttle.
struct Gate {
    /// The `static` the generated code borrows it into.
    what: &'static str,
    /// The trait its path must implement.
    shared: &'static str,
    /// That trait's method reading it.
    read: &'static str,
    /// The `AttemptState` method putting the call behind it.
    with: &'static str,
    /// The `AttemptState` method asking it before an attempt.
    admit: &'static str,
    /// Its rejection's type, which the error type must be `From`.
    rejection: &'static str,
    /// The give-up reason of a rejection.
    reason: &'static str,
}

const BREAKER: Gate = Gate {
    what: "BREAKER",
    shared: "SharedBreaker",
    read: "breaker",
    with: "breaker",
    admit: "admit",
    rejection: "CircuitOpen",
    reason: "BreakerOpen",
};

const THROTTLE: Gate = Gate {
    what: "THROTTLE",
    shared: "SharedThrottle",
    read: "throttle",
    with: "throttle",
    admit: "admit_throttled",
    rejection: "Throttled",
    reason: "Throttled",
};

/// The gates before every attempt (the adaptive throttle, the breaker):
/// their constructor (none without a gate: the call then makes its state
/// machine only if the first attempt fails), and the admission checks
/// before the first attempt and after each sleep.
fn breaker(
    args: &Args,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    view: &TokenStream,
    on_give_up: &TokenStream,
) -> (Option<WithGate>, TokenStream, TokenStream) {
    // The throttle is asked first: an attempt it sheds never takes a
    // breaker's leave.
    let keyed = args.key.value().is_some();
    let [
        (with_throttle, throttle_first, throttle_after),
        (with_breaker, breaker_first, breaker_after),
    ] = [
        (args.throttle.value(), &THROTTLE),
        (args.breaker.value(), &BREAKER),
    ]
    .map(|(path, kind)| gate(path, kind, rt, n, ret, view, on_give_up, keyed));
    let with_gates: Option<WithGate> = match (with_throttle, with_breaker) {
        (None, None) => None,
        (throttle, breaker) => Some(Box::new(move |mut init| {
            for gate in [&throttle, &breaker].into_iter().flatten() {
                init = gate(init);
            }
            init
        })),
    };
    (
        with_gates,
        quote!(#throttle_first #breaker_first),
        quote!(#throttle_after #breaker_after),
    )
}

/// One gate (`path`, what `gate` says it is), for a call given a key or
/// not (`keyed`): its constructor and its admission check, which gives
/// up with the function's return type, `view` and `on_give_up`.
#[allow(clippy::too_many_arguments)]
fn gate(
    path: Option<&syn::Path>,
    gate: &Gate,
    rt: &TokenStream,
    n: &Names,
    ret: &Type,
    view: &TokenStream,
    on_give_up: &TokenStream,
    keyed: bool,
) -> (Option<WithGate>, TokenStream, TokenStream) {
    let state = &n.state;
    // With a gate: the state machine asks it before every attempt; a
    // rejected first attempt is the function's error, through
    // `E: From<Rejection>` (required only here, spanned on the path).
    match path {
        Some(path) => {
            let (item, read, last) =
                shared_static(path, rt, gate.what, gate.shared, gate.read, &n.key, keyed);
            let open = format_ident!("__backstop_open", span = Span::mixed_site());
            // `<E as From<Rejection>>::from` with the user's own `E` where
            // the return type names it, all on the path: a missing impl is
            // one error there, naming `E`.
            let rejection = format_ident!("{}", gate.rejection);
            let open_arg = Ident::new(&open.to_string(), Span::mixed_site().located_at(last));
            let held = hold(rt, ret, &quote!(#rejection), last, quote!(#open_arg));
            // The rejection is the call's outcome: `on_give_up` is told.
            let outcome = &n.outcome;
            let (admit, give_up, with) = (
                format_ident!("{}", gate.admit),
                format_ident!("{}", gate.reason),
                format_ident!("{}", gate.with),
            );
            let rejected = from_err(rt, ret, held);
            let reject = quote! {
                if let ::core::result::Result::Err(#open) = #rt::AttemptState::#admit(#rt::Call::state(&mut #state)) {
                    let #outcome: #ret = #rejected;
                    #rt::AttemptState::gave_up_with(
                        #rt::Call::state(&mut #state),
                        #view,
                        #rt::GiveUp::#give_up,
                        #on_give_up,
                    );
                    return #outcome;
                }
            };
            let rt = rt.clone();
            let with_gate =
                move |init: TokenStream| quote!({ #item #rt::AttemptState::#with(#init, #read) });
            (
                Some(Box::new(with_gate) as WithGate),
                reject.clone(),
                reject,
            )
        }
        None => (None, quote!(), quote!()),
    }
}

/// The function as written, with `body` in braces that carry the original
/// block's spans: the item then spans the user's own code, so the user's
/// lints (`dead_code` on an unused function…) still reach it.
fn with_body(
    func: &Func,
    sig: &syn::Signature,
    braces: Option<syn::token::Brace>,
    body: TokenStream,
) -> TokenStream {
    let Func {
        attrs,
        vis,
        inner_attrs,
        ..
    } = func;
    let mut item = quote!(#(#attrs)* #vis #sig);
    braces.unwrap_or_default().surround(&mut item, |inner| {
        inner.extend(quote!(#(#inner_attrs)*));
        inner.extend(body);
    });
    item
}

/// The policy (built from the options, or the user's `policy = expr`) and
/// the budget (the user's, none, or this function's own `static`).
fn setup(args: &Args, rt: &TokenStream, n: &Names) -> TokenStream {
    let Names {
        policy,
        policy_value,
        budget,
        own_budget,
        ..
    } = n;
    let policy_init = match args.policy.value() {
        Some(expr) => quote! {
            let #policy_value = #expr;
            let #policy: &#rt::Policy = #rt::policy_ref(&#policy_value);
        },
        None => {
            let (calls, constant) = builder_calls(args, rt);
            if constant {
                // Literals only: built at compile time, not copied into
                // every call (nor into the future of every async one).
                quote! {
                    static __BACKSTOP_POLICY: #rt::Policy = #rt::Policy::new() #(#calls)*;
                    let #policy: &#rt::Policy = &__BACKSTOP_POLICY;
                }
            } else {
                quote! {
                    let #policy_value: #rt::Policy = #rt::Policy::new() #(#calls)*;
                    let #policy: &#rt::Policy = &#policy_value;
                }
            }
        }
    };
    let key = &n.key;
    let key_init = match args.key.value() {
        Some(expr) => {
            let span = expr.span();
            // (Spanned on the key: a key that cannot be hashed is an
            // error there.)
            let value = format_ident!(
                "__backstop_key_value",
                span = Span::mixed_site().located_at(span)
            );
            let hash = format_ident!("__backstop_key_hash", span = Span::mixed_site());
            let hashed = quote_spanned!(span=> #rt::call_key(#value));
            // Named for `tracing` and `metrics` by its `Debug` text where
            // it has one (autoref specialization on the concrete type),
            // else by its hash: once per key, in the same statement, so
            // that nothing of the key is kept in the call.
            quote! {{
                let #value = &(#expr);
                let #hash = #hashed;
                {
                    #[allow(unused_imports)]
                    use #rt::{NameByDebug as _, NameByHash as _, StableByHash as _, StableNone as _};
                    (&#rt::KeyOf(#value)).name_key(#hash, || (&#rt::StableOf(#value)).stable());
                }
                #hash
            }}
        }
        None => quote!(::core::option::Option::None),
    };
    let (own, budget_init) = match args.budget.value() {
        Some(OrNone::None) => (quote!(), quote!(::core::option::Option::None)),
        Some(OrNone::Some(path)) => {
            let (item, read, _) = shared_static(
                path,
                rt,
                "BUDGET",
                "SharedBudget",
                "budget",
                key,
                args.key.value().is_some(),
            );
            (item, quote!(::core::option::Option::Some(#read)))
        }
        None => {
            let own = quote! {
                static #own_budget: #rt::TokenBudget = #rt::TokenBudget::standard();
            };
            // Through `own`: a test under `testing::isolate()` gets a
            // fresh one instead. With a key, the key's own.
            let own_ref = quote!(#rt::own_budget(&#own_budget, #key));
            let init = if args.policy.value().is_some() {
                quote!(#rt::policy_budget(#policy, || #own_ref))
            } else {
                quote!(::core::option::Option::Some(#own_ref))
            };
            (own, init)
        }
    };
    quote! {
        #own
        #policy_init
        let #key: ::core::option::Option<u64> = #key_init;
        let #budget: ::core::option::Option<#rt::BudgetRef<'static>> = #budget_init;
    }
}

/// For `budget = PATH` and `breaker = PATH`: a `static` holding the one
/// borrow of `PATH` (as `&dyn SharedBudget` or `&dyn SharedBreaker`), and
/// the expression reading the shared state through it.
///
/// Shared state must be a `static`: a `const` would be a fresh temporary at
/// every call (a budget granting every retry, a breaker that never opens).
/// Borrowed for a `static`, a `const` is a compile error (E0492, whose help
/// says to use a `static`); the traits accept any static of the right type
/// or dereferencing to it (a `LazyLock`), and name the type expected
/// otherwise. Spanned on the path's last segment, the item the user named.
fn shared_static(
    path: &syn::Path,
    rt: &TokenStream,
    what: &str,
    shared: &str,
    read: &str,
    key: &Ident,
    keyed: bool,
) -> (TokenStream, TokenStream, Span) {
    let last = path
        .segments
        .last()
        .map_or_else(|| path.span(), |s| s.ident.span());
    let borrow = respan(quote!(&#path), last);
    let name = format_ident!("__BACKSTOP_{}", what);
    let shared = format_ident!("{}", shared);
    let read = format_ident!("{}", read);
    // Without `key = ..`, a `Keyed` table is refused: every call would
    // draw on its one limiter for calls without a key.
    let marker = if keyed { quote!(ByKey) } else { quote!(NoKey) };
    let ty = respan(quote!(&dyn #rt::#shared<#rt::#marker>), last);
    let item = quote! {
        static #name: #ty = #borrow;
    };
    (item, quote!(#rt::#shared::#read(#name, #key)), last)
}

/// `<Ret as Outcome>::from_err`, on the return type: an outcome the loop
/// makes itself from an error (a cut-off, a rejection), the one obligation
/// on the return type where an `Err(..)` written out would be a second,
/// E0308, for a type that is no `Result`.
fn from_err(rt: &TokenStream, ret: &Type, error: TokenStream) -> TokenStream {
    outcome_call(rt, ret, "from_err", error)
}

/// `<Ret as Outcome>::from_elapsed(into, elapsed)`: [`from_err`] of the
/// error `into` makes of `elapsed` (a function `elapsed_into` gave).
fn from_elapsed(rt: &TokenStream, ret: &Type, into: &Ident, elapsed: &TokenStream) -> TokenStream {
    outcome_call(rt, ret, "from_elapsed", quote!(#into, #elapsed))
}

/// `<Ret as Outcome>::method(args)`, all of it on the return type.
fn outcome_call(rt: &TokenStream, ret: &Type, method: &str, args: TokenStream) -> TokenStream {
    let span = ret.span();
    let method = Ident::new(method, span);
    let path = respan(quote!(<#ret as #rt::Outcome>::#method), span);
    // (The call on the return type too: rustc reports an unmet bound of
    // the function called at the whole call.)
    let mut args = proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, args);
    args.set_span(span);
    quote!(#path #args)
}

/// `<E as HoldsRejection<R>>::hold(args)`: the function's error made of
/// a rejection `R` (the runtime's type of that name), on `span` (the
/// option's token): a missing `From<R>` is one error there, naming `E`.
/// The error type of a return type not named `Result` (no `Result`, or
/// an alias of another name) stays on the return type, so that a return
/// type that is no `Result` is not reported at the option as well.
fn hold(
    rt: &TokenStream,
    ret: &Type,
    rejection: &TokenStream,
    span: Span,
    args: TokenStream,
) -> TokenStream {
    let err_span = if names_result(ret) { span } else { ret.span() };
    let error = error_type_tokens(ret, rt, err_span);
    let (lt, as_, trait_, method) = (
        respan(quote!(<), span),
        respan(quote!(as), span),
        respan(quote!(#rt::HoldsRejection<#rt::#rejection>), span),
        respan(quote!(>::hold), span),
    );
    let mut args = proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, args);
    args.set_span(span);
    quote!(#lt #error #as_ #trait_ #method #args)
}

/// `ElapsedInto::<E>::new().elapsed_into()`: how `error` is made from an
/// `Elapsed`, if it can be (`ViaFrom` for `E: From<Elapsed>`, else
/// `ViaNothing`). The type's path is on `span` (the return type's), so
/// that an error type rustc cannot find is one report there, not a second
/// on the attribute. An error type written `impl Trait` (erased to `_` in
/// `ret`) is not known where this is asked, before the first attempt: it
/// is taken to hold none (as the opaque type does, to its callers).
fn elapsed_into(rt: &TokenStream, ret: &Type, error: &TokenStream, span: Span) -> TokenStream {
    if inferred_error(ret) {
        return quote!(::core::option::Option::None::<fn(#rt::Elapsed) -> #error>);
    }
    let make = respan(quote!(#rt::ElapsedInto::<#error>::new()), span);
    quote! {{
        #[allow(unused_imports)]
        use #rt::{ViaFrom as _, ViaNothing as _};
        (&#make).elapsed_into()
    }}
}

/// Whether the error type can hold an `Elapsed`, as `elapsed_into` (its
/// tokens) says: `false` for an `impl Trait` error, whose `None` would
/// have nothing here to infer its type from.
fn holds_elapsed(ret: &Type, elapsed_into: &TokenStream) -> TokenStream {
    if inferred_error(ret) {
        quote!(false)
    } else {
        quote!(#elapsed_into.is_some())
    }
}

/// Whether `ret`'s error type is written with an `impl Trait` (erased to
/// `_`).
fn inferred_error(ret: &Type) -> bool {
    error_type(ret).is_some_and(has_inferred)
}

/// `<Ret as Outcome>::as_result(&outcome)`: the outcome as a `Result` of
/// references, all of it on the return type's span, so that the
/// obligations this expression raises for a non-`Result` type, wherever
/// it is used, are one identical, de-duplicated report (the user's type
/// tokens keep their hygiene: they are the user's, respanned to the
/// user's own token).
fn outcome_view(rt: &TokenStream, n: &Names, ret: &Type, ret_span: Span) -> TokenStream {
    let outcome = Ident::new(
        &n.outcome.to_string(),
        Span::mixed_site().located_at(ret_span),
    );
    // `Self` named as the user wrote it: the one obligation is theirs.
    let outcome_trait = respan(quote!(#rt::Outcome), ret_span);
    let (lt, as_, gt_method) = (
        respan(quote!(<), ret_span),
        respan(quote!(as), ret_span),
        respan(quote!(>::as_result), ret_span),
    );
    let ret = respan(ret.to_token_stream(), ret_span);
    let call = quote!(#lt #ret #as_ #outcome_trait #gt_method);
    let and = respan(quote!(&), ret_span);
    let mut args =
        proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, quote!(#and #outcome));
    args.set_span(ret_span);
    quote!(#call #args)
}

/// The verdict on an outcome: `when_ok` (or never) for `Ok`, `when` (or
/// `Classify`) for `Err`. Each call is located on the user's token it is
/// about (the return type, `when`, `when_ok`), so that a type error lands
/// there, once, with the runtime's own diagnostic.
fn classify(args: &Args, rt: &TokenStream, n: &Names, ret: &Type, ret_span: Span) -> TokenStream {
    let (value, error) = (
        Ident::new("__backstop_value", Span::mixed_site()),
        Ident::new("__backstop_error", Span::mixed_site()),
    );
    let view = outcome_view(rt, n, ret, ret_span);
    let ok = match args.when_ok.value() {
        Some(when_ok) if by_path(when_ok) => {
            located_call(quote!(#rt::ok_verdict_by), &value, when_ok, quote!(&))
        }
        Some(when_ok) => located_call(quote!(#rt::ok_verdict), &value, when_ok, quote!()),
        None => quote!(#rt::Attempted::Succeeded),
    };
    let err = match args.when.value() {
        Some(when) if by_path(when) => {
            located_call(quote!(#rt::err_verdict_by), &error, when, quote!(&))
        }
        Some(when) => located_call(quote!(#rt::err_verdict), &error, when, quote!()),
        None => {
            // `<E as Classify>` with the user's own `E` when the return type
            // is written `Result<T, E>` (the one obligation is then on their
            // token); else `<<Ret as Outcome>::Err as Classify>` on the
            // whole return type.
            let err_span = error_type(ret).map_or(ret_span, Spanned::span);
            let error_ty = error_type_tokens(ret, rt, err_span);
            let (lt, as_, trait_, gt_method) = (
                respan(quote!(<), err_span),
                respan(quote!(as), err_span),
                respan(quote!(#rt::Classify), err_span),
                respan(quote!(>::classify), err_span),
            );
            let call = quote!(#lt #error_ty #as_ #trait_ #gt_method);
            let error = Ident::new(&error.to_string(), Span::mixed_site().located_at(err_span));
            let mut args =
                proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, quote!(#error));
            args.set_span(err_span);
            quote!(#rt::Attempted::Failed(#call #args))
        }
    };
    let (ok_pat, err_pat) = (
        respan(quote!(#rt::Result::Ok), ret_span),
        respan(quote!(#rt::Result::Err), ret_span),
    );
    quote! {
        match #view {
            #ok_pat(#value) => #ok,
            #err_pat(#error) => #err,
        }
    }
}

/// Whether the return type is named `Result` (`Result<T, E>`, or an alias
/// such as `io::Result<T>`): its error type is then the user's to mend.
fn names_result(ret: &Type) -> bool {
    result_segment(ret).is_some()
}

/// The last segment of a return type named `Result`.
fn result_segment(ret: &Type) -> Option<&syn::PathSegment> {
    let Type::Path(path) = ret else { return None };
    path.path
        .segments
        .last()
        .filter(|last| last.ident == "Result")
}

/// `E` in a return type written `Result<T, E>` (the last segment named
/// `Result`, with two type arguments): an alias may order or mean its
/// parameters otherwise.
fn error_type(ret: &Type) -> Option<&Type> {
    let syn::PathArguments::AngleBracketed(args) = &result_segment(ret)?.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [
            syn::GenericArgument::Type(_),
            syn::GenericArgument::Type(error),
        ] => Some(error),
        _ => None,
    }
}

/// The error type as code can name it, spanned on `span`: the user's own
/// `E` where the return type is written `Result<T, E>`, else
/// `<Ret as Outcome>::Err`.
fn error_type_tokens(ret: &Type, rt: &TokenStream, span: Span) -> TokenStream {
    match error_type(ret) {
        Some(error) => respan(error.to_token_stream(), span),
        None => {
            // An `impl Trait` (erased to `_`) in an alias's success type
            // (`io::Result<impl Display>`) leaves nothing to infer it
            // from here: the error type does not depend on it, so any
            // type stands in for it.
            let ret = unit_for_inferred(ret);
            respan(quote!(<#ret as #rt::Outcome>::Err), span)
        }
    }
}

/// `ty` with every `_` (an erased `impl Trait`) made `()`.
fn unit_for_inferred(ty: &Type) -> Type {
    replace_types(ty, |ty| match ty {
        Type::Infer(infer) => {
            let span = infer.underscore_token.span;
            Some(syn::parse_quote_spanned!(span=> ()))
        }
        _ => None,
    })
}

/// Whether `ty` holds a type left to inference (`_`).
fn has_inferred(ty: &Type) -> bool {
    let found = std::cell::Cell::new(false);
    replace_types(ty, |ty| {
        if matches!(ty, Type::Infer(_)) {
            found.set(true);
        }
        None
    });
    found.get()
}

/// `ty` with each type `replace` gives a replacement for replaced (the
/// outermost first; what replaces it is not looked into).
fn replace_types(ty: &Type, replace: impl Fn(&Type) -> Option<Type>) -> Type {
    struct Replace<F>(F);
    impl<F: Fn(&Type) -> Option<Type>> VisitMut for Replace<F> {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            match (self.0)(ty) {
                Some(replaced) => *ty = replaced,
                None => syn::visit_mut::visit_type_mut(self, ty),
            }
        }
    }
    let mut ty = ty.clone();
    Replace(replace).visit_type_mut(&mut ty);
    ty
}

/// Whether a classifier is named by a path (a function, or an argument
/// or local holding one): borrowed for each attempt then, so that one
/// passed as an argument is not moved by the first. A closure written in
/// place is made anew for each attempt, and passed by value: its
/// parameters' types are inferred from the call it is passed to, which a
/// borrow would hide.
fn by_path(callable: &syn::Expr) -> bool {
    matches!(callable, syn::Expr::Path(_))
}

/// `function(arg, prefix callable)`, with the generated tokens located on
/// the user's `callable`: a closure of the wrong shape is reported there
/// (`prefix` `&`: a hook, or a classifier named by a path, is borrowed for
/// each call, so one passed as an argument is not moved).
fn located_call(
    function: TokenStream,
    arg: &Ident,
    callable: &syn::Expr,
    prefix: TokenStream,
) -> TokenStream {
    let span = callable.span();
    let function = respan(function, span);
    let arg = Ident::new(&arg.to_string(), Span::mixed_site().located_at(span));
    let prefix = respan(prefix, span);
    let mut args = quote!(#arg, #prefix #callable);
    let mut group = proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, args);
    group.set_span(span);
    args = group.into_token_stream();
    quote!(#function #args)
}

/// Gives every token of `tokens` the span `span` (for paths only: a local's
/// span carries its hygiene).
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = group.into();
            } else if matches!(&tt, proc_macro2::TokenTree::Ident(i) if i == CRATE_ALIAS || i == "dyn")
            {
                // The macro's own (see `CRATE_ALIAS`); `dyn`, a keyword in
                // the macro's edition (in a crate of edition 2015, on the
                // user's span, `dyn ::path` would be a path `dyn::path`).
                tt.set_span(Span::mixed_site().located_at(span));
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// `.attempts(4).base(..)…` for each option given; the rest keep
/// `Policy::new()`'s defaults.
fn builder_calls(args: &Args, rt: &TokenStream) -> (Vec<TokenStream>, bool) {
    let mut calls = Vec::new();
    // Every value a literal: the policy is a constant.
    let mut constant = true;
    if let Some(n) = args.attempts.value() {
        let n = match n {
            Num::Lit(n) => Literal::u32_unsuffixed(*n).into_token_stream(),
            Num::Expr(e) => {
                constant = false;
                e.to_token_stream()
            }
        };
        calls.push(quote!(.attempts(#n)));
    }
    if let Some(deadline) = args.deadline.value() {
        let d = match deadline {
            OrNone::None => quote!(::core::option::Option::None),
            OrNone::Some(d @ Dur::Lit(_)) => {
                let d = duration(rt, d);
                quote!(::core::option::Option::Some(#d))
            }
            OrNone::Some(Dur::Expr(e)) => {
                // A `Duration` or an `Option<Duration>` (`None`: no deadline).
                constant = false;
                let span = e.span();
                let f = respan(quote!(#rt::deadline), span);
                quote_spanned!(span=> #f(#e))
            }
        };
        calls.push(quote!(.deadline(#d)));
    }
    if let Some(backoff) = args.backoff.value() {
        let b = match backoff {
            Backoff::Exponential => quote!(Exponential),
            Backoff::Linear => quote!(Linear),
            Backoff::Fixed => quote!(Fixed),
        };
        calls.push(quote!(.backoff(#rt::Backoff::#b)));
    }
    for (name, opt) in [
        ("base", &args.base),
        ("cap", &args.cap),
        ("retry_after_max", &args.retry_after_max),
    ] {
        if let Some(d) = opt.value() {
            let method = format_ident!("{name}");
            constant &= d.as_lit().is_some();
            let d = duration(rt, d);
            calls.push(quote!(.#method(#d)));
        }
    }
    if let Some(f) = args.factor.value() {
        let f = match f {
            Num::Lit(f) => Literal::f64_unsuffixed(*f).into_token_stream(),
            Num::Expr(e) => {
                constant = false;
                e.to_token_stream()
            }
        };
        calls.push(quote!(.factor(#f)));
    }
    if let Some(jitter) = args.jitter.value() {
        let j = match jitter {
            Jitter::Full => quote!(Full),
            Jitter::Equal => quote!(Equal),
            Jitter::Decorrelated => quote!(Decorrelated),
            Jitter::None => quote!(None),
        };
        calls.push(quote!(.jitter(#rt::Jitter::#j)));
    }
    if let Some(idempotent) = args.idempotent.value() {
        calls.push(quote!(.idempotent(#idempotent)));
    }
    (calls, constant)
}

/// A validated literal becomes `Duration::new(secs, nanos)` (on the
/// literal, through the runtime: `::core` on the user's token would be a
/// path in the crate's root in a crate of edition 2015); an expression is
/// passed through for the compiler to type-check.
fn duration(rt: &TokenStream, d: &Dur) -> TokenStream {
    match d {
        Dur::Lit(DurLit { nanos, span, .. }) => {
            let secs = Literal::u64_suffixed((nanos / 1_000_000_000) as u64);
            let sub = Literal::u32_suffixed((nanos % 1_000_000_000) as u32);
            quote_spanned!(*span=> #rt::Duration::new(#secs, #sub))
        }
        Dur::Expr(e) => e.to_token_stream(),
    }
}

/// `impl Trait` cannot be written in a `let` type: it becomes `_`, and the
/// compiler infers the concrete type from the body.
fn erase_impl_trait(ty: &Type) -> Type {
    replace_types(ty, |ty| match ty {
        Type::ImplTrait(it) => {
            let span = it.impl_token.span;
            Some(syn::parse_quote_spanned!(span=> _))
        }
        _ => None,
    })
}

/// The function as written, with the errors inside its body, so that the
/// rest of the crate still type-checks and IDEs keep working. A trait method
/// without a body gets one that holds the errors.
pub(crate) fn with_errors(func: &Func, errors: &syn::Error) -> TokenStream {
    let errors = compile_errors(errors);
    let stmts = func.block.as_ref().map_or_else(
        || quote!(loop {}),
        |block| {
            let stmts = &block.stmts;
            quote!(#(#stmts)*)
        },
    );
    with_body(
        func,
        &func.sig,
        func.block.as_ref().map(|b| b.brace_token),
        quote!(#errors #stmts),
    )
}

/// For an item that is not a function at all: the item, unchanged, and the
/// error next to it.
pub(crate) fn not_a_function(item: &TokenStream, errors: &syn::Error) -> TokenStream {
    let errors = compile_errors(errors);
    quote! {
        #item
        #errors
    }
}

/// `errors` as `compile_error!{..}`s, each on its tokens: syn's, with
/// the `::core::` before each left out (on the user's tokens, in a crate
/// of edition 2015, it would be a path in the crate's root: "cannot find
/// `core`" in place of the error). `compile_error!` is in every prelude.
fn compile_errors(errors: &syn::Error) -> TokenStream {
    errors
        .to_compile_error()
        .into_iter()
        .filter(|tt| match tt {
            proc_macro2::TokenTree::Punct(p) => p.as_char() != ':',
            proc_macro2::TokenTree::Ident(i) => i != "core",
            _ => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::format_names;

    #[test]
    fn a_format_strings_inline_names_are_found() {
        let mut names = Vec::new();
        format_names(r#""{a} {{b}} {c:?} {0} {:x} {d.e} {{{f}}}""#, &mut names);
        format_names(r##"r#"{g:>8}"#"##, &mut names);
        format_names("'{'", &mut names);
        assert_eq!(names, ["a", "c", "f", "g"]);
    }
}
