//! Limiters kept per key: one instance per key, in a table of fixed
//! capacity that forgets only keys whose limiter holds nothing a fresh one
//! would not.
// Tokens are whole thousandths: their `f64` values compare exactly.
#![allow(clippy::float_cmp)]

use std::time::{Duration, Instant};

use backstop_runtime::Verdict;
use backstop_runtime::limit::{AdaptiveThrottle, CircuitBreaker, Keyed, TokenBudget, WindowBudget};

/// Opens `breaker` (threshold 1).
fn open(breaker: &CircuitBreaker, now: Instant) {
    breaker
        .try_acquire(now)
        .unwrap()
        .failed(Verdict::Retry, now);
}

#[test]
fn each_key_has_a_limiter_of_its_own_made_like_the_shared_one() {
    let table = Keyed::new(TokenBudget::new(20, 0.5));
    let now = Instant::now();
    let a = table.get(&"a");
    assert!(
        std::ptr::eq(a, table.get(&"a")),
        "the same key, the same budget"
    );
    assert!(!std::ptr::eq(a, table.get(&"b")));
    assert!(!std::ptr::eq(a, table.shared()));
    assert_eq!(a.max_tokens(), 20);
    assert_eq!(a.token_ratio(), 0.5);
    for _ in 0..15 {
        a.failed(now);
    }
    assert_eq!(a.tokens(), 5.0);
    assert_eq!(table.get(&"b").tokens(), 20.0, "b is untouched");
    assert_eq!(table.shared().tokens(), 20.0);
    assert_eq!(table.len(), 2);
}

#[test]
fn a_full_table_never_forgets_a_key_whose_limiter_remembers_failures() {
    // One place per key at most: a table of 4.
    let table = Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 4);
    let now = Instant::now();
    let failing: Vec<&CircuitBreaker> = (0..4u32).map(|k| table.get(&k)).collect();
    for breaker in &failing {
        open(breaker, now);
    }
    assert_eq!(table.len(), 4);
    // Every place holds a key whose breaker is open: a new key shares the
    // table's breaker, and the failing keys keep theirs.
    let newcomer = table.get(&99u32);
    assert!(
        std::ptr::eq(newcomer, table.shared()),
        "no place: the shared one"
    );
    for (k, breaker) in (0..4u32).zip(&failing) {
        assert!(
            std::ptr::eq(table.get(&k), *breaker),
            "key {k} kept its place"
        );
        assert!(
            table.get(&k).try_acquire(now).is_err(),
            "and its open breaker"
        );
    }
    // One key recovers: its breaker is as a fresh one's, its place may go.
    failing[2].reset();
    let placed = table.get(&99u32);
    assert!(
        std::ptr::eq(placed, failing[2]),
        "the recovered key's place"
    );
    assert!(
        placed.try_acquire(now).is_ok(),
        "closed, as a fresh breaker"
    );
    for k in [0u32, 1, 3] {
        assert!(
            table.get(&k).try_acquire(now).is_err(),
            "key {k} still open"
        );
    }
}

#[test]
fn a_full_table_keeps_a_key_whose_closed_breaker_counts_failures() {
    // Threshold 3, a table of 4: every key two failures in.
    let table = Keyed::with_capacity(CircuitBreaker::new(3, Duration::from_secs(30)), 4);
    let now = Instant::now();
    let counting: Vec<&CircuitBreaker> = (0..4u32).map(|k| table.get(&k)).collect();
    for breaker in &counting {
        for _ in 0..2 {
            breaker
                .try_acquire(now)
                .unwrap()
                .failed(Verdict::Retry, now);
        }
    }
    assert!(
        std::ptr::eq(table.get(&99u32), table.shared()),
        "no place for a newcomer"
    );
    for (k, breaker) in (0..4u32).zip(&counting) {
        assert!(
            std::ptr::eq(table.get(&k), *breaker),
            "key {k} kept its place"
        );
        breaker
            .try_acquire(now)
            .unwrap()
            .failed(Verdict::Retry, now);
        assert!(
            breaker.try_acquire(now).is_err(),
            "and its count: the third opens it"
        );
    }
}

#[test]
fn a_token_budget_refilled_in_time_is_as_a_fresh_one_and_its_place_may_go() {
    let table = Keyed::with_capacity(TokenBudget::standard(), 1);
    let now = Instant::now();
    let first = table.get(&1u8);
    first.failed(now);
    assert!(
        std::ptr::eq(table.get_at(&2u8, now), table.shared()),
        "1 is failing"
    );
    // One token back every 10 s: full again after 10 s.
    let later = now + Duration::from_secs(10);
    let second = table.get_at(&2u8, later);
    assert!(
        std::ptr::eq(second, first),
        "1 was forgotten, with nothing to forget"
    );
    second.failed(later);
    assert!(
        std::ptr::eq(table.get_at(&1u8, later), table.shared()),
        "2 holds it now"
    );
}

#[test]
fn windowed_budgets_and_adaptive_throttles_give_their_places_up_once_their_window_is_empty() {
    let now = Instant::now();
    let windows = Keyed::with_capacity(WindowBudget::new(0.5, 0, Duration::from_secs(1)), 1);
    let one = windows.get_at(&1u8, now);
    one.record_call(now);
    assert!(std::ptr::eq(windows.get_at(&2u8, now), windows.shared()));
    let after = now + Duration::from_secs(5);
    assert!(
        std::ptr::eq(windows.get_at(&2u8, after), one),
        "its window is over"
    );

    let throttles = Keyed::with_capacity(AdaptiveThrottle::new(2.0, Duration::from_secs(1)), 1);
    let one = throttles.get_at(&1u8, now);
    one.requested(now);
    assert!(std::ptr::eq(
        throttles.get_at(&2u8, now),
        throttles.shared()
    ));
    assert!(std::ptr::eq(throttles.get_at(&2u8, after), one));
}

#[test]
fn a_windowed_budget_gives_its_place_up_only_when_nothing_it_granted_or_counted_is_live() {
    let now = Instant::now();
    // A retry granted from the reserve, no call counted: its place is kept
    // for the window.
    let table = Keyed::with_capacity(WindowBudget::new(0.5, 1, Duration::from_secs(1)), 1);
    assert!(table.get_at(&1u8, now).try_withdraw(now));
    assert!(std::ptr::eq(table.get_at(&2u8, now), table.shared()));
    // A budget that granted nothing and counted nothing holds nothing a
    // fresh one would not: its place goes at once.
    let table = Keyed::with_capacity(WindowBudget::new(0.5, 0, Duration::from_secs(1)), 1);
    let one = table.get_at(&1u8, now);
    assert!(!one.try_withdraw(now), "no call, no reserve");
    assert!(std::ptr::eq(table.get_at(&2u8, now), one));
}

#[test]
fn keys_beyond_the_capacity_share_the_shared_limiter_and_are_never_unprotected() {
    let table = Keyed::with_capacity(TokenBudget::standard(), 8);
    let now = Instant::now();
    // Every key fails once: none may be forgotten.
    for k in 0..100u32 {
        table.get(&k).failed(now);
    }
    assert_eq!(table.len(), 8);
    // The shared budget took the failures of the 92 keys that found no
    // place: it has no retries to give.
    assert_eq!(table.shared().tokens(), 0.0);
    assert!(!table.get(&1000u32).allows_retry(now));
}

#[test]
fn a_closed_breaker_whose_key_has_not_failed_for_two_cooldowns_gives_its_place_up() {
    // Threshold 5, a table of 2: both keys failed once, then went away.
    let table = Keyed::with_capacity(CircuitBreaker::new(5, Duration::from_secs(30)), 2);
    let now = Instant::now();
    for k in 0..2u32 {
        table
            .get_at(&k, now)
            .try_acquire(now)
            .unwrap()
            .failed(Verdict::Retry, now);
    }
    // Within two cooldowns of their failures, they keep their places.
    let later = now + Duration::from_secs(59);
    assert!(table.own(&99u32).is_none(), "no place yet");
    assert!(std::ptr::eq(table.get_at(&99u32, later), table.shared()));
    // Two cooldowns on, what they counted is old news: a newcomer takes a
    // place, with a breaker as a fresh one's.
    let much_later = now + Duration::from_secs(60);
    let newcomer = table.get_at(&99u32, much_later);
    assert!(
        !std::ptr::eq(newcomer, table.shared()),
        "a place of its own"
    );
    assert!(table.peek(&99u32).is_some());
    for _ in 0..4 {
        newcomer
            .try_acquire(much_later)
            .unwrap()
            .failed(Verdict::Retry, much_later);
    }
    assert!(
        newcomer.try_acquire(much_later).is_ok(),
        "four failures of its own, none of the key before it: still closed"
    );
    // A key that keeps failing keeps its place, for two cooldowns from
    // its last failure.
    let other = u32::from(table.peek(&0u32).is_none());
    let kept = table.get_at(&other, much_later);
    kept.try_acquire(much_later)
        .unwrap()
        .failed(Verdict::Retry, much_later);
    let soon = much_later + Duration::from_secs(59);
    assert!(
        std::ptr::eq(table.get_at(&100u32, soon), table.shared()),
        "the table is full of keys failing lately"
    );
    let then = much_later + Duration::from_secs(60);
    assert!(!std::ptr::eq(table.get_at(&100u32, then), table.shared()));
}

#[test]
fn a_ratio_breaker_keeps_its_place_while_its_window_holds_calls_and_no_longer() {
    // Half of 10 calls in 10 s; a table of 1.
    let table = Keyed::with_capacity(
        CircuitBreaker::ratio(0.5, 10, Duration::from_secs(10), Duration::from_secs(5)),
        1,
    );
    let now = Instant::now();
    table
        .get_at(&0u32, now)
        .try_acquire(now)
        .unwrap()
        .failed(Verdict::Retry, now);
    let within = now + Duration::from_secs(5);
    assert!(
        std::ptr::eq(table.get_at(&99u32, within), table.shared()),
        "its window holds a call"
    );
    let past = now + Duration::from_secs(30);
    let newcomer = table.get_at(&99u32, past);
    assert!(
        !std::ptr::eq(newcomer, table.shared()),
        "the window is idle: its place goes"
    );
}

#[test]
fn a_call_whose_breakers_place_went_to_another_key_goes_on_without_it() {
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    use backstop_runtime::{Jitter, Policy, time::SystemClock};
    static TABLE: Keyed<CircuitBreaker> =
        Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 1);
    let policy = Policy::new().no_budget().jitter(Jitter::None);
    let now = Instant::now();
    // A call of key "a" is let through; its breaker holds nothing yet.
    let mut a = AttemptState::new(&policy, SystemClock).breaker(TABLE.get_at(&"a", now));
    assert!(a.admit().is_ok());
    // "b" takes the place, and its failure opens its breaker.
    let b = TABLE.get_at(&"b", now);
    open(b, now);
    // The call of "a" fails: it retries, and its retry is let through.
    assert!(matches!(
        a.decide(Attempted::Failed(Verdict::Retry)),
        Decision::Retry(_)
    ));
    assert!(a.admit().is_ok(), "not turned away by b's open breaker");
}

#[test]
fn a_tables_breaker_given_as_a_plain_one_is_kept() {
    use backstop_runtime::macro_support::{AttemptState, Attempted, Decision};
    use backstop_runtime::{Policy, time::SystemClock};
    static TABLE: Keyed<CircuitBreaker> =
        Keyed::new(CircuitBreaker::new(1, Duration::from_secs(30)));
    let policy = Policy::new().no_budget();
    // A host's breaker, given by hand to a call that gives no key.
    let mut call = AttemptState::new(&policy, SystemClock).breaker(TABLE.get(&"db-1"));
    assert!(call.admit().is_ok());
    assert!(
        matches!(
            call.decide(Attempted::Failed(Verdict::Retry)),
            Decision::GiveUp(backstop_runtime::GiveUp::BreakerOpen)
        ),
        "its failure opened the host's breaker, which it still answers to"
    );
}

#[test]
fn a_failure_of_a_call_in_flight_when_its_place_went_to_another_key_does_not_count_for_it() {
    let table = Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 1);
    let now = Instant::now();
    // A call to key "a" is admitted; its breaker holds nothing yet.
    let in_flight = table.get_at(&"a", now).try_acquire(now).unwrap();
    // Meanwhile "b" takes the place: "a"'s breaker was as a fresh one's.
    let b = table.get_at(&"b", now);
    assert!(std::ptr::eq(b, table.get_at(&"b", now)));
    // The call to "a" fails: it opened "a"'s breaker, not "b"'s.
    in_flight.failed(Verdict::Retry, now);
    assert!(b.try_acquire(now).is_ok(), "b's breaker is closed");
}

#[test]
fn peek_finds_a_keys_own_limiter_and_adds_no_key() {
    let table = Keyed::with_capacity(TokenBudget::standard(), 1);
    let now = Instant::now();
    assert!(table.peek(&"a").is_none());
    assert_eq!(table.len(), 0, "a look adds nothing");
    let a = table.get_at(&"a", now);
    assert!(std::ptr::eq(table.peek(&"a").unwrap(), a));
    a.failed(now);
    // "b" finds no place: `get` gives the shared budget, `peek` nothing.
    assert!(std::ptr::eq(table.get_at(&"b", now), table.shared()));
    assert!(table.peek(&"b").is_none());
}

#[test]
fn keys_that_find_no_place_in_the_default_table_draw_on_their_call_sites_own_budget() {
    use backstop_runtime::{Policy, Retry};
    let _vt = backstop_runtime::testing::VirtualTime::start();
    // (Unreachable, not refused: a refusal would hold once a budget
    // refuses its retry.)
    let refused = || std::io::Error::from(std::io::ErrorKind::HostUnreachable);
    // One call site fails once for each of 20,000 users: every place of
    // the process-wide table of default budgets is held by a key with a
    // token spent.
    let once = Policy::new().attempts(1);
    for user in 0..20_000u64 {
        let _ = Retry::new(&once)
            .key(&user)
            .call(|| Err::<(), _>(refused()));
    }
    // Another call site's keys, never seen: each call fails once, then
    // succeeds. They find no place either, and draw on their call site's
    // own budget, which the flood did not touch: as many are rescued as
    // calls without a key at a call site of their own.
    let policy = Policy::new().base(Duration::from_millis(1));
    let flaky = |attempts: &mut u32| {
        *attempts += 1;
        if *attempts == 1 {
            Err(refused())
        } else {
            Ok(())
        }
    };
    let mut keyed = 0;
    for shard in 0..10u32 {
        let mut attempts = 0;
        let out = Retry::new(&policy)
            .key(&shard)
            .call(|| flaky(&mut attempts));
        keyed += u32::from(out.is_ok());
    }
    let mut unkeyed = 0;
    for _ in 0..10u32 {
        let mut attempts = 0;
        let out = Retry::new(&policy).call(|| flaky(&mut attempts));
        unkeyed += u32::from(out.is_ok());
    }
    assert!(unkeyed >= 5, "{unkeyed}");
    assert_eq!(keyed, unkeyed, "no fewer than without a key");
}

#[test]
fn peek_finds_every_key_where_get_placed_it() {
    // A table of 256 places, 40 keys: each looks from a place of its own.
    let table = Keyed::new(TokenBudget::standard());
    assert!(table.is_empty());
    let placed: Vec<&TokenBudget> = (0..40u32).map(|k| table.get(&k)).collect();
    assert!(!table.is_empty());
    assert_eq!(table.len(), 40);
    for (k, budget) in (0..40u32).zip(placed) {
        assert!(
            std::ptr::eq(table.peek(&k).expect("placed"), budget),
            "key {k}"
        );
    }
}

/// A full table gives a place to a new key from those whose limiter is as
/// a fresh one's, passing over a key used since the last look (a second
/// chance, as a clock cache gives).
#[test]
fn a_key_used_since_the_last_look_keeps_its_place_over_one_that_was_not() {
    let now = Instant::now();
    // Twenty tables, each with keys of its own: where the places fall in a
    // key's probe order differs, the answer must not.
    for round in 0..20u32 {
        let key = |name: &str| format!("{round}-{name}");
        let table = Keyed::with_capacity(TokenBudget::standard(), 3);
        let first: Vec<(String, &TokenBudget)> = ["a", "b", "c"]
            .iter()
            .map(|name| (key(name), table.get_at(&key(name), now)))
            .collect();
        // "d" finds every place used: it takes one, and its chances are
        // taken from the other two.
        let d = table.get_at(&key("d"), now);
        let left: Vec<&(String, &TokenBudget)> =
            first.iter().filter(|(_, b)| !std::ptr::eq(*b, d)).collect();
        assert_eq!(left.len(), 2, "round {round}: d took one of the three");
        // One of them is used again; "d" spends a token (not fresh: its
        // place is not to be given).
        let (used, _) = left[0];
        let (idle, idle_budget) = left[1];
        let _ = table.get_at(used, now);
        d.failed(now);
        // "e" takes the place of the key not used since.
        let e = table.get_at(&key("e"), now);
        assert!(
            std::ptr::eq(e, *idle_budget),
            "round {round}: e took {used}'s place, not {idle}'s"
        );
        assert!(table.peek(used).is_some(), "round {round}: {used} kept it");
    }
}

#[test]
fn an_ipv6_host_without_brackets_has_no_port_read_from_its_last_group() {
    use backstop_runtime::limit::Destination;
    for (host, shown) in [
        ("::1", "http://::1:80"),
        ("fe80::1:8080", "http://fe80::1:8080:80"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("db-1:5432", "http://db-1:5432"),
    ] {
        assert_eq!(
            Destination::new("http", host, None).to_string(),
            shown,
            "{host}"
        );
    }
}

#[test]
fn its_debug_says_its_limiter_capacity_and_keys() {
    let table = Keyed::with_capacity(AdaptiveThrottle::new(2.0, Duration::from_secs(1)), 8);
    let _ = table.get(&1u8);
    assert_eq!(
        format!("{table:?}"),
        "Keyed { shared: AdaptiveThrottle { k: 2.0, window: 1s, .. }, capacity: 8, keys: 1, .. }"
    );
}

/// An adaptive throttle whose key has attempts out (a dependency that
/// hangs: nothing counted in its window yet) is not idle: a full table
/// keeps its place, and the attempts, counted when their callers give up,
/// land on its own throttle, not on another key's.
#[tokio::test(start_paused = true)]
async fn a_throttle_with_attempts_out_keeps_its_place_and_counts_them_as_its_own() {
    static TABLE: std::sync::LazyLock<Keyed<AdaptiveThrottle>> =
        std::sync::LazyLock::new(|| Keyed::with_capacity(AdaptiveThrottle::standard(), 1));
    static POLICY: std::sync::LazyLock<backstop_runtime::Policy> =
        std::sync::LazyLock::new(|| backstop_runtime::Policy::new().attempts(1).no_budget());
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..20 {
        calls.spawn(async {
            let retry = backstop_runtime::Retry::new(&POLICY)
                .key(&"hanging")
                .throttle(&*TABLE);
            let call = retry.call_async(std::future::pending::<Result<(), std::io::Error>>);
            tokio::time::timeout(Duration::from_secs(1), call).await
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let healthy: Result<(), std::io::Error> = backstop_runtime::Retry::new(&POLICY)
        .key(&"healthy")
        .throttle(&*TABLE)
        .call_async(|| async { Ok(()) })
        .await;
    assert!(healthy.is_ok());
    assert!(
        TABLE.peek(&"hanging").is_some(),
        "the hanging key kept its place"
    );
    assert!(
        TABLE.peek(&"healthy").is_none(),
        "the healthy key found none"
    );
    calls.join_all().await;
    let now = tokio::time::Instant::now().into_std();
    let hanging = TABLE
        .peek(&"hanging")
        .unwrap()
        .rejection_probability_at(now);
    assert!(
        (hanging - 20.0 / 21.0).abs() < 1e-12,
        "its 20 attempts: {hanging}"
    );
    assert!(TABLE.shared().rejection_probability_at(now) < 1e-12);
}

/// Hosts that fail, more than a breaker table holds: the first hold its
/// places and open their breakers, the rest find none. A healthy host
/// that finds no place either is let through on every call (a breaker
/// shared by the keys without a place would be opened by the failing
/// ones, and turn it away), and a failing host with a place is still
/// turned away by its own.
#[test]
fn a_breaker_table_full_of_failing_keys_turns_no_healthy_key_away() {
    use backstop_runtime::{Policy, Retry};
    use std::io::{Error, ErrorKind};
    static PER_HOST: Keyed<CircuitBreaker> =
        Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 4);
    let _vt = backstop_runtime::testing::VirtualTime::start();
    let once = Policy::new().attempts(1).no_budget();
    let call = |host: u32, ok: bool, ran: &mut u32| {
        Retry::new(&once).breaker(&PER_HOST).key(&host).call(|| {
            *ran += 1;
            if ok {
                Ok(())
            } else {
                Err(Error::from(ErrorKind::ConnectionRefused))
            }
        })
    };
    for host in 0..8 {
        for _ in 0..3 {
            let _ = call(host, false, &mut 0);
        }
    }
    assert_eq!(PER_HOST.len(), 4, "every place held by an open breaker");
    let mut ran = 0;
    for _ in 0..10 {
        assert!(call(99, true, &mut ran).is_ok());
    }
    assert_eq!(ran, 10, "the healthy host was never turned away");
    let placed = (0..8).find(|host| PER_HOST.peek(host).is_some()).unwrap();
    let mut ran = 0;
    assert!(call(placed, true, &mut ran).is_err());
    assert_eq!(ran, 0, "a failing host's own breaker is open");
}

/// The same for a table of adaptive throttles: a healthy key that finds
/// no place is never shed for the failures of keys that found none.
#[test]
fn a_throttle_table_full_of_failing_keys_sheds_no_healthy_key() {
    use backstop_runtime::{Policy, Retry};
    use std::io::{Error, ErrorKind};
    static PER_HOST: Keyed<AdaptiveThrottle> =
        Keyed::with_capacity(AdaptiveThrottle::standard(), 4);
    let _vt = backstop_runtime::testing::VirtualTime::start();
    let once = Policy::new().attempts(1).no_budget();
    for host in 0..8u32 {
        for _ in 0..50 {
            let _ = Retry::new(&once)
                .throttle(&PER_HOST)
                .key(&host)
                .call(|| Err::<(), _>(Error::from(ErrorKind::ConnectionRefused)));
        }
    }
    assert_eq!(PER_HOST.len(), 4);
    let mut ran = 0;
    for _ in 0..100 {
        let out = Retry::new(&once).throttle(&PER_HOST).key(&99u32).call(|| {
            ran += 1;
            Ok::<_, Error>(())
        });
        assert!(out.is_ok());
    }
    assert_eq!(ran, 100, "never shed");
}

static FORGOTTEN: std::sync::Mutex<Vec<(Option<String>, backstop_runtime::limit::ChangeReason)>> =
    std::sync::Mutex::new(Vec::new());

fn told(change: &backstop_runtime::limit::BreakerChange) {
    FORGOTTEN
        .lock()
        .unwrap()
        .push((change.key.map(str::to_owned), change.reason));
}

/// Hosts whose breakers opened and that no call comes to again (a
/// destination gone away) hold their places for two cooldowns from the
/// opening, no longer: then a new key takes one, closed again and told as
/// forgotten. A key still called (its trial made, failed again) keeps its
/// place.
#[test]
fn a_breaker_given_up_by_its_key_gives_its_place_to_a_new_key() {
    use backstop_runtime::limit::ChangeReason;
    let table = Keyed::with_capacity(
        CircuitBreaker::new(1, Duration::from_secs(30)).on_change(told),
        4,
    );
    let t0 = Instant::now();
    let opened: Vec<&CircuitBreaker> = (0..4u32).map(|k| table.get_at(&k, t0)).collect();
    for breaker in &opened {
        open(breaker, t0);
    }
    // Key 0 is still called: its trial, at 31 s, fails again.
    let at = |secs| t0 + Duration::from_secs(secs);
    opened[0]
        .try_acquire(at(31))
        .expect("its trial")
        .failed(Verdict::Retry, at(31));
    assert!(
        std::ptr::eq(table.get_at(&99u32, at(59)), table.shared()),
        "within two cooldowns, no place"
    );
    let placed = table.get_at(&99u32, at(61));
    assert!(!std::ptr::eq(placed, table.shared()), "a place given up");
    assert!(placed.try_acquire(at(61)).is_ok(), "closed, as a fresh one");
    assert!(
        std::ptr::eq(table.get_at(&0u32, at(61)), opened[0]),
        "key 0 kept its place"
    );
    assert_eq!(
        opened[0].state_at(at(61)),
        backstop_runtime::limit::BreakerState::HalfOpen,
        "and its breaker, its next trial due"
    );
    let forgotten = FORGOTTEN
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, reason)| *reason == ChangeReason::Forgotten)
        .count();
    assert_eq!(forgotten, 1, "told once");
}

/// A key whose trial was abandoned (its caller's future dropped) keeps its
/// place as a breaker opened at the trial's start does: until a cooldown
/// past the time its next trial is due, not a moment less.
#[test]
fn a_breaker_whose_trial_was_abandoned_keeps_its_place_for_a_cooldown() {
    let table = Keyed::with_capacity(CircuitBreaker::new(1, Duration::from_secs(30)), 1);
    let t0 = Instant::now();
    let at = |secs| t0 + Duration::from_secs(secs);
    let down = table.get_at(&1u32, t0);
    open(down, t0);
    // At 30 s its trial goes, and its caller gives up on it.
    drop(down.try_acquire(at(30)).expect("its trial"));
    assert!(
        std::ptr::eq(table.get_at(&2u32, at(31)), table.shared()),
        "just abandoned: no place for another key"
    );
    assert!(
        std::ptr::eq(table.get_at(&2u32, at(89)), table.shared()),
        "within a cooldown of its next trial's time (60 s)"
    );
    assert!(
        !std::ptr::eq(table.get_at(&2u32, at(91)), table.shared()),
        "a cooldown past its next trial's time, its place may go"
    );
}

/// A capacity no table can hold is refused where the table is made (in a
/// `static`, a compile error), not at its first call, where making its
/// slots would fail.
#[test]
#[should_panic(expected = "`capacity` is more keys than a table can hold in memory")]
fn a_capacity_no_table_can_hold_is_refused_where_the_table_is_made() {
    let _ = Keyed::with_capacity(TokenBudget::standard(), usize::MAX / 2);
}
