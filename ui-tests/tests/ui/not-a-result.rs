use backstop::retry;

#[retry]
fn fetch() -> Option<u32> {
    Some(1)
}

fn main() {}
