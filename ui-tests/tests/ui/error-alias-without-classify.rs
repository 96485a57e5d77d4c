use backstop::retry;

#[derive(Debug)]
struct MyErr;

type Reply<T> = Result<T, MyErr>;

#[retry]
fn fetch() -> Reply<u8> {
    Ok(1)
}

fn main() {}
