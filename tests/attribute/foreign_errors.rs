//! Errors a user cannot implement `Classify` for (the orphan rule): boxed
//! trait objects, `anyhow::Error`, tokio's `Elapsed`. They are classified by
//! the first error in their source chain that the crate can classify.

use std::error::Error;
use std::fmt;
use std::io::{self, ErrorKind};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use backstop::{Classify, Verdict, retry};

type BoxError = Box<dyn Error + Send + Sync>;

#[retry(attempts = 3, budget = none)]
fn boxed(calls: &AtomicU32, error: fn() -> BoxError) -> Result<(), BoxError> {
    calls.fetch_add(1, Relaxed);
    Err(error())
}

#[test]
fn a_boxed_error_is_classified_by_what_it_holds() {
    let _vt = backstop::testing::VirtualTime::start();
    let calls = AtomicU32::new(0);
    let _ = boxed(&calls, || {
        io::Error::from(ErrorKind::ConnectionRefused).into()
    });
    assert_eq!(calls.load(Relaxed), 3, "a refused connection is retried");
    calls.store(0, Relaxed);
    let _ = boxed(&calls, || "invalid order".into());
    assert_eq!(calls.load(Relaxed), 1, "nothing it knows: not retried");
}

/// An error of the user's wrapping an I/O error as its source.
#[derive(Debug)]
struct Fetch(io::Error);

impl fmt::Display for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fetch failed")
    }
}

impl Error for Fetch {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn the_source_chain_is_walked() {
    let wrapped: BoxError = Box::new(Fetch(ErrorKind::ConnectionRefused.into()));
    assert_eq!(wrapped.classify(), Verdict::Refused);
    let timed_out: BoxError = Box::new(Fetch(ErrorKind::TimedOut.into()));
    assert_eq!(timed_out.classify(), Verdict::RetryIfIdempotent);
    // The walk is a function, for `when =` on errors of one's own.
    assert_eq!(
        backstop::classify::source_chain(&Fetch(ErrorKind::BrokenPipe.into())),
        Verdict::RetryIfIdempotent
    );
    let plain: Box<dyn Error> = "nope".into();
    assert_eq!(plain.classify(), Verdict::Stop);
}

#[tokio::test(start_paused = true)]
async fn a_tokio_timeout_is_ambiguous() {
    let elapsed = tokio::time::timeout(
        std::time::Duration::from_millis(1),
        std::future::pending::<()>(),
    )
    .await
    .unwrap_err();
    assert_eq!(elapsed.classify(), Verdict::RetryIfIdempotent);
    let boxed: BoxError = Box::new(elapsed);
    assert_eq!(boxed.classify(), Verdict::RetryIfIdempotent);
    let rejected: BoxError = Box::new(backstop::CircuitOpen::new());
    assert_eq!(rejected.classify(), Verdict::Stop);
}

#[cfg(feature = "anyhow")]
#[test]
fn an_anyhow_error_is_classified_by_its_chain() {
    let error = anyhow::Error::new(io::Error::from(ErrorKind::ConnectionRefused))
        .context("loading the user");
    assert_eq!(error.classify(), Verdict::Refused);
    assert_eq!(anyhow::anyhow!("invalid").classify(), Verdict::Stop);
}

/// A layer of context around an error, as services wrap them.
#[derive(Debug)]
struct Context(&'static str, Box<dyn Error + Send + Sync>);

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.1)
    }
}

#[test]
fn two_layers_of_context_around_a_refused_connection_are_retried() {
    let refused: BoxError = Box::new(io::Error::from(ErrorKind::ConnectionRefused));
    let wrapped: BoxError = Box::new(Context(
        "loading the user",
        Box::new(Context("calling the users service", refused)),
    ));
    assert_eq!(wrapped.classify(), Verdict::Refused);
    let parse: BoxError = Box::new("x".parse::<u32>().unwrap_err());
    let wrapped: BoxError = Box::new(Context(
        "loading the user",
        Box::new(Context("reading the id", parse)),
    ));
    assert_eq!(wrapped.classify(), Verdict::Stop);
}

#[cfg(feature = "anyhow")]
#[test]
fn anyhow_with_two_layers_of_context() {
    use anyhow::Context as _;
    let refused: Result<(), io::Error> = Err(ErrorKind::ConnectionRefused.into());
    let error = refused
        .context("calling the users service")
        .context("loading the user")
        .unwrap_err();
    assert_eq!(error.classify(), Verdict::Refused);
    let parse = "x"
        .parse::<u32>()
        .context("reading the id")
        .context("loading the user")
        .unwrap_err();
    assert_eq!(parse.classify(), Verdict::Stop);
}

#[retry(attempts = 3, budget = none, when = backstop::classify::by_source_chain)]
fn own_error(calls: &AtomicU32) -> Result<(), Fetch> {
    calls.fetch_add(1, Relaxed);
    Err(Fetch(ErrorKind::ConnectionRefused.into()))
}

#[test]
fn the_chain_walk_is_a_path_for_when() {
    let _vt = backstop::testing::VirtualTime::start();
    let calls = AtomicU32::new(0);
    let _ = own_error(&calls);
    assert_eq!(calls.load(Relaxed), 3);
}
