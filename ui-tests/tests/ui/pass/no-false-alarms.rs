//! Legitimate code that the checks for rewritten or future-returning
//! functions and for non-`static` budgets must not reject.
use std::pin::Pin;
use std::sync::LazyLock;
use std::time::Duration;

use backstop::{limit::WindowBudget, retry};

/// A futures contract, not a `std::future::Future`.
pub struct Future {
    pub symbol: String,
}

#[retry]
fn quote(symbol: &str) -> Result<Future, std::io::Error> {
    Ok(Future {
        symbol: symbol.to_owned(),
    })
}

// A future is the `Ok` value, made afresh by each attempt.
#[retry]
fn bind() -> Result<Pin<Box<dyn std::future::Future<Output = ()> + Send>>, std::io::Error> {
    Ok(Box::pin(async {}))
}

// A sync function that runs a runtime of its own.
#[retry]
fn blocking() -> Result<u8, std::io::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("Failed building the Runtime");
    rt.block_on(async { Ok(1) })
}

// What `#[test_log::test]` and other test macros leave on a sync test.
#[retry]
#[::core::prelude::v1::test]
fn sync_test() -> Result<(), std::io::Error> {
    Ok(())
}

// A budget built at first use, from configuration say.
static LAZY: LazyLock<WindowBudget> =
    LazyLock::new(|| WindowBudget::new(0.2, 1, Duration::from_secs(1)));

#[retry(budget = LAZY)]
fn lazy_budget() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = quote("ES=F");
    let _ = bind();
    let _ = blocking();
    let _ = lazy_budget();
    use_them();
}

// A budget declared inside the function it guards.
#[retry(budget = INNER)]
fn own_static() -> Result<(), std::io::Error> {
    static INNER: WindowBudget = WindowBudget::new(0.1, 1, Duration::from_secs(1));
    Ok(())
}

#[retry(budget = INNER_ASYNC)]
async fn own_static_async() -> Result<(), std::io::Error> {
    static INNER_ASYNC: WindowBudget = WindowBudget::new(0.1, 1, Duration::from_secs(1));
    Ok(())
}

fn use_them() {
    let _ = own_static();
    let _ = own_static_async();
}
