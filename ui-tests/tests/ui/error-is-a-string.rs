use backstop::retry;

// A string error says nothing a classifier can read: the message names
// the `when` that says which to retry.
#[retry]
fn lookup() -> Result<u32, &'static str> {
    Err("not found")
}

#[retry]
fn fetch() -> Result<u32, String> {
    Err("unavailable".to_owned())
}

fn main() {
    let _ = lookup();
    let _ = fetch();
}
