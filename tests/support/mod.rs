//! Helpers shared by the integration tests (`mod support;` in each).
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Whether this is the process of its own that the test `name` runs in
/// (the environment variable `var` set): the process-wide tables it fills
/// are then its own. Called first in the test: in the parent it runs the
/// test again in a child process, asserts that the child ran it and that
/// it passed, and answers `false` (the parent returns).
pub fn in_a_process_of_its_own(name: &str, var: &str) -> bool {
    if std::env::var_os(var).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env(var, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "the test ran: {stdout}");
    false
}

/// A failure a retry can fix: a refused connection (nothing was sent).
pub fn refused() -> std::io::Error {
    std::io::ErrorKind::ConnectionRefused.into()
}

/// A transient failure that is not a refusal (a host unreachable): for
/// tests of a token budget's own bookkeeping, where a refusal would hold
/// once the budget refuses its retry (`Verdict::Refused`), and probe.
#[allow(dead_code)]
pub fn unreachable() -> std::io::Error {
    std::io::ErrorKind::HostUnreachable.into()
}

/// Answers each request with the next status of `script` (and its extra
/// header lines; a status of 0 never answers, a status of 1 is a 200 whose
/// body is cut off after 10 of its 100 bytes), recording the
/// `idempotency-key` each request carried (every one, joined by ", ").
pub async fn serve(script: Vec<(u16, &'static str)>) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    tokio::spawn(async move {
        for (status, extra) in script {
            let (mut socket, _) = listener.accept().await.unwrap();
            let request = read_head(&mut socket).await;
            let text = String::from_utf8_lossy(&request).to_lowercase();
            let found: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("idempotency-key:"))
                .map(str::trim)
                .collect();
            let key = (!found.is_empty()).then(|| found.join(", "));
            seen.lock().unwrap().push(key);
            if status == 0 {
                // Never answer: the client times out with the request sent.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    drop(socket);
                });
                continue;
            }
            if status == 1 {
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\n";
                socket.write_all(head.as_bytes()).await.unwrap();
                socket.write_all(b"{\"id\": 12").await.unwrap();
                socket.shutdown().await.unwrap();
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

/// Reads a request's head (up to its blank line, or the connection's end).
pub async fn read_head(socket: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    request
}

/// An error of its own that shows what it wraps as thiserror's
/// `#[error(transparent)]` does: the wrapped error's message, and its
/// source as its own (the wrapped error itself is not in the chain).
#[derive(Debug)]
pub struct Transparent<E>(pub E);

impl<E: std::fmt::Display> std::fmt::Display for Transparent<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error> std::error::Error for Transparent<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
