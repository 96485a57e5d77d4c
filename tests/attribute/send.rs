//! The future of an async `#[retry]` fn is `Send` whenever the plain fn's
//! would be: no outcome is held across the sleep between attempts. And a
//! retried outcome is dropped before the sleep, not after it.

// Users name the error type as they wrote it in the signature.
#![allow(clippy::borrowed_box)]

use std::error::Error;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::hedge::Hedge;
use backstop::{Policy, Retry, retry};
use tokio::time::Instant;

fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

// `Box<dyn Error>` is not `Send`: the plain fn's future is `Send` only
// because no error is alive across an `.await`.
#[retry(when = |_: &Box<dyn Error>| true, budget = none)]
async fn boxed_error(fail: bool) -> Result<u8, Box<dyn Error>> {
    tokio::task::yield_now().await;
    if fail {
        return Err("unavailable".into());
    }
    Ok(1)
}

/// A value that may not cross threads, made only at the end of the body.
struct Local(PhantomData<*const ()>);

#[retry(when_ok = |_: &Local| false, budget = none)]
async fn not_send_value() -> Result<Local, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(Local(PhantomData))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_with_non_send_outcomes_are_send() {
    let ok = tokio::spawn(assert_send(async { boxed_error(false).await.is_ok() }));
    assert!(ok.await.unwrap());
    let local = tokio::spawn(assert_send(async { not_send_value().await.is_ok() }));
    assert!(local.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_async_futures_with_non_send_errors_are_send() {
    static POLICY: Policy = Policy::new().base(Duration::from_millis(1));
    // Single attempts, then hedged rounds (their own loop).
    for hedge in [None, Some(Hedge::after(Duration::from_millis(1)))] {
        let mut retry = Retry::new(&POLICY).when(|_: &Box<dyn Error>| true);
        if let Some(hedge) = hedge {
            retry = retry.hedge(hedge);
        }
        let out = tokio::spawn(assert_send(async move {
            retry
                .call_async(|| async {
                    tokio::task::yield_now().await;
                    Err::<u8, Box<dyn Error>>("down".into())
                })
                .await
                .is_err()
        }));
        assert!(out.await.unwrap());
    }
}

/// A response holding a connection: records when it is dropped.
struct Response {
    status: u16,
    t0: Instant,
    dropped: Arc<Mutex<Vec<(u16, Duration)>>>,
}

impl Drop for Response {
    fn drop(&mut self) {
        let at = self.t0.elapsed();
        self.dropped.lock().unwrap().push((self.status, at));
    }
}

#[retry(when_ok = |r: &Response| r.status == 503, base = 5s, jitter = none, budget = none)]
async fn get(
    statuses: &Mutex<Vec<u16>>,
    t0: Instant,
    dropped: &Arc<Mutex<Vec<(u16, Duration)>>>,
) -> Result<Response, std::io::Error> {
    let status = statuses.lock().unwrap().remove(0);
    Ok(Response {
        status,
        t0,
        dropped: Arc::clone(dropped),
    })
}

#[tokio::test(start_paused = true)]
async fn a_retried_value_is_dropped_before_the_backoff() {
    let t0 = Instant::now();
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let statuses = Mutex::new(vec![503, 200]);
    let response = get(&statuses, t0, &dropped).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
    assert_eq!(
        *dropped.lock().unwrap(),
        [(503, Duration::ZERO)],
        "the 503 (and its connection) must be released at once, not after the 5 s sleep"
    );
}

#[tokio::test(start_paused = true)]
async fn call_async_drops_a_retried_value_before_the_backoff() {
    static POLICY: Policy = Policy::new()
        .base(Duration::from_secs(5))
        .jitter(backstop::Jitter::None);
    let t0 = Instant::now();
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let statuses = Mutex::new(vec![503, 200]);
    let response = Retry::new(&POLICY)
        .when_ok(|r: &Response| r.status == 503)
        .call_async(|| async {
            let status = statuses.lock().unwrap().remove(0);
            Ok::<_, std::io::Error>(Response {
                status,
                t0,
                dropped: Arc::clone(&dropped),
            })
        })
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(*dropped.lock().unwrap(), [(503, Duration::ZERO)]);
}

/// `Send`, not `Sync`: a future that holds `&Conn` across an `.await` is not
/// `Send`; one that holds the `Conn` or a `&mut Conn` is.
struct Conn {
    buf: std::cell::RefCell<Vec<u8>>,
}

impl Conn {
    fn new() -> Self {
        Self {
            buf: std::cell::RefCell::new(vec![1, 2, 3]),
        }
    }

    #[retry(budget = none)]
    async fn by_mut_ref(&mut self) -> Result<usize, std::io::Error> {
        tokio::task::yield_now().await;
        Ok(self.buf.borrow().len())
    }

    #[retry(budget = none)]
    async fn by_value(self) -> Result<usize, std::io::Error> {
        tokio::task::yield_now().await;
        Ok(self.buf.borrow().len())
    }

    // The typed form of `&mut self` is what is tested here.
    #[allow(clippy::needless_arbitrary_self_type)]
    #[retry(budget = none)]
    async fn by_typed_mut_ref(self: &mut Self, extra: usize) -> Result<usize, std::io::Error> {
        tokio::task::yield_now().await;
        Ok(self.buf.borrow().len() + extra)
    }
}

#[retry(budget = none)]
async fn owned_conn(conn: Conn) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(conn.buf.borrow().len())
}

#[retry(budget = none)]
async fn conn_by_mut_ref(conn: &mut Conn) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(conn.buf.borrow().len())
}

#[retry(budget = none)]
async fn generic_send<T: AsRef<[u8]> + Send>(body: T) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(body.as_ref().len())
}

#[retry(budget = none)]
async fn impl_send(
    body: impl AsRef<[u8]> + Send,
    (a, b): (u8, u8),
) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(body.as_ref().len() + usize::from(a + b))
}

/// Arguments named only inside a format string (`{count:?}`, `{name}`):
/// the body uses them all the same.
#[retry(budget = none)]
async fn named_in_format_strings(
    count: std::cell::Cell<u32>,
    name: std::cell::RefCell<String>,
) -> Result<String, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(format!("{{{count:?}}}|{name:>12?}"))
}

/// Bytes that may move between threads but not be shared.
struct Body(Vec<u8>, PhantomData<std::cell::Cell<()>>);

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

fn body() -> Body {
    Body(vec![1, 2, 3], PhantomData)
}

/// Checked for every `T: Send`, not for one type.
fn spawn_generic<T: AsRef<[u8]> + Send + 'static>(
    body: T,
) -> tokio::task::JoinHandle<Result<usize, std::io::Error>> {
    tokio::spawn(generic_send(body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_holding_send_but_not_sync_arguments_are_send() {
    let lens = [
        tokio::spawn(assert_send(async { Conn::new().by_mut_ref().await })),
        tokio::spawn(assert_send(Conn::new().by_value())),
        tokio::spawn(assert_send(async { Conn::new().by_typed_mut_ref(1).await })),
        tokio::spawn(assert_send(owned_conn(Conn::new()))),
        tokio::spawn(assert_send(async {
            conn_by_mut_ref(&mut Conn::new()).await
        })),
        spawn_generic(body()),
        tokio::spawn(assert_send(impl_send(body(), (1, 2)))),
    ];
    let mut got = Vec::new();
    for len in lens {
        got.push(len.await.unwrap().unwrap());
    }
    assert_eq!(got, [3, 3, 4, 3, 3, 3, 6]);
    let (count, name) = (
        std::cell::Cell::new(7),
        std::cell::RefCell::new("x".to_owned()),
    );
    let formatted = tokio::spawn(assert_send(named_in_format_strings(count, name)));
    assert_eq!(
        formatted.await.unwrap().unwrap(),
        r#"{Cell { value: 7 }}|RefCell { value: "x" }"#
    );
}

/// Shapes that compile as they would without `#[retry]`: a value borrowed
/// from a `&mut` argument is returned; an argument compiled out.
struct Token {
    value: String,
    refreshes: u32,
}

impl Token {
    #[retry(attempts = 3, budget = none)]
    async fn refresh(&mut self) -> Result<&str, std::io::Error> {
        self.refreshes += 1;
        tokio::task::yield_now().await;
        Ok(&self.value)
    }
}

#[retry(budget = none)]
async fn head(buf: &mut [u8]) -> Result<&[u8], std::io::Error> {
    tokio::task::yield_now().await;
    Ok(&buf[..1])
}

#[retry(budget = none)]
async fn compiled_out(
    #[cfg(any())] trace_id: String,
    key: String,
) -> Result<usize, std::io::Error> {
    Ok(key.len())
}

mod conn {
    pub(crate) static POLICY: backstop::Policy = backstop::Policy::new();
}

// `conn` in the policy's path is a module, not the argument.
#[retry(policy = &conn::POLICY, budget = none)]
async fn named_like_a_module(conn: Conn) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(conn.buf.borrow().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowing_returns_and_compiled_out_arguments_still_compile() {
    let mut token = Token {
        value: "t".into(),
        refreshes: 0,
    };
    assert_eq!(token.refresh().await.unwrap(), "t");
    assert_eq!(token.refreshes, 1);
    let mut buf = [1];
    assert_eq!(head(&mut buf).await.unwrap(), [1]);
    assert_eq!(compiled_out("abc".into()).await.unwrap(), 3);
    let len = tokio::spawn(assert_send(named_like_a_module(Conn::new())));
    assert_eq!(len.await.unwrap().unwrap(), 3);
}
