//! The ready assertion: one signed, single-use client assertion kept
//! per credential, signed off the request path. Against the verifying Entra-compatible
//! server, which rejects a replayed `jti`.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;

use msi_dataplane::ManualClock;
use support::entra::{EntraServer, Outcome};
use support::harness::{ARM, credential_with, https_env, options};

const FIXTURE: &str = "rotation-1";

fn replays(server: &EntraServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| matches!(&r.outcome, Outcome::Error { code: 50027, .. }))
        .count()
}

/// Many cold requests, one after the other and concurrently, with and without a spare
/// ready: the server never sees a `jti` twice, and every request gets a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_assertion_is_ever_sent_twice() {
    let server = EntraServer::start().await;
    let cred = credential_with(&server, FIXTURE, options());
    for _ in 0..40 {
        cred.clear_cache();
        cred.get_token(&[ARM]).await.expect("cold get_token");
    }
    // A herd of cold requests on different scopes: one may take the spare, the others
    // sign their own.
    let scopes: Vec<String> = (0..24)
        .map(|i| format!("https://resource-{i}.example/.default"))
        .collect();
    let mut tasks = Vec::new();
    for scope in scopes {
        let cred = cred.clone();
        tasks.push(tokio::spawn(async move {
            cred.get_token(&[scope.as_str()]).await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("herd get_token");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 64, "one request per cold get_token");
    assert_eq!(replays(&server), 0, "a jti was replayed");
    let jtis: HashSet<_> = requests.iter().filter_map(|r| r.jti.clone()).collect();
    assert_eq!(jtis.len(), 64, "every request carried its own jti");
    assert!(
        requests
            .iter()
            .all(|r| matches!(r.outcome, Outcome::Token(_))),
        "every request got a token"
    );
}

/// The spare dated when the credential was built (and signed in the background) is used
/// while it is at most half its lifetime old (its `iat` is the build time), and discarded
/// once older (the request signs on the spot: `iat` is the request time). The request
/// comes at once after building: one still being signed is waited for, not signed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_older_than_half_its_lifetime_is_not_used() {
    let server = EntraServer::start().await;
    // Build 400 s in the past, so that a 600 s assertion signed then is still unexpired
    // for the server when it is 301 s old.
    let built = time::OffsetDateTime::now_utc() - time::Duration::seconds(400);
    for (age, expect_spare) in [(299, true), (301, false)] {
        let clock = Arc::new(ManualClock::new(built));
        let cred = credential_with(
            &server,
            FIXTURE,
            options().with_environment(https_env().with_clock(clock.clone())),
        );
        clock.advance(std::time::Duration::from_secs(age as u64));
        server.clear_requests();
        cred.get_token(&[ARM]).await.expect("get_token");
        let request = server.requests().pop().expect("one request");
        let iat = request.iat.expect("iat");
        let want = if expect_spare {
            built.unix_timestamp()
        } else {
            built.unix_timestamp() + age
        };
        assert_eq!(
            iat,
            want,
            "spare {age} s old: expected it {}used",
            if expect_spare { "" } else { "not " }
        );
        assert!(matches!(request.outcome, Outcome::Token(_)), "{request:?}");
    }
}

/// Turned off, every request signs on the spot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ready_assertion_each_request_signs_on_the_spot() {
    let server = EntraServer::start().await;
    let built = time::OffsetDateTime::now_utc() - time::Duration::seconds(100);
    let clock = Arc::new(ManualClock::new(built));
    let cred = credential_with(
        &server,
        FIXTURE,
        options()
            .with_environment(https_env().with_clock(clock.clone()))
            .with_ready_assertion(false),
    );
    clock.advance(std::time::Duration::from_secs(10));
    cred.get_token(&[ARM]).await.expect("get_token");
    let request = server.requests().pop().expect("one request");
    assert_eq!(request.iat, Some(built.unix_timestamp() + 10));
}
