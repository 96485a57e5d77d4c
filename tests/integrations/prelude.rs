//! `use backstop::prelude::*` is a glob import that shadows nothing: the
//! crates named like backstop's modules (`reqwest`, `http`) stay reachable.
//! Run with `cargo test -p backstop --features reqwest --test integrations prelude::`.

use backstop::prelude::*;

#[retry(attempts = 2, when_ok = backstop::reqwest::response_verdict)]
async fn get(
    client: &reqwest::Client,
    url: &str,
) -> Result<reqwest::Response, backstop::reqwest::Error> {
    backstop::reqwest::within_attempt(client.get(url))
        .send()
        .await
}

#[test]
fn the_prelude_leaves_the_crates_of_the_same_names_alone() {
    // `reqwest::Client` and `http::StatusCode` are the crates' own.
    let client: reqwest::Client = reqwest::Client::new();
    let status: http::StatusCode = http::StatusCode::SERVICE_UNAVAILABLE;
    assert_eq!(status.classify(), Verdict::Retry);
    drop(get(&client, "http://127.0.0.1:9/"));
    let policy: Policy = Policy::new().jitter(Jitter::None);
    assert_eq!(policy.ceiling(0), std::time::Duration::from_millis(100));
}
