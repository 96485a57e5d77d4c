//! The pools of those clients, deadpool's and bb8's, over the real
//! servers: a checkout that timed out sent nothing, and is retried.

use std::time::Duration;

use backstop::{Classify, Verdict};

use super::BoxError;
use super::servers::{Postgres, Redis};

/// deadpool-postgres's configuration of `server`.
fn deadpool_config(server: &Postgres) -> deadpool_postgres::Config {
    let mut config = deadpool_postgres::Config::new();
    config.host = Some("127.0.0.1".to_owned());
    config.port = Some(server.port);
    config.user = Some("postgres".to_owned());
    config.dbname = Some("postgres".to_owned());
    config
}

/// A pool on tokio, without TLS, as `config` says.
fn deadpool_pool(config: &deadpool_postgres::Config) -> deadpool_postgres::Pool {
    config
        .create_pool(
            Some(deadpool_postgres::Runtime::Tokio1),
            tokio_postgres::NoTls,
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadpool_checkout_that_timed_out_is_retried_and_the_backends_error_is_its_own() {
    let Some(server) = Postgres::start("deadpool-postgres") else {
        return;
    };
    let mut config = deadpool_config(&server);
    let mut pool = deadpool_postgres::PoolConfig::new(1);
    pool.timeouts.wait = Some(Duration::from_millis(100));
    config.pool = Some(pool);
    let pool = deadpool_pool(&config);
    let held = pool.get().await.unwrap();
    let Err(timed_out) = pool.get().await else {
        panic!("a second connection from a pool of one");
    };
    assert!(
        matches!(timed_out, deadpool_postgres::PoolError::Timeout(_)),
        "{timed_out:?}"
    );
    assert_eq!(timed_out.classify(), Verdict::Retry);
    let boxed: BoxError = timed_out.into();
    assert_eq!(boxed.classify(), Verdict::Retry, "through a Box<dyn Error>");
    drop(held);
    // The server gone, the pool's connection closed: making a new one is
    // refused, which the pool reports as its backend's error.
    // (Until the pool's connection has seen the server go: a busy
    // machine may ask before its task has read the end of it.)
    server.crash();
    let asked = std::time::Instant::now();
    let refused = loop {
        match pool.get().await {
            Err(refused) => break refused,
            Ok(stale) => {
                assert!(
                    asked.elapsed() < Duration::from_secs(5),
                    "a connection from a stopped server"
                );
                drop(stale);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    assert!(
        matches!(refused, deadpool_postgres::PoolError::Backend(_)),
        "{refused:?}"
    );
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
    let boxed: BoxError = refused.into();
    assert_eq!(
        boxed.classify(),
        Verdict::Refused,
        "through a Box<dyn Error>"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bb8_checkout_that_timed_out_is_retried() {
    let Some(server) = Redis::start("bb8-redis") else {
        return;
    };
    let manager = bb8_redis::RedisConnectionManager::new(server.url()).unwrap();
    let pool = bb8::Pool::builder()
        .max_size(1)
        .connection_timeout(Duration::from_millis(300))
        .build(manager)
        .await
        .unwrap();
    // (On a busy machine, making the one connection can take longer than
    // the checkout's timeout: ask again.)
    let mut held = None;
    for _ in 0..20 {
        if let Ok(connection) = pool.get().await {
            held = Some(connection);
            break;
        }
    }
    let held = held.expect("a connection from the pool");
    let Err(timed_out) = pool.get().await else {
        panic!("a second connection from a pool of one");
    };
    assert!(
        matches!(timed_out, bb8::RunError::TimedOut),
        "{timed_out:?}"
    );
    // (bb8 tries a refused connection again until its timeout: a timed
    // out checkout is taken for a refusal, as sqlx's `PoolTimedOut` is.)
    assert_eq!(timed_out.classify(), Verdict::Refused);
    let boxed: BoxError = timed_out.into();
    assert_eq!(
        boxed.classify(),
        Verdict::Refused,
        "through a Box<dyn Error>"
    );
    drop(held);
}

/// A read through a bb8 pool, as a caller alone makes it.
#[backstop::retry(attempts = 60, base = 20ms, cap = 100ms, deadline = 6s, idempotent)]
async fn size_via_bb8(
    pool: &bb8::Pool<bb8_redis::RedisConnectionManager>,
) -> Result<i64, anyhow::Error> {
    let mut connection = pool.get().await?;
    Ok(redis::cmd("DBSIZE").query_async(&mut *connection).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_a_bb8_pool_rides_out_a_restart() {
    let Some(mut server) = Redis::start("bb8-redis restart") else {
        return;
    };
    let manager = bb8_redis::RedisConnectionManager::new(server.url()).unwrap();
    let pool = bb8::Pool::builder()
        .max_size(1)
        .connection_timeout(Duration::from_millis(300))
        .build_unchecked(manager);
    server.crash();
    let started = std::time::Instant::now();
    let call = {
        let pool = pool.clone();
        tokio::spawn(async move { size_via_bb8(&pool).await })
    };
    // bb8 says only `TimedOut` for a server that refuses: the call holds
    // once the budget refuses its retries, and goes through once it is back.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    server.up();
    let outcome = call.await.unwrap();
    assert!(outcome.is_ok(), "{outcome:?} after {:?}", started.elapsed());
}

#[test]
fn every_pairing_of_pool_and_client_is_found_in_a_source_chain() {
    use deadpool::managed::{PoolError, TimeoutType};
    let boxed: [BoxError; 4] = [
        PoolError::<tokio_postgres::Error>::Timeout(TimeoutType::Create).into(),
        PoolError::<redis::RedisError>::Timeout(TimeoutType::Recycle).into(),
        bb8::RunError::<tokio_postgres::Error>::TimedOut.into(),
        bb8::RunError::<redis::RedisError>::TimedOut.into(),
    ];
    let (deadpool, bb8) = boxed.split_at(2);
    for error in deadpool {
        assert_eq!(error.classify(), Verdict::Retry, "{error:?}");
    }
    for error in bb8 {
        assert_eq!(error.classify(), Verdict::Refused, "{error:?}");
    }
    let dropped =
        redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    // The backend's, as its own (a query's, wrapped by `?`, may have run).
    let boxed: BoxError = bb8::RunError::User(dropped).into();
    assert_eq!(boxed.classify(), Verdict::RetryIfIdempotent);
    // A Redis connection the pool could not make: refused, retried; timed
    // out, not told from a command's, only if idempotent.
    let io = |kind| redis::RedisError::from(std::io::Error::from(kind));
    let refused = PoolError::Backend(io(std::io::ErrorKind::ConnectionRefused));
    assert_eq!(refused.classify(), Verdict::Refused);
    let timed_out = PoolError::Backend(io(std::io::ErrorKind::TimedOut));
    assert_eq!(timed_out.classify(), Verdict::RetryIfIdempotent);
    let timed_out = bb8::RunError::User(io(std::io::ErrorKind::TimedOut));
    assert_eq!(timed_out.classify(), Verdict::RetryIfIdempotent);
}

// The two functions of docs/clients.md, as written there.

#[backstop::retry(deadline = 2s, attempt_timeout = 1s)]
async fn insert_order(pool: &deadpool_postgres::Pool, id: i64) -> Result<(), BoxError> {
    let client = pool.get().await?;
    client
        .execute("INSERT INTO orders (id) VALUES ($1)", &[&id])
        .await?;
    Ok(())
}

#[backstop::retry(deadline = 2s, attempt_timeout = 500ms, idempotent)]
async fn order_count(pool: &deadpool_postgres::Pool) -> Result<i64, BoxError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if let Some(left) = backstop::scope::time_left() {
        let ms = left.as_millis().max(1);
        tx.batch_execute(&format!("SET LOCAL statement_timeout = {ms}"))
            .await?;
    }
    let count = tx
        .query_one("SELECT count(*) FROM orders", &[])
        .await?
        .get(0);
    tx.commit().await?;
    Ok(count)
}

#[backstop::retry(deadline = 2s, attempt_timeout = 500ms, idempotent)]
async fn session(
    redis: &redis::aio::ConnectionManager,
    key: &str,
) -> Result<Option<String>, BoxError> {
    use redis::AsyncCommands;
    Ok(redis.clone().get(key).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_functions_run_against_the_servers() {
    let (Some(postgres), Some(mut redis)) = (
        Postgres::start("the documented functions"),
        Redis::start("the documented functions"),
    ) else {
        return;
    };
    let pool = deadpool_pool(&deadpool_config(&postgres));
    pool.get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE orders (id bigint NOT NULL)")
        .await
        .unwrap();
    insert_order(&pool, 7).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client).await.unwrap();
    assert_eq!(session(&manager, "nobody").await.unwrap(), None);
    insert_order(&pool, 8).await.unwrap();
    let rows: Vec<i64> = pool
        .get()
        .await
        .unwrap()
        .query("SELECT id FROM orders ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(rows, [7, 8]);
    assert_eq!(order_count(&pool).await.unwrap(), 2);
    redis.crash();
    // Dropped or refused, retried (idempotent) until the deadline or the
    // attempts ran out: the last error, unchanged.
    let error = session(&manager, "nobody").await.unwrap_err();
    assert!(error.classify().is_retryable(), "{error:?}");
}

/// A slow query under the recipe of docs/clients.md: each attempt cut off
/// by its timeout, the time left as its statement's timeout.
#[backstop::retry(attempts = 2, base = 1ms, deadline = 5s, attempt_timeout = 300ms, idempotent, budget = none)]
async fn slow_within_the_time_left(
    pool: &deadpool_postgres::Pool,
    bounded: bool,
) -> Result<(), BoxError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if let Some(left) = backstop::scope::time_left().filter(|_| bounded) {
        let ms = left.as_millis().max(1);
        tx.batch_execute(&format!("SET LOCAL statement_timeout = {ms}"))
            .await?;
    }
    tx.batch_execute("SELECT pg_sleep(3)").await?;
    tx.commit().await?;
    Ok(())
}

/// A query cut off by its attempt timeout keeps running on the server,
/// unless its statement's timeout is the time left (docs/clients.md):
/// two attempts cut off leave no query running, where without it the
/// first was still running (the second waiting behind it, on the same
/// connection, or beside it on another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_cut_off_is_stopped_on_the_server_by_the_time_left() {
    let Some(server) = Postgres::start("statement timeout") else {
        return;
    };
    let pool = deadpool_pool(&deadpool_config(&server));
    let watcher = pool.get().await.unwrap();
    let sleeping = || async {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
                 AND query LIKE 'SELECT pg_sleep%'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    for bounded in [true, false] {
        let error = slow_within_the_time_left(&pool, bounded).await.unwrap_err();
        // Cut off by the loop, or cancelled by the server at about the
        // same time (`57014`): either is ambiguous.
        assert_eq!(error.classify(), Verdict::RetryIfIdempotent, "{error}");
        if bounded {
            // The server's cancellation comes about when the loop's
            // cut-off does, a network trip later at most.
            let asked = std::time::Instant::now();
            while sleeping().await > 0 {
                assert!(asked.elapsed() < Duration::from_secs(1), "still running");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } else {
            let running = sleeping().await;
            assert!((1..=2).contains(&running), "{running} still running");
        }
    }
}

/// A write returning a pool's error type, as deadpool's and bb8's code
/// is written: `?` wraps the query's error as the backend's, as it wraps
/// one of the checkout.
#[backstop::retry(deadline = 2s, base = 1ms, budget = none)]
async fn write_returning_the_pools_error(
    client: &tokio_postgres::Client,
    calls: &std::sync::atomic::AtomicU32,
) -> Result<(), deadpool_postgres::PoolError> {
    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    client
        .execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await?;
    Ok(())
}

/// A query whose connection closed may have run: wrapped in a pool's
/// error by `?` (deadpool's `Backend`, bb8's `User`), it is judged as its
/// own, retried only if idempotent, not as a checkout's (it was written
/// again, and applied twice, through a connection that closed after the
/// server ran it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_querys_error_in_a_pools_error_is_judged_as_its_own() {
    let Some(server) = Postgres::start("a query's error in a pool's") else {
        return;
    };
    let url = format!("host=127.0.0.1 port={} user=postgres", server.port);
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection).abort();
    let closed = || async {
        let error = client.execute("SELECT 1", &[]).await.unwrap_err();
        assert!(error.is_closed(), "{error:?}");
        error
    };
    let error = closed().await;
    assert_eq!(error.classify(), Verdict::RetryIfIdempotent);
    let pooled = deadpool_postgres::PoolError::from(error);
    assert_eq!(pooled.classify(), Verdict::RetryIfIdempotent);
    let boxed: BoxError = pooled.into();
    assert_eq!(boxed.classify(), Verdict::RetryIfIdempotent);
    let pooled = bb8::RunError::from(closed().await);
    assert_eq!(pooled.classify(), Verdict::RetryIfIdempotent);
    let boxed: BoxError = pooled.into();
    assert_eq!(boxed.classify(), Verdict::RetryIfIdempotent);
    let calls = std::sync::atomic::AtomicU32::new(0);
    assert!(
        write_returning_the_pools_error(&client, &calls)
            .await
            .is_err()
    );
    assert_eq!(
        calls.into_inner(),
        1,
        "a write that may have run, not sent again"
    );
}
