//! A hyper client behind `RetryLayer`: the same policy, budget and
//! breaker as `#[retry]`, for a tower stack.
//!
//! `cargo run --example tower_client --features tower`
//!
//! It starts a server on 127.0.0.1 that is unavailable for its first two
//! requests, then sends a `POST` with a JSON body through the layer: the
//! body is kept and sent again, and the response tells how many attempts
//! it took.

use std::convert::Infallible;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backstop::http::Attempts;
use backstop::limit::CircuitBreaker;
use backstop::tower::RetryLayer;
use backstop::{Policy, Retry, RetryEvent};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::ServiceExt;

type BoxError = Box<dyn Error + Send + Sync>;

/// Shared by every client of the orders service (and any `#[retry(breaker
/// = ORDERS)]` function): five failures in a row, and calls fail fast for
/// 30 s.
static ORDERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

/// Told of each retry. A named `fn`, not a closure: below the layer the
/// error is boxed, and a closure over a boxed error's event puts a
/// lifetime in the service's type, which rustc loses inside an `async`
/// block (the call's future could not be proven `Send` there).
fn say_retry(e: &RetryEvent<'_, http::Response<Incoming>, BoxError>) {
    println!(
        "attempt {} failed ({:?}): retrying in {:?}",
        e.attempt(),
        e.verdict(),
        e.delay()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let addr = serve_unavailable_twice().await;

    let policy = Policy::new()
        .deadline(Some(Duration::from_secs(5)))
        .base(Duration::from_millis(50));
    let client = Client::builder(TokioExecutor::new()).build_http();
    let orders = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(
            Retry::new(&policy)
                .name("orders")
                .breaker(&ORDERS)
                .attempt_timeout(Duration::from_secs(2))
                .on_retry(say_retry),
        ))
        // Below the layer, hyper's errors are boxed: the breaker's
        // rejection and the attempt timeout must fit the same type. A
        // boxed transport error is retried when the connection was
        // refused, and otherwise only for an idempotent request (this one
        // carries an Idempotency-Key). (`box_error` rather than `Box::from`
        // or a closure keeps the service's type free of lifetimes, so that
        // the call's future is `Send` inside an `async` block too.)
        .map_err(backstop::tower::box_error)
        .service(client);

    let request = http::Request::post(format!("http://{addr}/orders"))
        .header("content-type", "application/json")
        .header("idempotency-key", "order-7f3a")
        .body(Full::new(Bytes::from_static(
            br#"{"sku": 7, "quantity": 1}"#,
        )))?;
    // Sent from a task of its own, as a server's handler would.
    let response = tokio::spawn(async move { orders.oneshot(request).await }).await??;
    let attempts = response.extensions().get::<Attempts>().copied();
    println!(
        "{} after {:?}",
        response.status(),
        attempts.unwrap_or(Attempts(1))
    );
    Ok(())
}

/// A server that answers 503 twice, then 201 with the body it got.
async fn serve_unavailable_twice() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU32::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            let handler =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let n = seen.fetch_add(1, Ordering::Relaxed);
                    async move {
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(http_body_util::Collected::to_bytes)
                            .unwrap_or_default();
                        let status = if n < 2 { 503 } else { 201 };
                        let response = http::Response::builder()
                            .status(status)
                            .body(Full::new(body))
                            .unwrap();
                        Ok::<_, Infallible>(response)
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler),
            );
        }
    });
    addr
}
