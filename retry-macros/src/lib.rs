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
mod valid;

use proc_macro::TokenStream;

/// Turns a function returning `Result<T, E>` into a retry loop that is safe
/// at fleet scale. See the `backstop` crate for the options and the
/// guarantees.
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
    let args = args::Args::parse(args.into(), &mut cx);
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
