//! A timer thread of the crate's own, for the async loops that find no
//! timer to sleep on: the feature `tokio` alone outside a tokio runtime (a
//! program on smol, async-std or `futures::executor` that did not enable
//! `async-io`), or the feature `custom-timer` before a timer is set. It is
//! started at the first such sleep (an attempt's cut-off included), tried
//! again at the next if it could not be, and sleeps until the earliest sleep
//! it holds is due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A sleep the thread holds until it is due: whether it is (set with the
/// heap held, as it leaves the heap), whether it was dropped before, and
/// whom to wake.
struct Sleeper {
    due: AtomicBool,
    dropped: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Sleeper {
    fn wake(&self) {
        // Taken first: woken without the lock held (a waker may poll the
        // sleep again at once).
        let waker = lock(&self.waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A sleep in the thread's heap: by its instant, then by its order of
/// arrival.
struct Entry {
    at: Instant,
    order: u64,
    sleeper: Arc<Sleeper>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The sleeps held, earliest first; how many have come; how many of
/// those held were dropped before they were due (left in the heap until
/// they are many: a call that succeeds drops its attempt's cut-off).
struct Heap {
    entries: BinaryHeap<Reverse<Entry>>,
    arrived: u64,
    dropped: usize,
}

static HEAP: Mutex<Heap> = Mutex::new(Heap {
    entries: BinaryHeap::new(),
    arrived: 0,
    dropped: 0,
});

/// Below this many sleeps held, dropped ones wait to be due.
const COMPACT_ABOVE: usize = 64;

/// Told when a sleep earlier than every other arrives.
static EARLIER: Condvar = Condvar::new();

/// Held while the thread is started.
static STARTING: Mutex<()> = Mutex::new(());

/// Whether the thread runs (it could not be started where a program has
/// no threads, or has none to spare: tried again at the next sleep).
static RUNNING: AtomicBool = AtomicBool::new(false);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wakes each sleep as it is due, forever.
fn run() {
    let mut heap = lock(&HEAP);
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while heap.entries.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(entry)) = heap.entries.pop() {
                if entry.sleeper.dropped.load(Ordering::Relaxed) {
                    // (Its waker was taken as it was dropped: nothing of
                    // a caller's is dropped here, with the heap held.)
                    heap.dropped = heap.dropped.saturating_sub(1);
                } else {
                    entry.sleeper.due.store(true, Ordering::Release);
                    due.push(entry.sleeper);
                }
            }
        }
        if !due.is_empty() {
            // Woken without the heap held: a waker may run an executor's
            // code, which may sleep again, or drop a task that holds a
            // sleep. A waker that panics loses its own wake, not the
            // thread.
            drop(heap);
            for sleeper in due {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sleeper.wake()));
            }
            heap = lock(&HEAP);
            continue;
        }
        heap = match heap.entries.peek() {
            Some(Reverse(next)) => {
                let wait = next.at.saturating_duration_since(now);
                EARLIER
                    .wait_timeout(heap, wait)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => EARLIER.wait(heap).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Starts the thread if it does not run; whether it runs.
fn started() -> bool {
    if RUNNING.load(Ordering::Acquire) {
        return true;
    }
    let started = {
        let _starting = lock(&STARTING);
        if RUNNING.load(Ordering::Acquire) {
            return true;
        }
        let spawned = std::thread::Builder::new()
            .name("backstop-timer".into())
            .spawn(run)
            .is_ok();
        RUNNING.store(spawned, Ordering::Release);
        spawned
    };
    #[cfg(debug_assertions)]
    if started {
        note!(
            "backstop: an async retry loop found no timer to sleep on (no tokio runtime here, \
             and neither the feature `async-io` nor a timer set with \
             `backstop::time::set_timer`): its sleeps and cut-offs go on a timer thread of \
             backstop's own. On smol or async-std, enable the feature `async-io`. Said once; \
             debug builds only."
        );
    }
    started
}

/// A sleep of `delay` on the thread, from now; `None` if the thread
/// cannot run.
pub(crate) fn sleep(delay: Duration) -> Option<ThreadSleep> {
    started().then(|| ThreadSleep {
        at: Instant::now().checked_add(delay),
        sleeper: None,
    })
}

/// A sleep on the thread, registered at its first poll.
pub(crate) struct ThreadSleep {
    /// When it is due (`None`: never, a delay past the end of time).
    at: Option<Instant>,
    sleeper: Option<Arc<Sleeper>>,
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(at) = self.at else {
            return Poll::Pending;
        };
        if let Some(sleeper) = &self.sleeper {
            if sleeper.due.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            // (A waker is the executor's code: cloned and dropped with no
            // lock held, as in `drop`.)
            let new = cx.waker().clone();
            let replaced = {
                let mut waker = lock(&sleeper.waker);
                match &*waker {
                    Some(old) if old.will_wake(&new) => Some(new),
                    _ => waker.replace(new),
                }
            };
            drop(replaced);
            // Due while the waker changed: the thread took the old one.
            return if sleeper.due.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            };
        }
        if Instant::now() >= at {
            return Poll::Ready(());
        }
        let sleeper = Arc::new(Sleeper {
            due: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            waker: Mutex::new(Some(cx.waker().clone())),
        });
        let mut heap = lock(&HEAP);
        let earliest = heap.entries.peek().is_none_or(|Reverse(e)| at < e.at);
        let order = heap.arrived;
        heap.arrived = heap.arrived.wrapping_add(1);
        heap.entries.push(Reverse(Entry {
            at,
            order,
            sleeper: Arc::clone(&sleeper),
        }));
        drop(heap);
        if earliest {
            EARLIER.notify_one();
        }
        self.sleeper = Some(sleeper);
        Poll::Pending
    }
}

impl Drop for ThreadSleep {
    fn drop(&mut self) {
        let Some(sleeper) = &self.sleeper else {
            return;
        };
        // Its waker is taken first and dropped last, with no lock held: a
        // waker may own a task that holds another sleep, whose drop takes
        // the heap. (A sleep marked dropped below holds no waker, so the
        // thread and the compaction drop none with the heap held.)
        let waker = lock(&sleeper.waker).take();
        {
            let mut heap = lock(&HEAP);
            // (`due` is set with the heap held: not due, it is still
            // there.)
            if !sleeper.due.load(Ordering::Acquire) {
                sleeper.dropped.store(true, Ordering::Relaxed);
                heap.dropped = heap.dropped.saturating_add(1);
                if heap.entries.len() > COMPACT_ABOVE
                    && heap.dropped.saturating_mul(2) > heap.entries.len()
                {
                    heap.entries
                        .retain(|Reverse(e)| !e.sleeper.dropped.load(Ordering::Relaxed));
                    heap.dropped = 0;
                }
            }
        }
        drop(waker);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::mpsc::channel;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};

    use super::sleep;

    /// Wakes the thread that waits.
    struct Unpark(std::thread::Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Taken by the tests that fill the heap, count what it holds, time
    /// it, or make it panic (a panic's report takes the thread's time).
    static TURNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn waker() -> Waker {
        Waker::from(Arc::new(Unpark(std::thread::current())))
    }

    /// Runs `future` to its end on this thread, parked between polls (no
    /// runtime at all).
    pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
        let waker = waker();
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park();
        }
    }

    /// Runs `body` on a thread of its own, failing (not hanging) if it
    /// has not ended within ten seconds.
    fn within_ten_seconds(what: &str, body: impl FnOnce() + Send + 'static) {
        let (done, finished) = channel();
        std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(10)).is_ok(),
            "{what}: hung, or failed"
        );
    }

    /// A sleep given after a longer one is woken when it is due, not when
    /// the longer one is (the thread, waiting for the long one alone, is
    /// told of the earlier arrival).
    #[test]
    fn a_sleep_ends_when_due_though_a_longer_one_came_first() {
        let _turn = super::lock(&TURNS);
        within_ten_seconds("the short sleep", || {
            // The thread runs, and then waits for the long sleep alone.
            block_on(sleep(Duration::from_millis(1)).expect("a thread"));
            let mut long = sleep(Duration::from_secs(2)).expect("a thread");
            let waker = waker();
            let cx = &mut Context::from_waker(&waker);
            assert!(Pin::new(&mut long).poll(cx).is_pending());
            std::thread::sleep(Duration::from_millis(2));
            let start = Instant::now();
            block_on(sleep(Duration::from_millis(5)).expect("a thread"));
            let short = start.elapsed();
            assert!(short >= Duration::from_millis(5), "{short:?}");
            assert!(short < Duration::from_secs(1), "{short:?}");
            assert!(Pin::new(&mut long).poll(cx).is_pending(), "not due yet");
        });
    }

    /// Sleeps on several threads at once each end once due.
    #[test]
    fn sleeps_on_several_threads_each_end_once_due() {
        within_ten_seconds("the sleeps", || {
            std::thread::scope(|threads| {
                for ms in [30u64, 10, 20, 10] {
                    threads.spawn(move || {
                        let start = Instant::now();
                        block_on(sleep(Duration::from_millis(ms)).expect("a thread"));
                        assert!(start.elapsed() >= Duration::from_millis(ms));
                    });
                }
            });
        });
    }

    /// Threads sleeping and dropping sleeps at once, hundreds each: every
    /// sleep kept ends once due, none hangs.
    #[test]
    fn many_threads_sleeping_and_dropping_at_once_all_end() {
        within_ten_seconds("the sleeps", || {
            std::thread::scope(|threads| {
                for t in 0..6u64 {
                    threads.spawn(move || {
                        let waker = waker();
                        for i in 0..150u64 {
                            let delay = Duration::from_micros((t * 37 + i * 101) % 1500);
                            let start = Instant::now();
                            let mut nap = sleep(delay).expect("a thread");
                            if i % 3 == 0 {
                                // Registered, then dropped before it is due.
                                let cx = &mut Context::from_waker(&waker);
                                let _ = Pin::new(&mut nap).poll(cx);
                                continue;
                            }
                            block_on(nap);
                            assert!(start.elapsed() >= delay);
                        }
                    });
                }
            });
        });
    }

    /// A waker may own a task that holds a sleep of its own (an executor's
    /// `Arc<Task>`): dropping sleeps whose wakers own others, enough of
    /// them to compact the heap, never takes the heap's lock twice.
    #[test]
    fn dropping_sleeps_whose_wakers_own_other_sleeps_does_not_deadlock() {
        // (Held, never read: it goes when the waker does.)
        struct Owner(#[allow(dead_code)] std::sync::Mutex<Option<super::ThreadSleep>>);
        impl Wake for Owner {
            fn wake(self: Arc<Self>) {}
        }
        let _turn = super::lock(&TURNS);
        within_ten_seconds("dropping the sleeps", || {
            let plain = waker();
            let mut held_by_owners = Vec::new();
            for _ in 0..2 * super::COMPACT_ABOVE {
                let mut inner = sleep(Duration::from_secs(3600)).expect("a thread");
                let cx = &mut Context::from_waker(&plain);
                assert!(Pin::new(&mut inner).poll(cx).is_pending());
                let owner = Waker::from(Arc::new(Owner(std::sync::Mutex::new(Some(inner)))));
                let mut held = sleep(Duration::from_secs(3600)).expect("a thread");
                let cx = &mut Context::from_waker(&owner);
                assert!(Pin::new(&mut held).poll(cx).is_pending());
                held_by_owners.push(held);
            }
            // Then as many plain ones: past half of what the heap holds,
            // dropped, it compacts.
            let mut plain_sleeps = Vec::new();
            for _ in 0..2 * super::COMPACT_ABOVE {
                let mut nap = sleep(Duration::from_secs(3600)).expect("a thread");
                let cx = &mut Context::from_waker(&plain);
                assert!(Pin::new(&mut nap).poll(cx).is_pending());
                plain_sleeps.push(nap);
            }
            drop(held_by_owners);
            drop(plain_sleeps);
        });
    }

    /// A waker that panics loses its own wake, not the thread: later
    /// sleeps still end.
    #[test]
    fn a_waker_that_panics_does_not_stop_the_thread() {
        struct Panics;
        impl Wake for Panics {
            fn wake(self: Arc<Self>) {
                panic!("a waker that panics, as this test means it to");
            }
        }
        let _turn = super::lock(&TURNS);
        let panics = Waker::from(Arc::new(Panics));
        let mut doomed = sleep(Duration::from_millis(1)).expect("a thread");
        let cx = &mut Context::from_waker(&panics);
        assert!(Pin::new(&mut doomed).poll(cx).is_pending());
        within_ten_seconds("a sleep after the panic", || {
            block_on(sleep(Duration::from_millis(20)).expect("a thread"));
        });
        drop(doomed);
    }

    /// Sleeps dropped before they are due (an attempt's cut-off, once the
    /// attempt is over) leave the heap once they are more than half of it.
    #[test]
    fn sleeps_dropped_before_they_are_due_leave_the_heap() {
        let _turn = super::lock(&TURNS);
        let waker = waker();
        for _ in 0..1000 {
            let mut cut_off = sleep(Duration::from_secs(3600)).expect("a thread");
            let cx = &mut Context::from_waker(&waker);
            assert!(Pin::new(&mut cut_off).poll(cx).is_pending());
        }
        // (Other tests' sleeps may be held too, a few at a time.)
        let held = super::lock(&super::HEAP).entries.len();
        assert!(held <= 2 * super::COMPACT_ABOVE, "{held} held");
    }

    /// A sleep dropped before it is due is passed over, waking no one, and
    /// a later sleep still ends.
    #[test]
    fn a_sleep_dropped_before_it_is_due_keeps_the_others_going() {
        let mut dropped = sleep(Duration::from_millis(5)).expect("a thread");
        let waker = waker();
        let cx = &mut Context::from_waker(&waker);
        assert!(Pin::new(&mut dropped).poll(cx).is_pending());
        drop(dropped);
        within_ten_seconds("a later sleep", || {
            let start = Instant::now();
            block_on(sleep(Duration::from_millis(10)).expect("a thread"));
            assert!(start.elapsed() >= Duration::from_millis(10));
        });
    }
}
