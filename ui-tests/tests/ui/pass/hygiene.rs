//! Generated names cannot clash with the user's, and warnings stay the user's.
#![deny(warnings)]

use std::io::Error;

use backstop::retry;

#[retry]
fn locals_named_like_internals(attempt: u32) -> Result<u32, Error> {
    let state = 1;
    let policy = 2;
    let budget = 3;
    let outcome = 4;
    let verdict = 5;
    let delay = 6;
    Ok(attempt + state + policy + budget + outcome + verdict + delay)
}

#[retry]
fn argument_named_like_internals(
    __backstop_state: u32,
    __backstop_policy: u32,
) -> Result<u32, Error> {
    Ok(__backstop_state + __backstop_policy)
}

fn main() {
    let _ = locals_named_like_internals(1);
    let _ = argument_named_like_internals(1, 2);
}
