//! `#[retry]` on every shape, under the strictest lints a user may set:
//! `cargo clippy --all-targets -- -D warnings` in CI checks this file, so
//! generated code must not trip a lint (nor silence one for the user's code),
//! among them `absolute_paths`, a restriction lint a user may set alone.
#![deny(warnings, clippy::all, clippy::pedantic, clippy::absolute_paths)]

use std::fmt::Display;
use std::io::{Error, ErrorKind};

use backstop::retry;
use backstop::testing::VirtualTime;

/// Fetches a user.
///
/// # Errors
///
/// When the dependency is down.
#[retry(attempts = 3, base = 10ms, cap = 1s, jitter = equal, deadline = 5s)]
pub fn free(id: u64) -> Result<u64, Error> {
    if id == 0 {
        return Err(ErrorKind::InvalidInput.into());
    }
    Ok(id)
}

/// Parses with `?` inside the body.
///
/// # Errors
///
/// On bad input.
#[retry(when = |e| e.kind() == ErrorKind::Interrupted)]
pub fn parse(input: &str) -> Result<u32, Error> {
    let n = input
        .trim()
        .parse::<u32>()
        .map_err(|_| Error::from(ErrorKind::InvalidData))?;
    Ok(n)
}

/// Generic, with an elided lifetime and `impl Trait` on both sides.
///
/// # Errors
///
/// Never.
#[retry(budget = none)]
pub fn generic<T>(name: &T, extra: impl Display) -> Result<impl Display + '_, Error>
where
    T: Display + ?Sized,
{
    let _ = extra.to_string();
    Ok(name)
}

/// Keyed by a string (named by its `Debug` text) and by a value that has
/// no `Debug` (named by its hash).
///
/// # Errors
///
/// Never.
#[retry(key = shard)]
pub fn keyed(shard: &str) -> Result<usize, Error> {
    Ok(shard.len())
}

/// A key without `Debug`.
#[derive(Hash)]
pub struct Opaque(pub u8);

/// Keyed by a value without `Debug`, in an `async fn`.
///
/// # Errors
///
/// Never.
#[retry(key = opaque, attempts = 2)]
pub async fn keyed_opaque(opaque: &Opaque) -> Result<u8, Error> {
    Ok(opaque.0)
}

/// A one-line body.
///
/// # Errors
///
/// Never.
#[retry]
pub fn one_line() -> Result<(), Error> {
    Ok(())
}

/// A one-line async body.
///
/// # Errors
///
/// Never.
#[retry]
pub async fn one_line_async() -> Result<(), Error> {
    Ok(())
}

/// A client.
pub struct Client {
    count: u32,
}

impl Client {
    /// Counts.
    ///
    /// # Errors
    ///
    /// Never.
    #[retry]
    pub fn count(&mut self) -> Result<u32, Error> {
        self.count += 1;
        Ok(self.count)
    }

    /// Reads.
    ///
    /// # Errors
    ///
    /// Never.
    #[retry]
    pub fn read(&self) -> Result<u32, Error> {
        Ok(self.count)
    }

    /// Reads, async.
    ///
    /// # Errors
    ///
    /// Never.
    #[retry(attempts = 2)]
    pub async fn read_async(&self) -> Result<u32, Error> {
        Ok(self.count)
    }
}

/// A store.
pub trait Store {
    /// Gets.
    ///
    /// # Errors
    ///
    /// Never.
    #[retry]
    fn get(&self) -> Result<u8, Error> {
        Ok(1)
    }
}

impl Store for Client {}

#[test]
fn every_shape_compiles_cleanly_and_runs() {
    let _vt = VirtualTime::start();
    assert_eq!(free(3).unwrap(), 3);
    assert_eq!(parse(" 7 ").unwrap(), 7);
    assert_eq!(generic("a", 1).unwrap().to_string(), "a");
    let mut client = Client { count: 0 };
    assert_eq!(client.count().unwrap(), 1);
    assert_eq!(client.read().unwrap(), 1);
    assert_eq!(client.get().unwrap(), 1);
    assert!(one_line().is_ok());
}

#[tokio::test]
async fn async_shapes() {
    let client = Client { count: 4 };
    assert_eq!(client.read_async().await.unwrap(), 4);
    assert!(one_line_async().await.is_ok());
}

/// `_`-prefixed arguments of an `async fn`: no `used_underscore_binding`.
///
/// # Errors
///
/// Never.
#[retry]
pub async fn underscored(_unused: u8, _also: String) -> Result<u8, Error> {
    Ok(1)
}
