//! The Key Vault credential store (feature `keyvault`) against the test Key Vault: every
//! operation over HTTPS with the challenge, soft delete, purge, recover, the 409 of a held
//! name, paging across many pages, throttling, and what the vault rejects.
#![cfg(feature = "keyvault")]

use crate::support;

use std::sync::Arc;

use std::time::Duration;

use msi_dataplane::dataplane::ManagedIdentityCredentials;
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::{ErrorCategory, ErrorKind, RetryPolicy, keyvault};
use msi_dataplane_testing::KeyVaultServer;
use serde_json::json;
use support::entra::{EntraServer, Scripted};
use support::fixtures::{load, secret};
use support::harness::{credential, https_client, https_env};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";

struct Setup {
    _entra: EntraServer,
    vault: KeyVaultServer,
    store: CredentialStore,
}

fn quick_retry() -> RetryPolicy {
    RetryPolicy::default()
        .with_initial_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(10))
}

async fn setup() -> Setup {
    let entra = EntraServer::start().await;
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    let app = credential(&entra, "pem-pkcs8");
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(app),
        StoreOptions::default()
            .with_environment(https_env().with_retry_policy(quick_retry()))
            .verify_challenge_resource(false),
    )
    .unwrap();
    Setup {
        _entra: entra,
        vault,
        store,
    }
}

fn kind(e: &msi_dataplane::Error) -> &ErrorKind {
    e.kind()
}

#[tokio::test]
async fn put_then_get_round_trips_user_assigned_credentials_with_the_format_s_attributes() {
    let s = setup().await;
    let creds = load("rotation-1");
    let put = s
        .store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap();
    assert_eq!(put.name, format!("uamsi-{ID}"));
    assert!(put.version.is_some());
    let expected =
        keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds).unwrap();
    assert_eq!(put.not_before, Some(expected.attributes().not_before));
    assert_eq!(put.expires, Some(expected.attributes().expires));
    assert_eq!(put.tags, *expected.tags());

    // The challenge: the first request went without a token and without its body.
    let requests = s.vault.requests();
    assert_eq!(requests[0].status, 401);
    assert!(!requests[0].authorized);
    assert!(
        requests[0].body.is_empty(),
        "the unauthenticated try carries no secret"
    );
    let set = requests
        .iter()
        .find(|r| r.authorized && r.method == "PUT")
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(&set.body).unwrap();
    assert_eq!(body["attributes"]["enabled"], json!(true));
    assert_eq!(
        body["attributes"]["nbf"],
        json!(expected.attributes().not_before.unix_timestamp())
    );
    assert_eq!(
        body["attributes"]["exp"],
        json!(expected.attributes().expires.unix_timestamp())
    );
    assert_eq!(
        body["tags"]["renew_after"],
        json!(creds.renew_after.clone().unwrap())
    );

    let got = s.store.get_user_assigned_identity(ID, None).await.unwrap();
    assert_eq!(got.credentials, creds);
    assert_eq!(got.properties.version, put.version);
    // Secrets never print.
    let needle = secret("rotation-1");
    assert!(!format!("{got:?}").contains(&needle[..40]));
}

#[tokio::test]
async fn get_reads_the_latest_or_a_named_version_of_a_managed_identity() {
    let s = setup().await;
    let wrap = |name: &str| -> ManagedIdentityCredentials {
        let one = serde_json::to_value(load(name)).unwrap();
        serde_json::from_value(json!({ "explicit_identities": [one] })).unwrap()
    };
    let first = s
        .store
        .put_managed_identity("cluster-1", &wrap("rotation-1"))
        .await
        .unwrap();
    let second = s
        .store
        .put_managed_identity("cluster-1", &wrap("rotation-2"))
        .await
        .unwrap();
    assert_ne!(first.version, second.version);
    assert_eq!(s.vault.version_count("msi-cluster-1"), 2);

    let latest = s
        .store
        .get_managed_identity("cluster-1", None)
        .await
        .unwrap();
    assert_eq!(latest.credentials, wrap("rotation-2"));
    let old = s
        .store
        .get_managed_identity("cluster-1", first.version.as_deref())
        .await
        .unwrap();
    assert_eq!(old.credentials, wrap("rotation-1"));
    assert_eq!(old.properties.version, first.version);

    // Either kind by name.
    let any = s.store.get("msi-cluster-1", None).await.unwrap();
    assert!(matches!(
        any.credentials,
        msi_dataplane::keyvault::store::AnyCredentials::ManagedIdentity(_)
    ));
}

#[tokio::test]
async fn a_missing_secret_is_a_typed_404() {
    let s = setup().await;
    let err = s
        .store
        .get_user_assigned_identity("absent", None)
        .await
        .unwrap_err();
    match kind(&err) {
        ErrorKind::Service(e) => {
            assert_eq!(e.status, 404);
            assert_eq!(e.code.as_deref(), Some("SecretNotFound"));
            assert_eq!(e.request, "get of secret `uamsi-absent`");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(!err.is_transient());
}

#[tokio::test]
async fn soft_delete_holds_the_name_until_purged() {
    let s = setup().await;
    let creds = load("rotation-1");
    s.store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap();
    let name = format!("uamsi-{ID}");

    let deleted = s.store.delete(&name).await.unwrap();
    assert_eq!(deleted.properties.name, name);
    assert!(
        deleted
            .recovery_id
            .as_deref()
            .unwrap()
            .ends_with(&format!("/deletedsecrets/{name}"))
    );
    let (when, purge) = (
        deleted.deleted_date.unwrap(),
        deleted.scheduled_purge_date.unwrap(),
    );
    assert_eq!(purge - when, time::Duration::days(90));

    // Gone from reads and listings, present as deleted.
    assert!(matches!(
        kind(&s.store.get(&name, None).await.unwrap_err()),
        ErrorKind::Service(e) if e.status == 404
    ));
    assert!(s.store.list().await.unwrap().is_empty());
    assert_eq!(
        s.store.get_deleted(&name).await.unwrap().recovery_id,
        deleted.recovery_id
    );

    // The name is held: a typed error that says what to do.
    let err = s
        .store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap_err();
    assert!(
        matches!(kind(&err), ErrorKind::Service(e) if e.status == 409 && e.request.ends_with(&format!("`{name}`"))),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("purge") && text.contains("recover"), "{text}");

    s.store.purge_deleted(&name).await.unwrap();
    assert!(matches!(
        kind(&s.store.get_deleted(&name).await.unwrap_err()),
        ErrorKind::Service(e) if e.status == 404
    ));
    s.store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap();
    assert_eq!(s.vault.version_count(&name), 1, "purged versions are gone");
}

#[tokio::test]
async fn recover_brings_back_every_version() {
    let s = setup().await;
    s.store
        .put_user_assigned_identity(ID, &load("rotation-1"))
        .await
        .unwrap();
    s.store
        .put_user_assigned_identity(ID, &load("rotation-2"))
        .await
        .unwrap();
    let name = format!("uamsi-{ID}");
    s.store.delete(&name).await.unwrap();
    let recovered = s.store.recover_deleted(&name).await.unwrap();
    assert_eq!(recovered.name, name);
    assert_eq!(s.vault.version_count(&name), 2);
    let got = s.store.get_user_assigned_identity(ID, None).await.unwrap();
    assert_eq!(got.credentials, load("rotation-2"));
    assert!(matches!(
        kind(&s.store.get_deleted(&name).await.unwrap_err()),
        ErrorKind::Service(e) if e.status == 404
    ));
}

#[tokio::test]
async fn list_follows_next_link_across_many_pages_without_reading_values() {
    let s = setup().await;
    s.vault.set_page_size(7);
    let tags = json!({"renew_after": "2036-01-01T00:00:00Z", "cannot_renew_after": "2046-01-01T00:00:00Z"});
    for i in 0..40 {
        s.vault.seed(
            &format!("uamsi-id-{i:03}"),
            "{\"secret\":\"VALUE-NEEDLE\"}",
            tags.clone(),
            1_700_000_000,
            2_400_000_000,
        );
    }
    for i in 0..5 {
        s.vault.seed(
            &format!("msi-cluster-{i}"),
            "{}",
            tags.clone(),
            1_700_000_000,
            2_400_000_000,
        );
        s.vault.seed(
            &format!("other-{i}"),
            "x",
            json!({}),
            1_700_000_000,
            2_400_000_000,
        );
    }
    let listed = s.store.list().await.unwrap();
    assert_eq!(
        listed.len(),
        45,
        "msi- and uamsi- secrets only, across every page"
    );
    assert!(
        listed
            .iter()
            .all(|p| p.tags["renew_after"] == "2036-01-01T00:00:00Z")
    );
    assert_eq!(listed[0].expires.unwrap().unix_timestamp(), 2_400_000_000);
    let pages: Vec<_> = s
        .vault
        .requests()
        .into_iter()
        .filter(|r| r.authorized)
        .collect();
    assert_eq!(
        pages.len(),
        50usize.div_ceil(7),
        "one request per page of 7"
    );
    assert!(
        pages
            .iter()
            .all(|r| r.path == "/secrets" && r.status == 200)
    );
    assert!(
        pages[1..]
            .iter()
            .all(|r| r.query.iter().any(|(k, _)| k == "$skiptoken"))
    );
    assert!(
        pages
            .iter()
            .all(|r| r.query.iter().any(|(k, v)| k == "maxresults" && v == "25"))
    );
}

#[tokio::test]
async fn throttling_and_unavailability_are_retried_with_retry_after() {
    let s = setup().await;
    // Authenticate first, so the scripted answers meet authorized requests.
    s.store.list().await.unwrap();
    s.vault.enqueue(
        Scripted::status(429)
            .retry_after("0")
            .body(r#"{"error":{"code":"Throttled","message":"slow down"}}"#),
    );
    s.vault.enqueue(Scripted::status(503).retry_after("0"));
    s.store
        .put_user_assigned_identity(ID, &load("rotation-1"))
        .await
        .unwrap();
    let statuses: Vec<u16> = s
        .vault
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 503, 200]);

    // Past the retries: a typed, transient error with Key Vault's code.
    for _ in 0..4 {
        s.vault.enqueue(
            Scripted::status(429)
                .retry_after("0")
                .body(r#"{"error":{"code":"Throttled","message":"slow down"}}"#),
        );
    }
    let err = s
        .store
        .get_user_assigned_identity(ID, None)
        .await
        .unwrap_err();
    assert!(
        matches!(kind(&err), ErrorKind::Service(e) if e.status == 429 && e.code.as_deref() == Some("Throttled")),
        "{err:?}"
    );
    assert!(err.is_transient());
}

#[tokio::test]
async fn the_sdk_s_challenge_resource_check_refuses_a_vault_on_another_host() {
    let entra = EntraServer::start().await;
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(credential(&entra, "pem-pkcs8")),
        StoreOptions::default().with_environment(https_env()),
    )
    .unwrap();
    let err = store.list().await.unwrap_err();
    assert!(err.to_string().contains("doesn't match"), "{err}");
    assert!(
        vault.requests().iter().all(|r| !r.authorized),
        "no token was sent"
    );
    assert_eq!(entra.token_requests(), 0, "no token was even asked for");
}

#[tokio::test]
async fn bad_names_fail_before_anything_is_sent() {
    let s = setup().await;
    let err = s.store.get("uamsi-bad_name", None).await.unwrap_err();
    assert!(
        matches!(
            kind(&err),
            ErrorKind::Config {
                code: "invalid_secret_name",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(s.vault.requests().is_empty());
    let err = CredentialStore::new(
        "http://vault.example/",
        Arc::new(credential(&s._entra, "pem-pkcs8")),
        StoreOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(
        kind(&err),
        ErrorKind::Config {
            code: "invalid_argument",
            field: "vault_url",
            ..
        }
    ));
    // The caller's URL: the program's configuration, not the credential file.
    assert_eq!(err.category(), ErrorCategory::Configuration);
}

/// The test vault rejects what Key Vault rejects, for any client.
#[tokio::test]
async fn the_test_vault_rejects_no_token_missing_api_version_and_bad_names() {
    let s = setup().await;
    s.store.list().await.unwrap();
    let http = https_client();
    let base = s.vault.url();
    // No token: 401 with the challenge naming the tenant and resource.
    let r = http
        .get(format!("{base}secrets?api-version=2025-07-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains(&format!("login.microsoftonline.com/{TENANT}")));
    assert!(challenge.contains(r#"resource="https://vault.azure.net""#));
    // A token the Entra server never issued.
    let r = http
        .get(format!("{base}secrets?api-version=2025-07-01"))
        .bearer_auth("forged")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // With a real token: no api-version, a bad name, a too large page.
    let entra = &s._entra;
    let app = credential(entra, "pem-pkcs8");
    let token = app.get_token(&[KeyVaultServer::SCOPE]).await.unwrap();
    let get = |path: &str| {
        http.get(format!("{base}{path}"))
            .bearer_auth(token.token())
            .send()
    };
    assert_eq!(get("secrets").await.unwrap().status(), 400);
    let r = get("secrets/bad_name?api-version=2025-07-01")
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("BadParameter"));
    assert_eq!(
        get(&format!(
            "secrets/{}?api-version=2025-07-01",
            "a".repeat(128)
        ))
        .await
        .unwrap()
        .status(),
        400
    );
    assert_eq!(
        get("secrets?api-version=2025-07-01&maxresults=26")
            .await
            .unwrap()
            .status(),
        400
    );
    // A token for another audience.
    let arm = app.get_token(&[support::harness::ARM]).await.unwrap();
    let r = http
        .get(format!("{base}secrets?api-version=2025-07-01"))
        .bearer_auth(arm.token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn list_deleted_follows_next_link_across_many_pages_without_reading_values() {
    let s = setup().await;
    s.vault.set_page_size(4);
    let tags = json!({"renew_after": "2036-01-01T00:00:00Z", "cannot_renew_after": "2046-01-01T00:00:00Z"});
    let mut names = Vec::new();
    for i in 0..10 {
        names.push(format!("uamsi-gone-{i:02}"));
    }
    names.push("msi-cluster-gone".to_owned());
    names.push("other-gone".to_owned());
    for name in &names {
        s.vault.seed(
            name,
            "{\"secret\":\"VALUE-NEEDLE\"}",
            tags.clone(),
            1_700_000_000,
            2_400_000_000,
        );
    }
    // One that stays: not listed as deleted.
    s.vault.seed(
        "uamsi-kept",
        "{}",
        tags.clone(),
        1_700_000_000,
        2_400_000_000,
    );
    for name in &names {
        s.store.delete(name).await.unwrap();
    }
    s.vault.clear_requests();

    let deleted = s.store.list_deleted().await.unwrap();
    let listed: Vec<&str> = deleted.iter().map(|d| d.properties.name.as_str()).collect();
    let mut expected: Vec<&str> = names[..11].iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(
        listed, expected,
        "msi- and uamsi- deleted secrets only, every page"
    );
    for d in &deleted {
        let name = &d.properties.name;
        assert!(
            d.recovery_id
                .as_deref()
                .is_some_and(|r| r.ends_with(&format!("/deletedsecrets/{name}"))),
            "{d:?}"
        );
        let (when, purge) = (d.deleted_date.unwrap(), d.scheduled_purge_date.unwrap());
        assert_eq!(purge - when, time::Duration::days(90));
        assert_eq!(d.properties.tags["renew_after"], "2036-01-01T00:00:00Z");
        assert_eq!(
            d.properties.expires.unwrap().unix_timestamp(),
            2_400_000_000
        );
    }
    // 12 deleted secrets in pages of 4: three pages, linked by nextLink.
    let pages = s.vault.requests();
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(
        pages
            .iter()
            .all(|r| r.path == "/deletedsecrets" && r.status == 200 && r.authorized)
    );
    assert!(
        pages[1..]
            .iter()
            .all(|r| r.query.iter().any(|(k, _)| k == "$skiptoken"))
    );
    // The vault's own view agrees.
    assert_eq!(s.vault.deleted_secrets().len(), 12);
    assert_eq!(s.vault.secrets().len(), 1);

    // Recovered or purged secrets leave the deleted listing.
    s.store.purge_deleted("uamsi-gone-00").await.unwrap();
    s.store.recover_deleted("uamsi-gone-01").await.unwrap();
    let after = s.store.list_deleted().await.unwrap();
    assert_eq!(after.len(), 9);
    assert!(
        after
            .iter()
            .all(|d| d.properties.name != "uamsi-gone-00" && d.properties.name != "uamsi-gone-01")
    );
}

#[tokio::test]
async fn the_put_body_carries_the_formatted_value_content_type_and_both_tags() {
    let s = setup().await;
    let creds = load("rotation-1");
    s.store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap();
    let expected =
        keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds).unwrap();
    let set = s
        .vault
        .requests()
        .into_iter()
        .find(|r| r.authorized && r.method == "PUT")
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(&set.body).unwrap();
    assert_eq!(body["value"], json!(expected.value().expose_secret()));
    assert_eq!(body["contentType"], json!("application/json"));
    assert_eq!(body["tags"], json!(expected.tags()));
    assert_eq!(body["attributes"]["enabled"], json!(true));
}

#[tokio::test]
async fn a_large_answer_is_read_whole_and_one_past_the_limit_is_refused() {
    let s = setup().await;
    let creds = load("rotation-1");
    let put = s
        .store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap();
    // 600 KB: many TLS records, many body chunks, all of them kept.
    let answer = json!({
        "value": creds.to_json().unwrap(),
        "id": format!("{}secrets/uamsi-{ID}/{}", s.vault.url(), put.version.clone().unwrap()),
        "attributes": {"enabled": true},
        "padding": "x".repeat(600_000),
    });
    s.vault
        .enqueue(Scripted::status(200).body(&answer.to_string()));
    let got = s.store.get_user_assigned_identity(ID, None).await.unwrap();
    assert_eq!(got.credentials, creds);
    assert_eq!(got.properties.version, put.version);

    // 2 MB, on every try: a typed error, not a truncated value, after one download (the
    // same answer would come again, so it is not retried).
    let huge = format!(r#"{{"value":"{}"}}"#, "x".repeat(2 * 1024 * 1024));
    for _ in 0..4 {
        s.vault.enqueue(Scripted::status(200).body(&huge));
    }
    s.vault.clear_requests();
    let err = s
        .store
        .get_user_assigned_identity(ID, None)
        .await
        .unwrap_err();
    assert!(
        matches!(kind(&err), ErrorKind::InvalidAnswer { code: "invalid_key_vault_response", message }
            if message.starts_with("Key Vault get: ") && message.contains("exceeds")),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let gets = s
        .vault
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.authorized)
        .count();
    assert_eq!(gets, 1, "downloads of the oversized answer");
}

#[tokio::test]
async fn an_unreadable_put_answer_is_a_typed_error_without_the_value() {
    let s = setup().await;
    let creds = load("rotation-1");
    let secret_b64 = creds
        .client_secret
        .as_ref()
        .unwrap()
        .expose_secret()
        .to_owned();
    // An answer that is not the "Set Secret" JSON: a typed error naming the secret, with
    // neither the sent value nor the answer's bytes in it.
    let answer = format!(r#"{{"value":"{secret_b64}","attributes":"#);
    s.vault.enqueue(Scripted::status(200).body(&answer));
    let err = s
        .store
        .put_user_assigned_identity(ID, &creds)
        .await
        .unwrap_err();
    assert!(
        matches!(kind(&err), ErrorKind::InvalidAnswer { code: "invalid_stored_secret", message }
            if message.contains(&format!("`uamsi-{ID}`")) && message.contains("cannot be read")),
        "{err:?}"
    );
    for text in [format!("{err}"), format!("{err:?}")] {
        assert!(!text.contains(&secret_b64[..40]), "{text}");
    }
}

// ---------------------------------------------------------------------------------------
// a hostile or broken vault
// ---------------------------------------------------------------------------------------

/// The operation and fault of a Key Vault `RefusedLink` error.
/// A refused link's operation and why (`Key Vault {operation} stopped: {why}`).
fn refused(err: &msi_dataplane::Error) -> (String, String) {
    assert_eq!(err.kind().code(), "refused_link", "{err:?}");
    let message = err.to_string();
    let rest = message.strip_prefix("Key Vault ").unwrap();
    let (operation, why) = rest.split_once(" stopped: ").unwrap();
    (operation.to_owned(), why.to_owned())
}

/// Listing requests the vault received (authorized, so each one carried the token).
fn listing_requests(vault: &KeyVaultServer) -> usize {
    vault
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/secrets" && r.authorized)
        .count()
}

#[tokio::test]
async fn a_next_link_that_loops_ends_the_listing_with_a_typed_error() {
    let s = setup().await;
    let page =
        json!({"value": [], "nextLink": format!("{}secrets?$skiptoken=again", s.vault.url())});
    for _ in 0..50 {
        s.vault
            .enqueue(Scripted::status(200).body(&page.to_string()));
    }
    s.vault.clear_requests();
    let err = s.store.list().await.unwrap_err();
    assert!(
        matches!(refused(&err), (op, why) if op == "list" && why.contains("repeats one already followed")),
        "{err:?}"
    );
    assert!(!err.is_transient());
    // The first page and the one link, once: the repeat is refused before it is sent.
    assert_eq!(listing_requests(&s.vault), 2);
}

#[tokio::test]
async fn a_next_link_to_another_host_is_refused_before_anything_is_sent() {
    let s = setup().await;
    // A listener that counts connections: the vault's token must never reach it.
    let foreign = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    foreign.set_nonblocking(true).unwrap();
    let port = foreign.local_addr().unwrap().port();
    for next in [
        format!("https://127.0.0.1:{port}/secrets?$skiptoken=x"),
        format!(
            "https://localhost:{}/secrets?$skiptoken=x",
            s.vault.addr().port()
        ),
        format!("http://{}/secrets?$skiptoken=x", s.vault.addr()),
    ] {
        let page = json!({"value": [], "nextLink": next});
        s.vault
            .enqueue(Scripted::status(200).body(&page.to_string()));
        s.vault.clear_requests();
        let err = s.store.list().await.unwrap_err();
        assert!(
            refused(&err).1.contains("not to the service's own origin"),
            "{next}: {err:?}"
        );
        assert!(
            err.to_string().contains("not to the service's own origin"),
            "{err}"
        );
        s.vault
            .enqueue(Scripted::status(200).body(&page.to_string()));
        let err = s.store.list_deleted().await.unwrap_err();
        assert!(
            matches!(refused(&err), (op, why) if op == "list deleted" && why.contains("own origin")),
            "{next}: {err:?}"
        );
    }
    assert!(
        matches!(foreign.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the foreign host was contacted"
    );
}

#[tokio::test]
async fn a_listing_stops_at_its_page_limit() {
    let s = setup().await;
    for i in 0..5 {
        s.vault.seed(
            &format!("uamsi-{i}"),
            "{}",
            json!({}),
            1_700_000_000,
            32_503_680_000,
        );
    }
    s.vault.set_page_size(1);
    let store_reading = |max_list_pages| {
        CredentialStore::new(
            &s.vault.url(),
            Arc::new(credential(&s._entra, "pem-pkcs8")),
            StoreOptions::default()
                .with_environment(https_env())
                .verify_challenge_resource(false)
                .with_max_list_pages(max_list_pages),
        )
        .unwrap()
    };
    let store = store_reading(3);
    s.vault.clear_requests();
    let err = store.list().await.unwrap_err();
    assert!(refused(&err).1.contains("more than 3 pages"), "{err:?}");
    assert_eq!(listing_requests(&s.vault), 3);
    // Within the limit, the same listing is read whole.
    assert_eq!(store_reading(5).list().await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_listing_is_bounded_in_items_bytes_and_time() {
    let s = setup().await;
    for i in 0..5 {
        s.vault.seed(
            &format!("uamsi-{i}"),
            "{}",
            json!({"renew_after": "x".repeat(1000)}),
            1_700_000_000,
            32_503_680_000,
        );
    }
    s.vault.set_page_size(2);
    let store_with = |options: StoreOptions| {
        CredentialStore::new(
            &s.vault.url(),
            Arc::new(credential(&s._entra, "pem-pkcs8")),
            options
                .with_environment(https_env())
                .verify_challenge_resource(false),
        )
        .unwrap()
    };
    // Items: the first three are handed as their pages arrive, then the listing stops.
    let store = store_with(StoreOptions::default().with_max_list_items(3));
    let mut handed = Vec::new();
    let err = store.list_with(|p| handed.push(p.name)).await.unwrap_err();
    assert!(refused(&err).1.contains("more than 3 items"), "{err:?}");
    assert_eq!(handed.len(), 3, "{handed:?}");
    assert!(store.list().await.is_err());
    // Bytes: each item carries a 1,000-byte tag; 2,500 bytes hold two.
    let store = store_with(StoreOptions::default().with_max_list_bytes(2_500));
    let err = store.list().await.unwrap_err();
    assert!(refused(&err).1.contains("more than 2500 bytes"), "{err:?}");
    // Time: a vault that takes 3 s for a page, against a deadline of 300 ms.
    let store = store_with(StoreOptions::default().with_list_deadline(Duration::from_millis(300)));
    s.vault.enqueue(
        Scripted::status(200)
            .body(r#"{"value":[]}"#)
            .delayed(Duration::from_secs(3)),
    );
    let started = std::time::Instant::now();
    let err = store.list().await.unwrap_err();
    assert!(refused(&err).1.contains("did not end within"), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Within the limits, the whole listing.
    assert_eq!(
        store_with(StoreOptions::default())
            .list()
            .await
            .unwrap()
            .len(),
        5
    );
}

#[tokio::test]
async fn vault_error_text_is_bounded_and_escaped() {
    let s = setup().await;
    // JSON escapes: the vault's code holds a newline, ESC and BEL once decoded.
    let forged = r"Forbidden\nINFO forged line\u001b]0;title\u0007\u001b[2J";
    let body = format!(
        r#"{{"error":{{"code":"{forged}","message":"{forged} {}"}}}}"#,
        "M".repeat(200_000)
    );
    s.vault.enqueue(Scripted::status(403).body(&body));
    let err = s
        .store
        .get_value(&format!("uamsi-{ID}"), None)
        .await
        .unwrap_err();
    let ErrorKind::Service(answer) = kind(&err) else {
        panic!("{err:?}")
    };
    assert_eq!(answer.status, 403);
    let (Some(code), Some(message)) = (&answer.code, &answer.message) else {
        panic!("{err:?}")
    };
    assert!(
        code.starts_with("Forbidden\\nINFO forged line\\u{1b}]0;title"),
        "{code}"
    );
    assert!(message.len() < 600, "{} bytes", message.len());
    let text = err.to_string();
    assert!(!text.contains(['\n', '\u{1b}', '\u{7}']), "{text:?}");
    assert!(text.len() < 2_000, "{} bytes", text.len());
}

#[tokio::test]
async fn listed_names_that_key_vault_would_refuse_are_skipped() {
    let s = setup().await;
    let url = s.vault.url();
    let page = json!({"value": [
        {"id": format!("{url}secrets/uamsi-good"), "attributes": {"enabled": true}},
        {"id": format!("{url}secrets/uamsi-\u{1b}]0;pwned\u{7}\u{1b}[2J"), "attributes": {"enabled": true}},
        {"id": format!("{url}secrets/uamsi-{}", "a".repeat(200)), "attributes": {"enabled": true}},
    ]});
    s.vault
        .enqueue(Scripted::status(200).body(&page.to_string()));
    let listed = s.store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["uamsi-good"]);
}

#[tokio::test]
async fn a_listing_that_does_not_decode_quotes_none_of_its_values() {
    let s = setup().await;
    let url = s.vault.url();
    let page = format!(
        r#"{{"value":[{{"id":"{url}secrets/uamsi-a","attributes":{{"enabled":"VALUE-FROM-THE-VAULT"}}}}]}}"#
    );
    s.vault.enqueue(Scripted::status(200).body(&page));
    let err = s.store.list().await.unwrap_err();
    assert!(
        matches!(kind(&err), ErrorKind::InvalidAnswer { code: "invalid_key_vault_response", message }
            if message.starts_with("Key Vault list: ") && message.contains("line 1")),
        "{err:?}"
    );
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("VALUE-FROM-THE-VAULT"), "{text}");
    }
}

#[tokio::test]
async fn a_secret_version_must_be_key_vault_s_form() {
    let s = setup().await;
    s.vault.clear_requests();
    for version in [
        "../../secrets/other",
        "0123",
        "0123456789abcdef0123456789abcdeg",
        "a/b",
    ] {
        let err = s
            .store
            .get_value(&format!("uamsi-{ID}"), Some(version))
            .await
            .unwrap_err();
        assert!(
            matches!(
                kind(&err),
                ErrorKind::Config {
                    code: "invalid_argument",
                    field: "version",
                    ..
                }
            ),
            "{version}: {err:?}"
        );
        assert_eq!(err.category(), ErrorCategory::Configuration, "{version}");
    }
    assert!(
        s.vault.requests().is_empty(),
        "nothing is sent for a bad version"
    );
    // The real form reaches the vault (which has no such secret).
    let err = s
        .store
        .get_value(
            &format!("uamsi-{ID}"),
            Some("0123456789abcdef0123456789ABCDEF"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            kind(&err),
            ErrorKind::Service(e) if e.status == 404
        ),
        "{err:?}"
    );
}
