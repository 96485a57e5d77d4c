//! Features `tokio-postgres` and `redis`: `#[retry]` over real PostgreSQL
//! and Redis servers on 127.0.0.1, started, killed and restarted by the
//! tests, with the clients people use (tokio-postgres, the blocking
//! `postgres` crate, sqlx, redis with its connection manager), errors boxed as
//! services box them. Without the server binaries each test is skipped;
//! `.ci/run` installs them and sets `BACKSTOP_REAL_SERVERS=1`.

mod pools;
mod postgres;
mod redis;
mod servers;
#[cfg(feature = "sqlx")]
mod sqlx;

use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one call under load came to.
#[derive(Debug)]
struct Outcome {
    /// The write's own key.
    id: i64,
    /// When it started, from the start of the load.
    started: Duration,
    took: Duration,
    ok: bool,
}

/// What a restart under load must leave: no call past its 2 s deadline
/// (with `attempt_timeout`, a call returns by it; a call stuck on a dead
/// connection, or an attempt not cut to the time left, would overrun by
/// an attempt timeout of 500 ms or more: 300 ms is left for a task that
/// two busy cores wake late), calls made while the server was down, and
/// every call made a second after it came back a success.
fn the_restart_held(outcomes: &[Outcome], down: Duration, back: Duration) {
    let late: Vec<_> = outcomes
        .iter()
        .filter(|o| o.took > Duration::from_millis(2_300))
        .collect();
    assert!(late.is_empty(), "past the deadline: {late:?}");
    assert!(
        outcomes
            .iter()
            .any(|o| o.started > down && o.started < back),
        "no call met the server down"
    );
    let after: Vec<_> = outcomes
        .iter()
        .filter(|o| o.started > back + Duration::from_secs(1))
        .collect();
    assert!(!after.is_empty());
    assert!(after.iter().all(|o| o.ok), "{after:?}");
}

/// Runs `tasks` tasks calling `call` with fresh ids, one call after
/// another, until `stop` returns true; what every call came to.
async fn load<F, Fut>(
    tasks: i64,
    origin: Instant,
    call: F,
    stop: impl Fn() -> bool + Send + Sync + 'static,
) -> Vec<Outcome>
where
    F: Fn(i64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let call = std::sync::Arc::new(call);
    let stop = std::sync::Arc::new(stop);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (call, stop) = (call.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut n = 0;
            while !stop() {
                let id = task * 1_000_000 + n;
                n += 1;
                let started = origin.elapsed();
                let ok = call(id).await;
                outcomes.push(Outcome {
                    id,
                    started,
                    took: origin.elapsed().saturating_sub(started),
                    ok,
                });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            outcomes
        }));
    }
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    all
}
