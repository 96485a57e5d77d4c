//! The storm example's story, checked: on a smaller scenario than the
//! example's default, retries without a budget never let the server
//! recover, and the defaults keep the load near the offered load.

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/storm.rs"]
mod example;

use std::sync::Mutex;
use std::time::Duration;

use example::{
    MATRIX_STRATEGIES, Protection, Recovery, Scenario, Strategy, Summary, broken_promises,
    broken_restart_promises, restart_scenarios, run, run_two, summarise,
};

fn scenario() -> Scenario {
    Scenario {
        clients: 500,
        capacity: 400.0,
        queue: 800,
        duration: Duration::from_secs(20),
        outage_at: Duration::from_secs(4),
        outage: Duration::from_secs(3),
        ..Scenario::default()
    }
}

fn simulate(strategy: Strategy) -> Summary {
    let sc = scenario();
    summarise(&run(strategy, &sc), &sc)
}

fn amplification(s: &Summary) -> f64 {
    s.sent as f64 / s.offered as f64
}

#[test]
fn retries_without_a_budget_keep_the_server_down() {
    for strategy in [Strategy::Naive, Strategy::Exponential, Strategy::FullJitter] {
        let s = simulate(strategy);
        assert_eq!(s.recovered, Recovery::Never, "{strategy:?} recovered");
        assert!(
            amplification(&s) > 2.0,
            "{strategy:?}: {}",
            amplification(&s)
        );
        assert!(s.wasted > 0.5, "{strategy:?}: {}", s.wasted);
    }
}

/// Each strategy's budget and breaker are statics, which two simulations
/// running at once on different clocks would share: the tests that use them
/// take turns.
static STATICS: Mutex<()> = Mutex::new(());

#[test]
fn the_defaults_keep_load_near_the_offered_load_and_recover_a_breaker_first() {
    let _turn = STATICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let none = simulate(Strategy::NoRetry);
    let defaults = simulate(Strategy::Defaults);
    let breaker = simulate(Strategy::DefaultsBreaker);
    assert!((amplification(&none) - 1.0).abs() < f64::EPSILON);
    assert!(
        amplification(&defaults) < 1.05,
        "{}",
        amplification(&defaults)
    );
    let Recovery::After(recovered) = defaults.recovered else {
        panic!("the defaults never recover");
    };
    assert!(recovered < Duration::from_secs(8), "{recovered:?}");
    let Recovery::After(by_breaker) = breaker.recovered else {
        panic!("the breaker never recovers");
    };
    assert!(
        by_breaker <= recovered,
        "breaker {by_breaker:?}, defaults {recovered:?}"
    );
    assert!(breaker.wasted < defaults.wasted);
}

#[test]
fn near_capacity_the_windowed_budget_feeds_the_storm_and_the_token_budget_does_not() {
    let _turn = STATICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let sc = Scenario {
        load: 0.9,
        ..scenario()
    };
    let [none, windowed, defaults, breaker] = [
        Strategy::NoRetry,
        Strategy::Windowed,
        Strategy::Defaults,
        Strategy::DefaultsBreaker,
    ]
    .map(|strategy| summarise(&run(strategy, &sc), &sc));
    // A budget funded per call keeps 10% more on a server with less
    // headroom than that: it never drains.
    assert_eq!(windowed.recovered, Recovery::Never);
    let Recovery::After(by_none) = none.recovered else {
        panic!("no retry never recovers");
    };
    // The throttle stops retrying within a few failures: no worse than
    // not retrying at all.
    assert!(
        amplification(&defaults) < 1.05,
        "{}",
        amplification(&defaults)
    );
    let Recovery::After(by_defaults) = defaults.recovered else {
        panic!("the defaults never recover");
    };
    let slack = (by_none.mul_f64(0.15)).max(Duration::from_secs(1));
    assert!(
        by_defaults <= by_none + slack,
        "defaults {by_defaults:?}, none {by_none:?}"
    );
    assert!(defaults.failed_share() <= none.failed_share() + 0.01);
    let Recovery::After(by_breaker) = breaker.recovered else {
        panic!("the breaker never recovers");
    };
    assert!(by_breaker < by_none, "{by_breaker:?}");
}

#[test]
fn a_seed_replays_the_same_run_jitter_included() {
    let sc = Scenario {
        seed: 9,
        ..scenario()
    };
    let (a, b) = (
        run(Strategy::FullJitter, &sc),
        run(Strategy::FullJitter, &sc),
    );
    assert_eq!(a.sent, b.sent);
    assert_eq!(a.ok, b.ok);
    let other = run(
        Strategy::FullJitter,
        &Scenario {
            seed: 10,
            ..scenario()
        },
    );
    assert_ne!(a.sent, other.sent);
}

#[test]
fn durations_are_read_as_the_summary_prints_them() {
    let parse = |args: &[&str]| Scenario::parse(args.iter().map(|a| (*a).to_owned()));
    let sc = parse(&[
        "--timeout",
        "250ms",
        "--outage=2s",
        "--duration",
        "10",
        "--outage-at",
        "1.5s",
    ])
    .expect("valid flags");
    assert_eq!(sc.timeout, Duration::from_millis(250));
    assert_eq!(sc.outage, Duration::from_secs(2));
    assert_eq!(sc.duration, Duration::from_secs(10));
    assert_eq!(sc.outage_at, Duration::from_millis(1500));
    for bad in ["2x", "s", "ms", "-1s", "1e400"] {
        let err = parse(&["--timeout", bad]).expect_err(bad);
        assert!(err.contains("is not a duration"), "{bad}: {err}");
    }
}

#[test]
fn the_matrix_promises_hold_on_the_small_scenario_over_seeds() {
    let _turn = STATICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let base = scenario();
    let variants = [
        ("default", base.clone()),
        (
            "--load 0.9",
            Scenario {
                load: 0.9,
                ..base.clone()
            },
        ),
        (
            "--outage 0 --flaky 0.05",
            Scenario {
                outage: Duration::ZERO,
                flaky: 0.05,
                ..base.clone()
            },
        ),
    ];
    for (name, sc) in variants {
        for seed in 1..=3 {
            let sc = Scenario { seed, ..sc.clone() };
            let results: Vec<(Strategy, Summary)> = MATRIX_STRATEGIES
                .into_iter()
                .map(|strategy| (strategy, summarise(&run(strategy, &sc), &sc)))
                .collect();
            let broken = broken_promises(&results);
            assert!(broken.is_empty(), "{name}, seed {seed}: {broken:?}");
        }
    }
}

/// A restart (the server refuses at once) with callers that would wait
/// 3 s, on the example's own server (at 400 requests a second, the small
/// scenario's 100 ms counts are too noisy for a bound of 1.2× capacity:
/// no retry alone reaches it) over a shorter run: the defaults hold the
/// calls whose retries the budget refuses and bring them back as the
/// server answers again, where no retry fails every call started in it.
#[test]
fn the_defaults_ride_out_a_restart_over_seeds() {
    let _turn = STATICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let base = Scenario {
        duration: Duration::from_secs(15),
        ..Scenario::default()
    };
    for (name, sc) in restart_scenarios(&base) {
        for seed in 1..=3 {
            let sc = Scenario { seed, ..sc.clone() };
            let results: Vec<(Strategy, Summary)> = [Strategy::NoRetry, Strategy::Defaults]
                .into_iter()
                .map(|strategy| (strategy, summarise(&run(strategy, &sc), &sc)))
                .collect();
            let (none, defaults) = (results[0].1.outage, results[1].1.outage);
            assert_eq!(none.ok, 0, "{name}, seed {seed}: {none:?}");
            let broken = broken_restart_promises(&results, &sc);
            assert!(broken.is_empty(), "{name}, seed {seed}: {broken:?}");
            if sc.outage < sc.deadline {
                assert!(
                    defaults.rescued() > 0.25,
                    "{name}, seed {seed}: {defaults:?}"
                );
            } else {
                // Held to their deadlines, the calls sent nothing more.
                assert!(
                    defaults.amplification() < 1.02,
                    "{name}, seed {seed}: {defaults:?}"
                );
            }
        }
    }
}

#[test]
fn behind_one_client_a_stalled_dependency_costs_the_healthy_one_nothing_per_destination() {
    let _turn = STATICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for seed in 1..=3 {
        let sc = Scenario { seed, ..scenario() };
        let healthy = |protection| {
            let (series, retries) = run_two(protection, &sc);
            (summarise(&series, &sc), retries)
        };
        let (alone, alone_retries) = healthy(Protection::Alone);
        let (per, per_retries) = healthy(Protection::PerDestination);
        let (shared, _) = healthy(Protection::OneForBoth);
        assert_eq!(per.offered, alone.offered, "seed {seed}: the same calls");
        // Per destination: as if the healthy dependency were alone, every
        // retry it has alone kept and no more of its calls failed.
        assert_eq!(
            per_retries, alone_retries,
            "seed {seed}: retries per destination and alone"
        );
        assert!(
            per.failed <= alone.failed,
            "seed {seed}: {} failed vs {} alone",
            per.failed,
            alone.failed
        );
        // One budget and one breaker for both: the stalled one's failures
        // open the breaker and drain the budget for the healthy one too.
        assert!(
            shared.failed_share() > alone.failed_share() + 0.01,
            "seed {seed}: {} shared vs {} alone",
            shared.failed_share(),
            alone.failed_share()
        );
    }
}
