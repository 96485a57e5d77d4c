// `Retry::when` and `Retry::when_ok` take a classifier answering a
// `Verdict` or a `bool`: one answering a number is refused where it is
// given, in words.
use backstop::{Policy, Retry};

fn main() {
    let policy = Policy::new();
    let _ = Retry::new(&policy)
        .when(|_: &std::io::Error| 5)
        .call(|| Err::<(), std::io::Error>(std::io::ErrorKind::Other.into()));
    let _ = Retry::new(&policy)
        .when_ok(|_: &u16| "retry")
        .call(|| Ok::<u16, std::io::Error>(503));
}
