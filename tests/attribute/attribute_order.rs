//! `#[retry]` written above the attributes that rewrite a function sees it
//! as written: `#[tokio::test]` then builds one runtime whose paused clock
//! drives the sleeps, and `#[tracing::instrument]` makes one span per call.

use std::io::{Error, ErrorKind};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use backstop::retry;

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

// Three attempts 10 s and 20 s apart: in real time this test would take
// 30 s; under the paused clock it takes none.
#[retry(attempts = 3, base = 10s, jitter = none, deadline = none, budget = none)]
#[tokio::test(start_paused = true)]
async fn retry_above_tokio_test_sleeps_on_the_paused_clock() -> Result<(), Error> {
    static START: std::sync::OnceLock<(tokio::time::Instant, std::time::Instant)> =
        std::sync::OnceLock::new();
    let (virtual_start, real_start) =
        *START.get_or_init(|| (tokio::time::Instant::now(), std::time::Instant::now()));
    if ATTEMPTS.fetch_add(1, Relaxed) < 2 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    assert_eq!(virtual_start.elapsed(), Duration::from_secs(30));
    assert!(
        real_start.elapsed() < Duration::from_secs(5),
        "slept in real time"
    );
    Ok(())
}

/// Counts the spans created while it is the default subscriber.
struct SpanCounter(AtomicU64);

impl tracing::Subscriber for SpanCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        // `#[tracing::instrument]`'s spans only (with the `tracing`
        // feature, backstop adds one `retry` span per call of its own).
        if span.metadata().name() == "retry" {
            return tracing::span::Id::from_u64(u64::MAX);
        }
        tracing::span::Id::from_u64(self.0.fetch_add(1, Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// An owned argument on purpose: instrumenting first would move it.
#[allow(clippy::needless_pass_by_value)]
#[retry(attempts = 3, jitter = none, budget = none)]
#[tracing::instrument]
fn send(body: String, failures: &AtomicU32) -> Result<usize, Error> {
    if failures.fetch_sub(1, Relaxed) > 0 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(body.len())
}

#[test]
fn retry_above_instrument_makes_one_span_per_call() {
    let _vt = backstop::testing::VirtualTime::start();
    let counter = std::sync::Arc::new(SpanCounter(AtomicU64::new(0)));
    let failures = AtomicU32::new(2);
    let sent = tracing::subscriber::with_default(std::sync::Arc::clone(&counter), || {
        send("hello".to_owned(), &failures)
    });
    assert_eq!(sent.unwrap(), 5, "an owned argument, retried twice");
    assert_eq!(
        counter.0.load(Relaxed),
        1,
        "one span for the call, not one per attempt"
    );
}
