use backstop::retry;

#[retry]
const fn fetch() -> Result<(), ()> {
    Ok(())
}

fn main() {}
