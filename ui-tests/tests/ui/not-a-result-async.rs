use backstop::retry;

// An async function returning no `Result`: said at its return type.
#[retry]
async fn fetch() -> u32 {
    1
}

fn main() {}
