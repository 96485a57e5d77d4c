//! PostgreSQL through sqlx (feature `sqlx`): its errors classified as they
//! come from a real server, and `#[retry]` on a function returning
//! `sqlx::Error`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backstop::limit::CircuitBreaker;
use backstop::{CircuitOpen, Classify, Elapsed, Verdict, retry};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};

use super::BoxError;
use super::servers::Postgres;

/// A function that runs a whole transaction: a serialization failure
/// rolls all of it back, and is retried. Its first two attempts fail so.
#[retry(deadline = 5s, base = 10ms, budget = none)]
async fn transfer(pool: &PgPool, attempts: &AtomicU32) -> Result<i64, sqlx::Error> {
    attempts.fetch_add(1, Ordering::Relaxed);
    let mut tx = pool.begin().await?;
    let n: i64 = sqlx::query_scalar("SELECT nextval('conflicts')")
        .fetch_one(&mut *tx)
        .await?;
    if n <= 2 {
        tx.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
            .await?;
    }
    tx.commit().await?;
    Ok(n)
}

/// A statement that fails as the server says, as sqlx reports it.
async fn failed(pool: &PgPool, sql: &'static str) -> sqlx::Error {
    pool.execute(sql).await.unwrap_err()
}

fn code(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(error) => error.code().unwrap_or_default().into_owned(),
        other => panic!("not the database's error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_errors_are_classified_by_sqlstate_and_by_how_the_connection_failed() {
    let Some(server) = Postgres::start("sqlx error classification") else {
        return;
    };
    let url = server.url();
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&url)
        .await
        .unwrap();

    // The database's errors, by SQLSTATE.
    pool.execute("CREATE TABLE users (id int PRIMARY KEY); INSERT INTO users VALUES (1)")
        .await
        .unwrap();
    let unique = failed(&pool, "INSERT INTO users VALUES (1)").await;
    assert_eq!(code(&unique), "23505");
    assert_eq!(unique.classify(), Verdict::Stop);
    let syntax = failed(&pool, "SELEC 1").await;
    assert_eq!(code(&syntax), "42601");
    assert_eq!(syntax.classify(), Verdict::Stop);
    let data = failed(&pool, "SELECT 1 / 0").await;
    assert_eq!(code(&data), "22012");
    assert_eq!(data.classify(), Verdict::Stop);
    let none = sqlx::query("SELECT 1 WHERE false")
        .fetch_one(&pool)
        .await
        .unwrap_err();
    assert!(matches!(none, sqlx::Error::RowNotFound));
    assert_eq!(none.classify(), Verdict::Stop);

    // A serialization failure, retried by a function that runs the
    // whole transaction: two attempts fail, the third commits.
    pool.execute("CREATE SEQUENCE conflicts").await.unwrap();
    let attempts = AtomicU32::new(0);
    assert_eq!(transfer(&pool, &attempts).await.unwrap(), 3);
    assert_eq!(attempts.load(Ordering::Relaxed), 3);
    let conflict = failed(
        &pool,
        "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$",
    )
    .await;
    assert_eq!(conflict.classify(), Verdict::Retry);
    // Through a `Box<dyn Error>`, as a service boxes it.
    let boxed: BoxError = conflict.into();
    assert_eq!(boxed.classify(), Verdict::Retry, "through a Box<dyn Error>");
    let again = failed(
        &pool,
        "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$",
    )
    .await;
    let wrapped = anyhow::Error::from(again).context("transferring");
    assert_eq!(
        wrapped.classify(),
        Verdict::Retry,
        "through an anyhow::Error"
    );

    // A statement ended by an administrator's shutdown of its
    // backend: rolled back, retried.
    let mut victim = PgConnection::connect(&url).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut victim)
        .await
        .unwrap();
    let sleeping =
        tokio::spawn(async move { victim.execute("SELECT pg_sleep(10)").await.unwrap_err() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&pool)
        .await
        .unwrap();
    let terminated = sleeping.await.unwrap();
    assert_eq!(code(&terminated), "57P01", "{terminated:?}");
    assert_eq!(terminated.classify(), Verdict::Retry);

    // A pool with every connection out: its checkout times out,
    // having sent nothing (taken for a refusal: a pool says the same
    // of a server that refuses its connections).
    let held = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let timed_out = pool.acquire().await.unwrap_err();
    assert!(
        matches!(timed_out, sqlx::Error::PoolTimedOut),
        "{timed_out:?}"
    );
    assert_eq!(timed_out.classify(), Verdict::Refused);
    drop(held);

    // After a restart, a connection made before it is closed under
    // the next statement: it may have run, retried only if
    // idempotent. A new connection meanwhile is refused, and retried.
    let mut before = PgConnection::connect(&url).await.unwrap();
    tokio::task::block_in_place(|| server.crash());
    let closed = before.execute("SELECT 1").await.unwrap_err();
    assert!(matches!(closed, sqlx::Error::Io(_)), "{closed:?}");
    assert_eq!(closed.classify(), Verdict::RetryIfIdempotent, "{closed:?}");
    let refused = PgConnection::connect(&url).await.unwrap_err();
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
}

static DATABASE: CircuitBreaker = CircuitBreaker::new(5, Duration::from_secs(30));

/// A read: idempotent, each attempt cut off after 300 ms, with room for
/// a restart in its attempts and its deadline. (`sqlx::Error` holds a
/// timed-out attempt.)
#[retry(deadline = 10s, attempt_timeout = 300ms, attempts = 50, base = 50ms, idempotent)]
async fn read(pool: &PgPool, sql: &'static str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(pool).await
}

/// A read behind a breaker, which turns calls away with an error
/// `sqlx::Error` holds, and a deadline of a second.
#[retry(deadline = 1s, attempt_timeout = 300ms, idempotent, breaker = DATABASE)]
async fn guarded(pool: &PgPool, sql: &'static str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(pool).await
}

/// `error` is an I/O error holding one of this crate's errors, a `T`.
fn holds<T: std::error::Error + 'static>(error: &sqlx::Error) -> bool {
    let sqlx::Error::Io(io) = error else {
        return false;
    };
    io.get_ref()
        .is_some_and(<dyn std::error::Error + Send + Sync>::is::<T>)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_calls_through_a_pool_ride_out_a_restart() {
    let Some(server) = Postgres::start("sqlx calls through a restart") else {
        return;
    };
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&server.url())
        .await
        .unwrap();

    // An attempt that overruns is cut off; the call gives up by its
    // deadline with the timeout sqlx's error holds.
    let started = Instant::now();
    let slow = guarded(&pool, "SELECT 1::bigint FROM pg_sleep(10)")
        .await
        .unwrap_err();
    // (Cut off: the statement alone would take ten seconds.)
    assert!(started.elapsed() < Duration::from_millis(1_500));
    assert!(holds::<Elapsed>(&slow), "{slow:?}");
    assert_eq!(slow.classify(), Verdict::RetryIfIdempotent);

    assert_eq!(guarded(&pool, "SELECT 7::bigint").await.unwrap(), 7);
    DATABASE.hold_open();
    let open = guarded(&pool, "SELECT 7::bigint").await.unwrap_err();
    assert!(holds::<CircuitOpen>(&open), "{open:?}");
    assert_eq!(open.classify(), Verdict::Stop);

    // Sixteen callers meet the server down: its pool times out,
    // refused, until the budget holds them; they are answered
    // once it is back, within their deadline.
    tokio::task::block_in_place(|| server.crash());
    let pool = Arc::new(pool);
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                (read(&pool, "SELECT 7::bigint").await, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    tokio::task::block_in_place(|| server.up());
    for call in calls {
        let (outcome, took) = call.await.unwrap();
        assert_eq!(outcome.unwrap(), 7, "after {took:?}");
        assert!(took < Duration::from_millis(10_100), "{took:?}");
    }
}

/// A TLS handshake that failed never made the connection: retried (a
/// certificate refused spends the call's attempts). A message the client
/// could not read is not retried, as PostgreSQL's protocol violation is
/// not.
#[test]
fn a_failed_tls_handshake_is_retried_and_a_protocol_error_is_not() {
    let tls = sqlx::Error::Tls(Box::new(std::io::Error::other("certificate refused")));
    assert_eq!(tls.classify(), Verdict::Retry);
    let protocol = sqlx::Error::Protocol("unexpected message".into());
    assert_eq!(protocol.classify(), Verdict::Stop);
}
