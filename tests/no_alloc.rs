//! The success path of a `#[retry]` call allocates nothing.
//!
//! A counting global allocator (test-only `unsafe`: it forwards every call
//! to the system allocator unchanged) measures calls whose first attempt
//! succeeds.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Error;

use backstop::retry;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments,
// so `System`'s guarantees are passed on unchanged; the counter is a
// thread-local `Cell` of a `Copy` integer, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded as received.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[retry(attempts = 5, deadline = 10s)]
fn succeeds(x: u64) -> Result<u64, Error> {
    Ok(x + 1)
}

#[retry(attempts = 5)]
async fn succeeds_async(x: u64) -> Result<u64, Error> {
    Ok(x + 1)
}

#[retry(attempts = 5, key = shard)]
fn keyed_succeeds(shard: &str, x: u64) -> Result<u64, Error> {
    let _ = shard;
    Ok(x + 1)
}

#[retry(attempts = 5, key = shard)]
async fn keyed_succeeds_async(shard: u64, x: u64) -> Result<u64, Error> {
    let _ = shard;
    Ok(x + 1)
}

#[test]
fn a_keyed_success_path_does_not_allocate_once_its_key_was_seen() {
    const SHARDS: [&str; 4] = ["a", "b", "c", "d"];
    // A new key's name and the tables' first use allocate, once.
    for shard in SHARDS {
        keyed_succeeds(shard, 0).unwrap();
    }
    let before = allocations();
    let mut sum = 0;
    for i in 0..1000 {
        sum += keyed_succeeds(SHARDS[i as usize % 4], i).unwrap();
    }
    assert_eq!(sum, 500_500);
    assert_eq!(allocations() - before, 0);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        for shard in 0..4 {
            keyed_succeeds_async(shard, 0).await.unwrap();
        }
        let before = allocations();
        let mut sum = 0;
        for i in 0..1000 {
            sum += keyed_succeeds_async(i % 4, i).await.unwrap();
        }
        assert_eq!(sum, 500_500);
        assert_eq!(allocations() - before, 0);
    });
}

#[test]
fn the_sync_success_path_does_not_allocate() {
    let before = allocations();
    let mut sum = 0;
    for i in 0..1000 {
        sum += succeeds(i).unwrap();
    }
    assert_eq!(sum, 500_500);
    assert_eq!(allocations() - before, 0);
}

/// `future`, run to its end on a current-thread tokio runtime with time.
fn on_tokio<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

/// The allocations of a thousand calls of `call`, each answering `x + 1`
/// for its `x` of `0..1000` (their sum is checked).
async fn allocations_of<F: std::future::Future<Output = Result<u64, Error>>>(
    mut call: impl FnMut(u64) -> F,
) -> u64 {
    let before = allocations();
    let mut sum = 0;
    for i in 0..1000 {
        sum += call(i).await.unwrap();
    }
    assert_eq!(sum, 500_500);
    allocations() - before
}

#[test]
fn the_async_success_path_does_not_allocate() {
    assert_eq!(on_tokio(allocations_of(succeeds_async)), 0);
}

/// Pending once (its task woken at once), then ready: an attempt that
/// does not answer at its first poll, so that the timers beside it (its
/// cut-off, a hedge's) start.
async fn pending_once() {
    let mut polled = false;
    std::future::poll_fn(|cx| {
        if polled {
            return std::task::Poll::Ready(());
        }
        polled = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

#[retry(attempts = 5, attempt_timeout = 1s)]
async fn succeeds_in_time(x: u64) -> Result<u64, Error> {
    pending_once().await;
    Ok(x + 1)
}

#[cfg(feature = "async-io")]
#[retry(attempts = 5, attempt_timeout = 1s)]
async fn answers_at_once_in_time(x: u64) -> Result<u64, Error> {
    Ok(x + 1)
}

/// An attempt's cut-off is a sleep held in place on tokio's timer: a
/// call whose attempt answers in time allocates nothing for it, also when
/// the attempt waits (and the timer starts).
#[test]
fn an_attempt_timeout_allocates_nothing_on_the_success_path() {
    assert_eq!(on_tokio(allocations_of(succeeds_in_time)), 0);
}

/// On async-io's timer (smol, async-std: outside a tokio runtime) the
/// sleep is held in place too: the crate allocates nothing for a cut-off.
/// (A timer that starts is async-io's reactor's to keep, in a map that may
/// allocate: measured about once per call whose attempt waits once, in
/// async-io's own code; so the attempt here answers at its first poll.)
#[cfg(feature = "async-io")]
#[test]
fn an_attempt_timeout_allocates_nothing_on_async_io_either() {
    assert!(matches!(
        backstop::time::RuntimeClock::current(),
        backstop::time::RuntimeClock::AsyncIo
    ));
    assert_eq!(
        async_io::block_on(allocations_of(answers_at_once_in_time)),
        0
    );
}

#[retry(attempts = 3, idempotent, hedge = 1s)]
async fn succeeds_hedged(x: u64) -> Result<u64, Error> {
    pending_once().await;
    Ok(x + 1)
}

#[retry(attempts = 3, idempotent, hedge = p95)]
async fn succeeds_hedged_at_p95(x: u64) -> Result<u64, Error> {
    pending_once().await;
    Ok(x + 1)
}

/// A hedged call keeps its round (the first attempt, the timer of the
/// first hedge) in its own future: one that answers before any hedge is
/// sent allocates nothing, at a fixed delay or at a percentile learnt
/// from the calls before it.
#[test]
fn a_hedged_call_answered_before_its_first_hedge_does_not_allocate() {
    on_tokio(async {
        // (A percentile's delay is known after 100 calls: from then on
        // each round starts the timer of its first hedge.)
        for i in 0..200 {
            succeeds_hedged_at_p95(i).await.unwrap();
        }
        assert_eq!(allocations_of(succeeds_hedged).await, 0, "at a fixed delay");
        assert_eq!(allocations_of(succeeds_hedged_at_p95).await, 0, "at p95");
    });
}

/// One call of each closure form, sync and async: the free functions
/// (the defaults, their call site's budget), a `Retry`'s, and a named
/// `Retry`'s (its metric labels made on its first call).
async fn closures(policy: &backstop::Policy, retry: &backstop::Retry<'_>, i: u64) -> u64 {
    let named = retry.name("orders");
    let sync = backstop::call(policy, || Ok::<_, Error>(i + 1)).unwrap()
        + retry.call(|| Ok::<_, Error>(i + 1)).unwrap()
        + named.call(|| Ok::<_, Error>(i + 1)).unwrap();
    let free = backstop::call_async(policy, || async move { Ok::<_, Error>(i + 1) });
    let built = retry.call_async(|| async move { Ok::<_, Error>(i + 1) });
    let named = named.call_async(|| async move { Ok::<_, Error>(i + 1) });
    sync + free.await.unwrap() + built.await.unwrap() + named.await.unwrap()
}

#[test]
fn the_closure_forms_success_path_does_not_allocate() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let policy = backstop::Policy::new().attempts(5);
        let retry = backstop::Retry::new(&policy);
        // (A call site's budget is found in its table on its first call.)
        closures(&policy, &retry, 0).await;
        let before = allocations();
        let mut sum = 0;
        for i in 0..1000 {
            sum += closures(&policy, &retry, i).await;
        }
        assert_eq!(sum, 6 * 500_500);
        assert_eq!(allocations() - before, 0);
    });
}

#[test]
fn the_counter_counts() {
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 64]);
    assert!(allocations() > before, "a Vec must register: {v:?}");
}

#[retry(attempts = 5, key = shard)]
fn keyed_by_number(shard: u64, x: u64) -> Result<u64, Error> {
    let _ = shard;
    Ok(x + 1)
}

/// A subscriber interested in everything, that keeps nothing.
struct Enabled;

impl tracing::Subscriber for Enabled {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// With a subscriber, a keyed call's span is told its key's name, named
/// or `(other)`, without a lock or an allocation.
#[test]
fn a_keyed_success_path_told_to_a_subscriber_does_not_allocate() {
    tracing::subscriber::with_default(Enabled, || {
        // More keys than have names: the later ones are `(other)`.
        for shard in 0..20_000 {
            keyed_by_number(shard, 0).unwrap();
        }
        let before = allocations();
        let mut sum = 0;
        for i in 0..1000 {
            // Named keys, and keys without a name.
            let shard = if i % 2 == 0 { i % 8 } else { 19_992 + i % 8 };
            sum += keyed_by_number(shard, i).unwrap();
        }
        assert_eq!(sum, 500_500);
        assert_eq!(allocations() - before, 0);
    });
}
