#![deny(unused_variables)]

use backstop::retry;

// An argument the body never uses is reported, as without `#[retry]`.
#[retry]
async fn fetch(id: u64, unused: String) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
