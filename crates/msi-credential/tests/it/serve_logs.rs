//! The token server's log (every `tracing` event at TRACE, from every crate) holds no
//! token and no identity header secret, whether a request succeeds, presents a wrong
//! secret, or meets a token endpoint that refuses, and through a rotation.
#![cfg(unix)]

use crate::serving;

use std::time::Duration;

use msi_credential::serve::ServeOptions;
use msi_dataplane_testing::{EntraServer, Scripted, wait_for_certificate};
use serving::{ARM, Mounted, SECRET, raw, start, token_request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_and_no_secret_reaches_the_log() {
    crate::support::log_capture::captured();
    let entra = EntraServer::start().await;
    let mut a = Mounted::new(&entra);
    let served = a.serve(&entra, Default::default()).await;
    let credential = served.credential().clone();
    let server = start(vec![served], ServeOptions::default()).await;
    let wrong = "a-wrong-secret-presented-0123456789";
    let mut tokens = Vec::new();
    let answer = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    tokens.push(answer.body["access_token"].as_str().unwrap().to_owned());
    let refused = raw(server.local_addr(), token_request(&server, ARM, "", wrong)).await;
    assert_eq!(refused.status, 401);
    entra.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "Client assertion failed.",
    ));
    let failed = raw(
        server.local_addr(),
        token_request(&server, "api://other", "", SECRET),
    )
    .await;
    assert_eq!(failed.status, 403);
    let next = a.rotate(&entra);
    wait_for_certificate(&credential, &next, Duration::from_secs(20)).await;
    entra
        .wait_for_token_requests(3, Duration::from_secs(20))
        .await;
    for _ in 0..100 {
        let answer = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
        let token = answer.body["access_token"].as_str().unwrap().to_owned();
        let new = entra.issued(&token).unwrap().cert_sha256_hex == next.sha256_hex();
        tokens.push(token);
        if new {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(server);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = crate::support::log_capture::text();
    assert!(
        log.contains("token server listening"),
        "the capture saw the server: {log}"
    );
    assert!(log.contains("AADSTS700027"), "the refusal is logged: {log}");
    assert!(log.contains("rotated"), "the rotation is logged: {log}");
    for secret in [SECRET, wrong] {
        assert!(!log.contains(secret), "a secret in the log");
    }
    for token in &tokens {
        assert!(!log.contains(token.as_str()), "a token in the log");
    }
}

/// A resource with invisible characters (a Hangul filler, a variation selector, a
/// combining grapheme joiner) that Entra refuses: the warning in the log and the answer
/// show them escaped, so neither can look like another resource's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_characters_reach_the_log_and_the_answer_escaped() {
    crate::support::log_capture::captured();
    let (entra, _a, server) = serving::one_identity(ServeOptions::default()).await;
    let resource = "api://lookalike\u{3164}\u{fe0f}\u{34f}";
    let _refusal = serving::refuse(&entra, resource);
    let encoded: String = url::form_urlencoded::byte_serialize(resource.as_bytes()).collect();
    let answer = raw(
        server.local_addr(),
        token_request(&server, &encoded, "", SECRET),
    )
    .await;
    assert_eq!(answer.status, 403, "{answer:?}");
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        message.contains("api://lookalike\\u{3164}\\u{fe0f}\\u{34f}"),
        "{message}"
    );
    let log = crate::support::log_capture::text();
    let warned = log
        .lines()
        .find(|l| l.contains("token request failed") && l.contains("api://lookalike"))
        .unwrap_or_else(|| panic!("no warning for the refused resource: {log}"));
    assert!(
        warned.contains("api://lookalike\\u{3164}\\u{fe0f}\\u{34f}"),
        "{warned}"
    );
    for invisible in ['\u{3164}', '\u{fe0f}', '\u{34f}'] {
        assert!(
            !log.contains(invisible),
            "{invisible:?} reached the log raw"
        );
    }
}
