use std::io::Error;

use backstop::{Policy, Retry};

fn main() {
    let policy = Policy::new();
    let _ = backstop::call_async(&policy, || async { Ok::<u8, Error>(1) });
    let _ = Retry::new(&policy).call_async(|| async { Ok::<u8, Error>(1) });
    let _ = backstop::call_async_with(&policy, 7u8, |n| async move { (n, Ok::<u8, Error>(n)) });
    let _ = Retry::new(&policy).call_async_with(7u8, |n| async move { (n, Ok::<u8, Error>(n)) });
}
