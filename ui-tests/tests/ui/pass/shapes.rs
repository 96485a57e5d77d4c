//! Every shape `#[retry]` supports.
#![deny(warnings, clippy::pedantic)]

use std::fmt::{Debug, Display};
use std::io::{Error, ErrorKind};

use backstop::retry;

/// Doc comments and other attributes are kept.
#[retry]
#[must_use = "the result says whether the fetch worked"]
pub fn free_fn(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[retry]
pub(crate) fn io_result_alias() -> std::io::Result<()> {
    Ok(())
}

#[retry]
fn early_return_and_question_mark(input: &str) -> Result<u32, Error> {
    if input.is_empty() {
        return Err(ErrorKind::InvalidInput.into());
    }
    let n: u32 = input
        .parse()
        .map_err(|_| Error::from(ErrorKind::InvalidData))?;
    Ok(n)
}

#[retry]
fn generic<'a, T: Display + ?Sized, U>(name: &'a T, extra: U) -> Result<&'a T, Error>
where
    U: Debug + Clone,
{
    let _ = format!("{name}{:?}", extra.clone());
    Ok(name)
}

#[retry]
fn impl_trait_argument(items: impl IntoIterator<Item = u8> + Clone) -> Result<usize, Error> {
    Ok(items.clone().into_iter().count())
}

#[retry]
fn impl_trait_return() -> Result<impl Display, Error> {
    Ok(5)
}

struct Client {
    calls: u32,
}

impl Client {
    #[retry]
    fn by_ref(&self) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[retry]
    fn by_mut(&mut self) -> Result<u32, Error> {
        self.calls += 1;
        Ok(self.calls)
    }

    #[retry]
    fn by_value(self) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[retry]
    fn returns_self() -> Result<Self, Error> {
        Ok(Self { calls: 0 })
    }

    #[retry]
    async fn async_by_ref(&self) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[retry]
    async fn async_by_mut(&mut self, by: u32) -> Result<u32, Error> {
        self.calls += by;
        Ok(self.calls)
    }
}

trait Store {
    fn get(&self, key: &str) -> Result<String, Error>;

    #[retry]
    fn get_default(&self) -> Result<String, Error> {
        self.get("default")
    }

    async fn load(&self, key: &str) -> Result<String, Error>;

    #[retry]
    async fn load_default(&self) -> Result<String, Error> {
        self.load("default").await
    }
}

impl Store for Client {
    #[retry]
    fn get(&self, key: &str) -> Result<String, Error> {
        Ok(format!("{key}{}", self.calls))
    }

    #[retry]
    async fn load(&self, key: &str) -> Result<String, Error> {
        Ok(key.to_owned())
    }
}

#[retry]
async fn async_free_fn<T: Display>(x: T) -> Result<String, Error> {
    Ok(x.to_string())
}

#[retry]
async fn async_question_mark(input: &str) -> Result<u32, Error> {
    let n: u32 = input
        .parse()
        .map_err(|_| Error::from(ErrorKind::InvalidData))?;
    if n == 0 {
        return Err(ErrorKind::InvalidInput.into());
    }
    Ok(n)
}

#[retry]
unsafe fn unsafe_fn(p: *const u8) -> Result<u8, Error> {
    // SAFETY: callers pass a valid pointer.
    Ok(unsafe { *p })
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let _ = free_fn(1);
    let _ = io_result_alias();
    let _ = early_return_and_question_mark("1");
    let _ = generic("a", 1u8);
    let _ = impl_trait_argument(vec![1, 2]);
    let _ = impl_trait_return().map(|d| d.to_string());
    let mut client = Client::returns_self().unwrap();
    let _ = client.by_ref();
    let _ = client.by_mut();
    let _ = client.get_default();
    let fut = client.async_by_ref();
    assert_send(&fut);
    drop(fut);
    let _ = client.async_by_mut(2);
    let _ = client.load_default();
    let _ = async_free_fn(3);
    let _ = async_question_mark("3");
    let byte = 7u8;
    // SAFETY: a valid pointer.
    let _ = unsafe { unsafe_fn(&byte) };
    let _ = client.by_value();
}

#[retry]
async fn one_line_async() -> Result<(), Error> { Ok(()) }

#[retry]
fn one_line_sync() -> Result<(), Error> { Ok(()) }

#[allow(dead_code)]
fn use_one_liners() {
    let _ = one_line_async();
    let _ = one_line_sync();
}

#[retry]
fn inner_attribute() -> Result<(), Error> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(())
}

#[retry]
async fn inner_attribute_async() -> Result<(), Error> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(())
}

#[allow(dead_code)]
fn use_inner_attributes() {
    let _ = inner_attribute();
    let _ = inner_attribute_async();
}

struct Wrapper<T>(T);

impl<T: Clone + Display> Wrapper<T> {
    #[retry]
    fn boxed(self: Box<Self>) -> Result<String, Error> {
        Ok(self.0.to_string())
    }

    #[retry]
    fn generic_impl<'a>(&'a self, other: &'a T) -> Result<(T, &'a T), Error> {
        Ok((self.0.clone(), other))
    }
}

#[retry]
fn pattern_arguments((a, b): (u32, u32), Wrapper(c): Wrapper<u32>) -> Result<u32, Error> {
    Ok(a + b + c)
}

#[retry]
fn mutable_argument(mut tries: u32) -> Result<u32, Error> {
    tries += 1;
    if tries < 3 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(tries)
}

#[retry]
fn const_generic<const N: usize>(items: [u8; N]) -> Result<usize, Error> {
    Ok(items.len() + N)
}

#[retry]
fn nested_impl_trait() -> Result<Vec<impl Display>, Error> {
    Ok(vec![1, 2])
}

#[retry]
fn items_and_labels_in_the_body(x: u32) -> Result<u32, Error> {
    fn helper(y: u32) -> u32 {
        y * 2
    }
    const LIMIT: u32 = 10;
    let r = 'outer: {
        if x > LIMIT {
            break 'outer LIMIT;
        }
        helper(x)
    };
    Ok(r)
}

#[allow(dead_code)]
fn use_more_shapes() {
    let _ = Box::new(Wrapper(1)).boxed();
    let _ = Wrapper(1).generic_impl(&2);
    let _ = pattern_arguments((1, 2), Wrapper(3));
    let _ = mutable_argument(0);
    let _ = const_generic([1, 2, 3]);
    let _ = nested_impl_trait().map(|v| v.len());
    let _ = items_and_labels_in_the_body(4);
}
