//! Features `tracing` and `metrics`: what a subscriber and a recorder see.
//! Run with `cargo test -p backstop --features tracing,metrics --test telemetry`.

use std::collections::BTreeMap;
use std::io::{Error, ErrorKind};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use backstop::retry;

type Fields = BTreeMap<String, String>;

/// One test at a time: `tracing` caches each callsite's interest globally,
/// and a test running without a subscriber beside one with a scoped
/// subscriber can make it skip events.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records spans and events with their fields.
#[derive(Default)]
struct Capture {
    next: AtomicU64,
    spans: Mutex<BTreeMap<u64, (String, Fields)>>,
    events: Mutex<Vec<(Option<u64>, Fields)>>,
    /// Each event's level, in order.
    levels: Mutex<Vec<tracing::Level>>,
    /// The spans entered, innermost last.
    entered: Mutex<Vec<u64>>,
    /// Each span's parent, if it has one.
    parents: Mutex<BTreeMap<u64, u64>>,
    /// Spans made (`"new"`) and handles of them dropped (`"close"`), in
    /// order.
    lifecycle: Mutex<Vec<(&'static str, u64)>>,
    /// Each span's fields as it was made (before any `record`).
    born: Mutex<BTreeMap<u64, Fields>>,
}

struct Visitor<'a>(&'a mut Fields);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self.next.fetch_add(1, Relaxed) + 1;
        let mut fields = Fields::new();
        span.record(&mut Visitor(&mut fields));
        let name = span.metadata().name().to_owned();
        self.born.lock().unwrap().insert(id, fields.clone());
        self.spans.lock().unwrap().insert(id, (name, fields));
        let parent = match span.parent() {
            Some(explicit) => Some(explicit.into_u64()),
            None if span.is_contextual() => self.entered.lock().unwrap().last().copied(),
            None => None,
        };
        if let Some(parent) = parent {
            self.parents.lock().unwrap().insert(id, parent);
        }
        self.lifecycle.lock().unwrap().push(("new", id));
        tracing::span::Id::from_u64(id)
    }
    fn try_close(&self, span: tracing::span::Id) -> bool {
        self.lifecycle
            .lock()
            .unwrap()
            .push(("close", span.into_u64()));
        true
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(&span.into_u64()) {
            values.record(&mut Visitor(fields));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let parent = match event.parent() {
            Some(explicit) => Some(explicit.into_u64()),
            None if event.is_contextual() => self.entered.lock().unwrap().last().copied(),
            None => None,
        };
        self.events.lock().unwrap().push((parent, fields));
        self.levels.lock().unwrap().push(*event.metadata().level());
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.entered.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, span: &tracing::span::Id) {
        let mut entered = self.entered.lock().unwrap();
        if let Some(at) = entered.iter().rposition(|&id| id == span.into_u64()) {
            entered.remove(at);
        }
    }
}

#[retry(attempts = 3, jitter = none, budget = none)]
fn fetch_user() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[retry(attempts = 2, base = std::time::Duration::from_micros(123_400), jitter = none, budget = none)]
fn fetch_odd_delay() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[retry(attempts = 2, jitter = none, budget = none, key = shard)]
fn keyed_lookup(shard: u32) -> Result<(), Error> {
    let _ = shard;
    Err(ErrorKind::ConnectionRefused.into())
}

/// A call's span is made with its function and its key, not filled in
/// afterwards: a subscriber that prints spans as they are made (`fmt`'s
/// `FmtSpan::NEW`) sees them.
#[test]
fn a_calls_span_is_made_with_its_function_and_key() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = keyed_lookup(7);
    });
    let spans = capture.spans.lock().unwrap();
    let born = capture.born.lock().unwrap();
    let (id, (_, fields)) = spans
        .iter()
        .find(|(_, (name, _))| name == "retry")
        .expect("a span for the call");
    assert_eq!(
        born[id].get("function").map(String::as_str),
        Some("telemetry::keyed_lookup"),
        "{born:?}"
    );
    assert!(fields.contains_key("key"), "{fields:?}");
    assert_eq!(born[id].get("key"), fields.get("key"), "{born:?}");
}

#[test]
fn a_delay_reads_in_milliseconds_as_written() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = fetch_odd_delay();
    });
    let events = capture.events.lock().unwrap();
    let delay = events[0].1.get("delay_ms").map(String::as_str);
    // Not 123.39999999999999: one rounding, not two.
    assert_eq!(delay, Some("123.4"), "{events:?}");
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What a subscriber sees of `call`, run in virtual time.
fn captured(call: impl FnOnce()) -> Arc<Capture> {
    let _vt = backstop::testing::VirtualTime::start();
    let capture = Arc::new(Capture::default());
    tracing::subscriber::with_default(Arc::clone(&capture), call);
    capture
}

#[test]
fn a_span_per_call_and_an_event_per_retry_and_give_up() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = fetch_user();
    });
    let spans = capture.spans.lock().unwrap();
    assert_eq!(spans.len(), 1, "one span for the call: {spans:?}");
    let (&id, (name, span_fields)) = spans.iter().next().unwrap();
    assert_eq!(name, "retry");
    assert_eq!(
        span_fields,
        &fields(&[("function", "telemetry::fetch_user")])
    );
    let events = capture.events.lock().unwrap();
    let expected = [
        fields(&[
            ("message", "retrying"),
            ("function", "telemetry::fetch_user"),
            ("attempt", "1"),
            ("delay_ms", "100.0"),
            ("verdict", "Refused"),
            ("error", "connection refused"),
        ]),
        fields(&[
            ("message", "retrying"),
            ("function", "telemetry::fetch_user"),
            ("attempt", "2"),
            ("delay_ms", "200.0"),
            ("verdict", "Refused"),
            ("error", "connection refused"),
        ]),
        fields(&[
            ("message", "giving up"),
            ("function", "telemetry::fetch_user"),
            ("attempts", "3"),
            ("reason", "attempts"),
            ("error", "connection refused"),
        ]),
    ];
    assert_eq!(events.len(), 3, "{events:?}");
    for ((parent, got), want) in events.iter().zip(&expected) {
        assert_eq!(*parent, Some(id), "events belong to the call's span");
        assert_eq!(got, want);
    }
}

#[retry(
    attempts = 2,
    jitter = none,
    budget = none,
    on_retry = |e| tracing::warn!(attempt = e.attempt(), "hook: retrying"),
    on_give_up = |e| tracing::error!(attempts = e.attempts(), "hook: giving up"),
)]
fn logged() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

/// The events the tests' hooks logged ("hook: …"), with their parents.
fn hook_events(capture: &Capture) -> Vec<(Option<u64>, Fields)> {
    let events = capture.events.lock().unwrap();
    events
        .iter()
        .filter(|(_, f)| f["message"].starts_with("hook:"))
        .cloned()
        .collect()
}

#[test]
fn what_the_hooks_log_belongs_to_the_call() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = logged();
    });
    let spans = capture.spans.lock().unwrap();
    let (&id, _) = spans.iter().next().unwrap();
    let hooks = hook_events(&capture);
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    for (parent, fields) in hooks {
        assert_eq!(parent, Some(id), "{fields:?} outside the call's span");
    }
}

/// The builder's hooks, like the attribute's, run in the call's span:
/// sync and async alike.
#[test]
fn what_the_hooks_of_a_retry_log_belongs_to_the_call() {
    let _serial = serial();
    let policy = backstop::Policy::new()
        .attempts(2)
        .jitter(backstop::Jitter::None)
        .no_budget();
    let retry = backstop::Retry::new(&policy)
        .on_retry(|e: &backstop::RetryEvent<'_, (), Error>| {
            tracing::warn!(attempt = e.attempt(), "hook: retrying");
        })
        .on_give_up(|e: &backstop::GiveUpEvent<'_, (), Error>| {
            tracing::error!(attempts = e.attempts(), "hook: giving up");
        });
    let refused = || Err::<(), _>(Error::from(ErrorKind::ConnectionRefused));
    let capture = captured(|| {
        let _ = retry.call(refused);
        let runtime = paused_runtime();
        let _ = runtime.block_on(retry.call_async(|| async { refused() }));
    });
    let spans = capture.spans.lock().unwrap();
    assert_eq!(spans.len(), 2, "a span per call");
    let hooks = hook_events(&capture);
    assert_eq!(hooks.len(), 4, "{hooks:?}");
    for (parent, fields) in hooks {
        assert!(
            parent.is_some_and(|id| spans.contains_key(&id)),
            "{fields:?} outside the call's span"
        );
    }
}

/// Counters and histograms, by name and labels.
#[derive(Default)]
struct Recorder {
    /// The metrics described to it, by name.
    described: Mutex<Vec<String>>,
    counters: Mutex<BTreeMap<String, Arc<Counter>>>,
    histograms: Mutex<BTreeMap<String, Arc<Histogram>>>,
    gauges: Mutex<BTreeMap<String, Arc<Gauge>>>,
}

/// A gauge's value; on the thread named `slow`, its first `set` can be
/// `held` until told to go on, as a thread preempted between a change and
/// its telling would be.
#[derive(Default)]
struct Gauge(Mutex<f64>, Held);

type Held = Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>;

impl metrics::GaugeFn for Gauge {
    fn increment(&self, value: f64) {
        *self.0.lock().unwrap() += value;
    }
    fn decrement(&self, value: f64) {
        *self.0.lock().unwrap() -= value;
    }
    fn set(&self, value: f64) {
        if std::thread::current().name() == Some("slow")
            && let Some((reached, go)) = self.1.lock().unwrap().take()
        {
            reached.send(()).unwrap();
            go.recv().unwrap();
        }
        *self.0.lock().unwrap() = value;
    }
}

#[derive(Default)]
struct Counter(AtomicU64);

impl metrics::CounterFn for Counter {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Relaxed);
    }
}

#[derive(Default)]
struct Histogram(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Histogram {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn key_text(key: &metrics::Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.described.lock().unwrap().push(key.as_str().to_owned());
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let counter = Arc::clone(
            self.counters
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default(),
        );
        metrics::Counter::from_arc(counter)
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        let gauge = Arc::clone(
            self.gauges
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default(),
        );
        metrics::Gauge::from_arc(gauge)
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        let histogram = Arc::clone(
            self.histograms
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default(),
        );
        metrics::Histogram::from_arc(histogram)
    }
}

static TIGHT: backstop::limit::WindowBudget =
    backstop::limit::WindowBudget::new(0.1, 1, std::time::Duration::from_secs(1));

#[retry(attempts = 3, jitter = none, budget = TIGHT)]
fn get_order(fail: bool) -> Result<(), Error> {
    if fail {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(())
}

#[test]
fn counters_and_histograms_per_function() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let _ = get_order(false); // one attempt
        let _ = get_order(true); // the reserve of one retry: 2 attempts, then the budget
    });
    let counters: BTreeMap<String, u64> = recorder
        .counters
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.0.load(Relaxed)))
        .collect();
    let expected: BTreeMap<String, u64> = [
        // Counted as it ended: the first answered, the second gave up.
        (
            "backstop_calls_total{function=telemetry::get_order,outcome=ok}",
            1,
        ),
        (
            "backstop_calls_total{function=telemetry::get_order,outcome=error}",
            1,
        ),
        ("backstop_retries_total{function=telemetry::get_order}", 1),
        (
            "backstop_give_ups_total{function=telemetry::get_order,reason=budget}",
            1,
        ),
        (
            "backstop_budget_refusals_total{function=telemetry::get_order}",
            1,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(counters, expected);
    let histograms: BTreeMap<String, Vec<f64>> = recorder
        .histograms
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.0.lock().unwrap().clone()))
        .collect();
    assert_eq!(
        histograms["backstop_attempts{function=telemetry::get_order}"],
        [1.0, 2.0]
    );
    assert_eq!(
        histograms["backstop_slept_seconds{function=telemetry::get_order}"],
        [0.0, 0.1]
    );
}

/// A call made without the attribute and not named reports as
/// `anonymous`; named, as its name.
#[test]
fn an_unnamed_call_reports_as_anonymous_and_a_named_one_by_its_name() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    let policy = backstop::Policy::new().no_budget();
    metrics::with_local_recorder(&recorder, || {
        for name in [None, Some("ping")] {
            let mut failures = 1;
            let retry = backstop::Retry::new(&policy);
            let retry = match name {
                Some(name) => retry.name(name),
                None => retry,
            };
            let out = retry.call(|| {
                if failures > 0 {
                    failures -= 1;
                    return Err(Error::from(ErrorKind::ConnectionRefused));
                }
                Ok(())
            });
            assert!(out.is_ok());
        }
    });
    let counters = counters(&recorder);
    for function in ["anonymous", "ping"] {
        // Counted as it retried, and as it ended (with the labels kept
        // for nobody's name and for a name given at run time).
        for metric in [
            format!("backstop_retries_total{{function={function}}}"),
            format!("backstop_calls_total{{function={function},outcome=ok}}"),
        ] {
            assert_eq!(counters.get(&metric), Some(&1), "{counters:#?}");
        }
    }
}

fn gauges(recorder: &Recorder) -> BTreeMap<String, f64> {
    recorder
        .gauges
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), *v.0.lock().unwrap()))
        .collect()
}

#[retry(attempts = 2, base = 1ms, budget = none, when_ok = |status: &u16| *status == 503)]
fn status(answer: u16) -> Result<u16, Error> {
    Ok(answer)
}

/// A call's end is counted by how it went: an `Ok` that `when_ok`
/// retries until the call gives up on it is an `error`, one it accepts is
/// `ok`.
#[test]
fn a_call_that_gives_up_on_an_ok_value_ends_as_an_error() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        assert_eq!(status(503).unwrap(), 503);
        assert_eq!(status(200).unwrap(), 200);
        assert_eq!(status(200).unwrap(), 200);
    });
    let calls: BTreeMap<String, u64> = counters(&recorder)
        .into_iter()
        .filter(|(k, _)| k.starts_with("backstop_calls_total"))
        .collect();
    let expected: BTreeMap<String, u64> = [
        (
            "backstop_calls_total{function=telemetry::status,outcome=error}",
            1,
        ),
        (
            "backstop_calls_total{function=telemetry::status,outcome=ok}",
            2,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(calls, expected);
}

/// A current-thread tokio runtime on a paused clock.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn counters(recorder: &Recorder) -> BTreeMap<String, u64> {
    recorder
        .counters
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.0.load(Relaxed)))
        .collect()
}

#[derive(Debug)]
struct Down;

impl backstop::Classify for Down {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Retry
    }
}

impl From<backstop::CircuitOpen> for Down {
    fn from(_: backstop::CircuitOpen) -> Self {
        Down
    }
}

static OPEN: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60));

#[retry(attempts = 2, budget = none, breaker = OPEN)]
fn rejected() -> Result<(), Down> {
    Err(Down)
}

static OPENED_BY_A_SYNC_CALL: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60))
        .named("opened-by-a-sync-call");

#[retry(attempts = 2, budget = none, jitter = none, breaker = OPENED_BY_A_SYNC_CALL)]
fn opens_its_breaker() -> Result<(), Down> {
    Err(Down)
}

/// A sync call's breaker tells its change of state inside the call's span,
/// as an async call's does (the decision is made between attempts, outside
/// the attempt's entry of the span): which function opened it is known.
#[test]
fn a_sync_calls_breaker_tells_its_changes_inside_the_calls_span() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = opens_its_breaker();
    });
    let spans = capture.spans.lock().unwrap();
    let calls: Vec<u64> = spans
        .iter()
        .filter(|(_, (name, _))| name == "retry")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(calls.len(), 1, "{spans:?}");
    let events = capture.events.lock().unwrap();
    let changes: Vec<Option<u64>> = events
        .iter()
        .filter(|(_, f)| f.get("breaker").map(String::as_str) == Some("opened-by-a-sync-call"))
        .map(|(parent, _)| *parent)
        .collect();
    assert_eq!(changes, [Some(calls[0])], "{events:?}");
}

#[retry(attempts = 100, base = 100ms, jitter = none, budget = none, deadline = none)]
async fn cancelled() -> Result<(), Error> {
    // Attempts run 0–100 ms and 200–300 ms: cancelled at 250 ms, during the second.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    Err(ErrorKind::ConnectionRefused.into())
}

#[retry(attempts = 3, budget = none)]
fn panics() -> Result<(), Error> {
    panic!("the attempt panicked");
}

#[test]
fn every_way_a_call_ends_is_counted() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let _ = rejected(); // opens the breaker: 1 attempt, breaker_open
        let _ = rejected(); // rejected before its first attempt
        let _ = std::panic::catch_unwind(panics);
        let rt = paused_runtime();
        rt.block_on(async {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(250), cancelled()).await;
            // Dropped in their sleep after attempt 1 (100–200 ms), the
            // attribute's and the closure form's.
            let ms = std::time::Duration::from_millis;
            let _ = tokio::time::timeout(ms(150), asleep()).await;
            let policy = backstop::Policy::new()
                .base(ms(100))
                .jitter(backstop::Jitter::None)
                .no_budget();
            let retry = backstop::Retry::new(&policy).name("telemetry::asleep_closure");
            let closure = retry.call_async(|| async {
                tokio::time::sleep(ms(100)).await;
                Err::<(), Error>(ErrorKind::ConnectionRefused.into())
            });
            let _ = tokio::time::timeout(ms(150), closure).await;
        });
    });
    let counters = counters(&recorder);
    assert_eq!(
        counters["backstop_calls_total{function=telemetry::rejected,outcome=error}"],
        2
    );
    // The first call failed and wanted a retry the open breaker refused: a
    // give-up. The second was turned away before its first attempt: a
    // rejection (nothing was sent, nothing given up).
    assert_eq!(
        counters["backstop_give_ups_total{function=telemetry::rejected,reason=breaker_open}"],
        1
    );
    assert_eq!(
        counters["backstop_rejections_total{function=telemetry::rejected,reason=breaker_open}"],
        1
    );
    assert_eq!(
        counters["backstop_calls_total{function=telemetry::panics,outcome=dropped}"], 1,
        "{counters:?}"
    );
    assert_eq!(
        counters["backstop_calls_total{function=telemetry::cancelled,outcome=dropped}"], 1,
        "{counters:?}"
    );
    let histograms = recorder.histograms.lock().unwrap();
    let attempts = histograms["backstop_attempts{function=telemetry::rejected}"]
        .0
        .lock()
        .unwrap()
        .clone();
    assert_eq!(attempts, [1.0, 0.0], "the rejected call made no attempt");
    let panicked = histograms["backstop_attempts{function=telemetry::panics}"]
        .0
        .lock()
        .unwrap()
        .clone();
    assert_eq!(panicked, [1.0], "the attempt that panicked ran");
    let cancelled = histograms["backstop_attempts{function=telemetry::cancelled}"]
        .0
        .lock()
        .unwrap()
        .clone();
    assert_eq!(
        cancelled,
        [2.0],
        "one attempt, and the one running when cancelled"
    );
    // Dropped in a sleep: its one attempt made, its retry decided and
    // counted, its whole delay counted as slept.
    for function in ["telemetry::asleep", "telemetry::asleep_closure"] {
        assert_eq!(
            counters[&format!("backstop_calls_total{{function={function},outcome=dropped}}")],
            1,
            "{counters:?}"
        );
        assert_eq!(
            counters[&format!("backstop_retries_total{{function={function}}}")],
            1,
            "{counters:?}"
        );
        let attempts = histograms[&format!("backstop_attempts{{function={function}}}")]
            .0
            .lock()
            .unwrap()
            .clone();
        assert_eq!(attempts, [1.0], "{function}");
        let slept = histograms[&format!("backstop_slept_seconds{{function={function}}}")]
            .0
            .lock()
            .unwrap()
            .clone();
        assert_eq!(slept, [0.1], "{function}");
    }
}

#[retry(attempts = 3, base = 100ms, jitter = none, budget = none)]
async fn asleep() -> Result<(), Error> {
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    Err(ErrorKind::ConnectionRefused.into())
}

// --- names: the module path and the type ------------------------------------

struct Users;
struct Orders;
struct Repo<T>(T);

#[allow(clippy::unused_self)]
impl Users {
    #[retry(attempts = 2, budget = none)]
    fn get(&self) -> Result<(), Error> {
        Err(ErrorKind::ConnectionRefused.into())
    }
}

#[allow(clippy::unused_self)]
impl Orders {
    #[retry(attempts = 2, budget = none)]
    fn get(&self) -> Result<(), Error> {
        Err(ErrorKind::ConnectionRefused.into())
    }
}

impl<T> Repo<T> {
    #[retry(attempts = 2, budget = none)]
    async fn get(&self) -> Result<(), Error> {
        Err(ErrorKind::ConnectionRefused.into())
    }
}

trait Store {
    #[retry(attempts = 2, budget = none)]
    fn load(&self) -> Result<(), Error> {
        Err(ErrorKind::ConnectionRefused.into())
    }
}

impl Store for Users {}
impl Store for Orders {}

#[test]
fn same_named_methods_of_different_types_have_labels_of_their_own() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let _ = Users.get();
        let _ = Orders.get();
        let _ = Orders.get();
        let _ = Store::load(&Users);
        let _ = Store::load(&Orders);
        let rt = paused_runtime();
        rt.block_on(async {
            let _ = Repo(1_u8).get().await;
            let _ = Repo("one").get().await;
        });
    });
    let calls: BTreeMap<String, u64> = counters(&recorder)
        .into_iter()
        .filter(|(k, _)| k.starts_with("backstop_calls_total"))
        .collect();
    let expected: BTreeMap<String, u64> = [
        (
            "backstop_calls_total{function=telemetry::Users::get,outcome=error}",
            1,
        ),
        (
            "backstop_calls_total{function=telemetry::Orders::get,outcome=error}",
            2,
        ),
        (
            "backstop_calls_total{function=telemetry::Users::load,outcome=error}",
            1,
        ),
        (
            "backstop_calls_total{function=telemetry::Orders::load,outcome=error}",
            1,
        ),
        // Every instance of a generic type: one label.
        (
            "backstop_calls_total{function=telemetry::Repo::get,outcome=error}",
            2,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(calls, expected);
}

// --- what is not a give-up ----------------------------------------------------

#[retry(attempts = 3, jitter = none, base = 250us, budget = none)]
fn not_found(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    if *calls == 1 {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Err(ErrorKind::NotFound.into())
}

#[test]
fn a_first_attempt_that_no_retry_can_fix_is_not_a_give_up() {
    let _serial = serial();
    let recorder = Recorder::default();
    let capture = captured(|| {
        metrics::with_local_recorder(&recorder, || {
            // Fails with NotFound at once: not retried, nothing given up.
            let _ = not_found(&mut 1);
            // Retried once (after 250 µs), then NotFound: a give-up.
            let _ = not_found(&mut 0);
        });
    });
    let events = capture.events.lock().unwrap();
    let messages: Vec<(&str, &str)> = events
        .iter()
        .map(|(_, f)| {
            (
                f["message"].as_str(),
                f.get("delay_ms").or(f.get("reason")).unwrap().as_str(),
            )
        })
        .collect();
    assert_eq!(
        messages,
        [
            ("not retried", "stopped"),
            ("retrying", "0.25"),
            ("giving up", "stopped")
        ],
        "{events:?}"
    );
    assert_eq!(
        *capture.levels.lock().unwrap(),
        [
            tracing::Level::DEBUG,
            tracing::Level::INFO,
            tracing::Level::INFO
        ]
    );
    let counters = counters(&recorder);
    assert_eq!(
        counters["backstop_calls_total{function=telemetry::not_found,outcome=error}"],
        2
    );
    assert_eq!(
        counters["backstop_give_ups_total{function=telemetry::not_found,reason=stopped}"], 1,
        "{counters:?}"
    );
}

/// Attempt 1 answers `NotFound` after `first_ms`; a hedge, sent at 50 ms,
/// answers after 1 s.
/// What `on_give_up` was told of `hedged_not_found`: attempts, hedges.
static NOT_FOUND_TOLD: Mutex<Vec<(u32, u32)>> = Mutex::new(Vec::new());

#[retry(
    hedge = 50ms,
    idempotent,
    budget = none,
    jitter = none,
    on_give_up = |e| NOT_FOUND_TOLD.lock().unwrap().push((e.attempts(), e.hedges())),
)]
async fn hedged_not_found(first_ms: u64) -> Result<(), Error> {
    let attempt = backstop::context().unwrap().attempt();
    let took = if attempt == 1 { first_ms } else { 1_000 };
    tokio::time::sleep(std::time::Duration::from_millis(took)).await;
    Err(ErrorKind::NotFound.into())
}

/// A first round that ends with an error no retry can fix retried nothing,
/// whether a hedge was sent beside its attempt or not: how fast the
/// dependency said so does not make it a give-up.
#[test]
fn a_first_round_that_no_retry_can_fix_is_not_a_give_up_hedged_or_not() {
    let _serial = serial();
    let recorder = Recorder::default();
    let runtime = paused_runtime();
    let capture = captured(|| {
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                // Fast: answered before any hedge.
                assert!(hedged_not_found(10).await.is_err());
                // Slow: answered after a hedge was sent beside it.
                assert!(hedged_not_found(100).await.is_err());
            });
        });
    });
    let events = capture.events.lock().unwrap();
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|(_, f)| f.get("message").map(String::as_str))
        .collect();
    assert_eq!(
        messages,
        ["not retried", "hedging", "not retried"],
        "{events:?}"
    );
    // The hooks hear of both, with `attempts() == 1 + hedges()`.
    assert_eq!(*NOT_FOUND_TOLD.lock().unwrap(), [(1, 0), (2, 1)]);
    let counters = counters(&recorder);
    assert_eq!(
        counters["backstop_calls_total{function=telemetry::hedged_not_found,outcome=error}"],
        2
    );
    assert!(
        !counters
            .keys()
            .any(|k| k.starts_with("backstop_give_ups_total")),
        "{counters:?}"
    );
}

static TURNS_AWAY: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60));

#[retry(attempts = 2, budget = none, breaker = TURNS_AWAY)]
fn turned_away() -> Result<(), Down> {
    Err(Down)
}

#[test]
fn a_call_turned_away_before_its_first_attempt_is_a_debug_rejection() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = turned_away(); // fails, opens the breaker: a give-up
        let _ = turned_away(); // turned away: a rejection
    });
    let events = capture.events.lock().unwrap();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(_, f)| (f["message"].as_str(), f["reason"].as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            // The breaker tells its own change, outside the call's span.
            ("circuit breaker changed", "Failures"),
            ("giving up", "breaker_open"),
            ("rejected", "breaker_open")
        ],
        "{events:?}"
    );
    assert_eq!(
        *capture.levels.lock().unwrap(),
        [
            tracing::Level::WARN,
            // (After a single attempt: DEBUG, as the give-ups of the test
            // below.)
            tracing::Level::DEBUG,
            tracing::Level::DEBUG
        ]
    );
}

#[retry(attempts = 3, base = 1ms, budget = none)]
fn timed_out(attempts: &mut u32) -> Result<(), Error> {
    *attempts += 1;
    // Ambiguous: not retried, as the call is not idempotent; then (second
    // call) retried, as `NotConnected` is, and ambiguous after.
    if *attempts == 2 {
        return Err(ErrorKind::NotConnected.into());
    }
    Err(ErrorKind::TimedOut.into())
}

/// An outage fails every call: a give-up that told no retry (a single
/// attempt whose retry the budget or the breaker refused, or that was not
/// idempotent) is told at DEBUG, counted as any; one after a retry at
/// INFO. So INFO events are bounded by the retries the budget allows.
#[test]
fn a_give_up_that_retried_nothing_is_told_at_debug_and_counted() {
    let _serial = serial();
    let recorder = Recorder::default();
    let capture = captured(|| {
        metrics::with_local_recorder(&recorder, || {
            let _ = timed_out(&mut 0); // one attempt: not idempotent
            let _ = timed_out(&mut 1); // retried once, then not idempotent
        });
    });
    let events = capture.events.lock().unwrap();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .filter(|(_, f)| f["message"] == "giving up")
        .map(|(_, f)| (f["message"].as_str(), f["attempts"].as_str()))
        .collect();
    assert_eq!(seen, [("giving up", "1"), ("giving up", "2")], "{events:?}");
    let levels: Vec<_> = capture
        .levels
        .lock()
        .unwrap()
        .iter()
        .zip(events.iter())
        .filter(|(_, (_, f))| f["message"] == "giving up")
        .map(|(level, _)| *level)
        .collect();
    assert_eq!(levels, [tracing::Level::DEBUG, tracing::Level::INFO]);
    let counters = counters(&recorder);
    assert_eq!(
        counters["backstop_give_ups_total{function=telemetry::timed_out,reason=not_idempotent}"], 2,
        "{counters:?}"
    );
}

#[retry(attempts = 1)]
fn described() -> Result<(), Down> {
    Ok(())
}

/// The metrics are described to the recorder a call ends under, the first
/// time one does, and again to another: a recorder installed after calls
/// made without one (at start-up) is told them too.
#[test]
fn the_metrics_are_described_to_each_recorder_calls_end_under() {
    let _serial = serial();
    let _ = described(); // no recorder: described to none
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let _ = described();
        let _ = described(); // (once)
    });
    let names = recorder.described.lock().unwrap().clone();
    assert!(
        names.contains(&"backstop_calls_total".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "backstop_calls_total")
            .count(),
        1,
        "{names:?}"
    );
}

static OPENED_MEANWHILE: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(100, std::time::Duration::from_secs(60));

// Its retry is told; then, during the sleep, the breaker is opened (as
// other callers' failures would), and the retry is turned away.
#[retry(attempts = 3, budget = none, breaker = OPENED_MEANWHILE,
        on_retry = |_: &backstop::RetryEvent<'_, (), Down>| OPENED_MEANWHILE.hold_open())]
fn opened_meanwhile() -> Result<(), Down> {
    Err(Down)
}

/// A call that told a retry at INFO ends at INFO, whatever turned the
/// retry away after the sleep: every INFO `retrying` has an INFO end.
#[test]
fn a_call_that_told_a_retry_gives_up_at_info_whatever_came_after() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = opened_meanwhile();
    });
    OPENED_MEANWHILE.reset();
    let events = capture.events.lock().unwrap();
    let seen: Vec<(&str, tracing::Level)> = events
        .iter()
        .zip(capture.levels.lock().unwrap().iter())
        .filter(|((_, f), _)| f["message"] == "retrying" || f["message"] == "giving up")
        .map(|((_, f), level)| (f["message"].as_str(), *level))
        .collect();
    assert_eq!(
        seen,
        [
            ("retrying", tracing::Level::INFO),
            ("giving up", tracing::Level::INFO)
        ],
        "{events:?}"
    );
    let reason = events.iter().find(|(_, f)| f["message"] == "giving up");
    assert_eq!(
        reason
            .and_then(|(_, f)| f.get("reason"))
            .map(String::as_str),
        Some("breaker_open")
    );
}

/// Through the tower layer, each attempt has a span of its own inside the
/// call's, with its number and, on resends, OpenTelemetry's
/// `http.request.resend_count`; the response tells how many attempts it
/// took.
#[cfg(feature = "tower")]
#[test]
fn each_attempt_through_the_layer_has_a_span_and_the_response_counts_them() {
    use tower::{Layer, ServiceExt};
    let _serial = serial();
    let mut attempts = None;
    let capture = captured(|| {
        let runtime = paused_runtime();
        let statuses = Arc::new(Mutex::new(vec![200, 503, 503]));
        let inner = tower::service_fn(move |_: http::Request<_>| {
            let status = statuses.lock().unwrap().pop().unwrap();
            async move {
                tracing::info!(status, "answered");
                Ok::<_, Error>(http::Response::builder().status(status).body(()).unwrap())
            }
        });
        let service = backstop::tower::RetryLayer::http(
            backstop::Retry::new(&backstop::Policy::new()).name("users"),
        )
        .layer(inner);
        let request = http::Request::get("/users/7").body(String::new()).unwrap();
        let response = runtime.block_on(service.oneshot(request)).unwrap();
        attempts = response
            .extensions()
            .get::<backstop::http::Attempts>()
            .copied();
    });
    assert_eq!(attempts, Some(backstop::http::Attempts(3)));
    let spans = capture.spans.lock().unwrap();
    let attempt_spans: Vec<(u64, &Fields)> = spans
        .iter()
        .filter(|(_, (name, _))| name == "attempt")
        .map(|(id, (_, fields))| (*id, fields))
        .collect();
    let want = [
        fields(&[("attempt", "1")]),
        fields(&[("attempt", "2"), ("http.request.resend_count", "1")]),
        fields(&[("attempt", "3"), ("http.request.resend_count", "2")]),
    ];
    assert_eq!(
        attempt_spans
            .iter()
            .map(|s| s.1.clone())
            .collect::<Vec<_>>(),
        want
    );
    let events = capture.events.lock().unwrap();
    let answered: Vec<Option<u64>> = events
        .iter()
        .filter(|(_, f)| f.get("message").is_some_and(|m| m == "answered"))
        .map(|(parent, _)| *parent)
        .collect();
    let ids: Vec<Option<u64>> = attempt_spans.iter().map(|s| Some(s.0)).collect();
    assert_eq!(
        answered, ids,
        "what the inner service logs belongs to its attempt"
    );
    // An attempt's span ends with the attempt, not when the next begins:
    // the sleep before a retry is not the attempt's time.
    let lifecycle = capture.lifecycle.lock().unwrap();
    let at = |what: &str, id: u64| lifecycle.iter().position(|&(w, i)| w == what && i == id);
    for pair in attempt_spans.windows(2) {
        let (closed, next) = (at("close", pair[0].0), at("new", pair[1].0));
        assert!(
            closed.is_some_and(|closed| Some(closed) < next),
            "attempt {} closes before attempt {} begins: {lifecycle:?}",
            pair[0].1["attempt"],
            pair[1].1["attempt"]
        );
    }
}

mod support;

/// Through the reqwest middleware too: a span per attempt, with the
/// resends counted.
#[cfg(feature = "reqwest-middleware")]
#[test]
fn each_attempt_through_the_middleware_has_a_span() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let capture = Arc::new(Capture::default());
    let status = tracing::subscriber::with_default(Arc::clone(&capture), || {
        runtime.block_on(async {
            let (url, _) = support::serve(vec![(503, ""), (200, "")]).await;
            let policy = backstop::Policy::new().base(std::time::Duration::from_millis(1));
            let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(backstop::reqwest::RetryMiddleware::new(&policy))
                .build();
            client.get(&url).send().await.unwrap().status()
        })
    });
    assert_eq!(status, 200);
    let spans = capture.spans.lock().unwrap();
    let attempts: Vec<Fields> = spans
        .values()
        .filter(|(name, _)| name == "attempt")
        .map(|(_, fields)| fields.clone())
        .collect();
    assert_eq!(
        attempts,
        [
            fields(&[("attempt", "1")]),
            fields(&[("attempt", "2"), ("http.request.resend_count", "1")]),
        ]
    );
}

/// A request the layer cannot send again is a give-up of its own reason,
/// counted like the others.
#[cfg(feature = "tower")]
#[test]
fn a_request_that_cannot_be_sent_again_is_counted_as_not_replayable() {
    use tower::{Layer, ServiceExt};
    let _serial = serial();
    let recorder = Recorder::default();
    let runtime = paused_runtime();
    metrics::with_local_recorder(&recorder, || {
        let inner = tower::service_fn(
            |request: http::Request<backstop::tower::ReplayBody<_>>| async move {
                // Reads the whole body, then answers 503.
                let _ = http_body_util::BodyExt::collect(request.into_body()).await;
                Ok::<_, Error>(http::Response::builder().status(503).body(()).unwrap())
            },
        );
        let service = backstop::tower::RetryLayer::http(
            backstop::Retry::new(&backstop::Policy::new()).name("uploads"),
        )
        .layer(inner);
        // 65 KiB of unknown length: over the 64 KiB kept.
        let chunks = (0..65).map(|_| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from(
                vec![0u8; 1024],
            )))
        });
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let request = http::Request::put("/files/1").body(body).unwrap();
        let response = runtime.block_on(service.oneshot(request)).unwrap();
        assert_eq!(response.status(), 503);
    });
    let counters = counters(&recorder);
    assert_eq!(
        counters.get("backstop_give_ups_total{function=uploads,reason=not_replayable}"),
        Some(&1),
        "{counters:?}"
    );
}

/// Through the middleware too: a streamed body, which cannot be sent
/// again, ends the call on its first failure as a give-up of its own
/// reason, told and counted.
#[cfg(feature = "reqwest-middleware")]
#[test]
fn a_request_the_middleware_cannot_send_again_is_told_and_counted_as_not_replayable() {
    let _serial = serial();
    let recorder = Recorder::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let capture = Arc::new(Capture::default());
    let status = metrics::with_local_recorder(&recorder, || {
        tracing::subscriber::with_default(Arc::clone(&capture), || {
            runtime.block_on(async {
                let (url, _) = support::serve(vec![(503, ""), (200, "")]).await;
                let policy = backstop::Policy::new().base(std::time::Duration::from_millis(1));
                let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                    .with(backstop::reqwest::RetryMiddleware::new(
                        backstop::Retry::new(&policy).name("uploads"),
                    ))
                    .build();
                let chunks: Vec<Result<&'static [u8], std::io::Error>> = vec![Ok(b"{\"sku\": 7}")];
                let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
                client.put(&url).body(body).send().await.unwrap().status()
            })
        })
    });
    assert_eq!(status, 503);
    let counters = counters(&recorder);
    // (Labelled with the request's destination, as each of the
    // middleware's limits is kept.)
    let key = the_only_key(&counters);
    assert!(key.starts_with("http://127.0.0.1:"), "{key}");
    assert_eq!(
        counters.get(&format!(
            "backstop_give_ups_total{{function=uploads,key={key},reason=not_replayable}}"
        )),
        Some(&1),
        "{counters:?}"
    );
    assert_eq!(
        counters.get("backstop_calls_total{function=uploads,outcome=error}"),
        Some(&1),
        "{counters:?}"
    );
    let events = capture.events.lock().unwrap();
    let given_up: Vec<&Fields> = events
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f["message"] == "giving up")
        .collect();
    assert_eq!(given_up.len(), 1, "{events:?}");
    assert_eq!(
        given_up[0].get("reason").map(String::as_str),
        Some("not_replayable"),
        "{given_up:?}"
    );
    assert_eq!(given_up[0].get("status").map(String::as_str), Some("503"));
}

/// The one `key` label among `counters`.
#[cfg(feature = "reqwest-middleware")]
fn the_only_key(counters: &BTreeMap<String, u64>) -> String {
    let keys: Vec<&str> = counters
        .keys()
        .filter_map(|name| name.split("key=").nth(1)?.split([',', '}']).next())
        .collect();
    assert_eq!(keys.len(), 1, "{counters:?}");
    keys[0].to_owned()
}

#[retry(
    hedge = 50ms,
    idempotent,
    budget = none,
    jitter = none,
    on_retry = |e| HOOKED.lock().unwrap().push((e.attempt(), e.hedges())),
)]
async fn hedged(calls: &std::sync::atomic::AtomicU32) -> Result<u32, Error> {
    // The first call: attempt 1 and its hedge fail (retried), then 3 wins
    // alone. The second: attempt 1 is slow, its hedge wins.
    let attempt = backstop::context().unwrap().attempt();
    let call = calls.load(Relaxed);
    let (took, ok) = match (call, attempt) {
        (0, 1) => (60, false),
        (0, 2) => (20, false),
        (0, _) => (10, true),
        (_, 1) => (1_000, true),
        _ => (10, true),
    };
    tokio::time::sleep(std::time::Duration::from_millis(took)).await;
    if ok {
        Ok(attempt)
    } else {
        Err(ErrorKind::ConnectionRefused.into())
    }
}

static HOOKED: Mutex<Vec<(u32, u32)>> = Mutex::new(Vec::new());

#[test]
fn hedges_are_counted_told_to_the_hooks_and_logged() {
    let _serial = serial();
    let recorder = Recorder::default();
    let capture = Arc::new(Capture::default());
    let runtime = paused_runtime();
    let calls = std::sync::atomic::AtomicU32::new(0);
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                assert_eq!(hedged(&calls).await.unwrap(), 3);
                calls.store(1, Relaxed);
                assert_eq!(hedged(&calls).await.unwrap(), 2);
            });
        });
    });
    assert_eq!(
        *HOOKED.lock().unwrap(),
        [(2, 1)],
        "one retry, after attempt 2: one of the two was a hedge"
    );
    let counters = counters(&recorder);
    assert_eq!(
        counters["backstop_hedges_total{function=telemetry::hedged}"],
        2
    );
    assert_eq!(
        counters["backstop_hedge_wins_total{function=telemetry::hedged}"], 1,
        "the second call was won by its hedge"
    );
    let histograms = recorder.histograms.lock().unwrap();
    let attempts = histograms["backstop_attempts{function=telemetry::hedged}"]
        .0
        .lock()
        .unwrap()
        .clone();
    assert_eq!(attempts, [3.0, 2.0], "hedges are attempts");
    let events = capture.events.lock().unwrap();
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|(_, f)| f.get("message").map(String::as_str))
        .collect();
    assert_eq!(
        messages,
        [
            "hedging",
            "attempt failed, others still in flight",
            "retrying",
            "hedging",
            "a hedge answered first"
        ]
    );
    // A hedge tells the delay it was sent after, to tune it by.
    let delays: Vec<&str> = events
        .iter()
        .filter(|(_, f)| f.get("message").map(String::as_str) == Some("hedging"))
        .filter_map(|(_, f)| f.get("delay_ms").map(String::as_str))
        .collect();
    assert_eq!(delays, ["50.0", "50.0"]);
}

/// Layers built per request that each call on a token budget of their
/// own (requests without a destination) are warned about, once; layers
/// whose requests go to a destination (its budget is shared), layers never
/// called, and layers sharing a `static` budget are not.
#[cfg(feature = "tower")]
#[test]
fn many_layers_built_at_one_place_are_warned_about_once_in_debug_builds() {
    use backstop::tower::RetryLayer;
    use tower::{Layer, ServiceExt};
    static SHARED: backstop::limit::TokenBudget = backstop::limit::TokenBudget::standard();
    let _serial = serial();
    let policy = backstop::Policy::new();
    let runtime = paused_runtime();
    let inner = tower::service_fn(|x: u32| async move { Ok::<_, Error>(x) });
    let http_inner =
        tower::service_fn(|_: http::Request<_>| async { Ok::<_, Error>(http::Response::new(())) });
    let (mut warned_line, mut per_method_line) = (0, 0);
    let capture = captured(|| {
        runtime.block_on(async {
            // To a destination: its budget, whichever layer sends.
            for _ in 0..250 {
                let request = http::Request::get("http://per-request.test/")
                    .body(String::new())
                    .unwrap();
                let service = RetryLayer::http(&policy).layer(http_inner);
                service.oneshot(request).await.unwrap();
            }
            // Built and never called: nothing drawn on.
            for _ in 0..250 {
                drop(RetryLayer::new(&policy));
            }
            // One layer called many times is one layer: no warning.
            let once = RetryLayer::new(&policy).layer(inner);
            for _ in 0..250 {
                once.clone().oneshot(1).await.unwrap();
            }
            // Sharing a budget is the fix: no warning, however many.
            for _ in 0..250 {
                let service = RetryLayer::new(backstop::Retry::new(&policy).budget(&SHARED));
                service.layer(inner).oneshot(1).await.unwrap();
            }
            // Without a destination, each on a budget of its own: warned.
            for _ in 0..250 {
                warned_line = line!() + 1;
                let service = RetryLayer::new(&policy).layer(inner);
                service.oneshot(1).await.unwrap();
            }
            // A path without a host, kept per method: the path's budget
            // within each layer, of its own too: warned.
            for _ in 0..250 {
                let request = http::Request::get("/orders.Orders/Get")
                    .body(String::new())
                    .unwrap();
                per_method_line = line!() + 1;
                let service = RetryLayer::http(&policy).per_method().layer(http_inner);
                service.oneshot(request).await.unwrap();
            }
        });
    });
    let warnings: Vec<_> = capture
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, fields)| {
            fields
                .get("message")
                .is_some_and(|m| m.contains("retry layers built at one place"))
        })
        .map(|(_, fields)| fields.clone())
        .collect();
    assert_eq!(
        warnings.len(),
        2 * usize::from(cfg!(debug_assertions)),
        "{warnings:?}"
    );
    for (warning, line) in warnings.iter().zip([warned_line, per_method_line]) {
        assert!(
            warning["site"].contains(&format!("telemetry.rs:{line}:")),
            "the layers without a destination, built at line {line}: {warning:?}"
        );
        assert!(
            warning["message"].contains("budget(&STATIC)"),
            "{warning:?}"
        );
    }
}

#[test]
fn a_call_async_future_starts_when_first_polled_in_the_span_it_runs_in() {
    let _serial = serial();
    let capture = Arc::new(Capture::default());
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        let rt = paused_runtime();
        rt.block_on(async {
            let policy = backstop::Policy::new();
            // Made before the span is given to it, as `.instrument` is used.
            let call = backstop::call_async(&policy, || async { Ok::<_, Error>(1) });
            let request = tracing::info_span!("request");
            let out = tracing::Instrument::instrument(call, request).await;
            assert_eq!(out.unwrap(), 1);
            // A call never polled is no call.
            drop(backstop::call_async(&policy, || async {
                Ok::<_, Error>(2)
            }));
        });
    });
    let spans = capture.spans.lock().unwrap();
    let named = |name: &str| {
        spans
            .iter()
            .filter(|(_, (n, _))| n == name)
            .map(|(id, _)| *id)
            .collect::<Vec<_>>()
    };
    let (calls, requests) = (named("retry"), named("request"));
    assert_eq!(calls.len(), 1, "one span for the call that ran: {spans:?}");
    assert_eq!(
        capture.parents.lock().unwrap().get(&calls[0]),
        Some(&requests[0]),
        "the call's span is inside the one its future ran in"
    );
}

static ORDERS_DB: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(2, std::time::Duration::from_secs(30)).named("orders-db");

#[test]
fn a_breaker_tells_its_changes_in_tracing_and_counts_itself_open_in_a_gauge() {
    use backstop::Verdict;
    let _serial = serial();
    let recorder = Recorder::default();
    let now = std::time::Instant::now();
    let gauge = |recorder: &Recorder| {
        recorder
            .gauges
            .lock()
            .unwrap()
            .get("backstop_breakers_open{breaker=orders-db}")
            .map(|g| *g.0.lock().unwrap())
    };
    let capture = captured(|| {
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..2 {
                ORDERS_DB
                    .try_acquire(now)
                    .unwrap()
                    .failed(Verdict::Retry, now);
            }
            assert_eq!(gauge(&recorder), Some(1.0), "open: one breaker open");
            let later = now + std::time::Duration::from_secs(30);
            ORDERS_DB.try_acquire(later).unwrap().succeeded(later);
            assert_eq!(gauge(&recorder), Some(0.0), "closed again");
        });
    });
    let events = capture.events.lock().unwrap();
    let told: Vec<(String, String, String, String)> = events
        .iter()
        .filter(|(_, f)| f.get("breaker").map(String::as_str) == Some("orders-db"))
        .map(|(_, f)| {
            let field = |k: &str| f.get(k).cloned().unwrap_or_default();
            (
                field("message"),
                field("from"),
                field("to"),
                field("reason"),
            )
        })
        .collect();
    let want = [
        ("circuit breaker changed", "Closed", "Open", "Failures"),
        (
            "circuit breaker changed",
            "Open",
            "HalfOpen",
            "TrialStarted",
        ),
        (
            "circuit breaker closed",
            "HalfOpen",
            "Closed",
            "TrialSucceeded",
        ),
    ]
    .map(|(m, f, t, r)| (m.to_owned(), f.to_owned(), t.to_owned(), r.to_owned()));
    assert_eq!(told, want);
}

static LEVELS: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(30)).named("levels");

static LEVELS_TABLE: backstop::limit::Keyed<backstop::limit::CircuitBreaker> =
    backstop::limit::Keyed::with_capacity(
        backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(30)).named("levels"),
        1,
    );

/// What an on-call engineer is woken for is a WARN (opened, held open, a
/// trial abandoned, a breaker forgotten by its table);
/// what an outage repeats every cooldown (a trial started, failed) is an
/// INFO, as a close is.
#[test]
fn a_breakers_trials_are_told_at_info_and_its_opening_at_warn() {
    use backstop::Verdict;
    let _serial = serial();
    let now = std::time::Instant::now();
    let later = now + std::time::Duration::from_secs(30);
    let much_later = later + std::time::Duration::from_secs(30);
    let capture = captured(|| {
        LEVELS.try_acquire(now).unwrap().failed(Verdict::Retry, now);
        LEVELS
            .try_acquire(later)
            .unwrap()
            .failed(Verdict::Retry, later);
        LEVELS
            .try_acquire(much_later)
            .unwrap()
            .succeeded(much_later);
        LEVELS.hold_open();
        LEVELS.reset();
        // Opened again; its trial's caller gives up on it.
        LEVELS.try_acquire(now).unwrap().failed(Verdict::Retry, now);
        drop(LEVELS.try_acquire(later).unwrap());
        LEVELS.reset();
        // A table of one place: "a" opens, goes away; "b" takes its place.
        let a = LEVELS_TABLE.get_at(&"a", now);
        a.try_acquire(now).unwrap().failed(Verdict::Retry, now);
        let _ = LEVELS_TABLE.get_at(&"b", much_later + std::time::Duration::from_secs(1));
    });
    let events = capture.events.lock().unwrap();
    let levels = capture.levels.lock().unwrap();
    let told: Vec<(String, tracing::Level)> = events
        .iter()
        .zip(levels.iter())
        .filter(|((_, f), _)| f.get("breaker").map(String::as_str) == Some("levels"))
        .map(|((_, f), level)| (f["reason"].clone(), *level))
        .collect();
    let (info, warn) = (tracing::Level::INFO, tracing::Level::WARN);
    let want = [
        ("Failures", warn),
        ("TrialStarted", info),
        ("TrialFailed", info),
        ("TrialStarted", info),
        ("TrialSucceeded", info),
        ("HeldOpen", warn),
        ("Reset", info),
        ("Failures", warn),
        ("TrialStarted", info),
        ("TrialAbandoned", warn),
        ("Reset", info),
        ("Failures", warn),
        ("Forgotten", warn),
    ]
    .map(|(reason, level)| (reason.to_owned(), level));
    assert_eq!(told, want);
}

static MAINTENANCE: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(5, std::time::Duration::from_secs(30))
        .named("maintenance");

/// A breaker held open before the recorder was installed (at start-up,
/// from configuration) and reset after it reads closed, not below zero.
#[test]
fn a_breaker_changed_before_the_recorder_reads_right_from_its_next_change() {
    let _serial = serial();
    MAINTENANCE.hold_open();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || MAINTENANCE.reset());
    assert_eq!(
        gauges(&recorder).get("backstop_breakers_open{breaker=maintenance}"),
        Some(&0.0)
    );
    metrics::with_local_recorder(&recorder, || MAINTENANCE.hold_open());
    assert_eq!(
        gauges(&recorder).get("backstop_breakers_open{breaker=maintenance}"),
        Some(&1.0)
    );
    MAINTENANCE.reset();
    // Opened before the recorder; its next change is a trial starting.
    let now = std::time::Instant::now();
    for _ in 0..5 {
        MAINTENANCE
            .try_acquire(now)
            .unwrap()
            .failed(backstop::Verdict::Retry, now);
    }
    let recorder = Recorder::default();
    let later = now + std::time::Duration::from_secs(30);
    metrics::with_local_recorder(&recorder, || drop(MAINTENANCE.try_acquire(later).unwrap()));
    assert_eq!(
        gauges(&recorder).get("backstop_breakers_open{breaker=maintenance}"),
        Some(&1.0),
        "open, from its trial's start"
    );
    MAINTENANCE.reset();
}

/// Two tokens: the first failure leaves one, not above half, so a refusal
/// holds at once.
static HELD: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(2, 1.0);

/// What `on_retry` was told of `held_to_the_deadline`: the delays.
static HELD_TOLD: Mutex<Vec<std::time::Duration>> = Mutex::new(Vec::new());

/// What `on_give_up` was told of `held_to_the_deadline`: the reasons.
static HELD_GAVE_UP: Mutex<Vec<backstop::GiveUp>> = Mutex::new(Vec::new());

#[retry(
    deadline = 1s,
    attempts = 50,
    jitter = none,
    budget = HELD,
    on_retry = |e| HELD_TOLD.lock().unwrap().push(e.delay()),
    on_give_up = |e| HELD_GAVE_UP.lock().unwrap().push(e.reason()),
)]
fn held_to_the_deadline() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_held_call_is_told_holding_and_counted_held_not_retried() {
    let _serial = serial();
    // (Its second held in virtual time: the same waits every run.)
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    let capture = metrics::with_local_recorder(&recorder, || {
        captured(|| {
            let _ = held_to_the_deadline();
        })
    });
    let events = capture.events.lock().unwrap();
    let messages: Vec<_> = events
        .iter()
        .map(|(_, fields)| fields.get("message").cloned().unwrap_or_default())
        .collect();
    // Held; each probe (a retry, refused) holds it again; at its deadline
    // it gives up.
    assert_eq!(
        messages[0], "holding until the dependency answers",
        "{events:?}"
    );
    // Each hold says the refusal it holds after.
    let refused = std::io::Error::from(ErrorKind::ConnectionRefused).to_string();
    for (_, fields) in events.iter().filter(|(_, fields)| {
        fields.get("message").map(String::as_str) == Some(messages[0].as_str())
    }) {
        assert_eq!(fields.get("error"), Some(&refused), "{fields:?}");
    }
    assert_eq!(
        messages.last().map(String::as_str),
        Some("giving up"),
        "{events:?}"
    );
    assert_eq!(
        events.last().unwrap().1.get("reason").map(String::as_str),
        Some("deadline")
    );
    // ...showing the refusal it gives up with, as its holds did.
    assert_eq!(events.last().unwrap().1.get("error"), Some(&refused));
    let count = |m: &str| messages.iter().filter(|x| x.as_str() == m).count() as u64;
    let (holds, probes) = (
        count("holding until the dependency answers"),
        count("retrying"),
    );
    assert!(probes >= 1 && holds == probes + 1, "{messages:?}");
    // (Each probe refused holds it again; the last hold ends at the
    // deadline.)
    let counters = counters(&recorder);
    let f = "function=telemetry::held_to_the_deadline";
    assert_eq!(
        counters.get(&format!("backstop_held_total{{{f}}}")),
        Some(&holds),
        "{counters:?}"
    );
    assert_eq!(
        counters.get(&format!("backstop_retries_total{{{f}}}")),
        Some(&probes),
        "{counters:?}"
    );
    // A release's `retrying` says nothing of the failure (its hold did).
    for (_, fields) in events
        .iter()
        .filter(|(_, fields)| fields.get("message").map(String::as_str) == Some("retrying"))
    {
        assert_eq!(fields.get("error"), None, "{fields:?}");
    }
    // The give-up at the deadline is told to `on_give_up`.
    assert_eq!(*HELD_GAVE_UP.lock().unwrap(), [backstop::GiveUp::Deadline]);
    // `on_retry` is told of each hold, as it starts (its delay the first
    // wait, about a base delay), and not again at the release.
    let told = HELD_TOLD.lock().unwrap().clone();
    assert_eq!(told.len() as u64, holds, "{told:?}");
    // (The last hold's may be shortened to fit the deadline.)
    let (last, earlier) = told.split_last().expect("held");
    assert!(
        earlier
            .iter()
            .all(|d| *d >= std::time::Duration::from_millis(50)
                && *d <= std::time::Duration::from_millis(150)),
        "{told:?}"
    );
    assert!(*last <= std::time::Duration::from_millis(150), "{told:?}");
    // The time held is time slept, within the second to the deadline.
    let slept = recorder.histograms.lock().unwrap()[&format!("backstop_slept_seconds{{{f}}}")]
        .0
        .lock()
        .unwrap()
        .clone();
    assert!(
        slept.len() == 1 && slept[0] > 0.5 && slept[0] <= 1.0,
        "{slept:?}"
    );
}

#[retry(attempts = 2, base = 1ms, jitter = none, budget = none, key = shard)]
fn read_shard(shard: &str) -> Result<(), Error> {
    let _ = shard;
    Err(ErrorKind::HostUnreachable.into())
}

/// A key without `Debug`: named by its hash.
#[derive(Hash)]
struct Opaque(u8);

#[retry(attempts = 2, base = 1ms, jitter = none, budget = none, key = opaque)]
fn read_opaque(opaque: &Opaque) -> Result<(), Error> {
    let _ = opaque.0;
    Err(ErrorKind::HostUnreachable.into())
}

#[test]
fn a_keyed_calls_retries_and_give_ups_are_labelled_with_its_key() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let _ = read_shard("shard-7");
        let _ = read_shard("shard-8");
        let _ = read_shard("shard-8");
        let _ = read_opaque(&Opaque(3));
        let policy = backstop::Policy::new()
            .attempts(2)
            .base(std::time::Duration::from_millis(1))
            .no_budget();
        let _ = backstop::Retry::new(&policy)
            .name("closure")
            .key(&("tenant", 42))
            .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    });
    let counters = counters(&recorder);
    let f = "function=telemetry::read_shard";
    for (metric, count) in [
        (format!("backstop_retries_total{{{f},key=shard-7}}"), 1),
        (format!("backstop_retries_total{{{f},key=shard-8}}"), 2),
        (
            format!("backstop_give_ups_total{{{f},key=shard-8,reason=attempts}}"),
            2,
        ),
        // Counted when a call ends, on the success path too: by function
        // only, so that a keyed call that succeeds allocates nothing.
        (format!("backstop_calls_total{{{f},outcome=error}}"), 3),
        (
            r#"backstop_retries_total{function=closure,key=("tenant", 42)}"#.to_owned(),
            1,
        ),
        // A name given at run time labels its call's end as a function's
        // name does.
        (
            "backstop_calls_total{function=closure,outcome=error}".to_owned(),
            1,
        ),
    ] {
        assert_eq!(
            counters.get(&metric),
            Some(&count),
            "{metric}: {counters:#?}"
        );
    }
    let opaque: Vec<&String> = counters
        .keys()
        .filter(|k| k.starts_with("backstop_retries_total{function=telemetry::read_opaque"))
        .collect();
    assert_eq!(opaque.len(), 1, "{counters:#?}");
    let label = opaque[0]
        .split("key=")
        .nth(1)
        .unwrap()
        .trim_end_matches('}');
    // By a hash that is the same in every process (std's `SipHash` under
    // its fixed keys), so that the label outlives a restart.
    let mut fixed = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&Opaque(3), &mut fixed);
    assert_eq!(
        label,
        format!("#{:016x}", std::hash::Hasher::finish(&fixed)),
        "a key without Debug is named by its hash"
    );
}

#[test]
fn a_keyed_calls_span_carries_its_key() {
    let _serial = serial();
    let capture = captured(|| {
        let _ = read_shard("shard-9");
    });
    let spans = capture.spans.lock().unwrap();
    let calls: Vec<&Fields> = spans
        .values()
        .filter(|(name, _)| name == "retry")
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(calls.len(), 1, "{spans:?}");
    assert_eq!(calls[0].get("key").map(String::as_str), Some("shard-9"));
    assert_eq!(
        calls[0].get("function").map(String::as_str),
        Some("telemetry::read_shard")
    );
}

/// However many keys the calls give, the `key` label takes at most as
/// many values in a process as its table of names holds (the first keys'
/// names), and one more for the keys after them: a recorder keeps a
/// series per value. (In a process of its own: the names are the
/// process's.)
#[test]
fn the_key_label_takes_a_bounded_number_of_values() {
    const NAMES: usize = 4096;
    if !support::in_a_process_of_its_own(
        "the_key_label_takes_a_bounded_number_of_values",
        "BACKSTOP_TEST_BOUNDED_KEYS",
    ) {
        return;
    }
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        for i in 0..3 * NAMES {
            let _ = read_shard(&format!("bounded-{i}"));
        }
        // The first key is still named by its text.
        let _ = read_shard("bounded-0");
    });
    let counters = counters(&recorder);
    let retries = "backstop_retries_total{function=telemetry::read_shard,key=";
    let labels: Vec<&str> = counters
        .keys()
        .filter_map(|k| k.strip_prefix(retries))
        .collect();
    assert!(
        labels.len() <= NAMES + 1 && labels.len() > NAMES / 2,
        "{} values",
        labels.len()
    );
    assert_eq!(counters.get(&format!("{retries}bounded-0}}")), Some(&2));
    assert!(
        counters
            .get(&format!("{retries}(other)}}"))
            .is_some_and(|&n| n >= NAMES as u64)
    );
    let all: u64 = counters
        .iter()
        .filter(|(k, _)| k.starts_with(retries))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(all, 3 * NAMES as u64 + 1, "every retry is counted");
}

static PER_SHARD: backstop::limit::Keyed<backstop::limit::CircuitBreaker> =
    backstop::limit::Keyed::new(
        backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60))
            .named("per_shard")
            .on_change(keyed_change),
    );

static KEYED_CHANGES: Mutex<Vec<(Option<String>, backstop::limit::BreakerState)>> =
    Mutex::new(Vec::new());

fn keyed_change(change: &backstop::limit::BreakerChange) {
    KEYED_CHANGES
        .lock()
        .unwrap()
        .push((change.key.map(str::to_owned), change.to));
}

#[retry(attempts = 2, budget = none, breaker = PER_SHARD, key = shard)]
fn behind_per_shard(shard: &str) -> Result<(), Down> {
    let _ = shard;
    Err(Down)
}

#[test]
fn a_keyed_breaker_is_counted_open_by_its_key_and_tells_it() {
    use backstop::limit::BreakerState;
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    let capture = Arc::new(Capture::default());
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            let _ = behind_per_shard("s-down"); // opens s-down's breaker
            let _ = behind_per_shard("s-down"); // turned away
            PER_SHARD.peek(&"s-down").unwrap().reset();
        });
    });
    let gauges = gauges(&recorder);
    assert_eq!(
        gauges.keys().collect::<Vec<_>>(),
        ["backstop_breakers_open{breaker=per_shard,key=s-down}"],
        "up and down by its key"
    );
    assert_eq!(gauges.values().copied().collect::<Vec<f64>>(), [0.0]);
    assert_eq!(
        *KEYED_CHANGES.lock().unwrap(),
        [
            (Some("s-down".to_owned()), BreakerState::Open),
            (Some("s-down".to_owned()), BreakerState::Closed),
        ]
    );
    let events = capture.events.lock().unwrap();
    let changes: Vec<&str> = events
        .iter()
        .filter(|(_, f)| f["message"].starts_with("circuit breaker"))
        .map(|(_, f)| f["key"].as_str())
        .collect();
    assert_eq!(changes, ["s-down", "s-down"], "{events:?}");
    let counters = counters(&recorder);
    assert_eq!(
        counters.get(
            "backstop_rejections_total{function=telemetry::behind_per_shard,key=s-down,reason=breaker_open}"
        ),
        Some(&1),
        "{counters:#?}"
    );
}

/// Through the tower layer, a call is labelled with its destination.
#[cfg(feature = "tower")]
#[test]
fn a_layers_calls_are_labelled_with_their_destination() {
    use tower::{Layer, ServiceExt};
    let _serial = serial();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let runtime = paused_runtime();
        let statuses = Arc::new(Mutex::new(vec![200, 503]));
        let inner = tower::service_fn(move |_: http::Request<_>| {
            let status = statuses.lock().unwrap().pop().unwrap();
            async move { Ok::<_, Error>(http::Response::builder().status(status).body(()).unwrap()) }
        });
        let service = backstop::tower::RetryLayer::http(
            backstop::Retry::new(&backstop::Policy::new()).name("users"),
        )
        .layer(inner);
        let request = http::Request::get("HTTP://Users.Internal:8080/users/7")
            .body(String::new())
            .unwrap();
        let response = runtime.block_on(service.oneshot(request)).unwrap();
        assert_eq!(response.status(), 200);
    });
    let counters = counters(&recorder);
    assert_eq!(
        counters.get("backstop_retries_total{function=users,key=http://users.internal:8080}"),
        Some(&1),
        "{counters:#?}"
    );
}

static PER_HOST: backstop::limit::Keyed<backstop::limit::CircuitBreaker> =
    backstop::limit::Keyed::new(
        backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60))
            .named("per_host"),
    );

/// An operator who holds a destination's breaker open, before any call
/// went there, sees it by the destination's name.
#[test]
fn a_breaker_reached_through_a_destination_is_told_by_its_name() {
    use backstop::limit::Destination;
    let _serial = serial();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        PER_HOST
            .get(&Destination::new("https", "Ops.internal", None))
            .hold_open();
    });
    let gauges: Vec<String> = recorder.gauges.lock().unwrap().keys().cloned().collect();
    assert_eq!(
        gauges,
        ["backstop_breakers_open{breaker=per_host,key=https://ops.internal:443}"]
    );
}

static PER_DB: backstop::limit::Keyed<backstop::limit::CircuitBreaker> =
    backstop::limit::Keyed::new(
        backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60)).named("per_db"),
    );

/// A key no call named (reached only through `Keyed::get`) is named by
/// its hash when its breaker first changes, and keeps that name: its
/// gauge goes up and down by the same labels.
#[test]
fn a_breaker_whose_key_no_call_named_is_counted_by_its_hash() {
    let _serial = serial();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        let breaker = PER_DB.get(&("db", 9u8));
        breaker.hold_open();
        breaker.reset();
    });
    let gauges = gauges(&recorder);
    assert_eq!(gauges.len(), 1, "{gauges:?}");
    let (series, value) = gauges.iter().next().unwrap();
    assert!(
        series.starts_with("backstop_breakers_open{breaker=per_db,key=#"),
        "{series}"
    );
    assert!(value.abs() < f64::EPSILON, "back down: {value}");
}

/// A hedging layer that may not hedge a request (a `POST` without a key)
/// says so at DEBUG, as `#[retry]` does for a policy not idempotent.
#[cfg(feature = "tower")]
#[test]
fn a_request_the_layer_may_not_hedge_is_told() {
    use backstop::hedge::Hedge;
    use backstop::tower::RetryLayer;
    use tower::{Layer, ServiceExt};
    let _serial = serial();
    let runtime = paused_runtime();
    let policy = backstop::Policy::new();
    let layer = RetryLayer::http(
        backstop::Retry::new(&policy).hedge(Hedge::after(std::time::Duration::from_millis(10))),
    );
    let service = tower::service_fn(|_: http::Request<_>| async {
        Ok::<_, std::io::Error>(http::Response::new(()))
    });
    let capture = captured(|| {
        let request = http::Request::post("http://orders.test/")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        runtime
            .block_on(layer.layer(service).oneshot(request))
            .unwrap();
    });
    let events = capture.events.lock().unwrap();
    assert!(
        events.iter().any(|(_, fields)| {
            fields.get("message").map(String::as_str) == Some("hedge not sent")
                && fields.get("reason").map(String::as_str) == Some("not_idempotent")
        }),
        "{events:?}"
    );
}

/// An error type without `Display`: its calls' events show no text.
#[derive(Debug)]
struct Unshown;

impl backstop::Classify for Unshown {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Retry
    }
}

#[retry(attempts = 2, jitter = none, budget = none)]
fn unshown() -> Result<(), Unshown> {
    Err(Unshown)
}

#[retry(attempts = 2, jitter = none, budget = none)]
async fn refused_async() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

/// Generic over its error: shown when the bounds in scope say it is
/// `Display`.
#[retry(attempts = 2, jitter = none, budget = none)]
fn generic_shown<E: backstop::Classify + std::fmt::Display + From<Error>>() -> Result<(), E> {
    Err(Error::from(ErrorKind::ConnectionRefused).into())
}

#[retry(attempts = 2, jitter = none, budget = none)]
fn rejected_at_once(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    Err(Error::new(ErrorKind::InvalidInput, "no such user"))
}

/// An `anyhow` error with context: its events show the whole chain.
#[cfg(feature = "anyhow")]
#[retry(attempts = 2, jitter = none, budget = none)]
fn load_user() -> anyhow::Result<()> {
    use anyhow::Context as _;
    Err(Error::from(ErrorKind::ConnectionRefused)).context("loading user 7 from db-1")
}

/// Each event's `message` and `error` field, if it has one.
fn errors_shown(capture: &Capture) -> Vec<(String, Option<String>)> {
    capture
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| (f["message"].clone(), f.get("error").cloned()))
        .collect()
}

/// An operator reading the logs of a retry sees what failed: the events
/// of a `#[retry]` function (sync, async, generic with `Display` in its
/// bounds; retried, given up, not retried) carry the error's text in
/// `error`; an error type that cannot be shown adds no field.
#[test]
fn a_functions_events_show_its_error_where_the_type_can_be_shown() {
    let _serial = serial();
    let refused = Some("connection refused".to_owned());
    let shown = |call: &dyn Fn()| errors_shown(&captured(call));
    assert_eq!(
        shown(&|| {
            let _ = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
                .block_on(refused_async());
        }),
        [
            ("retrying".to_owned(), refused.clone()),
            ("giving up".to_owned(), refused.clone())
        ]
    );
    assert_eq!(
        shown(&|| {
            let _ = generic_shown::<Error>();
        }),
        [
            ("retrying".to_owned(), refused.clone()),
            ("giving up".to_owned(), refused.clone())
        ]
    );
    assert_eq!(
        shown(&|| {
            let _ = rejected_at_once(&mut 0);
        }),
        [("not retried".to_owned(), Some("no such user".to_owned()))]
    );
    assert_eq!(
        shown(&|| {
            let _ = unshown();
        }),
        [
            ("retrying".to_owned(), None),
            ("giving up".to_owned(), None)
        ]
    );
    #[cfg(feature = "anyhow")]
    {
        let chain = Some("loading user 7 from db-1: connection refused".to_owned());
        assert_eq!(
            shown(&|| {
                let _ = load_user();
            }),
            [
                ("retrying".to_owned(), chain.clone()),
                ("giving up".to_owned(), chain)
            ]
        );
    }
}

/// Through the layer, a response retried for its status shows it
/// (`status`): an HTTP status, or a gRPC response's `grpc-status` when
/// its headers carry one.
#[cfg(feature = "tower")]
#[test]
fn a_response_retried_through_the_layer_shows_its_status() {
    use tower::{Layer, ServiceExt};
    let _serial = serial();
    let statuses = |responses: Vec<http::Response<()>>| {
        let capture = captured(|| {
            let runtime = paused_runtime();
            let responses = Arc::new(Mutex::new(responses));
            let inner = tower::service_fn(move |_: http::Request<_>| {
                let response = responses.lock().unwrap().pop().unwrap();
                async move { Ok::<_, Error>(response) }
            });
            let service = backstop::tower::RetryLayer::http(backstop::Retry::new(
                &backstop::Policy::new().attempts(3),
            ))
            .layer(inner);
            let request = http::Request::get("/users/7").body(String::new()).unwrap();
            let _ = runtime.block_on(service.oneshot(request)).unwrap();
        });
        let events = capture.events.lock().unwrap();
        events
            .iter()
            .map(|(_, f)| {
                (
                    f["message"].clone(),
                    f.get("status").cloned().unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    let status = |code: u16| http::Response::builder().status(code).body(()).unwrap();
    assert_eq!(
        statuses(vec![status(200), status(502), status(503)]),
        [
            ("retrying".to_owned(), "503".to_owned()),
            ("retrying".to_owned(), "502".to_owned())
        ]
    );
    let grpc = |code: &str| {
        http::Response::builder()
            .header("grpc-status", code)
            .body(())
            .unwrap()
    };
    assert_eq!(
        statuses(vec![grpc("14"), grpc("14"), grpc("14")]),
        [
            ("retrying".to_owned(), "14".to_owned()),
            ("retrying".to_owned(), "14".to_owned()),
            ("giving up".to_owned(), "14".to_owned())
        ]
    );
}

/// What a subscriber sees of `call`, run on a runtime of its own (real
/// time: it talks to sockets).
#[cfg(feature = "reqwest")]
fn captured_on_a_runtime(call: impl std::future::Future<Output = ()>) -> Arc<Capture> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let capture = Arc::new(Capture::default());
    tracing::subscriber::with_default(Arc::clone(&capture), || runtime.block_on(call));
    capture
}

/// A URL on loopback whose port nothing listens on: refused.
#[cfg(feature = "reqwest")]
fn refused_url(path_and_query: &str) -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}{path_and_query}", closed.local_addr().unwrap())
}

/// Through the middleware: a response retried shows its status, and an
/// error reqwest's text.
#[cfg(feature = "reqwest-middleware")]
#[test]
fn a_request_retried_through_the_middleware_shows_its_status_or_error() {
    let _serial = serial();
    let capture = captured_on_a_runtime(async {
        let (url, _) = support::serve(vec![(503, ""), (200, "")]).await;
        let refused = refused_url("/?api_key=SECRET");
        let policy = backstop::Policy::new()
            .attempts(2)
            .base(std::time::Duration::from_millis(1))
            .no_budget();
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(backstop::reqwest::RetryMiddleware::new(&policy))
            .build();
        assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
        assert!(client.get(&refused).send().await.is_err());
    });
    let events = capture.events.lock().unwrap();
    let retries: Vec<&Fields> = events
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f["message"] == "retrying")
        .collect();
    assert_eq!(retries.len(), 2, "{events:?}");
    assert_eq!(retries[0].get("status").map(String::as_str), Some("503"));
    assert_eq!(retries[0].get("error"), None);
    let error = retries[1].get("error").expect("the error's text");
    assert!(error.starts_with("error sending request: "), "{error}");
    // Why, from its sources; not the URL, whose query may hold a secret.
    assert!(error.to_lowercase().contains("refused"), "{error}");
    assert!(
        !error.contains("SECRET") && !error.contains("127.0.0.1"),
        "{error}"
    );
    assert_eq!(retries[1].get("status"), None);
}

/// A request held through the middleware after a refusal, giving up at its
/// deadline: the `giving up` event shows the refusal it gave up after, as
/// its `holding` events do.
#[cfg(feature = "reqwest-middleware")]
#[test]
fn a_held_request_giving_up_at_its_deadline_shows_its_last_error() {
    static SMALL: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(2, 1.0);
    let _serial = serial();
    let capture = captured_on_a_runtime(async {
        let refused = refused_url("/");
        let policy = backstop::Policy::new()
            .attempts(10)
            .deadline(Some(std::time::Duration::from_millis(200)))
            .token_budget(&SMALL);
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(backstop::reqwest::RetryMiddleware::new(&policy))
            .build();
        assert!(client.get(&refused).send().await.is_err());
    });
    let events = capture.events.lock().unwrap();
    let held = events
        .iter()
        .find(|(_, f)| f["message"] == "holding until the dependency answers")
        .expect("held after a refusal");
    let gave_up = events
        .iter()
        .find(|(_, f)| f["message"] == "giving up")
        .expect("gave up");
    assert_eq!(
        gave_up.1.get("reason").map(String::as_str),
        Some("deadline")
    );
    let error = gave_up.1.get("error").expect("the refusal's text");
    assert!(error.to_lowercase().contains("refused"), "{error}");
    assert_eq!(gave_up.1.get("error"), held.1.get("error"));
}

static ASYNC_HELD: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(2, 1.0);

#[retry(deadline = 1s, attempts = 50, jitter = none, budget = ASYNC_HELD)]
async fn held_async_to_the_deadline() -> Result<(), Error> {
    Err(ErrorKind::ConnectionRefused.into())
}

/// An async function held to its deadline dropped its last outcome before
/// it slept: it gives up with an `Elapsed` that says why, and its `giving
/// up` event shows that error, the one the call returns.
#[test]
fn an_async_call_held_to_its_deadline_shows_the_error_it_returns() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let capture = Arc::new(Capture::default());
    let returned = tracing::subscriber::with_default(Arc::clone(&capture), || {
        runtime.block_on(held_async_to_the_deadline())
    })
    .unwrap_err();
    assert!(
        returned
            .get_ref()
            .and_then(|e| e.downcast_ref::<backstop::Elapsed>())
            .is_some_and(backstop::Elapsed::is_refused),
        "{returned}"
    );
    let events = capture.events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|(_, f)| f["message"] == "holding until the dependency answers"),
        "{events:?}"
    );
    let gave_up = events.last().expect("gave up");
    assert_eq!(gave_up.1["message"], "giving up", "{events:?}");
    assert_eq!(
        gave_up.1.get("reason").map(String::as_str),
        Some("deadline")
    );
    assert_eq!(gave_up.1.get("error"), Some(&returned.to_string()));
}

/// A `#[retry]` function whose `when_ok` judges a response a failure: its
/// events show the response's status, as the middleware's do.
#[cfg(feature = "reqwest")]
#[retry(attempts = 3, base = 1ms, budget = none, when_ok = backstop::reqwest::response_verdict)]
async fn get_busy(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    reqwest::get(url).await
}

/// The same, sync, on an `http::Response` judged by its status.
#[cfg(feature = "http")]
#[retry(attempts = 2, base = 1ms, budget = none, when_ok = |r: &http::Response<()>| backstop::http::verdict(r.status(), r.headers()))]
fn answer_busy(responses: &mut Vec<http::Response<()>>) -> Result<http::Response<()>, Error> {
    Ok(responses.pop().unwrap())
}

/// A status alone, judged by `when_ok`.
#[cfg(feature = "http")]
#[retry(attempts = 2, base = 1ms, budget = none, when_ok = |s: &http::StatusCode| backstop::http::verdict(*s, &http::HeaderMap::new()))]
fn status_busy(statuses: &mut Vec<http::StatusCode>) -> Result<http::StatusCode, Error> {
    Ok(statuses.pop().unwrap())
}

#[cfg(feature = "reqwest")]
#[test]
fn a_response_a_retry_function_judged_a_failure_shows_its_status() {
    let _serial = serial();
    let capture = captured_on_a_runtime(async {
        let (url, _) = support::serve(vec![(503, ""), (429, ""), (200, "")]).await;
        assert_eq!(get_busy(&url).await.unwrap().status(), 200);
    });
    let fields = |capture: &Capture| {
        let events = capture.events.lock().unwrap();
        events
            .iter()
            .filter(|(_, f)| ["retrying", "giving up"].contains(&f["message"].as_str()))
            .map(|(_, f)| {
                (
                    f["message"].clone(),
                    f.get("status").cloned().unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fields(&capture),
        [
            ("retrying".to_owned(), "503".to_owned()),
            ("retrying".to_owned(), "429".to_owned())
        ]
    );
    let status = |code: u16| http::Response::builder().status(code).body(()).unwrap();
    let capture = captured(|| {
        let mut responses = vec![status(502), status(503)];
        assert_eq!(answer_busy(&mut responses).unwrap().status(), 502);
    });
    assert_eq!(
        fields(&capture),
        [
            ("retrying".to_owned(), "503".to_owned()),
            ("giving up".to_owned(), "502".to_owned())
        ]
    );
    let capture = captured(|| {
        let mut statuses = vec![http::StatusCode::OK, http::StatusCode::TOO_MANY_REQUESTS];
        assert_eq!(status_busy(&mut statuses).unwrap(), http::StatusCode::OK);
    });
    assert_eq!(
        fields(&capture),
        [("retrying".to_owned(), "429".to_owned())]
    );
}

/// A `#[retry]` function returning reqwest's error, or the crate's: its
/// events say what failed and why, without the request's URL.
#[cfg(feature = "reqwest")]
#[retry(attempts = 2, base = 1ms, budget = none)]
async fn get_refused(url: &str) -> Result<(), reqwest::Error> {
    reqwest::get(url).await.map(drop)
}

#[cfg(feature = "reqwest")]
#[retry(attempts = 2, base = 1ms, budget = none)]
async fn get_refused_within(url: &str) -> Result<(), backstop::reqwest::Error> {
    backstop::reqwest::within_attempt(reqwest::Client::new().get(url))
        .send()
        .await
        .map(drop)
}

/// The crate's reqwest error wrapped in `anyhow` (whose chain says its
/// message twice: the crate's error gives reqwest's as its source).
#[cfg(all(feature = "reqwest", feature = "anyhow"))]
#[retry(attempts = 2, base = 1ms, budget = none)]
async fn get_refused_anyhow(url: &str) -> anyhow::Result<()> {
    let sent: Result<_, backstop::reqwest::Error> =
        backstop::reqwest::within_attempt(reqwest::Client::new().get(url))
            .send()
            .await;
    Ok(sent.map(drop)?)
}

/// An error of one's own that says reqwest's in its message.
#[cfg(feature = "reqwest")]
#[derive(Debug)]
struct Transport(reqwest::Error);

#[cfg(feature = "reqwest")]
impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transport: {}", self.0)
    }
}

#[cfg(feature = "reqwest")]
impl backstop::Classify for Transport {
    fn classify(&self) -> backstop::Verdict {
        self.0.classify()
    }
}

#[cfg(feature = "reqwest")]
#[retry(attempts = 2, base = 1ms, budget = none)]
async fn get_refused_wrapped(url: &str) -> Result<(), Transport> {
    reqwest::get(url).await.map(drop).map_err(Transport)
}

#[cfg(feature = "reqwest")]
#[test]
fn a_functions_reqwest_error_is_shown_without_its_url() {
    let _serial = serial();
    let capture = captured_on_a_runtime(async {
        let url = refused_url("/?token=SECRET");
        assert!(get_refused(&url).await.is_err());
        assert!(get_refused_within(&url).await.is_err());
    });
    let capture_wrapped = captured_on_a_runtime(async {
        let url = refused_url("/users/7?token=SECRET#f");
        assert!(get_refused_wrapped(&url).await.is_err());
        #[cfg(feature = "anyhow")]
        assert!(get_refused_anyhow(&url).await.is_err());
    });
    // Wrapped, the text is the wrapper's: reqwest's URL in it is shown
    // without its query.
    let mut wrapped = errors_shown(&capture_wrapped);
    wrapped.retain(|(message, _)| message == "retrying" || message == "giving up");
    assert_eq!(wrapped.len(), if cfg!(feature = "anyhow") { 4 } else { 2 });
    for (_, error) in &wrapped {
        let error = error.as_deref().expect("the error's text");
        assert!(error.contains("/users/7)"), "{error}");
        assert!(
            !error.contains("SECRET") && !error.contains("#f"),
            "{error}"
        );
    }
    let mut shown = errors_shown(&capture);
    // (hyper's own events are captured too.)
    shown.retain(|(message, _)| message == "retrying" || message == "giving up");
    assert_eq!(shown.len(), 4, "{shown:?}");
    for (_, error) in &shown {
        let error = error.as_deref().expect("the error's text");
        assert!(error.starts_with("error sending request: "), "{error}");
        assert!(
            !error.contains("SECRET") && !error.contains("127.0.0.1"),
            "{error}"
        );
    }
}

/// A full table of breakers says that a key found no place, with the
/// key and how many calls found none: once, then at most once a minute.
#[test]
fn a_full_breaker_table_says_so_at_most_once_a_minute_with_a_count() {
    use backstop::limit::{CircuitBreaker, Keyed};
    static ONE_PLACE: Keyed<CircuitBreaker> = Keyed::with_capacity(
        CircuitBreaker::new(1, std::time::Duration::from_secs(3600)).named("edge"),
        1,
    );
    let _serial = serial();
    let vt = backstop::testing::VirtualTime::start();
    let capture = Arc::new(Capture::default());
    let once = backstop::Policy::new().attempts(1).no_budget();
    let call = |host: &str, fails: bool| {
        let _ = backstop::Retry::new(&once)
            .breaker(&ONE_PLACE)
            .key(&host)
            .call(|| {
                if fails {
                    Err(Error::from(ErrorKind::ConnectionRefused))
                } else {
                    Ok(())
                }
            });
    };
    let recorder = Recorder::default();
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            call("down.test", true);
            for _ in 0..3 {
                call("up.test", false);
            }
            vt.advance(std::time::Duration::from_secs(61));
            call("up.test", false);
        });
    });
    // Every call that went without a breaker, counted.
    assert_eq!(
        counters(&recorder).get("backstop_keys_unplaced_total{limiter=CircuitBreaker,name=edge}"),
        Some(&4),
        "{:?}",
        counters(&recorder)
    );
    let events = capture.events.lock().unwrap();
    let levels = capture.levels.lock().unwrap();
    assert!(
        events
            .iter()
            .zip(levels.iter())
            .filter(|((_, f), _)| f["message"].contains("table has no place for a key"))
            .all(|(_, level)| *level == tracing::Level::WARN),
        "at WARN"
    );
    let warned: Vec<(&str, &str, &str)> = no_place_said(&events)
        .into_iter()
        .map(|f| {
            (
                f["name"].as_str(),
                f["key"].as_str(),
                f["unplaced"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        warned,
        [("edge", "up.test", "1"), ("edge", "up.test", "3")],
        "{events:?}"
    );
}

/// A full table of budgets says that a key found no place too, and counts
/// its calls: they draw on the table's shared budget.
#[test]
fn a_full_budget_table_says_so_and_counts_the_calls_that_found_no_place() {
    use backstop::limit::{Keyed, TokenBudget};
    static ONE_PLACE: Keyed<TokenBudget> = Keyed::with_capacity(TokenBudget::standard(), 1);
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let capture = Arc::new(Capture::default());
    let twice = backstop::Policy::new()
        .attempts(2)
        .base(std::time::Duration::from_millis(1));
    let call = |tenant: &str, fails: bool| {
        let _ = backstop::Retry::new(&twice)
            .budget(&ONE_PLACE)
            .key(&tenant)
            .call(|| {
                if fails {
                    Err(Error::from(ErrorKind::NotConnected))
                } else {
                    Ok(())
                }
            });
    };
    let recorder = Recorder::default();
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            // Its tokens spent, the first tenant keeps the only place.
            call("failing", true);
            call("new-a", false);
            call("new-b", false);
        });
    });
    assert_eq!(
        counters(&recorder).get("backstop_keys_unplaced_total{limiter=TokenBudget,name=}"),
        Some(&2),
        "{:?}",
        counters(&recorder)
    );
    let events = capture.events.lock().unwrap();
    let warned = no_place_said(&events);
    let keys: Vec<(&str, &str)> = warned
        .iter()
        .map(|f| (f["key"].as_str(), f["unplaced"].as_str()))
        .collect();
    assert_eq!(keys, [("new-a", "1")], "{events:?}");
    let message = &warned[0]["message"];
    assert!(
        message.contains("draw on the table's shared budget"),
        "{message}"
    );
}

/// The events of full `Keyed` tables that said a key found no place.
fn no_place_said(events: &[(Option<u64>, Fields)]) -> Vec<&Fields> {
    events
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f["message"].contains("table has no place for a key"))
        .collect()
}

#[retry(attempts = 1, key = tenant)]
fn keyed_by_default(tenant: &str) -> Result<(), Error> {
    let _ = tenant;
    Err(ErrorKind::NotConnected.into())
}

/// The process's table of default budgets per key and per destination,
/// full: a new destination through a layer draws on the layer's own
/// budget, a new key of a `#[retry]` function on the function's, each
/// counted (`name="default"`) and said. (In a process of its own: the
/// table is the process's.)
#[cfg(feature = "tower")]
#[test]
fn a_full_table_of_default_budgets_says_so_and_counts_the_calls_that_found_no_place() {
    use tower::{Layer, ServiceExt};
    if !support::in_a_process_of_its_own(
        "a_full_table_of_default_budgets_says_so_and_counts_the_calls_that_found_no_place",
        "BACKSTOP_TEST_FULL_DEFAULT_TABLE",
    ) {
        return;
    }
    let runtime = paused_runtime();
    let inner = tower::service_fn(|_: http::Request<_>| async {
        Ok::<_, Error>(http::Response::builder().status(503).body(()).unwrap())
    });
    let layer = backstop::tower::RetryLayer::http(&backstop::Policy::new().attempts(1));
    let service = layer.layer(inner);
    let call = |host: String| {
        let service = service.clone();
        async move {
            let request = http::Request::get(format!("http://{host}/"))
                .body(String::new())
                .unwrap();
            let _ = service.oneshot(request).await;
        }
    };
    let capture = Arc::new(Capture::default());
    let recorder = Recorder::default();
    let unplaced = |recorder: &Recorder| {
        counters(recorder)
            .get("backstop_keys_unplaced_total{limiter=TokenBudget,name=default}")
            .copied()
            .unwrap_or(0)
    };
    let before = tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            // Every place taken by a destination whose budget spent a
            // token (many find none already: counted, and said once).
            runtime.block_on(async {
                for i in 0..3 * 4096 {
                    call(format!("down-{i}.test")).await;
                }
            });
            let before = unplaced(&recorder);
            runtime.block_on(call("new.test".to_owned()));
            let _ = keyed_by_default("new-tenant");
            before
        })
    });
    assert_eq!(unplaced(&recorder), before + 2);
    let events = capture.events.lock().unwrap();
    let said: Vec<&str> = no_place_said(&events)
        .iter()
        .map(|f| f["message"].as_str())
        .collect();
    assert_eq!(said.len(), 1, "once a minute a table: {said:?}");
    assert!(
        said[0].contains("draw on their layer's own budget"),
        "{}",
        said[0]
    );
}

#[retry(hedge = 20ms, idempotent, budget = none)]
async fn hedged_inner(took_ms: u64) -> Result<u32, std::io::Error> {
    tokio::time::sleep(std::time::Duration::from_millis(took_ms)).await;
    Ok(1)
}

#[retry(hedge = 10ms, idempotent, budget = none)]
async fn hedged_outer_first() -> Result<u32, std::io::Error> {
    hedged_inner(100).await
}

#[retry(hedge = 50ms, idempotent, budget = none)]
async fn hedged_outer_last() -> Result<u32, std::io::Error> {
    hedged_inner(100).await
}

/// A hedge not sent because another layer hedged says which layer did,
/// and is counted by its reason.
#[test]
fn a_hedge_not_sent_for_another_layers_says_which() {
    let _serial = serial();
    let runtime = paused_runtime();
    // The outer call hedges first: the inner calls in both its attempts
    // send none; the inner call hedges first: the outer one sends none.
    for (outer_first, reason, function, times) in [
        (true, "hedged_above", "telemetry::hedged_inner", 2_u64),
        (false, "hedged_below", "telemetry::hedged_outer_last", 1),
    ] {
        let recorder = Recorder::default();
        let capture = captured(|| {
            metrics::with_local_recorder(&recorder, || {
                let out = if outer_first {
                    runtime.block_on(hedged_outer_first())
                } else {
                    runtime.block_on(hedged_outer_last())
                };
                assert_eq!(out.unwrap(), 1);
            });
        });
        let counters = counters(&recorder);
        let refused: Vec<_> = counters
            .iter()
            .filter(|(name, _)| name.starts_with("backstop_hedges_refused_total"))
            .collect();
        let name = format!("backstop_hedges_refused_total{{function={function},reason={reason}}}");
        assert_eq!(refused, [(&name, &times)], "{counters:?}");
        let events = capture.events.lock().unwrap();
        let not_sent: Vec<_> = events
            .iter()
            .filter(|(_, fields)| {
                fields.get("message").map(String::as_str) == Some("hedge not sent")
            })
            .map(|(_, fields)| {
                (
                    fields.get("reason").cloned(),
                    fields.get("function").cloned(),
                )
            })
            .collect();
        let expected = (Some(reason.to_owned()), Some(function.to_owned()));
        assert_eq!(not_sent, vec![expected; times as usize], "{events:?}");
    }
}

/// A budget with no token to grant: a thousandth of a retry per call.
static NO_HEDGE_BUDGET: backstop::limit::WindowBudget =
    backstop::limit::WindowBudget::new(0.001, 0, std::time::Duration::from_secs(10));

#[retry(hedge = 10ms, idempotent, budget = NO_HEDGE_BUDGET)]
async fn hedged_on_an_empty_budget() -> Result<u32, std::io::Error> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(1)
}

/// A hedge due that the budget, an open breaker (or one half-open, beside
/// its probe), a shedding adaptive throttle or the deadline refuses is
/// counted by its reason; a call that
/// may not hedge at all (not idempotent) counts none.
#[test]
fn a_hedge_due_and_refused_is_counted_and_one_never_due_is_not() {
    use backstop::hedge::Hedge;
    let _serial = serial();
    let runtime = paused_runtime();
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            assert_eq!(hedged_on_an_empty_budget().await.unwrap(), 1);
            backstop::testing::seed_jitter(1);
            assert_eq!(hedge_beside_an_opened_breaker().await.unwrap(), 1);
            assert_eq!(hedge_beside_a_shedding_throttle().await.unwrap(), 1);
            assert_eq!(hedge_at_the_deadline().await.unwrap(), 1);
            // Opened by a failure; a cooldown later, a slow probe.
            hedge_beside_a_probe(true).await.unwrap_err();
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            assert_eq!(hedge_beside_a_probe(false).await.unwrap(), 1);
            let policy = backstop::Policy::new();
            let out = backstop::Retry::new(&policy)
                .name("not_idempotent")
                .hedge(Hedge::after(std::time::Duration::from_millis(10)))
                .call_async(|| async {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Ok::<_, std::io::Error>(1)
                })
                .await;
            assert_eq!(out.unwrap(), 1);
        });
    });
    let counters = counters(&recorder);
    let refused: Vec<_> = counters
        .iter()
        .filter(|(name, _)| name.starts_with("backstop_hedges_refused_total"))
        .collect();
    HEDGE_BREAKER.reset();
    let f = "backstop_hedges_refused_total{function=telemetry::";
    let expected = [
        format!("{f}hedge_at_the_deadline,reason=deadline}}"),
        format!("{f}hedge_beside_a_probe,reason=breaker_open}}"),
        format!("{f}hedge_beside_a_shedding_throttle,reason=throttled}}"),
        format!("{f}hedge_beside_an_opened_breaker,reason=breaker_open}}"),
        format!("{f}hedged_on_an_empty_budget,reason=budget}}"),
    ];
    assert_eq!(
        refused,
        expected.iter().map(|name| (name, &1)).collect::<Vec<_>>(),
        "{counters:?}"
    );
    assert!(
        !counters
            .keys()
            .any(|k| k.starts_with("backstop_hedges_total")),
        "no hedge went: {counters:?}"
    );
}

static FORGETTING: backstop::limit::Keyed<backstop::limit::CircuitBreaker> =
    backstop::limit::Keyed::with_capacity(
        backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(10))
            .named("forgetting"),
        1,
    );

/// A breaker given up (open, its key gone two cooldowns) whose place goes
/// to another key is told forgotten under the key it was, whose gauge
/// goes back to 0: not under the key that takes its place.
#[test]
fn a_forgotten_breaker_is_told_under_the_key_it_was() {
    use backstop::{Policy, Retry};
    let _serial = serial();
    let vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    let capture = Arc::new(Capture::default());
    tracing::subscriber::with_default(Arc::clone(&capture), || {
        metrics::with_local_recorder(&recorder, || {
            let policy = Policy::new().attempts(1).no_budget();
            let _ = Retry::new(&policy)
                .breaker(&FORGETTING)
                .key(&"db-1")
                .call(|| Err::<(), _>(Error::from(ErrorKind::ConnectionRefused)));
            vt.advance(std::time::Duration::from_secs(20));
            let _ = Retry::new(&policy)
                .breaker(&FORGETTING)
                .key(&"db-2")
                .call(|| Ok::<_, Error>(()));
        });
    });
    let gauges = gauges(&recorder);
    assert_eq!(
        gauges
            .get("backstop_breakers_open{breaker=forgetting,key=db-1}")
            .map(|open| open.abs() < f64::EPSILON),
        Some(true),
        "back to 0: {gauges:?}"
    );
    assert!(
        gauges
            .get("backstop_breakers_open{breaker=forgetting,key=db-2}")
            .is_none_or(|open| open.abs() < f64::EPSILON),
        "db-2's breaker is closed: {gauges:?}"
    );
    let events = capture.events.lock().unwrap();
    let forgotten: Vec<&str> = events
        .iter()
        .filter(|(_, f)| f["message"].starts_with("circuit breaker forgotten"))
        .map(|(_, f)| f["key"].as_str())
        .collect();
    assert_eq!(forgotten, ["db-1"], "{events:?}");
}

static RACED: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(10)).named("raced");

/// Two changes on two threads told in the other order than they were
/// made (the first thread held between its change and its gauge) leave
/// the gauge at the breaker's state, not at the change told last.
#[test]
fn a_change_told_late_leaves_the_gauge_at_the_breakers_state() {
    use backstop::Verdict;
    use backstop::limit::BreakerState;
    let _serial = serial();
    let recorder = Arc::new(Recorder::default());
    let gauge = Arc::new(Gauge::default());
    recorder.gauges.lock().unwrap().insert(
        "backstop_breakers_open{breaker=raced}".to_owned(),
        Arc::clone(&gauge),
    );
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let t0 = std::time::Instant::now();
    let t1 = t0 + std::time::Duration::from_secs(10);
    metrics::with_local_recorder(&*recorder, || {
        RACED.try_acquire(t0).unwrap().failed(Verdict::Retry, t0); // opens
    });
    let probe = RACED.try_acquire(t1).unwrap();
    *gauge.1.lock().unwrap() = Some((reached_tx, go_rx));
    let slow_recorder = Arc::clone(&recorder);
    let slow = std::thread::Builder::new()
        .name("slow".to_owned())
        .spawn(move || metrics::with_local_recorder(&*slow_recorder, || probe.succeeded(t1)))
        .unwrap();
    // The probe closed the breaker and is about to say so: another call
    // fails, and opens it again.
    reached.recv().unwrap();
    metrics::with_local_recorder(&*recorder, || {
        RACED.try_acquire(t1).unwrap().failed(Verdict::Retry, t1);
    });
    go.send(()).unwrap();
    slow.join().unwrap();
    assert_eq!(RACED.state_at(t1), BreakerState::Open);
    let value = *gauge.0.lock().unwrap();
    assert!(
        (value - 1.0).abs() < f64::EPSILON,
        "the gauge says open: {value}"
    );
}

// --- every give-up reason, in tracing and metrics -----------------------------

/// What `reasons`'s functions fail with.
#[derive(Debug)]
enum Failure {
    Transient,
    Ambiguous,
    After(std::time::Duration),
    Invalid,
    Rejected,
}

impl backstop::Classify for Failure {
    fn classify(&self) -> backstop::Verdict {
        use backstop::Verdict;
        match self {
            Failure::Transient => Verdict::Retry,
            Failure::Ambiguous => Verdict::RetryIfIdempotent,
            Failure::After(after) => Verdict::RetryAfter(*after),
            Failure::Invalid | Failure::Rejected => Verdict::Stop,
        }
    }
}

impl From<backstop::CircuitOpen> for Failure {
    fn from(_: backstop::CircuitOpen) -> Self {
        Failure::Rejected
    }
}

impl From<backstop::Throttled> for Failure {
    fn from(_: backstop::Throttled) -> Self {
        Failure::Rejected
    }
}

mod reasons {
    use super::Failure;
    use backstop::retry;
    use std::time::Duration;

    /// `Transient`, then `then`.
    #[retry(attempts = 2, budget = none)]
    pub(crate) fn stopped(calls: &mut u32) -> Result<(), Failure> {
        *calls += 1;
        Err(if *calls == 1 {
            Failure::Transient
        } else {
            Failure::Invalid
        })
    }

    #[retry(attempts = 2, budget = none)]
    pub(crate) fn not_idempotent() -> Result<(), Failure> {
        Err(Failure::Ambiguous)
    }

    #[retry(attempts = 2, budget = none)]
    pub(crate) fn attempts() -> Result<(), Failure> {
        Err(Failure::Transient)
    }

    #[retry(attempts = 5, deadline = 1s, budget = none)]
    pub(crate) fn deadline() -> Result<(), Failure> {
        Err(Failure::After(Duration::from_secs(2)))
    }

    #[retry(attempts = 5, retry_after_max = 10s, budget = none)]
    pub(crate) fn retry_after_too_long() -> Result<(), Failure> {
        Err(Failure::After(Duration::from_secs(30)))
    }

    static EMPTY: backstop::limit::WindowBudget =
        backstop::limit::WindowBudget::new(0.1, 0, Duration::from_secs(10));

    #[retry(attempts = 5, budget = EMPTY)]
    pub(crate) fn budget() -> Result<(), Failure> {
        Err(Failure::Transient)
    }

    static TRIPPED: backstop::limit::CircuitBreaker =
        backstop::limit::CircuitBreaker::new(1, Duration::from_secs(60));

    #[retry(attempts = 5, budget = none, breaker = TRIPPED)]
    pub(crate) fn breaker_open() -> Result<(), Failure> {
        Err(Failure::Transient)
    }

    static SHEDDING: backstop::limit::AdaptiveThrottle =
        backstop::limit::AdaptiveThrottle::new(2.0, Duration::from_secs(60));

    /// Its first attempt is let through, then sees ten thousand refusals:
    /// its retry is shed with p = 0.9999.
    #[retry(attempts = 5, budget = none, throttle = SHEDDING)]
    pub(crate) fn throttled() -> Result<(), Failure> {
        for _ in 0..10_000 {
            SHEDDING.requested(backstop::time::Clock::now(&backstop::time::SystemClock));
        }
        Err(Failure::Transient)
    }

    #[retry(attempts = 3, budget = none)]
    fn below() -> Result<(), Failure> {
        Err(Failure::Transient)
    }

    #[retry(attempts = 3, budget = none)]
    pub(crate) fn retried_below() -> Result<(), Failure> {
        below()
    }
}

#[test]
fn every_give_up_reason_is_told_and_counted() {
    let _serial = serial();
    let recorder = Recorder::default();
    let capture = captured(|| {
        metrics::with_local_recorder(&recorder, || {
            let _ = reasons::stopped(&mut 0);
            let _ = reasons::not_idempotent();
            let _ = reasons::attempts();
            let _ = reasons::deadline();
            let _ = reasons::retry_after_too_long();
            let _ = reasons::budget();
            let _ = reasons::breaker_open();
            backstop::testing::seed_jitter(1);
            let _ = reasons::throttled();
            let _ = reasons::retried_below();
        });
    });
    let all = [
        "stopped",
        "not_idempotent",
        "attempts",
        "deadline",
        "retry_after_too_long",
        "budget",
        "breaker_open",
        "throttled",
        "retried_below",
    ];
    let events = capture.events.lock().unwrap();
    let told: Vec<(String, &str)> = events
        .iter()
        .filter(|(_, f)| f.get("message").map(String::as_str) == Some("giving up"))
        .map(|(_, f)| (f["function"].clone(), f["reason"].as_str()))
        .filter(|(function, _)| !function.ends_with("::below"))
        .collect();
    let expected: Vec<(String, &str)> = all
        .iter()
        .map(|reason| (format!("telemetry::reasons::{reason}"), *reason))
        .collect();
    assert_eq!(told, expected, "{events:?}");
    let counters = counters(&recorder);
    for reason in all {
        assert_eq!(
            counters.get(&format!(
                "backstop_give_ups_total{{function=telemetry::reasons::{reason},reason={reason}}}"
            )),
            Some(&1),
            "{counters:?}"
        );
    }
    assert_eq!(
        counters.get("backstop_budget_refusals_total{function=telemetry::reasons::budget}"),
        Some(&1),
        "{counters:?}"
    );
}

// --- the key label on the other counters --------------------------------------

static KEYED_EMPTY: backstop::limit::WindowBudget =
    backstop::limit::WindowBudget::new(0.1, 0, std::time::Duration::from_secs(10));

#[retry(attempts = 3, budget = KEYED_EMPTY, key = shard)]
fn refused_by_its_budget(shard: &str) -> Result<(), Error> {
    let _ = shard;
    Err(ErrorKind::HostUnreachable.into())
}

/// Two tokens: a refusal holds at once.
static KEYED_HELD: backstop::limit::TokenBudget = backstop::limit::TokenBudget::new(2, 1.0);

#[retry(deadline = 300ms, attempts = 50, budget = KEYED_HELD, key = shard)]
fn held_keyed(shard: &str) -> Result<(), Error> {
    let _ = shard;
    Err(ErrorKind::ConnectionRefused.into())
}

/// Attempt 1 is slow; its hedge answers.
#[retry(hedge = 50ms, idempotent, budget = none, key = shard)]
async fn hedged_keyed(shard: &str) -> Result<u32, Error> {
    let _ = shard;
    let attempt = backstop::context().unwrap().attempt();
    let took = if attempt == 1 { 1_000 } else { 10 };
    tokio::time::sleep(std::time::Duration::from_millis(took)).await;
    Ok(attempt)
}

#[test]
fn a_keyed_calls_holds_budget_refusals_and_hedges_are_labelled_with_its_key() {
    let _serial = serial();
    let _vt = backstop::testing::VirtualTime::start();
    let recorder = Recorder::default();
    let runtime = paused_runtime();
    metrics::with_local_recorder(&recorder, || {
        let _ = refused_by_its_budget("shard-1");
        let _ = held_keyed("shard-2");
        assert_eq!(runtime.block_on(hedged_keyed("shard-3")).unwrap(), 2);
    });
    let counters = counters(&recorder);
    for metric in [
        "backstop_budget_refusals_total{function=telemetry::refused_by_its_budget,key=shard-1}",
        "backstop_give_ups_total{function=telemetry::refused_by_its_budget,key=shard-1,reason=budget}",
        "backstop_held_total{function=telemetry::held_keyed,key=shard-2}",
        "backstop_hedges_total{function=telemetry::hedged_keyed,key=shard-3}",
        "backstop_hedge_wins_total{function=telemetry::hedged_keyed,key=shard-3}",
    ] {
        assert!(
            counters.get(metric).is_some_and(|n| *n >= 1),
            "{metric}: {counters:#?}"
        );
    }
}

// --- hedges refused, by every reason -----------------------------------------

static HEDGE_BREAKER: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(60));

/// Its breaker is held open while attempt 1 runs: the hedge due at 10 ms
/// finds it open.
#[retry(hedge = 10ms, idempotent, budget = none, breaker = HEDGE_BREAKER)]
async fn hedge_beside_an_opened_breaker() -> Result<u32, Error> {
    HEDGE_BREAKER.hold_open();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(1)
}

static PROBE_BREAKER: backstop::limit::CircuitBreaker =
    backstop::limit::CircuitBreaker::new(1, std::time::Duration::from_secs(1));

/// Fails at once if told to (opening its breaker), or answers in 50 ms:
/// a breaker's probe, when half-open, whose hedge due at 10 ms is refused.
#[retry(hedge = 10ms, idempotent, budget = none, breaker = PROBE_BREAKER)]
async fn hedge_beside_a_probe(fail: bool) -> Result<u32, Error> {
    if fail {
        return Err(Error::from(ErrorKind::ConnectionRefused));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(1)
}

static HEDGE_THROTTLE: backstop::limit::AdaptiveThrottle =
    backstop::limit::AdaptiveThrottle::new(2.0, std::time::Duration::from_secs(60));

/// Attempt 1 is let through, then its throttle sees ten thousand
/// refusals: the hedge is shed with p = 0.9999.
#[retry(hedge = 10ms, idempotent, budget = none, throttle = HEDGE_THROTTLE)]
async fn hedge_beside_a_shedding_throttle() -> Result<u32, Error> {
    for _ in 0..10_000 {
        HEDGE_THROTTLE.requested(backstop::time::Clock::now(&backstop::time::SystemClock));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(1)
}

/// The hedge is due 1 ms before the deadline, within the timer's slack
/// (a literal deadline would be refused at compile time: no hedge could
/// go out).
const ELEVEN_MS: std::time::Duration = std::time::Duration::from_millis(11);

#[retry(hedge = 10ms, deadline = ELEVEN_MS, idempotent, budget = none)]
async fn hedge_at_the_deadline() -> Result<u32, Error> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    Ok(1)
}

/// A call that may not hedge (its policy not idempotent) says so once, not
/// once a round, as the layer says it once a request.
#[test]
fn a_call_that_may_not_hedge_says_so_once() {
    use backstop::hedge::Hedge;
    let _serial = serial();
    let runtime = paused_runtime();
    let policy = backstop::Policy::new().attempts(3).no_budget();
    let retry =
        backstop::Retry::new(&policy).hedge(Hedge::after(std::time::Duration::from_millis(10)));
    let capture = captured(|| {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let out = runtime.block_on(retry.call_async(|| async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if calls.fetch_add(1, Relaxed) < 2 {
                Err(Error::from(ErrorKind::ConnectionRefused))
            } else {
                Ok(())
            }
        }));
        out.unwrap();
    });
    let events = capture.events.lock().unwrap();
    let told = events
        .iter()
        .filter(|(_, fields)| fields.get("message").map(String::as_str) == Some("hedge not sent"))
        .count();
    assert_eq!(told, 1, "{events:?}");
}
