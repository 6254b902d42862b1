//! The token server (`serve`) over real HTTP on loopback, backed by the kit's verifying
//! Entra server and a credential file mounted as the CSI driver mounts it: every bad
//! request refused with its status and a JSON error, identities chosen by each selector,
//! the tokens after a `..data` rotation obtained with the new certificate, the refresh
//! window, the token endpoint's refusal passed on, the secret's rotation, health, and the
//! loopback-only rule.
#![cfg(unix)]

use crate::serving;

use std::sync::Arc;
use std::time::Duration;

use msi_credential::serve::{IdentityHeaderSecret, ServeError, ServeOptions, TokenServer};
use msi_dataplane::{ClientCertificateCredentialOptions, Clock as _, Environment, ManualClock};
use msi_dataplane_testing::{Scripted, TempDir, wait_for_certificate};
use serving::{ARM, Mounted, SECRET, raw, start, token_request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_each_get_their_status_and_a_json_error() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let (a, b) = (Mounted::new(&entra), Mounted::new(&entra));
    let identities = vec![
        a.serve(&entra, Default::default()).await,
        b.serve(&entra, Default::default()).await,
    ];
    let server = start(identities, ServeOptions::default()).await;
    let host = server.local_addr().to_string();
    let query = |extra: &str| format!("api-version=2019-08-01&resource={ARM}{extra}");
    let get = |query: String, headers: &str| {
        format!("GET /msi/token?{query} HTTP/1.1\r\nHost: {host}{headers}")
    };
    let secret = format!("\r\nX-IDENTITY-HEADER: {SECRET}");
    let a_id = format!("&client_id={}", a.identity.client_id);
    let long = format!("&x={}", "q".repeat(10 * 1024));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("no header", get(query(&a_id), ""), 401, "unauthorized"),
        (
            "wrong secret",
            get(
                query(&a_id),
                "\r\nX-IDENTITY-HEADER: not-the-secret-0123456789",
            ),
            401,
            "unauthorized",
        ),
        (
            "unknown identity",
            get(
                query("&client_id=00000000-0000-0000-0000-000000000000"),
                &secret,
            ),
            400,
            "identity_not_found",
        ),
        (
            "two identities served, none named",
            get(query(""), &secret),
            400,
            "identity_not_specified",
        ),
        (
            "two selectors",
            get(
                query(&format!("{a_id}&object_id={}", a.identity.object_id)),
                &secret,
            ),
            400,
            "invalid_request",
        ),
        (
            "no resource",
            get(format!("api-version=2019-08-01{a_id}"), &secret),
            400,
            "invalid_request",
        ),
        (
            "a 10 KiB query",
            get(query(&long), &secret),
            414,
            "uri_too_long",
        ),
        (
            "POST",
            format!(
                "POST /msi/token?{} HTTP/1.1\r\nHost: {host}{secret}\r\nContent-Length: 0",
                query(&a_id)
            ),
            405,
            "method_not_allowed",
        ),
        (
            "a foreign Host",
            format!(
                "GET /msi/token?{} HTTP/1.1\r\nHost: attacker.example{secret}",
                query(&a_id)
            ),
            421,
            "misdirected_request",
        ),
        (
            "X-Forwarded-For",
            get(
                query(&a_id),
                &format!("{secret}\r\nX-Forwarded-For: 10.0.0.7"),
            ),
            403,
            "forwarded_request",
        ),
        (
            "a body",
            get(query(&a_id), &format!("{secret}\r\nContent-Length: 2")),
            413,
            "content_too_large",
        ),
        (
            "another path",
            format!("GET /other HTTP/1.1\r\nHost: {host}{secret}"),
            404,
            "not_found",
        ),
    ];
    for (name, request, status, error) in cases {
        let answer = raw(server.local_addr(), request).await;
        assert_eq!(answer.status, status, "{name}: {answer:?}");
        assert_eq!(answer.body["statusCode"], status, "{name}: {answer:?}");
        assert_eq!(answer.body["error"], error, "{name}: {answer:?}");
        let message = answer.body["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{name}: no message");
        assert_eq!(answer.body["error_description"], message, "{name}");
        assert!(
            answer.body["correlationId"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        );
        assert!(
            answer
                .header("content-type")
                .unwrap()
                .starts_with("application/json"),
            "{name}"
        );
        assert!(
            answer.header("retry-after").is_none(),
            "{name}: only 429/503 say when to retry"
        );
        assert!(
            !answer.body.to_string().contains(SECRET),
            "{name}: the secret echoed"
        );
        assert!(answer.body.get("access_token").is_none(), "{name}");
        if status == 405 {
            assert_eq!(answer.header("allow"), Some("GET"));
        }
    }
    // What was asked is named.
    let unknown = raw(
        server.local_addr(),
        get(
            query("&object_id=0f0f0f0f-1111-2222-3333-444444444444"),
            &secret,
        ),
    )
    .await;
    let message = unknown.body["message"].as_str().unwrap();
    assert!(
        message.contains("object_id") && message.contains("0f0f0f0f-1111-2222-3333-444444444444"),
        "{message}"
    );
    // Nothing was asked of Entra for any of them.
    assert_eq!(entra.token_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_are_chosen_by_client_id_object_id_principal_id_and_mi_res_id() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let (a, b) = (Mounted::new(&entra), Mounted::new(&entra));
    let identities = vec![
        a.serve(&entra, Default::default()).await,
        b.serve(&entra, Default::default()).await,
    ];
    let server = start(identities, ServeOptions::default()).await;
    for (mounted, selector) in [
        (&a, format!("client_id={}", a.identity.client_id)),
        (
            &b,
            format!("client_id={}", b.identity.client_id.to_uppercase()),
        ),
        (&a, format!("object_id={}", a.identity.object_id)),
        (&b, format!("principal_id={}", b.identity.object_id)),
        (&b, format!("mi_res_id={}", b.identity.resource_id)),
    ] {
        let answer = raw(
            server.local_addr(),
            token_request(&server, ARM, &selector, SECRET),
        )
        .await;
        assert_eq!(answer.status, 200, "{selector}: {answer:?}");
        let body = &answer.body;
        assert_eq!(body["resource"], ARM);
        assert_eq!(body["token_type"], "Bearer");
        assert_eq!(body["client_id"], mounted.identity.client_id.as_str());
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        // `expires_on` is a string of whole Unix seconds, over 15 minutes ahead.
        let expires_on: i64 = body["expires_on"].as_str().unwrap().parse().unwrap();
        let left = expires_on - time::OffsetDateTime::now_utc().unix_timestamp();
        assert!(left > 15 * 60, "{left} s left");
        let issued = entra
            .issued(body["access_token"].as_str().unwrap())
            .unwrap();
        assert_eq!(issued.client_id, mounted.identity.client_id);
        assert_eq!(issued.scope, format!("{ARM}/.default"));
        assert_eq!(issued.cert_sha256_hex, mounted.certificate.sha256_hex());
    }
    // Answered from the cache: one token request per identity and resource.
    assert_eq!(entra.token_requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_csi_rotation_the_tokens_served_come_from_the_new_certificate() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let mut a = Mounted::new(&entra);
    let identity = a.serve(&entra, Default::default()).await;
    let credential = identity.credential().clone();
    let server = start(vec![identity], ServeOptions::default()).await;
    let first = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(first.status, 200, "{first:?}");
    let before = entra
        .issued(first.body["access_token"].as_str().unwrap())
        .unwrap();
    assert_eq!(before.cert_sha256_hex, a.certificate.sha256_hex());
    let next = a.rotate(&entra);
    wait_for_certificate(&credential, &next, Duration::from_secs(20)).await;
    // The new credential fetches the served scopes ahead; wait for that request.
    entra
        .wait_for_token_requests(2, Duration::from_secs(20))
        .await;
    let after = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(after.status, 200, "{after:?}");
    let issued = entra
        .issued(after.body["access_token"].as_str().unwrap())
        .unwrap();
    assert_eq!(issued.cert_sha256_hex, next.sha256_hex());
    assert_ne!(after.body["access_token"], first.body["access_token"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_tokens_are_refreshed_fifteen_minutes_ahead() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    entra.use_clock(clock.clone());
    let a = Mounted::new(&entra);
    let client = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_clock(clock.clone()));
    let server = start(vec![a.serve(&entra, client).await], ServeOptions::default()).await;
    let ask = || raw(server.local_addr(), token_request(&server, ARM, "", SECRET));
    let left = |answer: &serving::Raw| {
        let expires_on: i64 = answer.body["expires_on"].as_str().unwrap().parse().unwrap();
        expires_on - clock.now().unix_timestamp()
    };
    let first = ask().await;
    assert_eq!(entra.token_requests(), 1);
    // 46 minutes on, a 3599 s token has 14 minutes left: inside the window (a 5-minute
    // window would still hand it out unrefreshed).
    clock.advance(Duration::from_secs(46 * 60));
    let stale = ask().await;
    assert_eq!(stale.body["access_token"], first.body["access_token"]);
    entra
        .wait_for_token_requests(2, Duration::from_secs(20))
        .await;
    let mut fresh = ask().await;
    for _ in 0..100 {
        if fresh.body["access_token"] != first.body["access_token"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        fresh = ask().await;
    }
    assert_ne!(fresh.body["access_token"], first.body["access_token"]);
    assert!(left(&fresh) > 55 * 60, "{} s left", left(&fresh));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_endpoint_refusal_is_passed_on_once_with_its_aadsts_code() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let a = Mounted::new(&entra);
    // Each scripted answer reaches the next request: no failure memory (tests/it/cache.rs).
    let client = msi_dataplane::ClientCertificateCredentialOptions::default()
        .with_failure_memory(std::time::Duration::ZERO);
    let server = start(vec![a.serve(&entra, client).await], ServeOptions::default()).await;
    entra.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "Client assertion contains an invalid signature.",
    ));
    let answer = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.body["error"], "AADSTS700027");
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        message.contains("AADSTS700027: Client assertion contains an invalid signature"),
        "{message}"
    );
    assert!(message.contains(&a.identity.client_id), "{message}");
    assert!(answer.header("retry-after").is_none());
    assert_eq!(
        entra.token_requests(),
        1,
        "not retried: a retry cannot mend it"
    );
    // A transient failure (after the server's own retry) is a 503 the clients retry.
    entra.enqueue(Scripted::status(503));
    entra.enqueue(Scripted::status(503));
    let answer = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.header("retry-after"), Some("5"));
    // And then a token.
    let answer = raw(server.local_addr(), token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_file_rotates_with_the_old_and_the_new_secret_accepted() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("serve-secret");
    let path = dir.join("identity-header");
    let (old, new) = ("old-secret-0123456789abcdef", "new-secret-0123456789abcdef");
    std::fs::write(&path, format!("{old}\n")).unwrap();
    let secret = IdentityHeaderSecret::from_file(&path).unwrap();
    let options = ServeOptions::default()
        .with_port(0)
        .with_secret_recheck(Duration::from_millis(50));
    let server = TokenServer::start(
        vec![a.serve(&entra, Default::default()).await],
        secret,
        options,
    )
    .await
    .unwrap();
    let status = |secret: &'static str| {
        let request = token_request(&server, ARM, "", secret);
        let addr = server.local_addr();
        async move { raw(addr, request).await.status }
    };
    assert_eq!((status(old).await, status(new).await), (200, 401));
    // The rotation: the new secret first, the previous one second.
    std::fs::write(&path, format!("{new}\n{old}\n")).unwrap();
    let mut seen = (0, 0);
    for _ in 0..200 {
        seen = (status(new).await, status(old).await);
        if seen == (200, 200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, (200, 200));
    // Done: the old one goes; a broken file keeps the last good secret.
    std::fs::write(&path, format!("{new}\n")).unwrap();
    for _ in 0..200 {
        if status(old).await == 401 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((status(new).await, status(old).await), (200, 401));
    std::fs::write(&path, "short\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(new).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_ready_while_every_credential_is_valid() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let a = Mounted::new(&entra);
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let options =
        ServeOptions::default().with_environment(Environment::default().with_clock(clock.clone()));
    let server = start(vec![a.serve(&entra, Default::default()).await], options).await;
    let host = server.local_addr();
    let health = |secret: &str| {
        let header = match secret {
            "" => String::new(),
            secret => format!("\r\nX-IDENTITY-HEADER: {secret}"),
        };
        raw(
            host,
            format!(
                "GET /healthz HTTP/1.1\r\nHost: localhost:{}{header}",
                host.port()
            ),
        )
    };
    // Without the secret: the status only, nothing about the identities.
    let anonymous = health("").await;
    assert_eq!(anonymous.status, 200, "{anonymous:?}");
    assert_eq!(anonymous.body, serde_json::json!({"status": "ready"}));
    let wrong = health("not-the-secret-0123456789").await;
    assert_eq!(wrong.body, serde_json::json!({"status": "ready"}));
    // With it: each identity's details.
    let ready = health(SECRET).await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.body["status"], "ready");
    assert_eq!(
        ready.body["identities"][0]["client_id"],
        a.identity.client_id.as_str()
    );
    assert_eq!(
        ready.body["identities"][0]["thumbprint_sha256"],
        a.certificate.sha256_hex().as_str()
    );
    clock.set(a.certificate.not_after() + time::Duration::seconds(1));
    let expired = health(SECRET).await;
    assert_eq!(expired.status, 503, "{expired:?}");
    assert_eq!(
        expired.body["identities"][0]["problem"],
        "credential_expired"
    );
    let anonymous = health("").await;
    assert_eq!(
        (anonymous.status, anonymous.body),
        (503, serde_json::json!({"status": "not_ready"}))
    );
}

#[tokio::test]
async fn only_loopback_addresses_are_listened_on() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let a = Mounted::new(&entra);
    let identity = a.serve(&entra, Default::default()).await;
    let secret = IdentityHeaderSecret::new(SECRET).unwrap();
    for addr in ["0.0.0.0:0", "10.1.2.3:50342", "[::]:0"] {
        let options = ServeOptions::default().with_listen(addr.parse().unwrap());
        let err = TokenServer::start(vec![identity.clone()], secret.clone(), options)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ServeError::NonLoopbackAddress { .. }),
            "{addr}: {err}"
        );
        assert!(err.to_string().contains("loopback"), "{err}");
    }
    let duplicate = TokenServer::start(
        vec![identity.clone(), identity.clone()],
        secret.clone(),
        ServeOptions::default().with_port(0),
    )
    .await
    .unwrap_err();
    assert_eq!(duplicate.code(), "duplicate_identity");
    let none = TokenServer::start(vec![], secret, ServeOptions::default().with_port(0))
        .await
        .unwrap_err();
    assert_eq!(none.code(), "no_identity");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_counts_cache_misses_only() {
    let entra = msi_dataplane_testing::EntraServer::start().await;
    let a = Mounted::new(&entra);
    // Two token endpoint requests a second, bursts of four.
    let options = ServeOptions::default().with_max_token_requests_per_second(Some(2));
    let server = start(vec![a.serve(&entra, Default::default()).await], options).await;
    let before = entra.requests().len();
    let mut statuses = Vec::new();
    for i in 0..10 {
        let resource = format!("api://rate-{i}");
        let answer = raw(
            server.local_addr(),
            token_request(&server, &resource, "", SECRET),
        )
        .await;
        if answer.status == 429 {
            assert_eq!(answer.header("retry-after"), Some("1"));
            assert_eq!(answer.body["statusCode"], 429);
        }
        statuses.push(answer.status);
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert!((4..=6).contains(&admitted), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(
        entra.requests().len() - before,
        admitted,
        "only admitted misses reach the token endpoint"
    );
    // The bucket is empty, yet a cached token is answered every time.
    for _ in 0..30 {
        let answer = raw(
            server.local_addr(),
            token_request(&server, "api://rate-0", "", SECRET),
        )
        .await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
}
