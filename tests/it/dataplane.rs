//! The MSI data plane client against the test data plane (`msi_dataplane_testing::DataPlaneServer`),
//! whose tokens come from the test Entra server: the four operations on the wire, the
//! challenge flow, tenants, scripted errors, and the types' serde round trips.

use crate::support;

use std::time::Duration;

use msi_dataplane::dataplane::{
    Client, ClientFactory, ManagedIdentityCredentials, MoveIdentityRequest,
    UserAssignedIdentitiesRequest,
};
use msi_dataplane::limits::{MIN_REFRESH_BACKOFF, NEAR_END};
use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, Environment, ErrorCategory, ErrorKind,
    RetryPolicy, UserAssignedIdentityCredentials,
};
use msi_dataplane_testing::{DataPlaneRequest, DataPlaneServer};
use serde_json::json;
use support::entra::{EntraServer, Scripted, TokenShape};
use support::fixtures::{fixture_credentials, leaf_pem_path, load};
use support::harness::{ARM, https_env, options, register};

const AUDIENCE: &str = DataPlaneServer::AUDIENCE;
const IDENTITY_PATH: &str = DataPlaneServer::IDENTITY_PATH;

/// The service's own application: fixture pem-pkcs8, home tenant = the fixture's.
const SERVICE: &str = "pem-pkcs8";
const HOME_TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const OTHER_TENANT: &str = "b1d2e3f4-0000-4000-8000-00000000beef";
const UA_ID: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/pfx-aes";

struct Setup {
    entra: EntraServer,
    dp: DataPlaneServer,
    factory: ClientFactory,
    client: Client,
}

fn service_credential(entra: &EntraServer, allowed: &[&str]) -> ClientCertificateCredential {
    let creds = load(SERVICE);
    let client_id = creds.client_id.clone().unwrap();
    for tenant in [HOME_TENANT, OTHER_TENANT] {
        entra.register_certificate_file(&client_id, tenant, leaf_pem_path(SERVICE));
    }
    ClientCertificateCredential::from_parts(
        &entra.base_url(),
        HOME_TENANT,
        &client_id,
        ClientCertificate::from_credentials(&creds).unwrap(),
        options().with_additionally_allowed_tenants(allowed.iter().copied()),
    )
    .unwrap()
}

fn client_options() -> Environment {
    https_env().with_retry_policy(
        RetryPolicy::default()
            .with_initial_delay(Duration::from_millis(10))
            .with_max_delay(Duration::from_millis(50)),
    )
}

async fn setup_in(dp_tenant: &str, allowed: &[&str]) -> Setup {
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, dp_tenant, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    dp.add_user_assigned(UA_ID, fixture_credentials("pfx-aes", &entra.base_url()));
    let factory = ClientFactory::new(
        service_credential(&entra, allowed),
        AUDIENCE,
        client_options(),
    )
    .unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    Setup {
        entra,
        dp,
        factory,
        client,
    }
}

async fn setup() -> Setup {
    setup_in(HOME_TENANT, &[]).await
}

/// The checks every authenticated request passes: the identity URL's query in order,
/// then api-version; JSON accepted; a client request id.
fn assert_wire_basics(s: &Setup, request: &DataPlaneRequest) {
    let mut expected = s.dp.identity_query();
    expected.push(("api-version".into(), "2024-01-01".into()));
    assert_eq!(request.query, expected);
    assert_eq!(request.header("accept"), Some("application/json"));
    assert!(request.header("x-ms-client-request-id").is_some());
    assert!(request.authorized, "{request:?}");
}

#[tokio::test]
async fn get_system_assigned_credentials() {
    let s = setup().await;
    let creds = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let fixture = load("pem-chain");
    assert_eq!(creds.identity.client_id, fixture.client_id);
    assert_eq!(creds.identity.not_after, fixture.not_after);
    assert_eq!(
        creds
            .identity
            .client_secret
            .as_ref()
            .map(|c| c.expose_secret()),
        fixture.client_secret.as_ref().map(|c| c.expose_secret())
    );
    let requests = s.dp.requests();
    assert_eq!(
        requests.len(),
        2,
        "challenge then the request: {requests:?}"
    );
    assert_eq!(requests[0].status, 401);
    assert_eq!(requests[0].header("authorization"), None);
    let r = &requests[1];
    assert_eq!(
        (r.method.as_str(), r.path.as_str(), r.status),
        ("GET", IDENTITY_PATH, 200)
    );
    assert_eq!(r.body, "");
    assert_wire_basics(&s, r);
    // The system-assigned identity's certificate is usable as a credential.
    register(&s.entra, "pem-chain");
    let cred = ClientCertificateCredential::new(&creds.identity, options()).unwrap();
    cred.get_token(&[ARM]).await.unwrap();
}

#[tokio::test]
async fn user_assigned_credentials_post_camel_case_and_give_a_working_credential() {
    let s = setup().await;
    let request = UserAssignedIdentitiesRequest::new([UA_ID]);
    let creds = s
        .client
        .get_user_assigned_identities_credentials(&request)
        .await
        .unwrap();
    let r = s.dp.requests().pop().unwrap();
    assert_eq!(
        (r.method.as_str(), r.path.as_str(), r.status),
        ("POST", IDENTITY_PATH, 200)
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.body).unwrap(),
        json!({ "identityIds": [UA_ID] })
    );
    assert_wire_basics(&s, &r);
    let identity = creds
        .user_assigned_identity(UA_ID)
        .expect("the identity asked for");
    assert_eq!(creds.user_assigned_identities().len(), 1);
    // The explicit identity is the crate's credential file type: a token with it.
    register(&s.entra, "pfx-aes");
    let credential = ClientCertificateCredential::new(identity, options()).unwrap();
    let token = credential.get_token(&[ARM]).await.unwrap();
    let issued = s.entra.issued(token.token()).unwrap();
    assert_eq!(Some(issued.client_id), load("pfx-aes").client_id);
}

#[tokio::test]
async fn delete_accepts_204_and_200() {
    let s = setup().await;
    s.client.delete_system_assigned_identity().await.unwrap();
    let r = s.dp.requests().pop().unwrap();
    assert_eq!(
        (r.method.as_str(), r.path.as_str(), r.status),
        ("DELETE", IDENTITY_PATH, 204)
    );
    assert_wire_basics(&s, &r);
    s.dp.set_delete_status(200);
    s.client.delete_system_assigned_identity().await.unwrap();
    assert_eq!(s.dp.requests().pop().unwrap().status, 200);
}

#[tokio::test]
async fn move_identity_posts_to_proxy_move() {
    let s = setup().await;
    let target = "/subscriptions/s/resourcegroups/g/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-2";
    let moved = s
        .client
        .move_identity(&MoveIdentityRequest::new(target))
        .await
        .unwrap();
    assert!(moved.identity_url.unwrap().expose_secret().contains(target));
    let r = s.dp.requests().pop().unwrap();
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, format!("{IDENTITY_PATH}/proxy/move"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.body).unwrap(),
        json!({ "targetResourceId": target })
    );
    assert_wire_basics(&s, &r);
}

#[tokio::test]
async fn one_challenge_then_tokens_at_once_for_the_host() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert_eq!(s.dp.challenges_sent(), 1);
    // Later calls, other operations and a second client for the same host: no 401.
    s.client.delete_system_assigned_identity().await.unwrap();
    let other = s.factory.client(&s.dp.identity_url()).unwrap();
    other
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([UA_ID]))
        .await
        .unwrap();
    assert_eq!(s.dp.challenges_sent(), 1);
    assert_eq!(s.dp.requests().len(), 4);
    assert_eq!(s.entra.tokens_issued(), 1, "one token, reused");
}

#[tokio::test]
async fn a_token_near_expiry_is_renewed_without_a_challenge() {
    let s = setup().await;
    // Tokens of 4 minutes: always inside the 5-minute window, so the client asks the
    // source before every request, but knows the tenant: no second 401.
    s.entra.set_token_shape(TokenShape {
        expires_in: 240,
        ..TokenShape::default()
    });
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert_eq!(s.dp.challenges_sent(), 1);
    assert_eq!(s.dp.requests().len(), 3);
}

#[tokio::test]
async fn a_challenge_for_another_tenant_needs_it_allowed() {
    // Not allowed: a typed error naming both tenants, and no token request.
    let s = setup_in(OTHER_TENANT, &[]).await;
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert_eq!(e.kind().code(), "tenant_not_allowed", "{e:?}");
    let message = e.to_string();
    assert!(
        message.contains(&format!("tenant {HOME_TENANT} may not")),
        "{message}"
    );
    assert!(
        message.contains(&format!("in tenant {OTHER_TENANT};")),
        "{message}"
    );
    assert_eq!(s.entra.token_requests(), 0);
    assert!(!e.is_transient());
    // Allowed by name, or by `*`: the token comes from the challenge's tenant.
    for allowed in [OTHER_TENANT, "*"] {
        let s = setup_in(OTHER_TENANT, &[allowed]).await;
        s.client
            .get_system_assigned_identity_credentials()
            .await
            .unwrap();
        let token_request = s.entra.requests().pop().unwrap();
        assert_eq!(token_request.tenant.as_deref(), Some(OTHER_TENANT));
        assert_eq!(
            token_request.scope.as_deref(),
            Some("https://dataplane.msi-test.example/.default")
        );
    }
}

#[tokio::test]
async fn unusable_challenges_are_typed_errors() {
    for (values, expect) in [
        (vec![r#"Basic realm="dataplane""#], "no Bearer challenge"),
        (vec![r#"Bearer realm="x, y""#], "authorization"),
        (
            vec![r#"Bearer authorization="https://login.example/common""#],
            "neither a GUID",
        ),
        (
            vec![r#"Bearer authorization="unterminated"#],
            "unterminated",
        ),
    ] {
        let s = setup().await;
        s.dp.set_challenge(&values);
        let e = s
            .client
            .get_system_assigned_identity_credentials()
            .await
            .unwrap_err();
        assert!(
            matches!(
                e.kind(),
                ErrorKind::InvalidAnswer {
                    code: "invalid_challenge",
                    ..
                }
            ),
            "{values:?}: {e}"
        );
        assert!(e.to_string().contains(expect), "{e}");
        // The data plane's answer (its tenant included) is the service's, never the
        // caller's configuration or the credential file.
        assert_eq!(e.category(), ErrorCategory::Service, "{values:?}");
        assert_eq!(s.entra.token_requests(), 0);
    }
    // A Bearer challenge among others, in a second header field, scheme in capitals.
    let s = setup().await;
    s.dp.set_challenge(&[
        r#"Negotiate abc=, Basic realm="a, b""#,
        &format!(r#"BEARER error="invalid_token", authorization="https://login.microsoftonline.com/{HOME_TENANT}""#),
    ]);
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
}

#[tokio::test]
async fn not_found_with_and_without_body() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    s.dp.enqueue(
        Scripted::status(404).body(r#"{"error":{"code":"NotFound","message":"no such identity"}}"#),
    );
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!(d.status, 404);
    assert_eq!(d.code.as_deref(), Some("NotFound"));
    assert_eq!(d.message.as_deref(), Some("no such identity"));
    assert!(d.request_id.is_some(), "the server's x-ms-request-id");
    assert!(!e.is_transient());
    assert!(!e.to_string().contains("sig="), "{e}");
    s.dp.enqueue(Scripted::status(404).body(""));
    let e = s
        .client
        .delete_system_assigned_identity()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!((d.status, d.code.as_deref()), (404, None));
    // Not retried: one request each after the first call's two.
    assert_eq!(s.dp.requests().len(), 4);
    // The service's own 404 (an unknown identity id) and a bare `{"code"}` body.
    let e = s
        .client
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new(["/nope"]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("identity /nope not found"), "{e}");
    s.dp.enqueue(Scripted::status(400).body(r#"{"code":"BadRequest"}"#));
    let e = s
        .client
        .delete_system_assigned_identity()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!(d.code.as_deref(), Some("BadRequest"));
}

#[tokio::test]
async fn throttling_and_unavailability_are_retried() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    s.dp.clear_requests();
    s.dp.enqueue(Scripted::status(429).retry_after("1"));
    s.dp.enqueue(Scripted::status(503));
    let started = std::time::Instant::now();
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    let statuses: Vec<u16> = s.dp.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 503, 200]);
    // Past the policy's attempts: the last error, transient, with its Retry-After.
    for _ in 0..4 {
        s.dp.enqueue(Scripted::status(429).retry_after("0"));
    }
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!((d.status, d.retry_after), (429, Some(Duration::ZERO)));
    assert!(e.is_transient());
}

#[tokio::test]
async fn huge_and_malformed_bodies_are_refused_without_echo() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    s.dp.enqueue(
        Scripted::status(200).body(&"x".repeat(msi_dataplane::limits::MAX_RESPONSE_BYTES + 1)),
    );
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidAnswer {
                code: "invalid_data_plane_response",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("exceeds"), "{e}");
    s.dp.enqueue(
        Scripted::status(200).body(r#"{"client_secret": "TOPSECRETBUNDLE", "not_after": 5"#),
    );
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidAnswer {
                code: "invalid_data_plane_response",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!format!("{e} {e:?}").contains("TOPSECRETBUNDLE"), "{e}");
    s.dp.enqueue(Scripted::status(200).body(r#"{"client_id": ["not", "a", "string"]}"#));
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidAnswer {
                code: "invalid_data_plane_response",
                ..
            }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn only_https_identity_urls_and_nothing_is_sent_otherwise() {
    let s = setup().await;
    let http = s.dp.identity_url().replacen("https://", "http://", 1);
    let e = s.factory.client(&http).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_identity_url",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.to_string().contains("sig="), "{e}");
    assert!(s.factory.client("ftp://host/x").is_err());
    assert!(s.factory.client("no url").is_err());
    assert!(s.dp.requests().is_empty());
}

#[tokio::test]
async fn a_token_from_another_audience_is_refused_by_the_server() {
    // The server really checks audience: a factory with the wrong audience gets its
    // challenge again after the retry, and again after one token fetched past the caches;
    // the call fails with that 401.
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, HOME_TENANT, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let factory = ClientFactory::new(
        service_credential(&entra, &[]),
        "https://wrong.audience.example",
        client_options(),
    )
    .unwrap();
    assert_eq!(factory.scope(), "https://wrong.audience.example/.default");
    let e = factory
        .client(&dp.identity_url())
        .unwrap()
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!(d.status, 401);
    assert_eq!(dp.challenges_sent(), 3);
    assert_eq!(dp.requests().len(), 3);
}

#[tokio::test]
async fn credential_from_parts_caches_per_tenant() {
    let entra = EntraServer::start().await;
    let cred = service_credential(&entra, &[OTHER_TENANT]);
    let own = cred
        .get_token_for_tenant(&[ARM], HOME_TENANT)
        .await
        .unwrap();
    let other = cred
        .get_token_for_tenant(&[ARM], OTHER_TENANT)
        .await
        .unwrap();
    assert_ne!(own.token(), other.token());
    assert_eq!(entra.issued(other.token()).unwrap().tenant, OTHER_TENANT);
    // Cached per tenant (case-insensitive), and the own tenant is `get_token`'s cache.
    let again = cred
        .get_token_for_tenant(&[ARM], &OTHER_TENANT.to_uppercase())
        .await
        .unwrap();
    assert_eq!(again.token(), other.token());
    assert_eq!(cred.get_token(&[ARM]).await.unwrap().token(), own.token());
    assert_eq!(entra.token_requests(), 2);
    // An allowed tenant is matched trimmed and case-insensitively.
    let padded = format!(" {} ", OTHER_TENANT.to_uppercase());
    let loose = service_credential(&entra, &[padded.as_str()]);
    loose
        .get_token_for_tenant(&[ARM], OTHER_TENANT)
        .await
        .unwrap();
    let e = cred
        .get_token_for_tenant(&[ARM], "c0ffee00-0000-4000-8000-000000000000")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "tenant_not_allowed",
                ..
            }
        ),
        "{e:?}"
    );
    // Bad parts are typed errors.
    let cert = || ClientCertificate::from_credentials(&load(SERVICE)).unwrap();
    let e = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        HOME_TENANT,
        " ",
        cert(),
        options(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_argument",
                field: "client_id",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.category(), ErrorCategory::Configuration);
    let e =
        ClientCertificateCredential::from_parts(&entra.base_url(), "a/b", "c", cert(), options())
            .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_argument",
                field: "tenant_id",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.category(), ErrorCategory::Configuration);
    // A tenant that cannot be part of a URL path, from a credential that may ask in any.
    let any = service_credential(&entra, &["*"]);
    let e = any.get_token_for_tenant(&[ARM], "a/b").await.unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_argument",
                field: "tenant",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.category(), ErrorCategory::Configuration);
    // An empty audience for the data plane client factory.
    let e = ClientFactory::new(any, " / ", client_options()).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_argument",
                field: "audience",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.category(), ErrorCategory::Configuration);
    // The same authority check as a credential file's, but the caller's value here.
    let e = ClientCertificateCredential::from_parts(
        "http://login.example.test/",
        HOME_TENANT,
        "c",
        cert(),
        options(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "invalid_authority",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.category(), ErrorCategory::Configuration);
}

#[test]
fn types_round_trip_and_tolerate_unknown_keys() {
    let full = json!({
        "authentication_endpoint": "https://login.microsoftonline.com/",
        "cannot_renew_after": "2027-01-31T00:00:00Z",
        "client_id": "c",
        "client_secret": "U0VDUkVU",
        "client_secret_url": "https://v/secrets/x",
        "custom_claims": {"xms_az_nwperimid": ["p1"], "xms_az_tm": "user"},
        "delegated_resources": [{
            "delegation_id": "d", "delegation_url": "https://d", "internal_id": "i",
            "resource_id": "/r",
            "implicit_identity": {"client_id": "imp"},
            "explicit_identities": [{"client_id": "exp", "resource_id": "/e"}]
        }],
        "delegation_url": "https://delegation",
        "explicit_identities": [{"client_id": "u", "resource_id": UA_ID, "tenant_id": "t"}],
        "internal_id": "internal",
        "mtls_authentication_endpoint": "https://mtls/",
        "not_after": "2027-02-01T00:00:00Z",
        "not_before": "2026-11-01T00:00:00Z",
        "object_id": "o",
        "renew_after": "2026-12-17T00:00:00Z",
        "tenant_id": "t"
    });
    let parsed: ManagedIdentityCredentials = serde_json::from_value(full.clone()).unwrap();
    assert_eq!(serde_json::to_value(&parsed).unwrap(), full);
    assert_eq!(
        parsed.delegated_resources.as_ref().unwrap()[0]
            .implicit_identity
            .as_ref()
            .unwrap()
            .client_id
            .as_deref(),
        Some("imp")
    );
    // Unknown keys are ignored; absent ones are omitted.
    let mut with_extra = full.clone();
    with_extra["future_key"] = json!({"nested": true});
    assert_eq!(
        serde_json::from_value::<ManagedIdentityCredentials>(with_extra).unwrap(),
        parsed
    );
    let empty: ManagedIdentityCredentials = serde_json::from_str("{}").unwrap();
    assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
    // The secret never prints.
    assert!(!format!("{parsed:?}").contains("U0VDUkVU"));
    // Request bodies are camelCase and round-trip.
    let request = UserAssignedIdentitiesRequest::new(["/a"]).with_delegated_resources(["/d"]);
    let v = serde_json::to_value(&request).unwrap();
    assert_eq!(
        v,
        json!({"identityIds": ["/a"], "delegatedResources": ["/d"]})
    );
    assert_eq!(
        serde_json::from_value::<UserAssignedIdentitiesRequest>(v).unwrap(),
        request
    );
    let m = MoveIdentityRequest::new("/t");
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({"targetResourceId": "/t"})
    );
    let r: msi_dataplane::dataplane::MoveIdentityResponse =
        serde_json::from_value(json!({"identityUrl": "https://x", "other": 1})).unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"identityUrl": "https://x"})
    );
    // Explicit identities are the crate's credential type.
    let ua: &UserAssignedIdentityCredentials = &parsed.user_assigned_identities()[0];
    assert_eq!(ua.tenant_id.as_deref(), Some("t"));
    assert!(
        parsed
            .user_assigned_identity(&UA_ID.to_uppercase())
            .is_some()
    );
}

#[tokio::test]
async fn debug_output_holds_no_secret() {
    let s = setup().await;
    let creds = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let secret = creds.identity.client_secret.clone().unwrap();
    let shown = format!("{creds:?} {:?} {:?}", s.client, s.factory);
    assert!(!shown.contains(secret.expose_secret()));
    assert!(!shown.contains("sig="), "{shown}");
}

#[tokio::test]
async fn a_token_source_failure_is_not_retried_again_by_the_client() {
    // The credential retries its own token requests (here: not at all); the data plane
    // client must not multiply them with its own loop.
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, HOME_TENANT, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let creds = load(SERVICE);
    let client_id = creds.client_id.clone().unwrap();
    entra.register_certificate_file(&client_id, HOME_TENANT, leaf_pem_path(SERVICE));
    let credential = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        HOME_TENANT,
        &client_id,
        ClientCertificate::from_credentials(&creds).unwrap(),
        options().with_environment(https_env().with_retry_policy(RetryPolicy::none())),
    )
    .unwrap();
    let factory = ClientFactory::new(credential, AUDIENCE, client_options()).unwrap();
    entra.enqueue(Scripted::status(503));
    entra.enqueue(Scripted::status(503));
    let e = factory
        .client(&dp.identity_url())
        .unwrap()
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::TokenEndpoint(t) if t.status == 503),
        "{e:?}"
    );
    assert_eq!(entra.token_requests(), 1);
    assert_eq!(dp.requests().len(), 1, "the challenged request only");
}

#[tokio::test]
async fn other_token_sources_reloading_credential_and_azure_core() {
    use msi_dataplane::{ReloadOptions, UserAssignedIdentityCredential};
    use support::atomic_writer::AtomicDir;
    use support::fixtures::load_with_endpoint;

    let entra = EntraServer::start().await;
    register(&entra, SERVICE);
    let json = load_with_endpoint(SERVICE, &entra.base_url())
        .to_json()
        .unwrap();
    let dir = AtomicDir::new("dp-source", json.as_bytes());
    let reloading = || async {
        UserAssignedIdentityCredential::new(dir.visible_path(), options(), ReloadOptions::default())
            .await
            .unwrap()
    };
    // The reloading credential answers challenges in its own tenant...
    let dp = DataPlaneServer::start(&entra, HOME_TENANT, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let factory = ClientFactory::new(reloading().await, AUDIENCE, client_options()).unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    // ...and refuses others, naming both tenants.
    let other = DataPlaneServer::start(&entra, OTHER_TENANT, AUDIENCE).await;
    let e = factory
        .client(&other.identity_url())
        .unwrap()
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Config {
                code: "tenant_not_allowed",
                ..
            }
        ),
        "{e:?}"
    );

    // An azure_core TokenCredential (here the crate's own, seen only as `dyn`).
    #[cfg(feature = "azure_core")]
    {
        let credential: std::sync::Arc<dyn azure_core::credentials::TokenCredential> =
            std::sync::Arc::new(reloading().await);
        let factory = ClientFactory::new(
            msi_dataplane::dataplane::AzureTokenCredential(credential),
            AUDIENCE,
            client_options(),
        )
        .unwrap();
        factory
            .client(&dp.identity_url())
            .unwrap()
            .get_system_assigned_identity_credentials()
            .await
            .unwrap();
        // It cannot be pointed at another tenant: the data plane refuses its token.
        let e = factory
            .client(&other.identity_url())
            .unwrap()
            .get_system_assigned_identity_credentials()
            .await
            .unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Service(d) if d.status == 401),
            "{e:?}"
        );
    }
}

/// A hostile or broken data plane: codes and messages with newlines, terminal escapes and
/// 200 KB of text. Errors and log lines stay one bounded line with those characters
/// escaped, on the retry log (INFO) and in the final error.
#[tokio::test]
async fn service_text_reaches_errors_and_logs_bounded_and_escaped() {
    let log = support::log_capture::captured();
    let s = setup().await;
    let forged = "Throttled\nINFO forged: a line the service wrote\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let huge = "M".repeat(200_000);
    let body =
        json!({"error": {"code": forged, "message": format!("{forged} {huge}")}}).to_string();
    s.dp.enqueue(Scripted::status(503).retry_after("0").body(&body));
    s.dp.enqueue(Scripted::status(404).body(&body));
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    let ErrorKind::Service(d) = e.kind() else {
        panic!("{e:?}")
    };
    assert_eq!(d.status, 404);
    let code = d.code.as_deref().unwrap();
    assert!(code.starts_with("Throttled\\nINFO forged"), "{code}");
    let text = e.to_string();
    assert!(!text.contains(['\n', '\r', '\u{1b}', '\u{7}']), "{text:?}");
    assert!(text.contains("\\u{1b}]0;pwned"), "{text}");
    assert!(text.len() < 2_000, "{} bytes", text.len());

    // The retry after the 503 was logged with the service's text: one line, escaped. (The
    // capture is shared by every test of this binary: other tests' retries are left out.)
    let logged = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let retry_lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("data plane request failed; retrying"))
        .filter(|l| l.contains("Throttled"))
        .collect();
    assert!(!retry_lines.is_empty(), "no retry logged:\n{logged}");
    for line in retry_lines {
        assert!(line.contains("Throttled\\nINFO forged"), "{line}");
        assert!(line.len() < 2_000, "{} bytes", line.len());
    }
    assert!(
        !logged.lines().any(|l| l.starts_with("INFO forged")),
        "a forged log line"
    );
    assert!(!logged.contains('\u{1b}'), "an escape byte reached the log");
}

const OTHER_UA_ID: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/other/providers/Microsoft.ManagedIdentity/userAssignedIdentities/in-another-tenant";

/// Identities of two tenants behind one data plane host: each tenant's first call is
/// challenged, then alternating calls draw no 401, and no request ever carries a token
/// of another tenant than its identity URL's (the server records each token's tenant).
#[tokio::test]
async fn two_tenants_behind_one_host_each_get_their_own_token() {
    let s = setup_in(HOME_TENANT, &["*"]).await;
    s.dp.create_user_assigned_in(OTHER_TENANT, OTHER_UA_ID);
    let other = s
        .factory
        .client(&s.dp.identity_url_in(OTHER_TENANT))
        .unwrap();
    let (home_ids, other_ids) = (
        UserAssignedIdentitiesRequest::new([UA_ID]),
        UserAssignedIdentitiesRequest::new([OTHER_UA_ID]),
    );
    for _ in 0..3 {
        let home = s.client.get_user_assigned_identities_credentials(&home_ids);
        home.await.unwrap();
        let there = other.get_user_assigned_identities_credentials(&other_ids);
        there.await.unwrap();
    }
    let requests = s.dp.requests();
    assert_eq!(
        s.dp.challenges_sent(),
        2,
        "one challenge per tenant: {requests:#?}"
    );
    assert_eq!(requests.len(), 8);
    let statuses: Vec<u16> = requests.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [401, 200, 401, 200, 200, 200, 200, 200]);
    for r in &requests {
        if let Some(token_tenant) = &r.token_tenant {
            assert!(token_tenant.eq_ignore_ascii_case(&r.tenant), "{r:?}");
        }
    }
    let tenants: Vec<&str> = requests.iter().map(|r| r.tenant.as_str()).collect();
    assert_eq!(tenants.iter().filter(|t| **t == OTHER_TENANT).count(), 4);
    assert_eq!(s.entra.tokens_issued(), 2, "one token per tenant");
}

fn bearer(request: &DataPlaneRequest) -> String {
    request
        .header("authorization")
        .unwrap_or_default()
        .to_owned()
}

/// The data plane refuses a token once: the call succeeds with a token fetched past
/// every cache (the Entra server issued it), which later calls keep using.
#[tokio::test]
async fn a_refused_token_is_replaced_and_the_call_succeeds() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert_eq!(s.entra.tokens_issued(), 1);
    s.dp.clear_requests();
    s.dp.refuse_next_tokens(1);
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let requests = s.dp.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!((requests[0].status, requests[1].status), (401, 200));
    assert_ne!(bearer(&requests[0]), bearer(&requests[1]));
    assert_eq!(s.entra.tokens_issued(), 2, "a new token from Entra");
    assert!(
        s.entra
            .issued(bearer(&requests[1]).trim_start_matches("Bearer "))
            .is_some()
    );
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let last = s.dp.requests().pop().unwrap();
    assert_eq!((last.status, bearer(&last)), (200, bearer(&requests[1])));
    assert_eq!(s.entra.tokens_issued(), 2);
}

/// A data plane that keeps refusing: exactly one retry with a new token, then the 401 as
/// one typed error with the service's code.
#[tokio::test]
async fn a_token_refused_again_is_one_typed_error_after_one_retry() {
    let s = setup().await;
    s.client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    s.dp.clear_requests();
    s.dp.refuse_next_tokens(100);
    let e = s
        .client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    match e.kind() {
        ErrorKind::Service(service) => {
            assert_eq!(service.status, 401);
            assert_eq!(service.code.as_deref(), Some("Unauthorized"));
        }
        other => panic!("{other:?}"),
    }
    assert!(!e.is_transient());
    assert_eq!(
        s.dp.requests().len(),
        2,
        "the refused token, then one new one"
    );
    assert_eq!(s.entra.tokens_issued(), 2);
}

/// The types a user's test needs can be built without serde, serialize to the same bytes
/// as the wire's, and give their times typed.
#[test]
fn data_plane_types_built_in_code_match_the_wire() {
    use msi_dataplane::dataplane::{DelegatedResource, MoveIdentityResponse, SignedUrl};
    let identity = UserAssignedIdentityCredentials::from_slice(
        json!({
            "authentication_endpoint": "https://login.microsoftonline.com/",
            "client_id": "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d", "client_secret": "U0VDUkVU",
            "tenant_id": HOME_TENANT,
            "not_before": "2026-11-24T00:00:00Z", "not_after": "2027-02-22T00:00:00Z",
            "renew_after": "2027-01-08T00:00:00Z", "cannot_renew_after": "2027-05-23T00:00:00Z",
            "resource_id": UA_ID
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let system = ManagedIdentityCredentials::system_assigned(identity.clone());
    let mut expected = serde_json::to_value(&identity).unwrap();
    expected.as_object_mut().unwrap().remove("resource_id");
    assert_eq!(serde_json::to_value(&system).unwrap(), expected);
    assert_eq!(
        system.identity.not_after().unwrap(),
        Some(time::macros::datetime!(2027-02-22 00:00 UTC))
    );
    assert_eq!(
        system.identity.renew_after().unwrap(),
        Some(time::macros::datetime!(2027-01-08 00:00 UTC))
    );
    assert!(system.identity.cannot_renew_after().unwrap().is_some());
    assert!(system.identity.not_before().unwrap().is_some());
    let mut broken = system.clone();
    broken.identity.not_after = Some("next week".into());
    let e = broken.identity.not_after().unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("not_after"),
                ..
            }
        ),
        "{e:?}"
    );

    let user = ManagedIdentityCredentials::user_assigned([identity.clone()]);
    let wire: ManagedIdentityCredentials = serde_json::from_value(
        json!({ "explicit_identities": [serde_json::to_value(&identity).unwrap()] }),
    )
    .unwrap();
    assert_eq!(user, wire);
    assert_eq!(user.to_json().unwrap(), wire.to_json().unwrap());

    let delegated = DelegatedResource::new("/r").with_implicit_identity(identity.clone());
    assert_eq!(
        serde_json::to_value(&delegated).unwrap(),
        json!({ "resource_id": "/r", "implicit_identity": serde_json::to_value(&identity).unwrap() })
    );

    let url = "https://eastus.identity.azure.net/p/credentials/v2/identities?sig=S1GNATURE&tid=t";
    let moved = MoveIdentityResponse::new(url);
    assert_eq!(
        serde_json::to_value(&moved).unwrap(),
        json!({ "identityUrl": url })
    );
    let shown = format!("{moved:?} {}", moved.identity_url.as_ref().unwrap());
    assert!(!shown.contains("S1GNATURE"), "{shown}");
    assert_eq!(SignedUrl::new(url).expose_secret(), url);
}

/// The service credential on a manual clock (returned too), without retries.
fn service_credential_on_clock(
    entra: &EntraServer,
) -> (
    std::sync::Arc<msi_dataplane::ManualClock>,
    ClientCertificateCredential,
) {
    let clock = support::harness::manual_clock();
    let creds = load(SERVICE);
    let client_id = creds.client_id.clone().unwrap();
    entra.register_certificate_file(&client_id, HOME_TENANT, leaf_pem_path(SERVICE));
    let credential = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        HOME_TENANT,
        &client_id,
        ClientCertificate::from_credentials(&creds).unwrap(),
        options().with_environment(
            https_env()
                .with_retry_policy(RetryPolicy::none())
                .with_clock(clock.clone()),
        ),
    )
    .unwrap();
    (clock, credential)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_the_credential_share_one_cache_and_one_request() {
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, HOME_TENANT, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let credential = service_credential(&entra, &[]);
    let factory = ClientFactory::new(credential.clone(), AUDIENCE, client_options()).unwrap();
    let scope = factory.scope().to_owned();
    entra.set_scope_delay(&scope, Duration::from_millis(400));
    // The credential's own caller starts the request; the data plane call, challenged,
    // joins it rather than starting another.
    let direct = tokio::spawn({
        let (credential, scope) = (credential.clone(), scope.clone());
        async move { credential.get_token(&[&scope]).await }
    });
    support::harness::wait_for_token_requests(&entra, 1).await;
    let client = factory.client(&dp.identity_url()).unwrap();
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let token = direct.await.unwrap().unwrap();
    assert_eq!(
        entra.token_requests(),
        1,
        "one request across both consumers"
    );
    // The client sent the credential's cached token: one cache, not two.
    let sent = bearer(dp.requests().last().unwrap());
    assert_eq!(sent.trim_start_matches("Bearer "), token.token());
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    credential.clear_cache();
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert_eq!(
        entra.token_requests(),
        2,
        "cleared in the credential, gone for the client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entra_outage_costs_the_backoff_schedule_not_a_request_per_call() {
    let entra = EntraServer::start().await;
    // 500 s tokens: the refresh window opens at half-life, at most 250 s after issue.
    entra.set_token_shape(TokenShape {
        expires_in: 500,
        ..TokenShape::default()
    });
    let dp = DataPlaneServer::start(&entra, HOME_TENANT, AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let (clock, credential) = service_credential_on_clock(&entra);
    let options = client_options().with_clock(clock.clone());
    let factory = ClientFactory::new(credential, AUDIENCE, options).unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    assert_eq!(entra.token_requests(), 1);

    // Entra goes down; the token is past its refresh point and still valid for 240 s.
    for _ in 0..200 {
        entra.enqueue(Scripted::status(503));
    }
    clock.advance(Duration::from_secs(260));
    let (calls, step) = (100u32, Duration::from_secs(2));
    for _ in 0..calls {
        client
            .get_system_assigned_identity_credentials()
            .await
            .unwrap();
        clock.advance(step);
    }
    // The token is within NEAR_END of its end: background attempts at most every
    // MIN_REFRESH_BACKOFF (0, 30, 60 s...; jitter only lengthens the wait) within the
    // calls' 200 s, not one per call.
    assert!(Duration::from_secs(240) <= NEAR_END);
    let span = step * calls;
    let schedule = (span.as_secs() / MIN_REFRESH_BACKOFF.as_secs() + 1) as usize;
    let outage_requests = entra.token_requests() - 1;
    assert!(
        (1..=schedule).contains(&outage_requests),
        "{calls} data plane calls made {outage_requests} token requests; the schedule allows {schedule}"
    );
    // Every call was served with the still-valid token, after one challenge in all.
    assert_eq!(dp.challenges_sent(), 1);
}
