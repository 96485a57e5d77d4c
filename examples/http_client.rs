//! Retrying HTTP calls: a real server on 127.0.0.1 that answers 503, then
//! 429 with `Retry-After: 1`, then 200, and a reqwest client function with
//! `#[retry]` that prints each attempt and the result.
//!
//! ```sh
//! cargo run --example http_client --features reqwest
//! ```

use std::time::{Duration, Instant};

use backstop::limit::CircuitBreaker;
use backstop::reqwest::{Error, response_verdict, within_attempt};
use backstop::{GiveUpEvent, RetryEvent, context, retry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A tiny HTTP/1.1 server: one scripted answer per connection.
async fn serve(listener: TcpListener, script: &'static [(u16, &'static str)]) {
    for (status, extra) in script {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let key = String::from_utf8_lossy(&request)
            .lines()
            .find_map(|l| {
                l.to_lowercase()
                    .strip_prefix("idempotency-key:")
                    .map(|k| k.trim().to_owned())
            })
            .unwrap_or_default();
        println!("  server: request with Idempotency-Key {key} -> {status}");
        let response =
            format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n{extra}\r\n");
        let _ = socket.write_all(response.as_bytes()).await;
        let _ = socket.shutdown().await;
    }
}

fn on_retry(event: &RetryEvent<'_, reqwest::Response, Error>) {
    let what = match event.outcome() {
        Ok(response) => format!("status {}", response.status()),
        Err(error) => format!("error {error}"),
    };
    println!(
        "  client: attempt {} got {what}: {:?}, retrying in {:?}",
        event.attempt(),
        event.verdict(),
        event.delay()
    );
}

fn on_give_up(event: &GiveUpEvent<'_, reqwest::Response, Error>) {
    println!(
        "  client: giving up after {} attempts: {}",
        event.attempts(),
        event.reason()
    );
}

/// Everything that calls the order service: open after 5 failures in a row.
static ORDERS: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

/// POSTs an order: retried on 503 and 429 (after the server's Retry-After),
/// but not on a 500, 502 or 504 (the order may have been placed: declare a
/// function `idempotent` to retry those), with one idempotency key for all
/// its attempts; each attempt ends at 2 s or at the 10 s deadline.
#[retry(attempts = 5, base = 200ms, deadline = 10s, attempt_timeout = 2s, breaker = ORDERS,
        when_ok = response_verdict, on_retry = on_retry, on_give_up = on_give_up)]
async fn place_order(client: &reqwest::Client, url: &str) -> Result<reqwest::Response, Error> {
    let attempt = context().map_or(0, |cx| cx.attempt());
    println!("  client: attempt {attempt}");
    within_attempt(client.post(url)).send().await
}

#[tokio::main]
async fn main() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/orders", listener.local_addr().expect("address"));
    println!("server on {url}: 503, then 429 with Retry-After: 1, then 200");
    tokio::spawn(serve(
        listener,
        &[(503, ""), (429, "retry-after: 1\r\n"), (200, "")],
    ));

    let started = Instant::now();
    let client = reqwest::Client::new();
    match place_order(&client, &url).await {
        Ok(response) => println!(
            "result: {} after {:?}",
            response.status(),
            started.elapsed()
        ),
        Err(error) => println!("result: error {error} after {:?}", started.elapsed()),
    }
}
