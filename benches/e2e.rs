//! What a retry layer costs a real request: one hyper server on 127.0.0.1,
//! a kept-alive connection, each request awaited to the end of its body,
//! side by side in one run.
//!
//! ```sh
//! cargo bench --bench e2e --features tower,hyper-util,reqwest-middleware
//! cargo bench --bench e2e --features tower,hyper-util,reqwest-middleware -- hyper   # one group
//! cargo bench --bench e2e --features tower,hyper-util,reqwest-middleware -- --interleaved
//! ```
//!
//! `--interleaved` runs the stacks of each group in turns instead (rounds
//! of a few hundred requests each, the order rotated every round) and
//! prints each stack's median and the median of the per-round ratios: a
//! machine whose speed drifts between criterion's groups of seconds (this
//! one's moves by ±25%) drifts alike for every stack of one round.
//!
//! Groups:
//!
//! - `hyper`: a bare hyper-util client; the same behind
//!   `RetryLayer::http`; behind tower's `Retry` with a policy that never
//!   retries a success (what a success costs each); and behind tower's
//!   `Retry` as a careful tower user stacks it for some of what the layer
//!   also does (`tower_retry_guarded`: tower's own retry budget,
//!   `TpsBudget`, and a `Timeout` around the whole call as its deadline).
//! - `reqwest`: a bare reqwest client; a reqwest-middleware client with
//!   `RetryMiddleware`; with reqwest-retry's `RetryTransientMiddleware`;
//!   and the same with a deadline for the whole call
//!   (`reqwest_retry_deadline`: `tokio::time::timeout` around the send),
//!   which the middleware keeps too.
//!
//! BENCHMARKS.md has the figures and what they mean.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;

use backstop::Policy;
use backstop::reqwest::RetryMiddleware;
use backstop::tower::{ReplayBody, RetryLayer};
use bytes::Bytes;
use criterion::{Criterion, criterion_group};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Service, ServiceExt};

/// The answer to every request: a small JSON body.
const BODY: &[u8] = br#"{"id": 7, "name": "Ada"}"#;

/// A server that answers every request 200 with [`BODY`].
async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = hyper::service::service_fn(|_: http::Request<hyper::body::Incoming>| {
                std::future::ready(Ok::<_, Infallible>(http::Response::new(Full::new(
                    Bytes::from_static(BODY),
                ))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler),
            );
        }
    });
    addr
}

fn get(uri: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(uri).body(Full::default()).unwrap()
}

/// Reads a response's body to its end, as a caller does.
async fn read<B: hyper::body::Body>(response: http::Response<B>) -> usize
where
    B::Error: std::fmt::Debug,
{
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), BODY.len());
    body.len()
}

/// tower's `Retry` policy for the comparison: a success is final, a failure
/// retried once (never reached here: the server always answers).
#[derive(Clone)]
struct Once(bool);

impl<Res, E> tower::retry::Policy<http::Request<Full<Bytes>>, Res, E> for Once {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _: &mut http::Request<Full<Bytes>>,
        result: &mut Result<Res, E>,
    ) -> Option<Self::Future> {
        (result.is_err() && std::mem::replace(&mut self.0, false)).then(|| std::future::ready(()))
    }

    fn clone_request(
        &mut self,
        request: &http::Request<Full<Bytes>>,
    ) -> Option<http::Request<Full<Bytes>>> {
        let mut copy = http::Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.headers_mut() = request.headers().clone();
        Some(copy)
    }
}

/// tower's `Retry` policy of `tower_retry_guarded`: [`Once`], drawing on
/// tower's retry budget (a success deposits, a retry withdraws), as
/// tower's documentation shows it.
#[derive(Clone)]
struct Budgeted {
    budget: std::sync::Arc<tower::retry::budget::TpsBudget>,
    once: Once,
}

impl<Res, E> tower::retry::Policy<http::Request<Full<Bytes>>, Res, E> for Budgeted {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        request: &mut http::Request<Full<Bytes>>,
        result: &mut Result<Res, E>,
    ) -> Option<Self::Future> {
        use tower::retry::budget::Budget as _;
        if result.is_ok() {
            self.budget.deposit();
            return None;
        }
        if !self.budget.withdraw() {
            return None;
        }
        tower::retry::Policy::<_, Res, E>::retry(&mut self.once, request, result)
    }

    fn clone_request(
        &mut self,
        request: &http::Request<Full<Bytes>>,
    ) -> Option<http::Request<Full<Bytes>>> {
        tower::retry::Policy::<_, Res, E>::clone_request(&mut self.once, request)
    }
}

/// A current-thread runtime with a server of its own, and the URI to ask.
fn set_up() -> (tokio::runtime::Runtime, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = runtime.block_on(serve());
    (runtime, format!("http://{addr}/users/7"))
}

/// Runs `stacks` as a criterion group, one after the other.
fn group(
    c: &mut Criterion,
    name: &str,
    runtime: &tokio::runtime::Runtime,
    stacks: &[(&str, Sender<'_>)],
) {
    let mut group = c.benchmark_group(name);
    for (stack, send) in stacks {
        group.bench_function(*stack, |b| b.to_async(runtime).iter(send));
    }
    group.finish();
}

fn hyper(c: &mut Criterion) {
    let (runtime, uri) = set_up();
    let policy = Policy::new();
    // (A `Timeout`'s future starts its timer when it is made.)
    let _runtime = runtime.enter();
    let stacks = hyper_stacks(&policy, &uri);
    group(c, "hyper", &runtime, &stacks);
}

fn reqwest(c: &mut Criterion) {
    let (runtime, uri) = set_up();
    let policy = Policy::new();
    let stacks = reqwest_stacks(&policy, &uri);
    group(c, "reqwest", &runtime, &stacks);
}

criterion_group!(benches, hyper, reqwest);

/// A stack of a group: sends one request and reads its answer.
type Sender<'a> = Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = usize> + 'a>> + 'a>;

/// Runs `stacks` in turns, `ROUNDS` rounds of `PER_ROUND` requests each,
/// and prints the median time per request of each, and the median (and
/// range) over the rounds of each stack's time over the first's and over
/// that of each stack `versus` names.
fn interleave(
    group: &str,
    runtime: &tokio::runtime::Runtime,
    stacks: &[(&str, Sender<'_>)],
    versus: &[usize],
) {
    const ROUNDS: usize = 300;
    const PER_ROUND: usize = 200;
    // `E2E_ONLY=group/stack E2E_N=n`: that stack alone, n requests after
    // the warm-up (to count its instructions with cachegrind at two n).
    if let Ok(only) = std::env::var("E2E_ONLY") {
        let n: usize = std::env::var("E2E_N").map_or(10_000, |n| n.parse().unwrap());
        for (name, send) in stacks
            .iter()
            .filter(|(name, _)| only == format!("{group}/{name}"))
        {
            runtime.block_on(async {
                for _ in 0..PER_ROUND + n {
                    std::hint::black_box(send().await);
                }
            });
            println!("{group}/{name}: {n} requests");
        }
        return;
    }
    let mut times = vec![Vec::with_capacity(ROUNDS); stacks.len()];
    runtime.block_on(async {
        // Warm every connection and pool first.
        for (_, send) in stacks {
            for _ in 0..PER_ROUND {
                send().await;
            }
        }
        for round in 0..ROUNDS {
            for turn in 0..stacks.len() {
                let which = (turn + round) % stacks.len();
                let started = std::time::Instant::now();
                for _ in 0..PER_ROUND {
                    std::hint::black_box(stacks[which].1().await);
                }
                let per_request = started.elapsed().as_secs_f64() * 1e6 / PER_ROUND as f64;
                times[which].push(per_request);
            }
        }
    });
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let ratios =
        |of: usize, to: usize| median((0..ROUNDS).map(|r| times[of][r] / times[to][r]).collect());
    for (i, (name, _)) in stacks.iter().enumerate() {
        let (us, _, _) = median(times[i].clone());
        let mut line = format!("{group}/{name}: {us:.2} µs");
        if i > 0 {
            let (r, lo, hi) = ratios(i, 0);
            let _ = write!(line, ", {r:.3}× {} ({lo:.3}–{hi:.3})", stacks[0].0);
        }
        for &v in versus.iter().filter(|&&v| v != i && i > 0 && v > 0) {
            let (r, lo, hi) = ratios(i, v);
            let _ = write!(line, ", {r:.3}× {} ({lo:.3}–{hi:.3})", stacks[v].0);
        }
        println!("{line}");
    }
}

/// The `hyper` group: a bare hyper-util client; the same behind
/// `RetryLayer::http`; the same behind tower's `Retry`, bare and guarded.
fn hyper_stacks<'a>(policy: &'a Policy, uri: &'a str) -> [(&'static str, Sender<'a>); 4] {
    let bare: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let behind: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
        Client::builder(TokioExecutor::new()).build_http();
    // (hyper-util's client error is classified as it is, with the feature
    // `hyper-util`: nothing boxed below the layer.)
    let layered = tower::ServiceBuilder::new()
        .layer(RetryLayer::http(policy))
        .service(behind);
    let under_tower: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let retried = tower::ServiceBuilder::new()
        .retry(Once(true))
        .service(under_tower);
    // tower's defaults for its budget (10 s, 10 retries a second, 20 %),
    // and the layer's default deadline as the call's timeout.
    let guarded_client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let guarded = tower::ServiceBuilder::new()
        .timeout(
            policy
                .get_deadline()
                .expect("the default policy has a deadline"),
        )
        .retry(Budgeted {
            budget: std::sync::Arc::new(tower::retry::budget::TpsBudget::new(
                std::time::Duration::from_secs(10),
                10,
                0.2,
            )),
            once: Once(true),
        })
        .service(guarded_client);
    // Memory, not time: futures made and dropped unpolled (hyper-util's
    // client needs no readiness first).
    println!(
        "hyper: the future of one request, bytes: bare {}, backstop_layer {}, tower_retry {}, \
         tower_retry_guarded {}; a request's body: bare {}, backstop_layer {}",
        std::mem::size_of_val(&bare.request(get(uri))),
        std::mem::size_of_val(&layered.clone().call(get(uri))),
        std::mem::size_of_val(&retried.clone().call(get(uri))),
        std::mem::size_of_val(&guarded.clone().call(get(uri))),
        std::mem::size_of::<Full<Bytes>>(),
        std::mem::size_of::<ReplayBody<Full<Bytes>>>(),
    );
    [
        (
            "bare",
            Box::new(move || {
                let bare = bare.clone();
                Box::pin(async move { read(bare.request(get(uri)).await.unwrap()).await })
            }),
        ),
        (
            "backstop_layer",
            Box::new(move || {
                let mut service = layered.clone();
                Box::pin(async move {
                    let response = service.ready().await.unwrap().call(get(uri)).await;
                    read(response.unwrap()).await
                })
            }),
        ),
        (
            "tower_retry",
            Box::new(move || {
                let mut service = retried.clone();
                Box::pin(async move {
                    let response = service.ready().await.unwrap().call(get(uri)).await;
                    read(response.unwrap()).await
                })
            }),
        ),
        (
            "tower_retry_guarded",
            Box::new(move || {
                let mut service = guarded.clone();
                Box::pin(async move {
                    let response = service.ready().await.unwrap().call(get(uri)).await;
                    read(response.unwrap()).await
                })
            }),
        ),
    ]
}

/// The `reqwest` group: a bare client; a reqwest-middleware client with
/// `RetryMiddleware`; the same with reqwest-retry's middleware, without
/// and with a deadline.
fn reqwest_stacks<'a>(policy: &'a Policy, uri: &'a str) -> [(&'static str, Sender<'a>); 4] {
    let deadline = policy
        .get_deadline()
        .expect("the default policy has a deadline");
    let bare = reqwest::Client::new();
    let backstop = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy))
        .build();
    let backoff = reqwest_retry::policies::ExponentialBackoff::builder().build_with_max_retries(2);
    let retry_crate = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            backoff,
        ))
        .build();
    let retry_crate_deadline = retry_crate.clone();
    [
        (
            "bare",
            Box::new(move || {
                let send = bare.get(uri).send();
                Box::pin(async move { send.await.unwrap().bytes().await.unwrap().len() })
            }),
        ),
        (
            "backstop_middleware",
            Box::new(move || {
                let send = backstop.get(uri).send();
                Box::pin(async move { send.await.unwrap().bytes().await.unwrap().len() })
            }),
        ),
        (
            "reqwest_retry",
            Box::new(move || {
                let send = retry_crate.get(uri).send();
                Box::pin(async move { send.await.unwrap().bytes().await.unwrap().len() })
            }),
        ),
        (
            "reqwest_retry_deadline",
            Box::new(move || {
                let send = tokio::time::timeout(deadline, retry_crate_deadline.get(uri).send());
                Box::pin(async move { send.await.unwrap().unwrap().bytes().await.unwrap().len() })
            }),
        ),
    ]
}

/// `--interleaved`: both groups, their stacks in turns.
fn interleaved() {
    let (runtime, uri) = set_up();
    let policy = Policy::new();
    // (A `Timeout`'s future starts its timer when it is made.)
    let _runtime = runtime.enter();
    let hyper = hyper_stacks(&policy, &uri);
    interleave("hyper", &runtime, &hyper, &[2, 3]);
    let reqwest = reqwest_stacks(&policy, &uri);
    interleave("reqwest", &runtime, &reqwest, &[2, 3]);
}

fn main() {
    if std::env::args().any(|arg| arg == "--interleaved") {
        interleaved();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
