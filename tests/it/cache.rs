//! The token cache against the verifying server: single flight, independent scopes,
//! refresh ahead, failure behaviour, retries.

use crate::support;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use msi_dataplane::limits::{FAILURE_MEMORY, MIN_REFRESH_BACKOFF};
use msi_dataplane::{ClientCertificateCredential, ErrorKind, ManualClock, RetryPolicy};
use support::entra::{EntraServer, Outcome, Scripted, TokenShape};
use support::harness::{
    ARM, credential, credential_on_clock, credential_with, https_env, options,
    wait_for_token_requests,
};

const GRAPH: &str = "https://graph.microsoft.com/.default";

/// Tokens living 500 s: the refresh window opens at half-life (tokens under 10 minutes
/// cannot open it 5 minutes early), 250 s after issue, up to 25 s earlier with jitter.
/// Keeping the manual clock within the server's 5 minutes of clock skew lets the server
/// (on real time) accept the refresh's assertion.
async fn short_lived_tokens() -> EntraServer {
    let server = EntraServer::start().await;
    server.set_token_shape(TokenShape {
        expires_in: 500,
        ..TokenShape::default()
    });
    server
}

/// The tests' options without retries.
fn no_retry() -> msi_dataplane::ClientCertificateCredentialOptions {
    options().with_environment(https_env().with_retry_policy(RetryPolicy::none()))
}

const INTO_WINDOW: Duration = Duration::from_secs(260);

/// Poll once: a cache hit must be ready without waiting.
fn poll_once<F: Future>(fut: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(fut).poll(&mut cx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_callers_make_one_request() {
    let server = EntraServer::start().await;
    // Slow the answer so every caller arrives while the request is in flight.
    server.set_scope_delay(ARM, Duration::from_millis(300));
    let cred = credential(&server, "pem-pkcs8");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..1000 {
        let cred = cred.clone();
        tasks.spawn(async move { cred.get_token(&[ARM]).await });
    }
    let mut tokens = Vec::new();
    while let Some(result) = tasks.join_next().await {
        tokens.push(result.unwrap().unwrap());
    }
    assert_eq!(server.token_requests(), 1);
    assert_eq!(tokens.len(), 1000);
    assert!(tokens.iter().all(|t| t.token() == tokens[0].token()));
    assert!(server.issued(tokens[0].token()).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_all_get_the_one_error() {
    let server = EntraServer::start().await;
    let cred = credential_with(&server, "pem-pkcs8", no_retry());
    server.enqueue(
        Scripted::aadsts(400, "invalid_request", 90002, "tenant not found")
            .delayed(Duration::from_millis(300)),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let cred = cred.clone();
        tasks.spawn(async move { cred.get_token(&[ARM]).await });
    }
    while let Some(result) = tasks.join_next().await {
        let err = result.unwrap().unwrap_err();
        let ErrorKind::TokenEndpoint(e) = err.kind() else {
            panic!("{err:?}")
        };
        assert_eq!(e.aadsts_code(), Some(90002));
    }
    assert_eq!(server.token_requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_scope_does_not_delay_another() {
    // The delayed scope's answer comes long after any test deadline: ARM's token arriving
    // while it is still in flight is the proof, not a timing.
    let server = EntraServer::start().await;
    server.set_scope_delay(GRAPH, Duration::from_secs(600));
    let cred = credential(&server, "pem-pkcs8");
    let slow = tokio::spawn({
        let cred = cred.clone();
        async move { cred.get_token(&[GRAPH]).await }
    });
    wait_for_token_requests(&server, 1).await; // the slow request is in flight
    tokio::time::timeout(Duration::from_secs(60), cred.get_token(&[ARM]))
        .await
        .expect("ARM waited behind the delayed scope")
        .unwrap();
    assert!(
        !slow.is_finished(),
        "the delayed scope should still be in flight"
    );
    slow.abort();
}

/// The caller that starts a miss runs its request in its own poll. One that then keeps
/// its future without polling it (a hand-written future, a stalled combinator) does not
/// hold the request back from the callers that joined it: they drive it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_caller_that_stops_polling_does_not_hold_back_the_others() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    let mut first = Box::pin(cred.get_token(&[ARM]));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        first.as_mut().poll(&mut cx).is_pending(),
        "a miss answered in one poll"
    );
    // `first` is kept, never polled again until the end.
    let joined = tokio::time::timeout(Duration::from_secs(20), cred.get_token(&[ARM]))
        .await
        .expect("the joined caller waited on a first caller that stopped polling")
        .expect("get_token");
    assert_eq!(server.token_requests(), 1, "one request for both callers");
    assert_eq!(first.await.expect("the first caller's token"), joined);
}

#[tokio::test]
async fn cached_hit_is_ready_at_once_and_makes_no_request() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    let first = cred.get_token(&[ARM]).await.unwrap();
    for _ in 0..100 {
        let Poll::Ready(hit) = poll_once(cred.get_token(&[ARM])) else {
            panic!("a cache hit waited")
        };
        assert_eq!(hit.unwrap(), first);
    }
    assert_eq!(server.token_requests(), 1);
    // Another scope is another key; other order is another key too (scopes as given).
    cred.get_token(&[GRAPH]).await.unwrap();
    assert_eq!(server.token_requests(), 2);
    cred.clear_cache();
    cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_ahead_makes_one_request_and_callers_never_wait() {
    let server = short_lived_tokens().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    let old = cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 1);

    clock.advance(INTO_WINDOW);
    server.set_scope_delay(ARM, Duration::from_millis(500));
    for _ in 0..200 {
        let Poll::Ready(hit) = poll_once(cred.get_token(&[ARM])) else {
            panic!("a caller waited during refresh-ahead")
        };
        assert_eq!(
            hit.unwrap(),
            old,
            "the cached token is served while refreshing"
        );
    }
    wait_for_token_requests(&server, 2).await;
    // Once the refresh lands, callers get the new token; exactly one refresh happened.
    let mut new = old.clone();
    for _ in 0..300 {
        new = cred.get_token(&[ARM]).await.unwrap();
        if new != old {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(new, old);
    assert!(new.expires_on() > old.expires_on());
    assert_eq!(server.token_requests(), 2);
    assert!(server.issued(new.token()).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_in_from_the_server_is_honoured() {
    let server = EntraServer::start().await;
    server.set_token_shape(TokenShape {
        refresh_in: Some(1800),
        ..TokenShape::default()
    });
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    cred.get_token(&[ARM]).await.unwrap();
    clock.advance(Duration::from_secs(1700));
    cred.get_token(&[ARM]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.token_requests(), 1, "not yet in the window");
    clock.advance(Duration::from_secs(101));
    cred.get_token(&[ARM]).await.unwrap();
    wait_for_token_requests(&server, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_refresh_while_valid_serves_the_cached_token_and_backs_off() {
    let server = short_lived_tokens().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", no_retry());
    let old = cred.get_token(&[ARM]).await.unwrap();
    clock.advance(INTO_WINDOW);
    server.enqueue(Scripted::aadsts(
        400,
        "invalid_client",
        7000215,
        "refresh refused",
    ));
    assert_eq!(cred.get_token(&[ARM]).await.unwrap(), old);
    wait_for_token_requests(&server, 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await; // let the failure be recorded

    // Within the backoff: the cached token, and no new request.
    clock.advance(Duration::from_secs(10));
    for _ in 0..50 {
        assert_eq!(cred.get_token(&[ARM]).await.unwrap(), old);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.token_requests(),
        2,
        "backoff must hold the next attempt"
    );

    // After the backoff (≥ 30 s since the failure), the next call tries again.
    clock.advance(MIN_REFRESH_BACKOFF);
    assert_eq!(cred.get_token(&[ARM]).await.unwrap(), old);
    wait_for_token_requests(&server, 3).await;
}

#[tokio::test]
async fn expired_token_and_failing_server_yield_the_error() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", no_retry());
    cred.get_token(&[ARM]).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    server.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "certificate revoked",
    ));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!((e.status, e.aadsts_code()), (401, Some(700027)));
    assert!(e.trace_id.is_some());
}

#[tokio::test]
async fn a_503_then_200_succeeds_after_one_retry() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    server.enqueue(Scripted::aadsts(
        503,
        "temporarily_unavailable",
        90033,
        "busy",
    ));
    let token = cred.get_token(&[ARM]).await.unwrap();
    assert!(server.issued(token.token()).is_some());
    assert_eq!(server.token_requests(), 2);
    let sleeps = clock.sleeps();
    assert_eq!(sleeps.len(), 1);
    assert!(sleeps[0] >= Duration::from_millis(250) && sleeps[0] < Duration::from_millis(500));
    // Each attempt is a new assertion (the server refuses replays).
    let reqs = server.requests();
    assert_ne!(reqs[0].jti, reqs[1].jti);
}

#[tokio::test]
async fn a_429_retry_after_is_honoured() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    let start = clock.now_for_test();
    server.enqueue(Scripted::aadsts(429, "too_many_requests", 50196, "slow down").retry_after("2"));
    cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 2);
    assert_eq!(clock.sleeps(), vec![Duration::from_secs(2)]);
    assert_eq!(clock.now_for_test() - start, time::Duration::seconds(2));
}

#[tokio::test]
async fn a_400_is_not_retried() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    server.enqueue(Scripted::aadsts(400, "invalid_scope", 70011, "bad scope"));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(server.token_requests(), 1);
    assert!(clock.sleeps().is_empty());
    // 401 neither (once the first failure is no longer the answer).
    clock.advance(FAILURE_MEMORY);
    server.enqueue(Scripted::aadsts(401, "invalid_client", 700027, "no"));
    cred.get_token(&[ARM]).await.unwrap_err();
    assert_eq!(server.token_requests(), 2);
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", options());
    for _ in 0..10 {
        server.enqueue(Scripted::status(503));
    }
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(err.is_transient());
    assert_eq!(server.token_requests(), 4, "default policy: 4 attempts");
    assert_eq!(clock.sleeps().len(), 3);
    // A Retry-After beyond the total budget ends the retries at once.
    let server = EntraServer::start().await;
    let cred = credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(https_env().with_clock(clock.clone())),
    );
    let before = server.token_requests();
    server.enqueue(Scripted::status(429).retry_after("3600"));
    let err = cred.request_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.retry_after, Some(Duration::from_secs(3600)));
    assert_eq!(server.token_requests(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_caller_does_not_cancel_the_request() {
    let server = EntraServer::start().await;
    server.set_scope_delay(ARM, Duration::from_millis(300));
    let cred = credential(&server, "pem-pkcs8");
    // The first caller gives up after 50 ms; the request goes on for the second.
    let first = tokio::time::timeout(Duration::from_millis(50), cred.get_token(&[ARM])).await;
    assert!(first.is_err(), "the first caller timed out");
    let second = cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 1);
    assert!(server.issued(second.token()).is_some());
}

#[test]
fn without_a_runtime_a_miss_is_an_error_not_a_panic() {
    let server_rt = tokio::runtime::Runtime::new().unwrap();
    let server = server_rt.block_on(EntraServer::start());
    let cred: ClientCertificateCredential = {
        let _guard = server_rt.enter();
        credential(&server, "pem-pkcs8")
    };
    let Poll::Ready(result) = poll_once(cred.get_token(&[ARM])) else {
        panic!("expected an immediate answer")
    };
    let err = result.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Abandoned {
                code: "request_abandoned",
                ..
            }
        ),
        "{err}"
    );
    // Waiting does not bring a runtime: not transient, as the retry policy has it.
    assert!(!err.is_transient());
}

trait NowForTest {
    fn now_for_test(&self) -> time::OffsetDateTime;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> time::OffsetDateTime {
        msi_dataplane::Clock::now(self)
    }
}

/// A refused token is replaced past the cache: one new request (shared by concurrent
/// callers), the new token cached in its place; a caller that comes with the refused
/// token after it was replaced gets the replacement without another request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_replaced_once_past_the_cache() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    let refused = cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 1);
    server.set_scope_delay(ARM, Duration::from_millis(200));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (cred, refused) = (cred.clone(), refused.clone());
        tasks.spawn(async move { cred.get_token_replacing(&refused, &[ARM], None).await });
    }
    let mut replacements = Vec::new();
    while let Some(result) = tasks.join_next().await {
        replacements.push(result.unwrap().unwrap());
    }
    assert_eq!(
        server.token_requests(),
        2,
        "one request for all eight callers"
    );
    let new = replacements[0].token().to_owned();
    assert_ne!(new, refused.token());
    assert!(replacements.iter().all(|t| t.token() == new));
    assert_eq!(
        cred.get_token(&[ARM]).await.unwrap().token(),
        new,
        "cached in its place"
    );
    let late = cred
        .get_token_replacing(&refused, &[ARM], None)
        .await
        .unwrap();
    assert_eq!(late.token(), new);
    assert_eq!(server.token_requests(), 2, "already replaced: no request");
}

fn resource(i: usize) -> String {
    format!("https://r{i}.example/.default")
}

#[tokio::test]
async fn past_the_bound_the_least_recently_used_scope_leaves() {
    let server = EntraServer::start().await;
    let (clock, cred) =
        credential_on_clock(&server, "pem-pkcs8", options().with_max_cached_scopes(4));
    let step = Duration::from_secs(1);
    for i in 0..4 {
        cred.get_token(&[&resource(i)]).await.unwrap();
        clock.advance(step);
    }
    // r0 used again: r1 is now the least recently used.
    cred.get_token(&[&resource(0)]).await.unwrap();
    clock.advance(step);
    assert_eq!(server.token_requests(), 4);
    cred.get_token(&[&resource(4)]).await.unwrap();
    assert_eq!(server.token_requests(), 5);
    for i in [0, 2, 3, 4] {
        cred.get_token(&[&resource(i)]).await.unwrap();
    }
    assert_eq!(
        server.token_requests(),
        5,
        "the four most recent stay cached"
    );
    cred.get_token(&[&resource(1)]).await.unwrap();
    assert_eq!(server.token_requests(), 6, "r1 had left");
}

#[tokio::test]
async fn never_more_scopes_cached_than_the_bound() {
    let server = EntraServer::start().await;
    let (clock, cred) =
        credential_on_clock(&server, "pem-pkcs8", options().with_max_cached_scopes(16));
    for i in 0..40 {
        cred.get_token(&[&resource(i)]).await.unwrap();
        clock.advance(Duration::from_millis(10));
    }
    assert_eq!(server.token_requests(), 40);
    // Newest first: each hit is a scope still cached; a miss brings it back and evicts
    // older ones, which are asked for later and miss too.
    for i in (0..40).rev() {
        cred.get_token(&[&resource(i)]).await.unwrap();
    }
    let hits = 80 - server.token_requests();
    assert!(
        (14..=16).contains(&hits),
        "{hits} of 40 scopes were still cached with a bound of 16 (an eighth leaves at a time)"
    );
}

#[tokio::test]
async fn a_failed_scope_answers_its_error_for_the_failure_memory() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", no_retry());
    server.enqueue(Scripted::aadsts(
        400,
        "invalid_request",
        90002,
        "tenant not found",
    ));
    let code = |e: msi_dataplane::Error| match e.kind() {
        ErrorKind::TokenEndpoint(t) => t.aadsts_code(),
        _ => panic!("{e:?}"),
    };
    assert_eq!(code(cred.get_token(&[ARM]).await.unwrap_err()), Some(90002));
    for _ in 0..50 {
        assert_eq!(code(cred.get_token(&[ARM]).await.unwrap_err()), Some(90002));
    }
    assert_eq!(
        server.token_requests(),
        1,
        "repeats within the memory reach no one"
    );
    // Another scope is not held back.
    cred.get_token(&[GRAPH]).await.unwrap();
    assert_eq!(server.token_requests(), 2);
    clock.advance(FAILURE_MEMORY - Duration::from_millis(1));
    cred.get_token(&[ARM]).await.unwrap_err();
    assert_eq!(server.token_requests(), 2);
    clock.advance(Duration::from_millis(1));
    cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 3, "past the memory: a new request");
    // Cleared with the cache, and configurable down to nothing.
    server.enqueue(Scripted::status(400));
    cred.get_token(&[&resource(1)]).await.unwrap_err();
    cred.clear_cache();
    cred.get_token(&[&resource(1)]).await.unwrap();
    assert_eq!(server.token_requests(), 5);
    let forgetful = support::harness::credential_with(
        &server,
        "pem-pkcs8",
        no_retry().with_failure_memory(Duration::ZERO),
    );
    server.enqueue(Scripted::status(400));
    forgetful.get_token(&[ARM]).await.unwrap_err();
    forgetful.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 7);
}

/// Many cold requests, one after the other and concurrently: the server (which refuses a
/// replayed `jti`) never sees an assertion twice, and every request gets a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_assertion_is_ever_sent_twice() {
    let server = EntraServer::start().await;
    let cred = credential_with(&server, "rotation-1", options());
    for _ in 0..40 {
        cred.clear_cache();
        cred.get_token(&[ARM]).await.expect("cold get_token");
    }
    // A herd of cold requests on different scopes, each signing its own.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let cred = cred.clone();
        let scope = format!("https://resource-{i}.example/.default");
        tasks.push(tokio::spawn(async move {
            cred.get_token(&[scope.as_str()]).await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("herd get_token");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 64, "one request per cold get_token");
    let replays = requests
        .iter()
        .filter(|r| matches!(&r.outcome, Outcome::Error { code: 50027, .. }))
        .count();
    assert_eq!(replays, 0, "a jti was replayed");
    let jtis: std::collections::HashSet<_> =
        requests.iter().filter_map(|r| r.jti.clone()).collect();
    assert_eq!(jtis.len(), 64, "every request carried its own jti");
    assert!(
        requests
            .iter()
            .all(|r| matches!(r.outcome, Outcome::Token(_))),
        "every request got a token"
    );
}

/// Each request signs its assertion when it is made: its `iat` is the request's time,
/// not the credential's build time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_signs_on_the_spot() {
    let server = EntraServer::start().await;
    let built = time::OffsetDateTime::now_utc() - time::Duration::seconds(100);
    let clock = std::sync::Arc::new(ManualClock::new(built));
    let cred = credential_with(
        &server,
        "rotation-1",
        options().with_environment(https_env().with_clock(clock.clone())),
    );
    clock.advance(Duration::from_secs(10));
    cred.get_token(&[ARM]).await.expect("get_token");
    let request = server.requests().pop().expect("one request");
    assert_eq!(request.iat, Some(built.unix_timestamp() + 10));
}

/// A failed request's error says when the credential asks again (the failure memory's
/// end), fresh and answered again from the memory alike; a refusal made before sending
/// is not remembered and says nothing.
#[tokio::test]
async fn a_remembered_failure_says_when_the_next_request_is_made() {
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", no_retry());
    server.enqueue(Scripted::aadsts(
        400,
        "invalid_request",
        90002,
        "tenant not found",
    ));
    let failed_at = clock.now_for_test();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let retry_at = err.retry_at().expect("a remembered failure says when");
    let memory_end = failed_at + FAILURE_MEMORY;
    assert!(
        retry_at <= memory_end && memory_end - retry_at < time::Duration::milliseconds(1),
        "retry at {retry_at}, the memory ends at {memory_end}"
    );
    clock.advance(Duration::from_secs(2));
    let again = cred.get_token(&[ARM]).await.unwrap_err();
    assert_eq!(
        again.retry_at(),
        Some(retry_at),
        "the same time, from the memory"
    );
    assert_eq!(server.token_requests(), 1);
    // Refused before sending: not remembered.
    let bad_scope = cred.get_token(&["a b"]).await.unwrap_err();
    assert_eq!(bad_scope.retry_at(), None);
    let expired = cred.certificate().not_after() - clock.now_for_test();
    clock.advance(Duration::try_from(expired).unwrap() + Duration::from_secs(1));
    let refused = cred.get_token(&[GRAPH]).await.unwrap_err();
    assert!(
        matches!(refused.kind(), ErrorKind::Expired { .. }),
        "{refused:?}"
    );
    assert_eq!(refused.retry_at(), None);
    assert_eq!(server.token_requests(), 1);
}

/// The token server's hook: only starting a new request is subject to admission. A
/// cached token, a request in flight or a remembered failure never asks; refused, nothing
/// starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_new_request_is_subject_to_admission() {
    let server = support::harness::server_with("rotation-1").await;
    let dir = support::atomic_writer::TempDir::new("admitted");
    let path = dir.join("identity");
    let json = support::fixtures::load_with_endpoint("rotation-1", &server.base_url())
        .to_json()
        .unwrap();
    std::fs::write(&path, json).unwrap();
    let cred = msi_dataplane::UserAssignedIdentityCredential::new(
        &path,
        no_retry(),
        msi_dataplane::ReloadOptions::default().with_watch(false),
    )
    .await
    .unwrap();
    let never = || -> bool { panic!("asked without a request to start") };

    let refused = cred.get_token_admitted(&[ARM], || false).await.unwrap();
    assert!(refused.is_none());
    assert_eq!(server.token_requests(), 0, "refused: nothing started");

    server.set_scope_delay(ARM, Duration::from_millis(300));
    let first = tokio::spawn({
        let cred = cred.clone();
        async move { cred.get_token_admitted(&[ARM], || true).await }
    });
    wait_for_token_requests(&server, 1).await;
    let joined = cred.get_token_admitted(&[ARM], never).await.unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first, joined, "one request for both");
    let cached = cred.get_token_admitted(&[ARM], never).await.unwrap();
    assert_eq!(cached, joined);
    assert_eq!(server.token_requests(), 1);

    server.enqueue(Scripted::status(400));
    let err = cred
        .get_token_admitted(&[GRAPH], || true)
        .await
        .unwrap_err();
    let again = cred.get_token_admitted(&[GRAPH], never).await.unwrap_err();
    assert!(err.retry_at().is_some() && again.retry_at() == err.retry_at());
    assert_eq!(server.token_requests(), 2);
}

/// A failed request's error says when the credential will try again (the end of its
/// failure memory), the same on every answer from the memory; a caller that waits until
/// then gets a new request. A refusal made before any request says nothing.
#[tokio::test]
async fn a_remembered_failure_says_when_it_is_tried_again() {
    use msi_dataplane::Clock as _;
    let server = EntraServer::start().await;
    let (clock, cred) = credential_on_clock(&server, "pem-pkcs8", no_retry());
    server.enqueue(Scripted::status(503));
    let failed_at = clock.now();
    let first = cred.get_token(&[ARM]).await.unwrap_err();
    let retry_at = first.retry_at().expect("a remembered failure says when");
    let memory = time::Duration::try_from(FAILURE_MEMORY).unwrap();
    assert!(
        retry_at <= failed_at + memory
            && retry_at > failed_at + memory - time::Duration::MILLISECOND,
        "{retry_at} against a failure at {failed_at}"
    );
    clock.advance(Duration::from_secs(2));
    let again = cred.get_token(&[ARM]).await.unwrap_err();
    assert_eq!(again.retry_at(), Some(retry_at), "answered from the memory");
    assert_eq!(server.token_requests(), 1);
    clock.set(retry_at);
    cred.get_token(&[ARM])
        .await
        .expect("a new request at retry_at");
    assert_eq!(server.token_requests(), 2);
    let refused = cred.get_token(&["two words"]).await.unwrap_err();
    assert_eq!(refused.retry_at(), None, "a refusal before any request");
}
