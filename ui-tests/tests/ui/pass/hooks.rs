// Hooks on functions of every return shape: the event's outcome types are
// the function's, inferred for a closure, named for a function.
use std::cell::{Ref, RefCell};
use std::fmt::{Debug, Display};
use std::io::{Error, Result as IoResult};

use backstop::{GiveUpEvent, RetryEvent, retry};

fn log_any<T, E: Debug>(event: &RetryEvent<'_, T, E>) {
    let _ = (event.attempt(), event.delay());
}

fn log_give_up<T: Debug, E: Debug>(event: &GiveUpEvent<'_, T, E>) {
    let _ = event.reason();
}

#[retry(on_retry = |e| { let _ = e.attempt(); }, on_give_up = |e| { let _ = e.reason(); })]
fn borrowed(input: &str) -> Result<&str, Error> {
    Ok(input)
}

#[retry(on_retry = log_any, on_give_up = log_give_up)]
fn explicit<'a>(input: &'a str) -> Result<&'a str, Error> {
    Ok(input)
}

#[retry(on_retry = |e: &RetryEvent<'_, T, Error>| { let _ = e.attempt(); })]
fn generic<T: Clone>(value: &T) -> Result<T, Error> {
    Ok(value.clone())
}

#[retry(on_retry = log_any)]
fn alias() -> IoResult<u8> {
    Ok(1)
}

#[retry(on_retry = |e| { let _ = e.verdict(); })]
fn opaque() -> Result<impl Display, Error> {
    Ok(5)
}

struct Store(RefCell<u32>);

impl Store {
    #[retry(on_retry = |e| { let _ = e.attempt(); }, on_give_up = log_give_up)]
    fn read(&self) -> Result<Ref<'_, u32>, Error> {
        Ok(self.0.borrow())
    }

    #[retry(on_retry = |e: &RetryEvent<'_, Self, Error>| { let _ = e.attempt(); })]
    fn fresh() -> Result<Self, Error> {
        Ok(Store(RefCell::new(0)))
    }
}

impl Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

#[retry(on_retry = |e| { let _ = e.attempt(); }, on_give_up = |e| { let _ = e.attempts(); })]
async fn async_borrowed(input: &str) -> Result<&str, Error> {
    Ok(input)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(borrowed("a").unwrap(), "a");
    assert_eq!(explicit("b").unwrap(), "b");
    assert_eq!(generic(&3).unwrap(), 3);
    assert_eq!(alias().unwrap(), 1);
    assert_eq!(opaque().unwrap().to_string(), "5");
    let store = Store::fresh().unwrap();
    assert_eq!(*store.read().unwrap(), 0);
    assert_eq!(async_borrowed("c").await.unwrap(), "c");
}
