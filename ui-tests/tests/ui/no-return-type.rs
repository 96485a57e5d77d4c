use backstop::retry;

#[retry]
fn fetch() {}

fn main() {}
