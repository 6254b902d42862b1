//! `ClientCertificateCredential` as an `azure_core::credentials::TokenCredential`, driven
//! the way an Azure SDK client drives it: through azure_core's own
//! `BearerTokenAuthorizationPolicy` in an `azure_core::http::Pipeline`, against a loopback
//! HTTPS resource service that accepts only tokens the Entra-compatible test server issued.
//!
//! The pipeline's transport is azure_core's own `HttpClient` for reqwest (its `reqwest`
//! feature, enabled for the tests only: the library leaves azure_core without HTTP or TLS
//! features) over a client trusting only the test CA. The resource service is the kit's
//! `ResourceServer`, HTTPS because `BearerTokenAuthorizationPolicy` refuses to put a token
//! on a non-`https` request.
#![cfg(feature = "azure_core")]

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::azure_sdk::{get, pipeline, url};
use azure_core::credentials::{self, TokenCredential, TokenRequestOptions};
use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::http::StatusCode;
use msi_dataplane::{
    ErrorKind, ManualClock, ReloadOptions, ReloadStatus, UserAssignedIdentityCredential,
};
use msi_dataplane_testing::{ResourceRequest, ResourceServer};
use support::atomic_writer::AtomicDir;
use support::entra::{EntraServer, Scripted, TokenShape};
use support::fixtures::load_with_endpoint;
use support::harness::{
    ARM, credential, credential_with, https_env, leaf_sha256_hex, options, register,
};

fn source_chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut chain = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    chain
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn pipeline_presents_a_token_entra_issued() {
    let entra = EntraServer::start().await;
    let resource = ResourceServer::start(&entra, ARM).await;
    let cred = credential(&entra, "pem-pkcs8");
    let client_id = cred.client_id().to_owned();
    let pipeline = pipeline(Arc::new(cred));

    let response = get(&pipeline, &url(&resource, "/subscriptions"))
        .await
        .unwrap_or_else(|e| panic!("pipeline: {e} ({:?})", source_chain(&e)));
    assert_eq!(response.status(), StatusCode::Ok);
    assert_eq!(
        response.into_body().into_string().unwrap(),
        r#"{"value":[]}"#
    );

    let seen = resource.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/subscriptions");
    assert_eq!(seen[0].status, 200);
    let token = seen[0].bearer_token.as_deref().expect("a bearer token");
    let issued = entra.issued(token).expect("issued by the Entra server");
    assert_eq!(issued.scope, ARM);
    assert_eq!(issued.client_id, client_id);
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("pem-pkcs8"));
    assert_eq!(entra.token_requests(), 1);
}

#[tokio::test]
async fn sequential_requests_all_succeed_with_issued_tokens() {
    let entra = EntraServer::start().await;
    let resource = ResourceServer::start(&entra, ARM).await;
    let cred: Arc<dyn TokenCredential> = Arc::new(credential(&entra, "pfx-aes"));
    // Two pipelines (two SDK clients) sharing one credential.
    let pipelines = [pipeline(cred.clone()), pipeline(cred)];

    for i in 0..6 {
        let response = get(&pipelines[i % 2], &url(&resource, &format!("/r/{i}")))
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e} ({:?})", source_chain(&e)));
        assert_eq!(response.status(), StatusCode::Ok, "request {i}");
    }

    let seen = resource.requests();
    assert_eq!(seen.len(), 6, "{seen:?}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.path, format!("/r/{i}"));
        assert_eq!(s.status, 200);
        let issued = entra
            .issued(s.bearer_token.as_deref().expect("a bearer token"))
            .unwrap_or_else(|| panic!("request {i}: token not issued by the server"));
        assert_eq!(issued.scope, ARM);
        assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("pfx-aes"));
    }
    // Each policy keeps its token: at most one token request per pipeline, whatever
    // caching the credential does on its own.
    let requests = entra.token_requests();
    assert!((1..=2).contains(&requests), "{requests} token requests");
}

#[tokio::test]
async fn expired_credential_fails_the_call_with_a_credential_error() {
    let entra = EntraServer::start().await;
    let resource = ResourceServer::start(&entra, ARM).await;
    let pipeline = pipeline(Arc::new(credential(&entra, "expired")));

    let err = get(&pipeline, &url(&resource, "/subscriptions"))
        .await
        .expect_err("an expired credential cannot authorize a request");
    assert_eq!(err.kind(), &AzureErrorKind::Credential, "{err:?}");
    let chain = source_chain(&err);
    assert!(chain.iter().any(|m| m.contains("expired")), "{chain:?}");
    let ours = err
        .downcast_ref::<msi_dataplane::Error>()
        .expect("our error is the source");
    assert!(matches!(ours.kind(), ErrorKind::Expired { .. }), "{ours:?}");
    assert!(
        resource.requests().is_empty(),
        "no request reached the service"
    );
    assert_eq!(entra.token_requests(), 0, "checked before any network call");
}

#[tokio::test]
async fn token_endpoint_rejection_fails_the_call_with_a_credential_error() {
    let entra = EntraServer::start().await;
    let resource = ResourceServer::start(&entra, ARM).await;
    let pipeline = pipeline(Arc::new(credential(&entra, "pem-pkcs8")));
    entra.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "AADSTS700027: Client assertion failed signature validation.",
    ));

    let err = get(&pipeline, &url(&resource, "/subscriptions"))
        .await
        .expect_err("the token request was refused");
    assert_eq!(err.kind(), &AzureErrorKind::Credential, "{err:?}");
    let ours = err
        .downcast_ref::<msi_dataplane::Error>()
        .expect("our error is the source");
    let ErrorKind::TokenEndpoint(e) = ours.kind() else {
        panic!("{ours:?}")
    };
    assert_eq!(e.aadsts_code(), Some(700027));
    assert!(err.to_string().contains("AADSTS700027"), "{err}");
    assert!(resource.requests().is_empty());
}

#[tokio::test]
async fn expires_on_is_mapped_exactly() {
    let entra = EntraServer::start().await;
    entra.set_token_shape(TokenShape {
        expires_in: 4321,
        ext_expires_in: Some(4321),
        ..Default::default()
    });
    // A fixed clock makes the expected expiry exact: the time of the request plus
    // `expires_in`, to the nanosecond.
    let at = time::OffsetDateTime::now_utc();
    let cred = credential_with(
        &entra,
        "pem-pkcs8",
        options().with_environment(https_env().with_clock(Arc::new(ManualClock::new(at)))),
    );
    let dyn_cred: Arc<dyn TokenCredential> = Arc::new(cred.clone());

    let token: credentials::AccessToken = dyn_cred
        .get_token(&[ARM], Some(TokenRequestOptions::default()))
        .await
        .expect("token");
    assert_eq!(token.expires_on, at + time::Duration::seconds(4321));
    let issued = entra
        .issued(token.token.secret())
        .expect("issued by the Entra server");
    assert_eq!(issued.expires_in, 4321);
    assert_eq!(issued.scope, ARM);

    // The same as the crate's own token (whether or not it came from a cache).
    let ours = cred.get_token(&[ARM]).await.expect("token");
    assert_eq!(ours.expires_on(), token.expires_on);
}

/// The resource service really checks tokens: one the Entra server did not issue is
/// refused, and the pipeline reports the 401.
#[tokio::test]
async fn resource_refuses_a_token_entra_did_not_issue() {
    #[derive(Debug)]
    struct Forged;

    #[async_trait::async_trait]
    impl TokenCredential for Forged {
        async fn get_token(
            &self,
            _scopes: &[&str],
            _options: Option<TokenRequestOptions<'_>>,
        ) -> azure_core::Result<credentials::AccessToken> {
            Ok(credentials::AccessToken::new(
                "forged.token.value",
                time::OffsetDateTime::now_utc() + time::Duration::hours(1),
            ))
        }
    }

    let entra = EntraServer::start().await;
    let resource = ResourceServer::start(&entra, ARM).await;
    let pipeline = pipeline(Arc::new(Forged));
    let err = get(&pipeline, &url(&resource, "/subscriptions"))
        .await
        .expect_err("401");
    assert_eq!(err.http_status(), Some(StatusCode::Unauthorized), "{err:?}");
    let seen = resource.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].bearer_token.as_deref(), Some("forged.token.value"));
    assert_eq!(seen[0].status, 401);
}

/// A failing azure_core credential behind `AzureTokenCredential`: the error is
/// `ErrorKind::External`, its message escaped, and the credential's own error is its
/// source (down to the cause the credential carried), so a caller can `downcast_ref` it.
#[tokio::test]
async fn an_external_credential_failure_keeps_its_error_as_the_source() {
    #[derive(Debug)]
    struct Refusing;

    #[async_trait::async_trait]
    impl TokenCredential for Refusing {
        async fn get_token(
            &self,
            _scopes: &[&str],
            _options: Option<TokenRequestOptions<'_>>,
        ) -> azure_core::Result<credentials::AccessToken> {
            Err(azure_core::Error::with_error(
                AzureErrorKind::Credential,
                std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no token file"),
                "managed identity unavailable\nforged: line",
            ))
        }
    }

    use msi_dataplane::dataplane::{AzureTokenCredential, TokenSource};
    let source = AzureTokenCredential(Arc::new(Refusing));
    let err = source.token(ARM, "tenant").await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::External { .. }), "{err:?}");
    assert_eq!(err.kind().code(), "external_credential");
    assert!(
        err.to_string()
            .contains("managed identity unavailable\\nforged: line"),
        "{err}"
    );
    let kept = std::error::Error::source(&err).expect("the credential's error is the source");
    let azure = kept
        .downcast_ref::<azure_core::Error>()
        .expect("the azure_core error itself");
    assert_eq!(*azure.kind(), AzureErrorKind::Credential);
    assert_eq!(
        source_chain(&err).last().map(String::as_str),
        Some("no token file"),
        "{:?}",
        source_chain(&err)
    );
}

/// The reloading credential as an SDK client's credential, through a CSI-style rotation.
///
/// azure_core's `BearerTokenAuthorizationPolicy` keeps the token it got until close to its
/// expiry, so a client built before the rotation goes on presenting its (still valid)
/// token; a token the credential hands out after the swap, as to a client built then, is
/// signed with the rotated certificate.
#[tokio::test]
async fn reloading_credential_follows_a_rotation_through_the_pipeline() {
    let entra = EntraServer::start().await;
    for name in ["rotation-1", "rotation-2"] {
        register(&entra, name);
    }
    let json = |name| {
        load_with_endpoint(name, &entra.base_url())
            .to_json()
            .unwrap()
            .into_bytes()
    };
    let mut dir = AtomicDir::new("uami", &json("rotation-1"));
    let reloading = UserAssignedIdentityCredential::new(
        dir.visible_path(),
        options(),
        ReloadOptions::default().with_debounce(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    let mut status = reloading.subscribe();
    let reloading = Arc::new(reloading);
    let resource = ResourceServer::start(&entra, ARM).await;
    let pipeline = pipeline(reloading.clone() as Arc<dyn TokenCredential>);

    let signed_by = |seen: &ResourceRequest| {
        let token = seen.bearer_token.as_deref().expect("bearer token");
        entra.issued(token).expect("issued").cert_sha256_hex
    };
    let response = get(&pipeline, &url(&resource, "/before")).await.unwrap();
    assert_eq!(response.status(), StatusCode::Ok);
    assert_eq!(
        signed_by(&resource.requests()[0]),
        leaf_sha256_hex("rotation-1")
    );

    let rotated_at = Instant::now();
    dir.rotate(&json("rotation-2"));
    let deadline = Duration::from_secs(5);
    let swapped = |s: &ReloadStatus| s.reloads >= 1;
    tokio::time::timeout(deadline, status.wait_for(swapped))
        .await
        .unwrap_or_else(|_| panic!("no swap {:?} after the rotation", rotated_at.elapsed()))
        .unwrap();

    let response = get(&pipeline, &url(&resource, "/same-client"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::Ok);
    let new_client = crate::azure_sdk::pipeline(reloading.clone() as Arc<dyn TokenCredential>);
    let response = get(&new_client, &url(&resource, "/new-client"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::Ok);

    let seen = resource.requests();
    let paths: Vec<_> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["/before", "/same-client", "/new-client"]);
    assert_eq!(
        seen[1].bearer_token, seen[0].bearer_token,
        "the policy's cached token"
    );
    assert_eq!(signed_by(&seen[2]), leaf_sha256_hex("rotation-2"));
}
