//! Redis through redis-rs: a multiplexed connection, and the connection
//! manager that reconnects on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::{Classify, Verdict, retry};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::servers::Redis;
use super::{BoxError, load};

/// An append: not idempotent (a repeated `RPUSH` is a second entry).
#[retry(deadline = 2s, attempt_timeout = 500ms, base = 50ms, attempts = 10)]
async fn push(redis: &ConnectionManager, id: i64) -> Result<(), BoxError> {
    let mut redis = redis.clone();
    let _: i64 = redis::cmd("RPUSH")
        .arg("log")
        .arg(id)
        .query_async(&mut redis)
        .await?;
    Ok(())
}

/// One retry layer: the manager reconnects when asked, and does not
/// retry commands itself beyond one reconnection.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(100))
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_applies_no_write_twice_and_the_calls_recover() {
    let Some(mut server) = Redis::start("redis restart under load") else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let manager = ConnectionManager::new_with_config(client, manager_config())
        .await
        .unwrap();
    let origin = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let calls = {
        let (manager, done) = (manager.clone(), done.clone());
        tokio::spawn(load(
            8,
            origin,
            move |id| {
                let manager = manager.clone();
                async move { push(&manager, id).await.is_ok() }
            },
            move || done.load(Ordering::Relaxed),
        ))
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let down = origin.elapsed();
    server.crash();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.up();
    let back = origin.elapsed();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    done.store(true, Ordering::Relaxed);
    let outcomes = calls.await.unwrap();

    super::the_restart_held(&outcomes, down, back);

    let mut redis = manager.clone();
    let log: Vec<i64> = redis::cmd("LRANGE")
        .arg("log")
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<_> = log.iter().filter(|id| !seen.insert(**id)).collect();
    assert!(twice.is_empty(), "applied twice: {twice:?}");
    let lost: Vec<_> = outcomes
        .iter()
        .filter(|o| o.ok && !seen.contains(&o.id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but not there: {lost:?}");
    eprintln!(
        "{} calls, {} failed, {} entries",
        outcomes.len(),
        outcomes.iter().filter(|o| !o.ok).count(),
        log.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_errors_are_classified_by_the_clients_own_predicates() {
    let Some(mut server) = Redis::start("redis error classification") else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();

    // A wrong type: the command ran, and would fail again.
    let _: i64 = redis::cmd("RPUSH")
        .arg("k")
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let wrong = redis::cmd("INCR")
        .arg("k")
        .query_async::<i64>(&mut redis)
        .await
        .unwrap_err();
    assert_eq!(wrong.classify(), Verdict::Stop, "{wrong:?}");

    // A reply that does not convert to the type asked for (a name read as
    // a number): redis says `Parse`, and no retry changes it.
    let _: () = redis::cmd("SET")
        .arg("name")
        .arg("alice")
        .query_async(&mut redis)
        .await
        .unwrap();
    let unconverted = redis::cmd("GET")
        .arg("name")
        .query_async::<i64>(&mut redis)
        .await
        .unwrap_err();
    assert_eq!(unconverted.kind(), ErrorKind::Parse, "{unconverted:?}");
    assert_eq!(unconverted.classify(), Verdict::Stop, "{unconverted:?}");

    // BUSY: a script runs past the busy threshold; the server runs no
    // other command meanwhile.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lua-time-limit")
        .arg(100)
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut scripted = client.get_multiplexed_async_connection().await.unwrap();
    let script = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async::<()>(&mut scripted)
            .await
    });
    // Asked until the script runs (before it starts, a GET of the list is
    // answered `WRONGTYPE`; while it runs, `BUSY` once the limit has
    // passed).
    let mut other = client.get_multiplexed_async_connection().await.unwrap();
    let asked = std::time::Instant::now();
    let busy = loop {
        match redis::cmd("GET")
            .arg("k")
            .query_async::<Option<String>>(&mut other)
            .await
        {
            Err(busy) if busy.code() == Some("BUSY") => break busy,
            before => {
                assert!(
                    asked.elapsed() < Duration::from_secs(5),
                    "the script never ran: {before:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    assert_eq!(busy.code(), Some("BUSY"), "{busy:?}");
    assert_eq!(busy.classify(), Verdict::Retry);
    let _: () = redis::cmd("SCRIPT")
        .arg("KILL")
        .query_async(&mut other)
        .await
        .unwrap();
    assert!(script.await.unwrap().is_err());

    // The server goes away: a connection it had dropped may have had its
    // command run; a new one is refused, and nothing was sent.
    server.crash();
    let dropped = redis::cmd("GET")
        .arg("k")
        .query_async::<Option<String>>(&mut redis)
        .await
        .unwrap_err();
    assert_eq!(
        dropped.classify(),
        Verdict::RetryIfIdempotent,
        "{dropped:?}"
    );
    let refused = client.get_multiplexed_async_connection().await.unwrap_err();
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
    // Boxed, as services keep their errors, and walked by its chain.
    let wrapped = anyhow::Error::from(refused.clone()).context("loading the session");
    assert_eq!(wrapped.classify(), Verdict::Refused, "through anyhow");
    let boxed: BoxError = refused.into();
    assert_eq!(
        boxed.classify(),
        Verdict::Refused,
        "through a Box<dyn Error>"
    );
}

/// redis gives both as `Parse`: a reply that does not convert to the type
/// asked for is a wrong type (never retried); a reply that does not parse
/// leaves the connection out of step after the command was sent.
#[test]
fn a_reply_that_does_not_convert_is_not_retried_and_one_that_does_not_parse_is_ambiguous() {
    let unconverted =
        RedisError::from(redis::from_redis_value::<i64>(redis::Value::Nil).unwrap_err());
    assert_eq!(unconverted.kind(), ErrorKind::Parse, "{unconverted:?}");
    assert_eq!(unconverted.classify(), Verdict::Stop, "{unconverted:?}");
    let garbled = redis::parse_redis_value(b"@what\r\n").unwrap_err();
    assert_eq!(garbled.kind(), ErrorKind::Parse, "{garbled:?}");
    assert_eq!(
        garbled.classify(),
        Verdict::RetryIfIdempotent,
        "{garbled:?}"
    );
}

#[test]
fn a_cluster_in_motion_is_retried() {
    for kind in [
        ServerErrorKind::TryAgain,
        ServerErrorKind::Moved,
        ServerErrorKind::Ask,
        ServerErrorKind::ClusterDown,
        ServerErrorKind::MasterDown,
        ServerErrorKind::ReadOnly,
    ] {
        let error = RedisError::from((ErrorKind::Server(kind), "in motion"));
        assert_eq!(error.classify(), Verdict::Retry, "{kind:?}");
    }
    // Restarted, loading its data: refused before any work.
    let loading = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading"));
    assert_eq!(loading.classify(), Verdict::Refused);
    for kind in [
        ServerErrorKind::NoScript,
        ServerErrorKind::ExecAbort,
        ServerErrorKind::ResponseError,
    ] {
        let error = RedisError::from((ErrorKind::Server(kind), "no"));
        assert_eq!(error.classify(), Verdict::Stop, "{kind:?}");
    }
    let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
    assert_eq!(timed_out.classify(), Verdict::RetryIfIdempotent);
    let auth = RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS"));
    assert_eq!(auth.classify(), Verdict::Stop);
}

/// Redis's I/O errors by the transport rule: one that proves nothing was
/// sent is retried, one that may have come after the command was written
/// (or that says nothing of the connection) only for an idempotent call.
#[test]
fn an_io_error_is_retried_only_when_it_proves_nothing_was_sent() {
    use Verdict::{Retry, RetryIfIdempotent};
    use std::io::ErrorKind as K;
    for (kind, verdict) in [
        (K::NotConnected, Retry),
        (K::AddrNotAvailable, Retry),
        (K::HostUnreachable, Retry),
        (K::NetworkUnreachable, Retry),
        (K::NetworkDown, Retry),
        (K::ConnectionReset, RetryIfIdempotent),
        (K::ConnectionAborted, RetryIfIdempotent),
        (K::BrokenPipe, RetryIfIdempotent),
        (K::UnexpectedEof, RetryIfIdempotent),
        (K::WouldBlock, RetryIfIdempotent),
        (K::PermissionDenied, RetryIfIdempotent),
    ] {
        let error = RedisError::from(std::io::Error::from(kind));
        assert_eq!(error.classify(), verdict, "{kind:?}");
    }
}

/// A read, as a caller alone makes it, returning redis's own error.
#[retry(attempts = 60, base = 20ms, cap = 100ms, deadline = 5s, idempotent)]
async fn size(redis: &ConnectionManager, attempts: &AtomicU32) -> Result<i64, RedisError> {
    attempts.fetch_add(1, Ordering::Relaxed);
    let mut redis = redis.clone();
    redis::cmd("DBSIZE").query_async(&mut redis).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_alone_returning_redis_errors_holds_through_a_restart() {
    let Some(mut server) = Redis::start("redis restart, a caller alone") else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let manager = ConnectionManager::new_with_config(client, manager_config())
        .await
        .unwrap();
    server.crash();
    let started = Instant::now();
    let attempts = Arc::new(AtomicU32::new(0));
    let call = {
        let (manager, attempts) = (manager.clone(), attempts.clone());
        tokio::spawn(async move { size(&manager, &attempts).await })
    };
    // Past the budget's retries in a row: the call holds (its error type
    // holds an `Elapsed`), and goes through once the server is back.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.up();
    let outcome = call.await.unwrap();
    let attempts = attempts.load(Ordering::Relaxed);
    eprintln!(
        "{outcome:?} after {:?}, {attempts} attempts",
        started.elapsed()
    );
    assert!(outcome.is_ok(), "{outcome:?} after {:?}", started.elapsed());
    assert!(started.elapsed() >= Duration::from_millis(1_500));
}
