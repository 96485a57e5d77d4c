use std::collections::HashMap;

use backstop::retry;

#[retry]
fn fetch() -> HashMap<String, u8> {
    HashMap::new()
}

fn main() {}
