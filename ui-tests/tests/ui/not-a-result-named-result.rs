use backstop::retry;

// A type of one's own named `Result` is not an outcome `#[retry]` knows:
// said once, at the return type, whatever hooks the function has.
#[allow(dead_code)]
enum Result<T, E> {
    Done(T),
    Failed(E),
}

#[retry(on_retry = |e| eprintln!("{}", e.attempt()))]
fn fetch() -> Result<u32, std::io::Error> {
    Result::Done(1)
}

fn main() {}
