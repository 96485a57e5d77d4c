//! Feature `serde`: policies, budgets and breakers from configuration.
//! Run with `cargo test -p backstop --features serde --test integrations config::`.

use std::sync::LazyLock;
use std::time::Duration;

use backstop::config::{BreakerConfig, WindowBudgetConfig};
use backstop::limit::WindowBudget;
use backstop::{Jitter, Policy, retry};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    payments: Policy,
    payments_budget: WindowBudgetConfig,
    payments_breaker: BreakerConfig,
}

const TOML: &str = r#"
[payments]
attempts = 5
deadline = "10s"
base = "250ms"
cap = "1.5s"
jitter = "equal"
idempotent = true

[payments_budget]
ratio = 0.2
min_per_sec = 5
ttl = "30s"

[payments_breaker]
failure_threshold = 10
cooldown = "1m"
"#;

#[test]
fn a_policy_budget_and_breaker_from_toml() {
    let config: Config = toml::from_str(TOML).unwrap();
    let expected = Policy::new()
        .attempts(5)
        .deadline(Some(Duration::from_secs(10)))
        .base(Duration::from_millis(250))
        .cap(Duration::from_millis(1500))
        .jitter(Jitter::Equal)
        .idempotent(true);
    assert_eq!(config.payments, expected);
    let budget = config.payments_budget.build();
    assert_eq!(
        (budget.ratio(), budget.min_per_sec(), budget.ttl()),
        (0.2, 5, Duration::from_secs(30))
    );
    let breaker = config.payments_breaker.build();
    assert_eq!(
        (breaker.failure_threshold(), breaker.cooldown()),
        (10, Duration::from_secs(60))
    );
}

#[test]
fn unset_fields_keep_the_defaults_and_json_works_too() {
    let policy: Policy = serde_json::from_str(r#"{ "attempts": 2, "deadline": "none" }"#).unwrap();
    assert_eq!(policy, Policy::new().attempts(2).deadline(None));
    let policy: Policy = serde_json::from_str("{}").unwrap();
    assert_eq!(policy, Policy::new());
}

#[test]
fn an_invalid_config_is_an_error_naming_the_field_and_the_reason() {
    let cases = [
        (r#"{ "atempts": 3 }"#, "unknown field `atempts`"),
        (r#"{ "attempts": 0 }"#, "`attempts` must be at least 1"),
        (r#"{ "base": "250" }"#, "`base`: `250` needs a unit"),
        (r#"{ "base": "0ms" }"#, "`base` must be greater than zero"),
        (
            r#"{ "base": "2s", "cap": "1s" }"#,
            "`base` (2s) is above `cap` (1s)",
        ),
        (
            r#"{ "factor": 0.5 }"#,
            "`factor` must be a finite number greater than 1",
        ),
        (r#"{ "jitter": "fulll" }"#, "fulll"),
        (r#"{ "deadline": "0s" }"#, "`deadline`"),
        (r#"{ "deadline": "ten seconds" }"#, "duration"),
        (r#"{ "base": 250 }"#, "duration"),
    ];
    for (json, expected) in cases {
        let error = serde_json::from_str::<Policy>(json)
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{json}: {error}");
    }
    let budget = serde_json::from_str::<WindowBudgetConfig>(
        r#"{ "ratio": 1.5, "min_per_sec": 1, "ttl": "10s" }"#,
    );
    assert!(
        budget
            .unwrap_err()
            .to_string()
            .contains("`ratio` must be in (0, 1]")
    );
    let budget = serde_json::from_str::<WindowBudgetConfig>(
        r#"{ "ratio": 0.1, "min_per_sec": 1, "ttl": "0s" }"#,
    );
    assert!(
        budget
            .unwrap_err()
            .to_string()
            .contains("`ttl` must be greater than zero")
    );
    let breaker =
        serde_json::from_str::<BreakerConfig>(r#"{ "failure_threshold": 0, "cooldown": "1s" }"#);
    assert!(
        breaker
            .unwrap_err()
            .to_string()
            .contains("`failure_threshold` must be at least 1")
    );
}

// A configuration loaded once, and functions that use it.
static CONFIG: LazyLock<Config> = LazyLock::new(|| toml::from_str(TOML).unwrap());
static PAYMENTS_BUDGET: LazyLock<WindowBudget> = LazyLock::new(|| CONFIG.payments_budget.build());

#[retry(policy = CONFIG.payments, budget = PAYMENTS_BUDGET)]
fn charge(calls: &mut u32) -> Result<(), std::io::Error> {
    *calls += 1;
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[test]
fn a_retry_driven_by_configuration() {
    let _vt = backstop::testing::VirtualTime::start();
    let mut calls = 0;
    let _ = charge(&mut calls);
    assert_eq!(calls, 5, "the configured attempts");
    assert_eq!(PAYMENTS_BUDGET.stats().calls, 1);
}

/// A budget that grants no retry: a thousandth of one per call.
static GRANTS_NONE: WindowBudget = WindowBudget::new(0.001, 0, Duration::from_secs(10));

static NO_BUDGET: LazyLock<Policy> =
    LazyLock::new(|| toml::from_str("attempts = 3\nbudget = \"none\"").unwrap());

#[retry(policy = *NO_BUDGET, budget = GRANTS_NONE)]
fn under_the_attributes_budget(calls: &mut u32) -> Result<(), std::io::Error> {
    *calls += 1;
    Err(std::io::ErrorKind::HostUnreachable.into())
}

#[test]
fn the_attributes_budget_wins_over_the_policys_none() {
    let _vt = backstop::testing::VirtualTime::start();
    assert!(NO_BUDGET.get_budget().is_none(), "configured: no budget");
    let mut calls = 0;
    let _ = under_the_attributes_budget(&mut calls);
    assert_eq!(calls, 1, "the attribute's budget refused the retry");
    assert_eq!(GRANTS_NONE.stats().refusals, 1);
}

#[test]
fn long_fractions_and_defaults_are_explained() {
    use backstop::config::parse_duration;
    assert_eq!(
        parse_duration("1.00000000000000000000000000000000000000000s"),
        Ok(Duration::from_secs(1))
    );
    // Not zero, and below a nanosecond: refused (read as zero, a `refill`
    // of "0.1ns" would be no refill at all).
    let error = parse_duration("0.0000000000000000000000000000000000000001s")
        .unwrap_err()
        .to_string();
    assert!(error.contains("is below a nanosecond"), "{error}");
    let error = toml::from_str::<backstop::config::TokenBudgetConfig>("refill = \"0.1ns\"")
        .unwrap_err()
        .to_string();
    assert!(error.contains("`0.1ns` is below a nanosecond"), "{error}");
    assert_eq!(
        parse_duration("0.000ns"),
        Ok(Duration::ZERO),
        "zero written long"
    );
    let error = parse_duration("1s 0.5ns").unwrap_err().to_string();
    assert!(
        error.contains("`0.5ns` in `1s 0.5ns` is below a nanosecond"),
        "{error}"
    );
    // An exponent, which `#[retry]`'s literals take, is said to be one.
    let error = parse_duration("2e3ms").unwrap_err().to_string();
    assert!(error.contains("without an exponent"), "{error}");
    // Several terms, added up.
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(
        parse_duration("1m 30.5s"),
        Ok(Duration::from_millis(90_500))
    );
    let error = parse_duration("1m30").unwrap_err().to_string();
    assert!(error.contains("`30` in `1m30` needs a unit"), "{error}");
    assert!(
        !error.contains("write"),
        "no suggestion that drops the minute: {error}"
    );
    // No suggestion that changes the value either.
    let error = parse_duration("1_000ms").unwrap_err().to_string();
    assert!(error.contains("`1_000ms` is not a duration"), "{error}");
    assert!(!error.contains("\"1ms\""), "{error}");
    let error = parse_duration("250").unwrap_err().to_string();
    assert!(error.contains("write \"250ms\" or \"250s\""), "{error}");
    // The micro sign, and the Greek letter mu, for microseconds.
    assert_eq!(parse_duration("500µs"), Ok(Duration::from_micros(500)));
    assert_eq!(
        parse_duration("500\u{3bc}s"),
        Ok(Duration::from_micros(500))
    );
    let error = parse_duration("1m 30x").unwrap_err().to_string();
    assert!(error.contains("unknown unit `x` in `1m 30x`"), "{error}");
    let error = parse_duration("1s and more").unwrap_err().to_string();
    assert!(error.contains("is not a duration"), "{error}");
    let error = serde_json::from_str::<Policy>(r#"{ "cap": "10ms" }"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("the default `base`"), "{error}");
}

// --- attempt_timeout from configuration, and a policy written back ---------

#[test]
fn attempt_timeout_is_configuration_too() {
    let policy: Policy = toml::from_str("attempt_timeout = \"2s\"").unwrap();
    assert_eq!(policy.get_attempt_timeout(), Some(Duration::from_secs(2)));
    let policy: Policy = toml::from_str("attempt_timeout = \"none\"").unwrap();
    assert_eq!(policy.get_attempt_timeout(), None);
    let error = toml::from_str::<Policy>("attempt_timeout = \"0s\"").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`attempt_timeout` must be greater than zero"),
        "{error}"
    );
}

static SLOW: LazyLock<Policy> = LazyLock::new(|| {
    toml::from_str("attempts = 2\nidempotent = true\nattempt_timeout = \"1s\"").unwrap()
});

// The policy's attempt_timeout applies: `io::Error` can hold an `Elapsed`.
#[retry(policy = &*SLOW)]
async fn hangs(attempts: &mut u32) -> Result<(), std::io::Error> {
    *attempts += 1;
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn a_configured_attempt_timeout_applies_through_the_policy() {
    let started = tokio::time::Instant::now();
    let mut attempts = 0;
    let error = hangs(&mut attempts).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(attempts, 2);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

static SHORT: LazyLock<Policy> =
    LazyLock::new(|| toml::from_str("deadline = \"100ms\"\nattempt_timeout = \"none\"").unwrap());

// No attempt timeout in the policy: nothing to cut an attempt off, even
// at the deadline (as a function without `attempt_timeout`).
#[retry(policy = &*SHORT)]
async fn outlasts_its_deadline() -> Result<u8, std::io::Error> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn a_policy_without_an_attempt_timeout_cuts_no_attempt_off_at_the_deadline() {
    let started = tokio::time::Instant::now();
    assert_eq!(outlasts_its_deadline().await.unwrap(), 7);
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // Given to a closure's `attempt_timeout`, the same `None` cuts it off
    // at the deadline: the method asks for cut-offs, limited by the
    // deadline alone.
    let started = tokio::time::Instant::now();
    let out: Result<u8, std::io::Error> = backstop::Retry::new(&SHORT)
        .attempt_timeout(SHORT.get_attempt_timeout())
        .call_async(|| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(7)
        })
        .await;
    assert_eq!(out.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_policy_serializes_as_configuration_reads_it() {
    let policy = Policy::new()
        .attempts(5)
        .deadline(None)
        .base(Duration::from_millis(250))
        .cap(Duration::from_millis(1500))
        .jitter(Jitter::Decorrelated)
        .idempotent(true)
        .attempt_timeout(Some(Duration::from_secs(2)));
    let text = toml::to_string(&policy).unwrap();
    for line in [
        "attempts = 5",
        "deadline = \"none\"",
        "base = \"250ms\"",
        "cap = \"1500ms\"",
        "jitter = \"decorrelated\"",
        "backoff = \"exponential\"",
        "attempt_timeout = \"2s\"",
        "retry_after_max = \"1m\"",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert_eq!(toml::from_str::<Policy>(&text).unwrap(), policy);
    assert_eq!(
        serde_json::from_str::<Policy>(&serde_json::to_string(&Policy::new()).unwrap()).unwrap(),
        Policy::new()
    );
    // And read field by field.
    assert_eq!(
        (
            policy.get_attempts(),
            policy.get_deadline(),
            policy.get_base(),
            policy.get_jitter()
        ),
        (5, None, Duration::from_millis(250), Jitter::Decorrelated)
    );
    assert!(policy.is_idempotent());
}

/// An error type that cannot hold a timed-out attempt.
#[derive(Debug)]
struct Plain;

impl backstop::Classify for Plain {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Retry
    }
}

#[retry(policy = &*SLOW)]
async fn slow_plain() -> Result<u8, Plain> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn without_from_elapsed_a_policy_attempt_timeout_cannot_apply() {
    // It compiles, and the attempt runs its course: there is no `Plain` to
    // return for a timeout (documented on `Policy::attempt_timeout`).
    assert_eq!(slow_plain().await.unwrap(), 7);
}

#[test]
fn a_factor_needs_an_exponential_backoff_and_a_fixed_one_reads_back() {
    let error = toml::from_str::<Policy>("backoff = \"fixed\"\nfactor = 3.0").unwrap_err();
    assert!(
        error.to_string().contains("`factor` only applies"),
        "{error}"
    );
    let fixed = Policy::new().backoff(backstop::Backoff::Fixed);
    let text = toml::to_string(&fixed).unwrap();
    assert!(!text.contains("factor"), "{text}");
    assert_eq!(toml::from_str::<Policy>(&text).unwrap(), fixed);
}

static OWN: backstop::limit::TokenBudget = backstop::limit::TokenBudget::standard();

#[test]
fn a_policy_says_whether_it_draws_on_the_default_token_budget_or_none() {
    let off: Policy = toml::from_str("budget = \"none\"").unwrap();
    assert!(!off.has_default_budget() && off.get_budget().is_none());
    let default: Policy = toml::from_str("budget = \"default\"").unwrap();
    assert!(default.has_default_budget());
    let error = toml::from_str::<Policy>("budget = \"10%\"").unwrap_err();
    assert!(
        error.to_string().contains("is not \"default\" or \"none\""),
        "{error}"
    );
    for policy in [Policy::new(), Policy::new().no_budget()] {
        let text = toml::to_string(&policy).unwrap();
        assert_eq!(toml::from_str::<Policy>(&text).unwrap(), policy, "{text}");
    }
    let custom = toml::to_string(&Policy::new().token_budget(&OWN)).unwrap();
    assert!(custom.contains("budget = \"custom\""), "{custom}");
    // Read back, it says which budget it cannot give and where to give it.
    let error = toml::from_str::<Policy>(&custom).unwrap_err().to_string();
    assert!(
        error.contains("set in code") && error.contains("Policy::token_budget"),
        "{error}"
    );
}

#[test]
fn a_breaker_from_configuration_may_have_several_trials_and_a_growing_break() {
    use backstop::Verdict;
    use backstop::limit::BreakerState;
    let config: BreakerConfig = toml::from_str(
        "failure_threshold = 1\ncooldown = \"1s\"\ntrials = 2\ngrowing = 3\nlongest = \"1m\"",
    )
    .unwrap();
    let breaker = config.build();
    let t0 = std::time::Instant::now();
    let at = |s: u64| t0 + std::time::Duration::from_secs(s);
    breaker
        .try_acquire(at(0))
        .unwrap()
        .failed(Verdict::Retry, at(0));
    // Two trials a second later; the second fails: the break grows to 3 s.
    let (a, b) = (
        breaker.try_acquire(at(1)).unwrap(),
        breaker.try_acquire(at(1)).unwrap(),
    );
    assert!(breaker.try_acquire(at(1)).is_err(), "two trials");
    a.succeeded(at(1));
    b.failed(Verdict::Retry, at(1));
    assert_eq!(breaker.state_at(at(3)), BreakerState::Open);
    assert_eq!(breaker.state_at(at(4)), BreakerState::HalfOpen);
    for (text, error) in [
        ("trials = 0", "`trials` must be between 1 and 1000"),
        ("growing = 2", "`growing` and `longest` go together"),
        (
            "growing = 1\nlongest = \"1m\"",
            "`growing` must be at least 2",
        ),
        (
            "growing = 2\nlongest = \"10ms\"",
            "`longest` must be at least `cooldown`",
        ),
    ] {
        let text = format!("failure_threshold = 1\ncooldown = \"1s\"\n{text}");
        let got = toml::from_str::<BreakerConfig>(&text)
            .unwrap_err()
            .to_string();
        assert!(got.contains(error), "{text}: {got}");
    }
}

#[test]
fn a_bad_duration_is_reported_at_its_value() {
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct File {
        payments: Policy,
        search: Policy,
    }
    // In a file of several sections, the value's line, not its section's.
    let text = "[payments]\nattempts = 3\n\n[search]\nattempts = 2\nbase = \"100\"\n";
    let error = toml::from_str::<File>(text).unwrap_err().to_string();
    assert!(error.contains("line 6"), "{error}");
    assert!(error.contains("`base`: `100` needs a unit"), "{error}");
    // JSON says where, too.
    let error = serde_json::from_str::<Policy>("{\n  \"attempts\": 2,\n  \"cap\": \"1 minute\"\n}")
        .unwrap_err()
        .to_string();
    assert!(error.contains("`cap`: unknown unit `minute`"), "{error}");
    assert!(error.contains("line 3"), "{error}");
    // A field that takes "none" says so.
    let error = toml::from_str::<Policy>("deadline = \"off\"")
        .unwrap_err()
        .to_string();
    assert!(error.contains("or \"none\""), "{error}");
    // One that does not take it says what to write.
    let error = toml::from_str::<backstop::config::TokenBudgetConfig>(
        "max_tokens = 10\ntoken_ratio = 0.1\nrefill = \"none\"",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("for no refill, write \"0s\""), "{error}");
    let error = toml::from_str::<BreakerConfig>("failure_threshold = 1\ncooldown = \"0s\"")
        .unwrap_err()
        .to_string();
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn budgets_breakers_and_throttles_write_back_what_they_read() {
    use backstop::config::{AdaptiveThrottleConfig, TokenBudgetConfig, WindowBudgetConfig};
    fn again<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        text: &str,
    ) -> String {
        let read: T = toml::from_str(text).unwrap();
        let written = toml::to_string(&read).unwrap();
        let reread: T = toml::from_str(&written).unwrap();
        assert_eq!(toml::to_string(&reread).unwrap(), written, "{text}");
        // The same settings, read back (a token budget's defaults are
        // written out: its read-back names them, and is equal).
        assert_eq!(reread, read, "{text}");
        written
    }
    // A token budget's refill and ride-out as they are in effect, left out
    // or not.
    again::<TokenBudgetConfig>("max_tokens = 10\ntoken_ratio = 0.1");
    let written = again::<TokenBudgetConfig>("max_tokens = 10\ntoken_ratio = 0.1\nrefill = \"0s\"");
    assert!(written.contains("refill = \"0s\""), "{written}");
    assert!(
        written.contains("ride_out = \"10s\""),
        "the default, shown: {written}"
    );
    let budget: TokenBudgetConfig = toml::from_str(&written).unwrap();
    assert_eq!(budget.build().get_refill(), None, "no refill, still");
    // A refill as given, not as the budget keeps it (whole milli-tokens).
    let written = again::<TokenBudgetConfig>("max_tokens = 10\ntoken_ratio = 0.1\nrefill = \"7s\"");
    assert!(written.contains("refill = \"7s\""), "{written}");
    let written = again::<WindowBudgetConfig>("ratio = 0.2\nmin_per_sec = 5\nttl = \"30s\"");
    assert!(written.contains("ttl = \"30s\""), "{written}");
    let written = again::<AdaptiveThrottleConfig>("k = 2.0\nwindow = \"2m\"");
    assert!(written.contains("window = \"2m\""), "{written}");
    let written = again::<BreakerConfig>(
        "failure_ratio = 0.5\nminimum_throughput = 4\nsampling = \"10s\"\ncooldown = \"1s\"\n\
         trials = 2\ngrowing = 3\nlongest = \"1m\"",
    );
    for field in [
        "failure_ratio",
        "minimum_throughput",
        "sampling",
        "trials = 2",
        "longest",
    ] {
        assert!(written.contains(field), "{field}: {written}");
    }
    let written = again::<BreakerConfig>("failure_threshold = 5\ncooldown = \"30s\"");
    assert!(!written.contains("growing"), "{written}");
}

#[test]
fn a_configured_breaker_without_a_cooldown_is_refused() {
    // It would let every call through: a breaker that never breaks.
    for rule in [
        "failure_threshold = 3",
        "failure_ratio = 0.5\nminimum_throughput = 4\nsampling = \"10s\"",
    ] {
        for cooldown in ["0s", "0ms", "0ns"] {
            let text = format!("{rule}\ncooldown = \"{cooldown}\"");
            let got = toml::from_str::<BreakerConfig>(&text)
                .unwrap_err()
                .to_string();
            assert!(
                got.contains("`cooldown` must be above zero"),
                "{text}: {got}"
            );
        }
    }
}

#[test]
fn a_breakers_configuration_shows_itself_by_the_names_it_was_read_with() {
    let config: BreakerConfig =
        toml::from_str("failure_threshold = 5\ncooldown = \"30s\"").unwrap();
    assert_eq!(
        format!("{config:?}"),
        "BreakerConfig { failure_threshold: 5, cooldown: 30s, trials: 1 }"
    );
    let config: BreakerConfig = toml::from_str(
        "failure_ratio = 0.5\nminimum_throughput = 4\nsampling = \"10s\"\ncooldown = \"5s\"\n\
         growing = 2\nlongest = \"1m\"",
    )
    .unwrap();
    assert_eq!(
        format!("{config:?}"),
        "BreakerConfig { failure_ratio: 0.5, minimum_throughput: 4, sampling: 10s, cooldown: 5s, \
         trials: 1, growing: 2, longest: 60s }"
    );
}

#[test]
fn a_breaker_from_configuration_may_judge_ratios() {
    use backstop::Verdict;
    use backstop::limit::BreakerState;
    let config: BreakerConfig = toml::from_str(
        "failure_ratio = 0.5\nminimum_throughput = 4\nsampling = \"10s\"\ncooldown = \"5s\"",
    )
    .unwrap();
    let breaker = config.build();
    assert_eq!(breaker.failure_ratio(), Some(0.5));
    let t0 = std::time::Instant::now();
    let ms = |n: u64| t0 + std::time::Duration::from_millis(n);
    // 1 failure of 3 calls, then 2 of 4: at half, with 4 calls seen, it opens.
    breaker.try_acquire(ms(0)).unwrap().succeeded(ms(0));
    breaker.try_acquire(ms(1)).unwrap().succeeded(ms(1));
    breaker
        .try_acquire(ms(2))
        .unwrap()
        .failed(Verdict::Retry, ms(2));
    assert_eq!(
        breaker.state_at(ms(2)),
        BreakerState::Closed,
        "3 calls: below the minimum"
    );
    breaker
        .try_acquire(ms(3))
        .unwrap()
        .failed(Verdict::Retry, ms(3));
    assert_eq!(breaker.state_at(ms(3)), BreakerState::Open);
    assert_eq!(
        breaker.state_at(ms(5_003)),
        BreakerState::HalfOpen,
        "breaks for the cooldown"
    );
    // Polly's window by default.
    let defaults: BreakerConfig = toml::from_str("failure_ratio = 0.1\ncooldown = \"5s\"").unwrap();
    let expected: BreakerConfig = toml::from_str(
        "failure_ratio = 0.1\nminimum_throughput = 100\nsampling = \"30s\"\ncooldown = \"5s\"",
    )
    .unwrap();
    assert_eq!(defaults, expected);
    for (text, error) in [
        ("failure_threshold = 3\nfailure_ratio = 0.5", "not both"),
        ("", "needs `failure_threshold`"),
        (
            "failure_threshold = 3\nsampling = \"1s\"",
            "go with `failure_ratio`",
        ),
        (
            "failure_ratio = 0.0",
            "`failure_ratio` must be above 0 and at most 1",
        ),
        (
            "failure_ratio = 1.5",
            "`failure_ratio` must be above 0 and at most 1",
        ),
        (
            "failure_ratio = nan",
            "`failure_ratio` must be above 0 and at most 1",
        ),
        (
            "failure_ratio = 0.5\nminimum_throughput = 0",
            "`minimum_throughput` must be between 1 and 100000000",
        ),
        (
            "failure_ratio = 0.5\nminimum_throughput = 200000000",
            "`minimum_throughput` must be between 1 and 100000000",
        ),
        (
            "failure_ratio = 0.5\nsampling = \"100ms\"",
            "`sampling` must be at least 500ms",
        ),
        ("failure_ratio = 0.5\nsampling = \"soon\"", "`sampling`"),
    ] {
        let text = format!("cooldown = \"1s\"\n{text}");
        let got = toml::from_str::<BreakerConfig>(&text)
            .unwrap_err()
            .to_string();
        assert!(got.contains(error), "{text}: {got}");
    }
}

#[test]
fn a_token_budget_and_an_adaptive_throttle_from_toml() {
    use backstop::config::{AdaptiveThrottleConfig, TokenBudgetConfig};
    #[derive(Deserialize)]
    struct Limits {
        budget: TokenBudgetConfig,
        throttle: AdaptiveThrottleConfig,
    }
    let limits: Limits = toml::from_str(
        r#"
        [budget]
        max_tokens = 20
        token_ratio = 0.5
        refill = "2s"
        ride_out = "30s"

        [throttle]
        k = 1.5
        window = "1m"
        "#,
    )
    .unwrap();
    let budget = limits.budget.build();
    assert_eq!((budget.max_tokens(), budget.token_ratio()), (20, 0.5));
    assert_eq!(budget.get_refill(), Some(Duration::from_secs(2)));
    assert_eq!(budget.get_ride_out(), Duration::from_secs(30));
    let throttle = limits.throttle.build();
    assert!((throttle.k() - 1.5).abs() < f64::EPSILON);
    assert_eq!(throttle.window(), Duration::from_secs(60));

    // Only the two numbers: the defaults for the rest, as `TokenBudget::new`'s.
    let plain: TokenBudgetConfig =
        serde_json::from_str(r#"{ "max_tokens": 10, "token_ratio": 0.1 }"#).unwrap();
    let standard = backstop::limit::TokenBudget::standard();
    assert_eq!(plain.build().get_refill(), standard.get_refill());
    assert_eq!(plain.build().get_ride_out(), standard.get_ride_out());

    // Bad values are errors that name the field, never a panic in `build`.
    let cases = [
        (
            r#"{ "max_tokens": 0, "token_ratio": 0.1 }"#,
            "`max_tokens` must be between 1 and 4000000",
        ),
        (
            r#"{ "max_tokens": 5000000, "token_ratio": 0.1 }"#,
            "`max_tokens` must be between",
        ),
        (
            r#"{ "max_tokens": 10, "token_ratio": 0 }"#,
            "`token_ratio` must be above 0",
        ),
        (
            r#"{ "max_tokens": 10, "token_ratio": 11 }"#,
            "at most `max_tokens`",
        ),
        (
            r#"{ "max_tokens": 10, "token_ratio": 0.1, "refill": "1" }"#,
            "`refill`: `1` needs a unit",
        ),
        (
            r#"{ "max_tokens": 10, "token_ratio": 0.1, "rideout": "1s" }"#,
            "unknown field `rideout`",
        ),
        (r#"{ "max_tokens": 10 }"#, "missing field `token_ratio`"),
    ];
    for (json, expected) in cases {
        let error = serde_json::from_str::<TokenBudgetConfig>(json)
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{json}: {error}");
    }
    let cases = [
        (r#"{ "k": 0.5, "window": "2s" }"#, "`k` must be at least 1"),
        (
            r#"{ "k": 2, "window": "1us" }"#,
            "`window` must be at least 8us",
        ),
        (r#"{ "k": 2, "window": "2" }"#, "`window`: `2` needs a unit"),
        (r#"{ "k": 2 }"#, "missing field `window`"),
    ];
    for (json, expected) in cases {
        let error = serde_json::from_str::<AdaptiveThrottleConfig>(json)
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{json}: {error}");
    }
}

#[test]
fn each_limit_of_the_configuration_is_taken_and_just_past_it_refused() {
    use backstop::config::{AdaptiveThrottleConfig, TokenBudgetConfig};
    fn refused<T: for<'de> Deserialize<'de>>(text: &str, reason: &str) {
        match toml::from_str::<T>(text) {
            Ok(_) => panic!("{text}: taken"),
            Err(error) => assert!(error.to_string().contains(reason), "{text}: {error}"),
        }
    }
    fn taken<T: for<'de> Deserialize<'de>>(text: &str) {
        if let Err(error) = toml::from_str::<T>(text) {
            panic!("{text}: {error}");
        }
    }
    // A factor of 1 would be a fixed schedule.
    refused::<Policy>(
        "factor = 1.0",
        "`factor` must be a finite number greater than 1",
    );
    taken::<Policy>("factor = 1.01");
    // A cap may equal the base.
    taken::<Policy>("base = \"1s\"\ncap = \"1s\"");
    refused::<Policy>("base = \"1001ms\"\ncap = \"1s\"", "`base`");
    // A windowed budget lets a share of calls retry: none is no budget.
    let budget = "min_per_sec = 5\nttl = \"10s\"";
    refused::<WindowBudgetConfig>(
        &format!("ratio = 0.0\n{budget}"),
        "`ratio` must be in (0, 1]",
    );
    taken::<WindowBudgetConfig>(&format!("ratio = 1.0\n{budget}"));
    refused::<WindowBudgetConfig>(
        &format!("ratio = 1.01\n{budget}"),
        "`ratio` must be in (0, 1]",
    );
    // A windowed budget's ttl: a second to a minute (shorter, its reserve
    // of `min_per_sec` is a fraction of a retry; longer, a healthy spell's
    // deposits pay for a long storm).
    let ratio = "ratio = 0.1\nmin_per_sec = 5";
    taken::<WindowBudgetConfig>(&format!("{ratio}\nttl = \"1s\""));
    taken::<WindowBudgetConfig>(&format!("{ratio}\nttl = \"60s\""));
    for short in ["999ms", "10ms", "1ns"] {
        refused::<WindowBudgetConfig>(
            &format!("{ratio}\nttl = \"{short}\""),
            "`ttl` must be at least 1s",
        );
    }
    for long in ["60001ms", "10m", "10h"] {
        refused::<WindowBudgetConfig>(
            &format!("{ratio}\nttl = \"{long}\""),
            "`ttl` must be at most 60s",
        );
    }
    // An adaptive throttle's window: at least eight slots of a microsecond.
    taken::<AdaptiveThrottleConfig>("k = 2.0\nwindow = \"8us\"");
    refused::<AdaptiveThrottleConfig>("k = 2.0\nwindow = \"7us\"", "`window` must be at least 8us");
    // A breaker's break may grow no further than it starts.
    let growing = "failure_threshold = 1\ncooldown = \"1s\"\ngrowing = 2";
    taken::<BreakerConfig>(&format!("{growing}\nlongest = \"1s\""));
    refused::<BreakerConfig>(
        &format!("{growing}\nlongest = \"999ms\""),
        "`longest` must be at least `cooldown`",
    );
    // A ratio breaker's sampling: half a second at least.
    let ratio = "failure_ratio = 0.5\nminimum_throughput = 4\ncooldown = \"1s\"";
    taken::<BreakerConfig>(&format!("{ratio}\nsampling = \"500ms\""));
    refused::<BreakerConfig>(
        &format!("{ratio}\nsampling = \"499ms\""),
        "`sampling` must be at least 500ms",
    );
    // A token budget keeps its refill in thousandths of a token per
    // 100 ms: a token per 100 s is the slowest (slower would be none), and
    // its ride-out in 100 ms steps (less would be none); its ratio in
    // thousandths (less would be one).
    let token = "max_tokens = 10";
    taken::<TokenBudgetConfig>(&format!("{token}\ntoken_ratio = 0.1\nrefill = \"100s\""));
    taken::<TokenBudgetConfig>(&format!("{token}\ntoken_ratio = 0.1\nrefill = \"0s\""));
    // Kept to the nearest slower refill it can keep.
    let budget: TokenBudgetConfig =
        toml::from_str(&format!("{token}\ntoken_ratio = 0.1\nrefill = \"30s\"")).unwrap();
    assert_eq!(
        budget.build().get_refill(),
        Some(Duration::from_nanos(33_333_333_333))
    );
    for slow in ["100001ms", "2m", "1h"] {
        refused::<TokenBudgetConfig>(
            &format!("{token}\ntoken_ratio = 0.1\nrefill = \"{slow}\""),
            "`refill` must be at most 100s",
        );
    }
    taken::<TokenBudgetConfig>(&format!("{token}\ntoken_ratio = 0.1\nride_out = \"100ms\""));
    taken::<TokenBudgetConfig>(&format!("{token}\ntoken_ratio = 0.1\nride_out = \"0s\""));
    refused::<TokenBudgetConfig>(
        &format!("{token}\ntoken_ratio = 0.1\nride_out = \"99ms\""),
        "`ride_out` must be at least 100ms",
    );
    taken::<TokenBudgetConfig>(&format!("{token}\ntoken_ratio = 0.001"));
    refused::<TokenBudgetConfig>(
        &format!("{token}\ntoken_ratio = 0.0009"),
        "`token_ratio` must be at least 0.001",
    );
}

#[test]
fn a_number_without_its_digits_or_with_two_points_is_not_a_duration() {
    use backstop::config::parse_duration;
    for text in [".5s", "1.2.3s", "ms", "s1"] {
        let error = parse_duration(text).unwrap_err().to_string();
        assert!(
            error.contains("is not a duration such as"),
            "{text}: {error}"
        );
    }
    // A duration given as a number is refused with what is expected.
    for text in ["attempt_timeout = 5", "base = 5"] {
        let error = toml::from_str::<Policy>(text).unwrap_err().to_string();
        assert!(
            error.contains("a duration with a unit, as a string such as \"250ms\""),
            "{text}: {error}"
        );
    }
    let error = toml::from_str::<Policy>("attempt_timeout = 5")
        .unwrap_err()
        .to_string();
    assert!(error.contains("`attempt_timeout`"), "{error}");
    assert!(error.contains("or \"none\""), "{error}");
}

#[test]
fn a_policy_made_in_code_with_a_setting_configuration_refuses_is_refused_by_name_when_read_back() {
    // The builder takes these (a cap below the base is the cap, a factor
    // of 1 a fixed schedule); configuration refuses them as mistakes, and
    // says which setting.
    let made = [
        (Policy::new().cap(Duration::from_millis(50)), "`base`"),
        (
            Policy::new().base(Duration::ZERO),
            "`base` must be greater than zero",
        ),
        (
            Policy::new().factor(1.0),
            "`factor` must be a finite number greater than 1",
        ),
        (
            Policy::new().deadline(Some(Duration::ZERO)),
            "`deadline` must be greater than zero",
        ),
        (
            Policy::new().backoff(backstop::Backoff::Fixed).factor(3.0),
            "`factor` only applies",
        ),
    ];
    for (policy, reason) in made {
        let written = toml::to_string(&policy).unwrap();
        let error = toml::from_str::<Policy>(&written).unwrap_err().to_string();
        assert!(error.contains(reason), "{written}: {error}");
    }
}

/// Reads `text` (TOML, or JSON when it starts with `{`) as `T`: its
/// error, which must name `line` and say `says`.
fn refused_at<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str, line: u32, says: &str) {
    let error = if text.starts_with('{') {
        serde_json::from_str::<T>(text).unwrap_err().to_string()
    } else {
        toml::from_str::<T>(text).unwrap_err().to_string()
    };
    assert!(error.contains(says), "{text}: {error}");
    assert!(
        error.contains(&format!("line {line}")),
        "{text}: no line {line} in {error}"
    );
}

#[test]
fn a_value_out_of_its_range_is_reported_at_its_line() {
    use backstop::config::{AdaptiveThrottleConfig, TokenBudgetConfig};
    // Each value that no other field's can make right, on its own line.
    refused_at::<Policy>(
        "base = \"1s\"\n\nattempts = 0\n",
        3,
        "`attempts` must be at least 1",
    );
    refused_at::<Policy>(
        "{\n  \"base\": \"1s\",\n  \"attempts\": 0\n}",
        3,
        "`attempts` must be at least 1",
    );
    refused_at::<Policy>(
        "attempts = 2\nfactor = 0.5\n",
        2,
        "`factor` must be a finite number",
    );
    refused_at::<Policy>("{\n  \"budget\": \"mine\"\n}", 2, "`budget`: `mine` is not");
    refused_at::<WindowBudgetConfig>(
        "min_per_sec = 10\nttl = \"10s\"\nratio = 2.0\n",
        3,
        "`ratio` must be in (0, 1]",
    );
    let token = "max_tokens = 10\ntoken_ratio = 0.1\n";
    refused_at::<TokenBudgetConfig>(
        "token_ratio = 0.1\nmax_tokens = 0\n",
        2,
        "`max_tokens` must be between",
    );
    refused_at::<TokenBudgetConfig>(
        "max_tokens = 10\ntoken_ratio = 0.0001\n",
        2,
        "at least 0.001",
    );
    refused_at::<TokenBudgetConfig>(
        &format!("{token}refill = \"200s\""),
        3,
        "`refill` must be at most 100s",
    );
    refused_at::<TokenBudgetConfig>(
        &format!("{token}ride_out = \"50ms\""),
        3,
        "`ride_out` must be at least 100ms",
    );
    refused_at::<TokenBudgetConfig>(
        &format!("{token}ride_out = \"5000000000000h\""),
        3,
        "`ride_out` must be at most 214748364.7s",
    );
    let longest: TokenBudgetConfig =
        toml::from_str(&format!("{token}ride_out = \"214748364s\"")).unwrap();
    assert_eq!(
        longest.build().get_ride_out(),
        Duration::from_secs(214_748_364),
        "the longest a budget keeps, kept"
    );
    refused_at::<AdaptiveThrottleConfig>("window = \"2s\"\nk = 0.5\n", 2, "`k` must be at least 1");
    refused_at::<AdaptiveThrottleConfig>(
        "{\n  \"k\": 2,\n  \"window\": \"1us\"\n}",
        3,
        "`window` must be at least 8us",
    );
}

#[test]
fn a_word_or_a_flag_of_the_wrong_kind_is_named_at_its_line() {
    // (Where a source gives no position, as environment variables, the
    // name is all an operator has.)
    refused_at::<Policy>(
        "attempts = 2\njitter = \"equl\"\n",
        2,
        "`jitter`: `equl` is not \"none\", \"full\", \"equal\" or \"decorrelated\"",
    );
    refused_at::<Policy>(
        "{\n  \"backoff\": \"Fixed\"\n}",
        2,
        "`backoff`: `Fixed` is not \"exponential\", \"linear\" or \"fixed\"",
    );
    refused_at::<Policy>(
        "attempts = 2\n\nidempotent = \"yes\"\n",
        3,
        "expected `idempotent`: true or false",
    );
    // What each takes still reads, as an enum is read (a format that
    // writes a variant as a one-key table, or matches its case, included).
    let tabled: Policy = serde_json::from_str(r#"{ "backoff": { "fixed": null } }"#).unwrap();
    assert_eq!(tabled.get_backoff(), backstop::Backoff::Fixed);
    let policy: Policy =
        toml::from_str("backoff = \"linear\"\njitter = \"none\"\nidempotent = true").unwrap();
    assert_eq!(policy.get_backoff(), backstop::Backoff::Linear);
    assert_eq!(policy.get_jitter(), Jitter::None);
    assert!(policy.is_idempotent());
}

#[test]
fn a_policy_reads_back_from_a_format_that_counts_its_fields() {
    // CBOR reads as many fields as the struct said it would write: a
    // fixed schedule writes no `factor`.
    for policy in [
        Policy::new(),
        Policy::new().backoff(backstop::Backoff::Fixed),
        Policy::new().backoff(backstop::Backoff::Linear).attempts(5),
    ] {
        let mut bytes = Vec::new();
        ciborium::into_writer(&policy, &mut bytes).unwrap();
        let back: Policy = ciborium::from_reader(bytes.as_slice()).unwrap();
        assert_eq!(back, policy);
    }
}

/// A service's settings with its policy flattened into them.
#[derive(Deserialize)]
struct Flattened {
    #[allow(dead_code)]
    url: String,
    #[serde(flatten)]
    retry: Policy,
}

#[test]
fn a_flattened_policy_takes_unknown_fields_as_its_struct_does() {
    // serde's `deny_unknown_fields` does not reach a flattened field: a
    // misspelt setting is ignored there.
    let read: Flattened = serde_json::from_str(r#"{ "url": "x", "atempts": 7 }"#).unwrap();
    assert_eq!(read.retry, Policy::new());
    // In a field of its own, refused.
    let error = serde_json::from_str::<Config>(r#"{ "payments": { "atempts": 7 } }"#)
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("unknown field `atempts`"), "{error}");
}

#[test]
fn null_is_refused_where_a_fields_default_is_not_its_none() {
    // `null` would say neither the default nor none.
    refused_at::<Policy>(
        "{\n  \"deadline\": null\n}",
        2,
        "invalid type: null, expected `deadline`: a duration with a unit, as a string such as \
         \"250ms\", or \"none\"",
    );
    refused_at::<Policy>(
        "{\n  \"attempts\": 2,\n  \"attempt_timeout\": null\n}",
        3,
        "invalid type: null, expected `attempt_timeout`",
    );
    refused_at::<Policy>(
        "{\n  \"budget\": null\n}",
        2,
        "invalid type: null, expected `budget`: \"default\" or \"none\"",
    );
    // YAML's null comes as text (`~`, `null`, nothing), as an empty
    // string does.
    refused_at::<Policy>(
        "attempts = 2\ndeadline = \"\"\n",
        2,
        "`deadline`: an empty value or null says neither \"none\" nor the default",
    );
    refused_at::<Policy>(
        "{\n  \"attempt_timeout\": \"~\"\n}",
        2,
        "`attempt_timeout`: an empty value or null says neither",
    );
    // Elsewhere it is the field left out.
    let policy: Policy = serde_json::from_str(r#"{ "attempts": null, "base": null }"#).unwrap();
    assert_eq!(policy, Policy::new());
    // And "none", or nothing, says what it says.
    let none: Policy = serde_json::from_str(r#"{ "deadline": "none" }"#).unwrap();
    assert_eq!(none.get_deadline(), None);
    let default: Policy = serde_json::from_str("{}").unwrap();
    assert_eq!(default.get_deadline(), Policy::new().get_deadline());
}

#[test]
fn a_policy_is_a_table_of_its_settings_not_a_list_or_null() {
    // A list of values in the fields' order would read differently were
    // they ever reordered; the error names the type read, not a private one.
    for text in ["[3, \"10s\"]", "null", "3"] {
        let error = serde_json::from_str::<Policy>(text)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("expected a policy: a table of its settings"),
            "{text}: {error}"
        );
    }
    let error = serde_json::from_str::<Policy>(r#"{ "atempts": 3 }"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown field `atempts`"), "{error}");
    assert!(!error.contains("PolicyFields"), "{error}");
}

#[test]
fn a_breakers_value_out_of_its_range_or_of_the_wrong_type_is_reported_at_its_line() {
    use backstop::config::AdaptiveThrottleConfig;
    let breaker = "cooldown = \"1s\"\n";
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_threshold = 0"),
        2,
        "`failure_threshold` must be at least 1",
    );
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_ratio = 2.0"),
        2,
        "`failure_ratio` must be above 0",
    );
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_ratio = 0.5\nminimum_throughput = 0"),
        3,
        "`minimum_throughput` must be between",
    );
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_ratio = 0.5\nsampling = \"100ms\""),
        3,
        "`sampling` must be at least 500ms",
    );
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_threshold = 1\ntrials = 0"),
        3,
        "`trials` must be between 1 and 1000",
    );
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_threshold = 1\nlongest = \"1m\"\ngrowing = 1"),
        4,
        "`growing` must be at least 2",
    );
    // A value of the wrong type names its field, where it is.
    refused_at::<Policy>(
        "{\n  \"attempts\": \"3\"\n}",
        2,
        "expected `attempts`: a whole number",
    );
    refused_at::<Policy>("attempts = -1", 1, "expected `attempts`: a whole number");
    refused_at::<BreakerConfig>(
        &format!("{breaker}failure_ratio = \"half\""),
        2,
        "expected `failure_ratio`",
    );
    // Taken as before: whole numbers where a number is asked, `null` for
    // a field left out.
    let throttle: AdaptiveThrottleConfig =
        serde_json::from_str(r#"{ "k": 2, "window": "2s" }"#).unwrap();
    let written_as_float: AdaptiveThrottleConfig =
        toml::from_str("k = 2.0\nwindow = \"2s\"").unwrap();
    assert_eq!(throttle, written_as_float);
    let policy: Policy = serde_json::from_str(r#"{ "attempts": null, "factor": 3 }"#).unwrap();
    assert_eq!(policy, Policy::new().factor(3.0));
}
