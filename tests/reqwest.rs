//! Feature `reqwest`, against a real HTTP server on 127.0.0.1.
//! Run with `cargo test -p backstop --features reqwest --test reqwest`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::reqwest::{response_verdict, within_attempt};
use backstop::{Classify, Verdict, retry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers each request with the next status of `script` (and its extra
/// header lines; a status of 0 never answers), recording the
/// `idempotency-key` each request carried.
async fn serve(script: Vec<(u16, &'static str)>) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    tokio::spawn(async move {
        for (status, extra) in script {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&request).to_lowercase();
            let key = text
                .lines()
                .find_map(|l| l.strip_prefix("idempotency-key:"))
                .map(|k| k.trim().to_owned());
            seen.lock().unwrap().push(key);
            if status == 0 {
                // Never answer: the client times out with the request sent.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    drop(socket);
                });
                continue;
            }
            let response = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n{extra}\r\n"
            );
            socket.write_all(response.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    (url, keys)
}

#[retry(attempts = 5, base = 1ms, deadline = 5s, idempotent, when_ok = response_verdict)]
async fn place_order(
    client: &reqwest::Client,
    url: &str,
) -> Result<reqwest::Response, reqwest::Error> {
    within_attempt(client.post(url)).send().await
}

#[tokio::test]
async fn a_503_then_a_429_with_retry_after_then_success() {
    let (url, keys) = serve(vec![(503, ""), (429, "retry-after: 0\r\n"), (200, "")]).await;
    let client = reqwest::Client::new();
    let response = place_order(&client, &url).await.unwrap();
    assert_eq!(response.status(), 200);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3, "three requests");
    let first = keys[0].clone().expect("an idempotency key was sent");
    assert_eq!(first.len(), 36);
    assert!(
        keys.iter().all(|k| k.as_deref() == Some(first.as_str())),
        "one key for the call"
    );
}

#[tokio::test]
async fn a_client_error_status_is_returned_at_once() {
    let (url, keys) = serve(vec![(404, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn reqwest_errors_are_classified() {
    // Nothing listens here: connecting fails, nothing was sent.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let refused = reqwest::get(&url).await.unwrap_err();
    assert_eq!(refused.classify(), Verdict::Retry, "{refused:?}");
    // A server that never answers: the request may have been served.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let timed_out = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_millis(50))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        timed_out.classify(),
        Verdict::RetryIfIdempotent,
        "{timed_out:?}"
    );
    // A request that cannot be built.
    let bad = reqwest::Client::new()
        .get("not a url")
        .send()
        .await
        .unwrap_err();
    assert_eq!(bad.classify(), Verdict::Stop);
    // Through a boxed error's source chain too.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(refused);
    assert_eq!(boxed.classify(), Verdict::Retry);
    drop(silent);
}

#[tokio::test]
async fn the_attempt_deadline_becomes_the_request_timeout() {
    #[retry(attempts = 1, deadline = 100ms)]
    async fn hangs(url: &str) -> Result<reqwest::Response, reqwest::Error> {
        within_attempt(reqwest::Client::new().get(url)).send().await
    }
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let error = hangs(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn two_503s_then_success_is_three_requests() {
    let (url, keys) = serve(vec![(503, ""), (503, ""), (200, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(keys.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_400_is_exactly_one_request() {
    let (url, keys) = serve(vec![(400, "")]).await;
    let response = place_order(&reqwest::Client::new(), &url).await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 5, retry_after_max = 10s, when_ok = response_verdict)]
async fn throttled(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    within_attempt(reqwest::Client::new().get(url)).send().await
}

#[tokio::test]
async fn a_retry_after_above_the_max_returns_the_429_at_once() {
    let (url, keys) = serve(vec![(429, "retry-after: 3600\r\n"), (200, "")]).await;
    let response = throttled(&url).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[retry(attempts = 3, base = 1ms, when_ok = response_verdict)]
async fn post_once(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    // A shorter timeout than the time left: set after `within_attempt`.
    within_attempt(reqwest::Client::new().post(url))
        .timeout(Duration::from_millis(50))
        .send()
        .await
}

#[retry(attempts = 3, base = 1ms, idempotent, when_ok = response_verdict)]
async fn post_idempotent(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    // A shorter timeout than the time left: set after `within_attempt`.
    within_attempt(reqwest::Client::new().post(url))
        .timeout(Duration::from_millis(50))
        .send()
        .await
}

#[tokio::test]
async fn a_post_that_times_out_is_retried_only_when_idempotent() {
    let (url, keys) = serve(vec![(0, "")]).await;
    let error = post_once(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(
        keys.lock().unwrap().len(),
        1,
        "the work may have been done: not repeated"
    );

    let (url, keys) = serve(vec![(0, ""), (0, ""), (200, "")]).await;
    let response = post_idempotent(&url).await.unwrap();
    assert_eq!(response.status(), 200);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert!(
        keys[0].is_some() && keys.iter().all(|k| *k == keys[0]),
        "{keys:?}"
    );
}

#[retry(attempts = 1, deadline = 5s)]
async fn with_own_key_and_timeout(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    let request = reqwest::Client::new()
        .post(url)
        .header("idempotency-key", "mine")
        .timeout(Duration::from_millis(50));
    within_attempt(request).send().await
}

#[tokio::test]
async fn within_attempt_keeps_a_key_and_a_shorter_timeout_already_set() {
    let (url, keys) = serve(vec![(0, "")]).await;
    let started = std::time::Instant::now();
    let error = with_own_key_and_timeout(&url).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the 50 ms timeout was kept"
    );
    assert_eq!(
        *keys.lock().unwrap(),
        [Some("mine".to_owned())],
        "one key, the caller's"
    );
}
