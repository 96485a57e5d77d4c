use backstop::retry;

#[retry]
struct Client;

fn main() {}
