use backstop::retry;

// The body runs in a closure: `Location::caller()` in it would name the
// body, not the caller.
#[retry]
#[track_caller]
fn here() -> Result<u32, std::io::Error> {
    Ok(std::panic::Location::caller().line())
}

fn main() {}
