//! PostgreSQL through tokio-postgres and the blocking `postgres` crate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::{Classify, Verdict, retry};
use tokio_postgres::{Client, NoTls};

use super::servers::Postgres;
use super::{BoxError, load};
use crate::support::Transparent;

/// Idle connections handed out again, as a pool does: one whose
/// connection has closed (the server restarted) is dropped unused.
struct Pool {
    config: String,
    idle: Mutex<Vec<Client>>,
}

impl Pool {
    fn new(config: String) -> Self {
        Self {
            config,
            idle: Mutex::new(Vec::new()),
        }
    }

    async fn get(&self) -> Result<Client, tokio_postgres::Error> {
        loop {
            let idle = self.idle.lock().unwrap().pop();
            match idle {
                Some(client) if !client.is_closed() => return Ok(client),
                Some(_closed) => {}
                None => break,
            }
        }
        let (client, connection) = tokio_postgres::connect(&self.config, NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    fn put(&self, client: Client) {
        self.idle.lock().unwrap().push(client);
    }
}

/// An insert: not idempotent (the table has no key, so a repeated insert
/// is a second row).
#[retry(deadline = 2s, attempt_timeout = 1s, base = 50ms, attempts = 10)]
async fn insert(pool: &Pool, id: i64) -> Result<(), BoxError> {
    let client = pool.get().await?;
    client
        .execute("INSERT INTO orders (id) VALUES ($1)", &[&id])
        .await?;
    pool.put(client);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_applies_no_write_twice_and_the_calls_recover() {
    let Some(server) = Postgres::start("postgres restart under load") else {
        return;
    };
    let pool = Arc::new(Pool::new(server.config()));
    pool.get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE orders (id bigint NOT NULL)")
        .await
        .unwrap();
    let server = Arc::new(server);
    let origin = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let calls = {
        let (pool, done) = (pool.clone(), done.clone());
        tokio::spawn(load(
            8,
            origin,
            move |id| {
                let pool = pool.clone();
                async move { insert(&pool, id).await.is_ok() }
            },
            move || done.load(Ordering::Relaxed),
        ))
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let down = origin.elapsed();
    let crashing = server.clone();
    tokio::task::spawn_blocking(move || crashing.crash())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let restarting = server.clone();
    tokio::task::spawn_blocking(move || restarting.up())
        .await
        .unwrap();
    let back = origin.elapsed();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    done.store(true, Ordering::Relaxed);
    let outcomes = calls.await.unwrap();

    super::the_restart_held(&outcomes, down, back);

    let client = pool.get().await.unwrap();
    let twice = client
        .query("SELECT id FROM orders GROUP BY id HAVING count(*) > 1", &[])
        .await
        .unwrap();
    assert!(twice.is_empty(), "{} writes applied twice", twice.len());
    let rows: std::collections::HashSet<i64> = client
        .query("SELECT id FROM orders", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let lost: Vec<_> = outcomes
        .iter()
        .filter(|o| o.ok && !rows.contains(&o.id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but not there: {lost:?}");
    eprintln!(
        "{} calls, {} failed, {} rows",
        outcomes.len(),
        outcomes.iter().filter(|o| !o.ok).count(),
        rows.len()
    );
}

/// The blocking client, in a sync `#[retry]` function.
#[retry(deadline = 5s, base = 100ms, attempts = 20, idempotent, budget = none)]
fn count_blocking(config: &str) -> Result<i64, postgres::Error> {
    let mut client = postgres::Client::connect(config, postgres::NoTls)?;
    Ok(client
        .query_one("SELECT count(*) FROM pg_class", &[])?
        .get(0))
}

#[test]
fn the_servers_errors_are_classified_by_sqlstate_and_by_how_the_connection_failed() {
    let Some(server) = Postgres::start("postgres error classification") else {
        return;
    };
    let config = server.config();
    // The blocking client: a refused connection is retried until the
    // server is there.
    server.crash();
    let Err(refused) = postgres::Client::connect(&config, postgres::NoTls) else {
        panic!("connected to a stopped server");
    };
    assert_eq!(refused.classify(), Verdict::Refused, "{refused:?}");
    let boxed: BoxError = refused.into();
    assert_eq!(
        boxed.classify(),
        Verdict::Refused,
        "through a Box<dyn Error>"
    );
    let starting = std::thread::spawn({
        let config = config.clone();
        move || count_blocking(&config)
    });
    // (Starting takes a few hundred milliseconds: the call's first
    // attempts are refused meanwhile.)
    server.up();
    assert!(starting.join().unwrap().unwrap() > 0);

    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            statement_errors(&config).await;
            connecting_errors(&config).await;
            connection_errors(&server, &config).await;
        });
}

/// A connection of its own, its connection task spawned.
async fn connect(config: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Errors of statements, each by its SQLSTATE.
async fn statement_errors(config: &str) {
    let client = connect(config).await;
    let failed = |sql: &'static str| {
        let client = &client;
        async move { client.batch_execute(sql).await.unwrap_err() }
    };
    client
        .batch_execute("CREATE TABLE users (id int PRIMARY KEY)")
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO users VALUES (1)")
        .await
        .unwrap();
    let unique = failed("INSERT INTO users VALUES (1)").await;
    assert_eq!(unique.code().unwrap().code(), "23505");
    assert_eq!(unique.classify(), Verdict::Stop);
    // Behind a wrapper that hides it, as thiserror's `transparent` does:
    // the server's error is found by what it holds.
    let deadlocked =
        failed("DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$").await;
    assert_eq!(deadlocked.classify(), Verdict::Retry);
    let hidden = Transparent(deadlocked);
    assert_eq!(
        backstop::classify::by_source_chain(&hidden),
        Verdict::Retry,
        "{hidden:?}"
    );
    let syntax = failed("SELEC 1").await;
    assert_eq!(syntax.code().unwrap().code(), "42601");
    assert_eq!(syntax.classify(), Verdict::Stop);
    let data = failed("SELECT 1 / 0").await;
    assert_eq!(data.code().unwrap().code(), "22012");
    assert_eq!(data.classify(), Verdict::Stop);

    // A serialization failure: two transactions that each read
    // what the other writes.
    let other = connect(config).await;
    for c in [&client, &other] {
        c.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT count(*) FROM users")
            .await
            .unwrap();
    }
    client
        .batch_execute("INSERT INTO users VALUES (2)")
        .await
        .unwrap();
    other
        .batch_execute("INSERT INTO users VALUES (3)")
        .await
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    let conflict = other.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(conflict.code().unwrap().code(), "40001");
    assert_eq!(conflict.classify(), Verdict::Retry);
    // Inside the failed transaction, everything else is refused.
    other
        .batch_execute("BEGIN; SELECT 1 / 0")
        .await
        .unwrap_err();
    let aborted = other.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(aborted.code().unwrap().code(), "25P02");
    assert_eq!(aborted.classify(), Verdict::Stop);
    other.batch_execute("ROLLBACK").await.unwrap();
}

/// Connections that could not be made: nothing of the call was sent,
/// retried whatever the call.
async fn connecting_errors(config: &str) {
    // A server that allows no writes, asked for one that does: a standby
    // before a failover ends.
    let writable = format!(
        "{config} target_session_attrs=read-write \
         options='-c default_transaction_read_only=on'"
    );
    let Err(standby) = tokio_postgres::connect(&writable, NoTls).await else {
        panic!("a read-only server taken for a writable one");
    };
    let why = std::error::Error::source(&standby).map(ToString::to_string);
    assert_eq!(
        why.as_deref(),
        Some("database does not allow writes"),
        "{standby}"
    );
    assert_eq!(standby.classify(), Verdict::Retry, "{standby:?}");

    // A connection that timed out: a listener whose queue is full drops
    // the connection's first packet.
    // (A queue of one: a few connections fill it, whatever the process's
    // limit of open files.)
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = socket.local_addr().unwrap();
    let listener = socket.listen(1).unwrap();
    let mut queued = Vec::new();
    while let Ok(filler) = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(50))
    {
        queued.push(filler);
        assert!(queued.len() < 100, "the listener's queue never filled");
    }
    let mut never = tokio_postgres::Config::new();
    never
        .host("127.0.0.1")
        .port(address.port())
        .user("postgres")
        .connect_timeout(Duration::from_millis(100));
    let timed_out = tokio::time::timeout(Duration::from_secs(5), never.connect(NoTls))
        .await
        .expect("the connect timeout fires")
        .err()
        .expect("no connection to a full queue");
    let why = std::error::Error::source(&timed_out).map(ToString::to_string);
    assert_eq!(why.as_deref(), Some("connection timed out"), "{timed_out}");
    assert_eq!(timed_out.classify(), Verdict::Retry, "{timed_out:?}");
    drop((queued, listener));
}

/// Errors of connections: shut down under a statement, refused for too
/// many, closed by a restart.
async fn connection_errors(server: &Postgres, config: &str) {
    let client = connect(config).await;
    // A statement ended by an administrator's shutdown of its
    // backend: rolled back, retried.
    let victim = connect(config).await;
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sleeping = tokio::spawn(async move {
        victim
            .batch_execute("SELECT pg_sleep(10)")
            .await
            .unwrap_err()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let terminated = sleeping.await.unwrap();
    assert_eq!(terminated.code().unwrap().code(), "57P01", "{terminated:?}");
    assert_eq!(terminated.classify(), Verdict::Retry);

    // Too many connections.
    let mut held = Vec::new();
    let refused = loop {
        match tokio_postgres::connect(config, NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                held.push(client);
            }
            Err(error) => break error,
        }
        assert!(held.len() < 100, "the server never refused a connection");
    };
    assert_eq!(refused.code().unwrap().code(), "53300", "{refused:?}");
    assert_eq!(refused.classify(), Verdict::Retry);
    drop(held);

    // After a restart, a connection made before it is closed: the
    // statement may have run, retried only if idempotent. (The backends of
    // the connections just dropped take a moment to go: until they have, a
    // new connection is refused as above, and retried.)
    let room = backstop::Policy::new()
        .base(Duration::from_millis(10))
        .attempts(100)
        .no_budget();
    let (before, connection) =
        backstop::call_async(&room, || tokio_postgres::connect(config, NoTls))
            .await
            .unwrap();
    tokio::spawn(connection);
    server.crash();
    let closed = before.batch_execute("SELECT 1").await.unwrap_err();
    assert!(closed.is_closed(), "{closed:?}");
    assert_eq!(closed.classify(), Verdict::RetryIfIdempotent);
    server.up();
}

/// Every SQLSTATE `classify::sqlstate` names, with the verdict its docs
/// give it, by the names tokio-postgres gives the codes; and codes of the
/// classes it names that it does not (a connection exception is
/// ambiguous, a protocol violation is not).
#[test]
fn each_sqlstate_has_the_verdict_the_docs_give_it() {
    use backstop::Verdict::{Refused, Retry, RetryIfIdempotent, Stop};
    use backstop::classify::sqlstate;
    use tokio_postgres::error::SqlState as S;
    let table = [
        // Nothing ran; a call may wait for the server to come back.
        (S::CANNOT_CONNECT_NOW, Refused),
        (S::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, Refused),
        (
            S::SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION,
            Refused,
        ),
        // Nothing ran, or the transaction was rolled back.
        (S::TOO_MANY_CONNECTIONS, Retry),
        (S::ADMIN_SHUTDOWN, Retry),
        (S::CRASH_SHUTDOWN, Retry),
        (S::T_R_SERIALIZATION_FAILURE, Retry),
        (S::T_R_DEADLOCK_DETECTED, Retry),
        // The statement may have run, or committed.
        (S::QUERY_CANCELED, RetryIfIdempotent),
        (S::CONNECTION_EXCEPTION, RetryIfIdempotent),
        (S::CONNECTION_FAILURE, RetryIfIdempotent),
        (S::TRANSACTION_RESOLUTION_UNKNOWN, RetryIfIdempotent),
        // A bug, not the network; the request's own fault.
        (S::PROTOCOL_VIOLATION, Stop),
        (S::IN_FAILED_SQL_TRANSACTION, Stop),
        (S::UNIQUE_VIOLATION, Stop),
        (S::SYNTAX_ERROR, Stop),
        (S::DIVISION_BY_ZERO, Stop),
    ];
    for (state, verdict) in table {
        assert_eq!(sqlstate(state.code()), verdict, "{}", state.code());
    }
}
