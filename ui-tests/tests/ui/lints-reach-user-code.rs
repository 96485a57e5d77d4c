#![deny(dead_code, unused_variables)]

use backstop::retry;

// The expansion silences nothing of the user's: an unused function and an
// unused variable inside the body are still reported, on their own spans.
#[retry]
fn never_called() -> Result<(), std::io::Error> {
    let unused = 1;
    Ok(())
}

fn main() {}
