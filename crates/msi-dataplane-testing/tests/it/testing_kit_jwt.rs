//! The testing kit's access tokens as JWTs, through the public API only, as a downstream
//! crate uses them: the claims an Entra app-only token has (times by a `ManualClock`),
//! extra claims, the discovery documents fetched over HTTPS and used to verify a token
//! with another JWT library (`jsonwebtoken`), and the `ResourceServer` validating as an
//! Azure resource does: a component calling it with the crate's credential passes, and a
//! wrong audience, an expired token, a token from another tenant or a tampered one are
//! refused with a message that says why.

use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use msi_dataplane::{
    BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Clock,
    Environment, ManualClock,
};
use msi_dataplane_testing::{
    EntraServer, ResourceServer, TOKEN_CLOCK_SKEW_SECS, TestCertificate, TestIdentity,
    TokenRejection, TokenShape,
};
use serde_json::{Map, Value, json};

const ARM_SCOPE: &str = "https://management.azure.com/.default";
const ARM: &str = "https://management.azure.com";
const VAULT_SCOPE: &str = "https://vault.azure.net/.default";

/// An identity registered with `entra` and the crate's credential for it, on `clock` when
/// given (the server should then read the same clock).
fn credential(
    entra: &EntraServer,
    identity: &TestIdentity,
    clock: Option<Arc<ManualClock>>,
) -> ClientCertificateCredential {
    let now = clock
        .as_ref()
        .map_or_else(time::OffsetDateTime::now_utc, |c| c.now());
    let certificate = TestCertificate::builder()
        .validity(
            now - time::Duration::hours(1),
            now + time::Duration::days(30),
        )
        .self_signed();
    entra.register(identity, &certificate);
    let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    let mut environment = Environment::default().with_http_client(entra.client());
    if let Some(clock) = clock {
        environment = environment.with_clock(clock);
    }
    let options = ClientCertificateCredentialOptions::default().with_environment(environment);
    ClientCertificateCredential::new(&file, options).expect("credential")
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not a JSON object: {other}"),
    }
}

/// A JWT's header and claims, decoded here (not by the kit).
fn decode(token: &str) -> (Map<String, Value>, Map<String, Value>) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a compact JWS");
    let part =
        |p: &str| object(serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap());
    (part(parts[0]), part(parts[1]))
}

async fn get_json(entra: &EntraServer, url: &str) -> (u16, Value) {
    let answer = entra.client().get(url).send().await.expect("GET");
    let status = answer.status().as_u16();
    let body = answer.text().await.expect("body");
    (status, serde_json::from_str(&body).expect("JSON"))
}

// ---------------------------------------------------------------------------------------
// The component under test
// ---------------------------------------------------------------------------------------

/// What a component's call to its service can fail with.
#[derive(Debug)]
enum CallError {
    Token(azure_core::Error),
    Http(reqwest::Error),
    Refused { status: u16, message: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Token(e) => write!(f, "no token: {e}"),
            CallError::Http(e) => write!(f, "HTTP: {e}"),
            CallError::Refused { status, message } => {
                write!(f, "the service answered {status}: {message}")
            }
        }
    }
}

/// A tiny component: a token for `scope` from any `TokenCredential` (as an Azure SDK
/// client gets it), then `GET {service}subscriptions`; a refusal carries the service's
/// error message.
async fn list_subscriptions(
    credential: &dyn TokenCredential,
    http: &reqwest::Client,
    service: &str,
    scope: &str,
) -> Result<Value, CallError> {
    let token = credential
        .get_token(&[scope], None)
        .await
        .map_err(CallError::Token)?;
    let answer = http
        .get(format!("{service}subscriptions"))
        .bearer_auth(token.token.secret())
        .send()
        .await
        .map_err(CallError::Http)?;
    let status = answer.status().as_u16();
    let body: Value =
        serde_json::from_str(&answer.text().await.map_err(CallError::Http)?).unwrap_or(Value::Null);
    if status != 200 {
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("(no message)")
            .to_owned();
        return Err(CallError::Refused { status, message });
    }
    Ok(body)
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_component_using_the_crate_s_credential_passes_and_a_wrong_audience_fails_saying_so() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ResourceServer::ARM_SCOPE).await;
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, None);
    let http = entra.client();

    let listed = list_subscriptions(&credential, &http, &arm.url(), ARM_SCOPE)
        .await
        .expect("the component's call passes");
    assert_eq!(listed, json!({"value": []}));

    // The same component configured with the wrong scope.
    let refused = list_subscriptions(&credential, &http, &arm.url(), VAULT_SCOPE)
        .await
        .expect_err("a Key Vault token is no ARM token");
    let text = refused.to_string();
    assert!(
        matches!(&refused, CallError::Refused { status: 401, .. }),
        "{text}"
    );
    assert!(
        text.contains("The audience 'https://vault.azure.net' is invalid"),
        "{text}"
    );
    assert!(text.contains("'https://management.azure.com'"), "{text}");

    let seen = arm.requests();
    assert_eq!(seen.len(), 2);
    let accepted = seen[0].claims.as_ref().expect("the first call's claims");
    assert_eq!(accepted.aud, ARM);
    assert_eq!(accepted.appid.as_deref(), Some(identity.client_id.as_str()));
    assert_eq!(
        seen[1].rejection,
        Some(TokenRejection::Audience {
            actual: "https://vault.azure.net".to_owned(),
            expected: arm.audiences(),
        })
    );
    assert!(seen[1].claims.is_none());
    // The issued log still says which certificate signed the assertion.
    assert_eq!(
        seen[1].issued.as_ref().map(|i| i.scope.as_str()),
        Some(VAULT_SCOPE)
    );
}

#[tokio::test]
async fn the_access_token_is_a_jwt_with_the_claims_of_an_entra_app_only_token_at_the_server_s_time()
{
    // Three days ahead of the wall clock: the times can only come from the ManualClock.
    let start = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap()
        + time::Duration::days(3);
    let clock = Arc::new(ManualClock::new(start));
    let entra = EntraServer::start().await;
    entra.use_clock(clock.clone());
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, Some(clock.clone()));

    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let (header, claims) = decode(token.token());
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["typ"], "JWT");
    assert_eq!(header["kid"], entra.signing_key_id().as_str());
    assert_eq!(header["x5t"], header["kid"]);

    let t0 = start.unix_timestamp();
    let tenant = identity.tenant_id.as_str();
    let client = identity.client_id.as_str();
    let oid = identity.object_id.as_str();
    let issuer = format!("{}{tenant}/v2.0", entra.base_url());
    assert_eq!(entra.issuer(tenant), issuer);
    for (name, expected) in [
        ("aud", json!(ARM)),
        ("iss", json!(issuer)),
        ("tid", json!(tenant)),
        ("oid", json!(oid)),
        ("sub", json!(oid)),
        ("appid", json!(client)),
        ("azp", json!(client)),
        ("appidacr", json!("2")),
        ("azpacr", json!("2")),
        ("idtyp", json!("app")),
        ("ver", json!("2.0")),
        ("iat", json!(t0)),
        ("nbf", json!(t0)),
        ("exp", json!(t0 + 3599)),
    ] {
        assert_eq!(claims.get(name), Some(&expected), "claim {name}");
    }
    assert!(claims["uti"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(!claims.contains_key("roles"), "no app role granted");

    // The kit reads them the same, typed.
    let typed = entra.validate(token.token(), ARM).expect("valid for ARM");
    assert_eq!(
        (typed.iat, typed.nbf, typed.exp),
        (Some(t0), Some(t0), t0 + 3599)
    );
    assert_eq!(typed.expires_at(), start + time::Duration::seconds(3599));
    assert_eq!(typed.tid, tenant);
    assert_eq!(typed.oid.as_deref(), Some(oid));
    assert_eq!(typed.kid, entra.signing_key_id());
    assert_eq!(typed.get("appidacr"), Some(json!("2")));
    assert_eq!(entra.object_id(client, tenant), oid);
    // `issued` still tells which certificate was behind it.
    assert_eq!(entra.issued(token.token()).unwrap().client_id, client);

    // An hour on, with a shorter token shape: the next token follows the clock.
    clock.advance(Duration::from_secs(3600));
    entra.set_token_shape(TokenShape {
        expires_in: 600,
        ..TokenShape::default()
    });
    let later = credential.get_token(&[VAULT_SCOPE]).await.unwrap();
    let (_, claims) = decode(later.token());
    assert_eq!(claims["aud"], "https://vault.azure.net");
    assert_eq!(claims["iat"], json!(t0 + 3600));
    assert_eq!(claims["exp"], json!(t0 + 3600 + 600));
}

#[tokio::test]
async fn a_client_registered_without_an_identity_has_a_stable_object_id() {
    let entra = EntraServer::start().await;
    let other = EntraServer::start().await;
    let (client, tenant) = ("11111111-2222-4333-8444-555555555555", "tenant-x");
    let oid = entra.object_id(client, tenant);
    assert!(uuid::Uuid::parse_str(&oid).is_ok(), "{oid}");
    assert_eq!(
        other.object_id(client, tenant),
        oid,
        "the same on every server"
    );
    assert_ne!(entra.object_id(client, "tenant-y"), oid, "one per tenant");

    let certificate = TestCertificate::self_signed();
    entra.register_certificate_der(client, tenant, certificate.certificate_der());
    let identity = TestIdentity {
        client_id: client.to_owned(),
        tenant_id: tenant.to_owned(),
        ..TestIdentity::new()
    };
    let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    let credential = ClientCertificateCredential::new(&file, options).unwrap();
    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let claims = entra.claims(token.token()).unwrap();
    assert_eq!(claims.oid.as_deref(), Some(oid.as_str()));
    assert_eq!(claims.sub, claims.oid);
}

#[tokio::test]
async fn extra_claims_for_every_client_and_for_one_client_are_in_the_tokens() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let (reader, writer) = (TestIdentity::new(), TestIdentity::new());
    let reader_credential = credential(&entra, &reader, None);
    let writer_credential = credential(&entra, &writer, None);
    entra.set_extra_claims(object(
        json!({"roles": ["Reader"], "xms_mirid": "/subscriptions/x"}),
    ));
    entra.set_extra_claims_for(&writer.client_id, object(json!({"roles": ["Writer"]})));

    let read = reader_credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let write = writer_credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let read_claims = entra.validate(read.token(), ARM).unwrap();
    let write_claims = entra.validate(write.token(), ARM).unwrap();
    assert_eq!(read_claims.roles, ["Reader"]);
    assert_eq!(
        write_claims.roles,
        ["Writer"],
        "the client's own claims come last"
    );
    assert_eq!(read_claims.extra["xms_mirid"], "/subscriptions/x");
    assert_eq!(write_claims.extra["xms_mirid"], "/subscriptions/x");

    // The resource logs them with the call.
    let answer = entra
        .client()
        .get(arm.url())
        .bearer_auth(write.token())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(arm.requests()[0].claims.as_ref().unwrap().roles, ["Writer"]);

    // An empty map removes them; a standard claim can be replaced.
    entra.set_extra_claims(Map::new());
    entra.set_extra_claims_for(&writer.client_id, object(json!({"ver": "1.0"})));
    let plain = reader_credential.get_token(&[VAULT_SCOPE]).await.unwrap();
    let plain = entra.claims(plain.token()).unwrap();
    assert!(plain.roles.is_empty() && !plain.extra.contains_key("xms_mirid"));
    let v1 = writer_credential.get_token(&[VAULT_SCOPE]).await.unwrap();
    assert_eq!(
        entra.claims(v1.token()).unwrap().ver.as_deref(),
        Some("1.0")
    );
}

#[tokio::test]
async fn the_discovery_documents_over_https_verify_a_token_with_another_jwt_library() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, None);
    let tenant = identity.tenant_id.as_str();
    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();

    // The tenant's OpenID configuration, as a resource's middleware reads it.
    let config_url = entra.openid_configuration_url(tenant);
    assert_eq!(
        config_url,
        format!(
            "{}{tenant}/v2.0/.well-known/openid-configuration",
            entra.base_url()
        )
    );
    let (status, config) = get_json(&entra, &config_url).await;
    assert_eq!(status, 200, "{config}");
    assert_eq!(config["issuer"], entra.issuer(tenant).as_str());
    assert_eq!(config["token_endpoint"], entra.token_url(tenant).as_str());
    assert_eq!(
        config["id_token_signing_alg_values_supported"],
        json!(["RS256"])
    );
    let jwks_uri = config["jwks_uri"].as_str().expect("jwks_uri");

    // Its keys.
    let (status, jwks) = get_json(&entra, jwks_uri).await;
    assert_eq!(status, 200, "{jwks}");
    assert_eq!(jwks, entra.jwks());
    assert_eq!(get_json(&entra, &entra.jwks_url()).await.1, jwks);
    let keys: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks.clone()).unwrap();
    let kid = jsonwebtoken::decode_header(token.token())
        .unwrap()
        .kid
        .unwrap();
    let jwk = keys.find(&kid).expect("the token's key in the JWKS");
    assert_eq!(jwks["keys"][0]["kty"], "RSA");
    assert_eq!(jwks["keys"][0]["use"], "sig");
    assert!(jwks["keys"][0]["x5c"][0].as_str().is_some());

    // jsonwebtoken verifies the signature and checks audience, issuer and expiry.
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[ARM]);
    validation.set_issuer(&[config["issuer"].as_str().unwrap()]);
    let verified = jsonwebtoken::decode::<Value>(token.token(), &key, &validation)
        .expect("jsonwebtoken accepts the kit's token");
    assert_eq!(verified.claims["appid"], identity.client_id.as_str());
    // ... and refuses it tampered.
    let tampered = tamper_signature(token.token());
    assert!(jsonwebtoken::decode::<Value>(&tampered, &key, &validation).is_err());
    // The certificate in `x5c` is the one the kit publishes.
    let pem = entra.signing_certificate_pem();
    let x5c = jwks["keys"][0]["x5c"][0].as_str().unwrap();
    assert_eq!(
        pem.lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>(),
        x5c
    );

    // `common` has the issuer template; an unknown tenant is Entra's 400.
    let (status, common) = get_json(&entra, &entra.openid_configuration_url("common")).await;
    assert_eq!(status, 200);
    assert_eq!(
        common["issuer"],
        format!("{}{{tenantid}}/v2.0", entra.base_url()).as_str()
    );
    let (status, unknown) = get_json(&entra, &entra.openid_configuration_url("nobody")).await;
    assert_eq!(status, 400);
    assert_eq!(unknown["error_codes"], json!([90002]));
    // Discovery requests are not token requests.
    assert_eq!(entra.token_requests(), 1);
}

/// `token` with its signature's first byte changed.
fn tamper_signature(token: &str) -> String {
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
    bytes[0] ^= 0x01;
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// `token` with its claims rewritten by `edit`, its signature kept.
fn tamper_claims(token: &str, edit: impl FnOnce(&mut Map<String, Value>)) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims = decode(token).1;
    edit(&mut claims);
    let claims = URL_SAFE_NO_PAD.encode(Value::Object(claims).to_string());
    format!("{}.{claims}.{}", parts[0], parts[2])
}

async fn call(
    entra: &EntraServer,
    resource: &ResourceServer,
    token: &str,
) -> (u16, String, String) {
    let answer = entra
        .client()
        .get(format!("{}subscriptions", resource.url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let challenge = answer
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, message, challenge)
}

#[tokio::test]
async fn an_expired_token_is_refused_once_the_clock_passes_exp_and_the_skew() {
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let entra = EntraServer::start().await;
    entra.use_clock(clock.clone());
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let credential = credential(&entra, &TestIdentity::new(), Some(clock.clone()));
    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let exp = entra.claims(token.token()).unwrap().exp;

    // Within the five minutes of skew after `exp`: still accepted.
    let skew = u64::try_from(TOKEN_CLOCK_SKEW_SECS).unwrap();
    let until_exp = u64::try_from(exp - clock.now().unix_timestamp()).unwrap();
    clock.advance(Duration::from_secs(until_exp + skew - 1));
    assert_eq!(call(&entra, &arm, token.token()).await.0, 200);

    clock.advance(Duration::from_secs(1));
    let (status, message, challenge) = call(&entra, &arm, token.token()).await;
    assert_eq!(status, 401);
    assert!(message.starts_with("The token is expired"), "{message}");
    assert!(message.contains(&format!("({exp})")), "{message}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(
        challenge.contains("error_description=\"The token is expired"),
        "{challenge}"
    );
    let now = clock.now().unix_timestamp();
    assert_eq!(
        arm.requests().last().unwrap().rejection,
        Some(TokenRejection::Expired { exp, now })
    );
    assert_eq!(
        entra.validate(token.token(), ARM),
        Err(TokenRejection::Expired { exp, now })
    );
    // Its claims can still be read.
    assert_eq!(entra.claims(token.token()).unwrap().exp, exp);
}

#[tokio::test]
async fn a_token_from_another_tenant_is_refused_when_the_resource_allows_only_its_tenants() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let (home, visitor) = (TestIdentity::new(), TestIdentity::new());
    let home_token = credential(&entra, &home, None)
        .get_token(&[ARM_SCOPE])
        .await
        .unwrap();
    let visitor_token = credential(&entra, &visitor, None)
        .get_token(&[ARM_SCOPE])
        .await
        .unwrap();
    // Any tenant by default.
    assert_eq!(call(&entra, &arm, visitor_token.token()).await.0, 200);

    arm.allow_tenants([home.tenant_id.as_str()]);
    assert_eq!(call(&entra, &arm, home_token.token()).await.0, 200);
    let (status, message, challenge) = call(&entra, &arm, visitor_token.token()).await;
    assert_eq!(status, 401);
    assert_eq!(
        message,
        format!(
            "The tenant '{}' is not allowed: this resource accepts tokens from '{}'.",
            visitor.tenant_id, home.tenant_id
        )
    );
    assert!(
        challenge.starts_with(&format!(
            "Bearer authorization_uri=\"{}{}\"",
            entra.base_url(),
            home.tenant_id
        )),
        "{challenge}"
    );
    assert_eq!(
        arm.requests()
            .last()
            .unwrap()
            .rejection
            .as_ref()
            .map(TokenRejection::code),
        Some("InvalidAuthenticationTokenTenant")
    );

    arm.allow_any_tenant();
    assert_eq!(call(&entra, &arm, visitor_token.token()).await.0, 200);
}

#[tokio::test]
async fn tampered_forged_and_foreign_tokens_are_refused_by_signature() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let identity = TestIdentity::new();
    let token = credential(&entra, &identity, None)
        .get_token(&[ARM_SCOPE])
        .await
        .unwrap();
    let kid = entra.signing_key_id();

    // A flipped signature bit; claims rewritten under the old signature.
    let bad_signature = tamper_signature(token.token());
    let other_tenant = tamper_claims(token.token(), |c| {
        c.insert("tid".to_owned(), json!("someone-else"));
    });
    for forged in [&bad_signature, &other_tenant] {
        let (status, message, _) = call(&entra, &arm, forged).await;
        assert_eq!(status, 401);
        assert_eq!(
            message,
            format!(
                "Signature validation failed: the token's signature does not verify with the issuer's key '{kid}'."
            )
        );
        assert_eq!(
            entra.validate(forged, ARM),
            Err(TokenRejection::Signature { kid: kid.clone() })
        );
        // The issued log does not know them: the lookup is no way in.
        assert!(entra.issued(forged).is_none());
    }

    // A real token from another Entra server: a key this one does not publish.
    let stranger = EntraServer::start().await;
    let foreign = credential(&stranger, &identity, None)
        .get_token(&[ARM_SCOPE])
        .await
        .unwrap();
    let (status, message, _) = call(&entra, &arm, foreign.token()).await;
    assert_eq!(status, 401);
    assert!(message.contains("no key with kid"), "{message}");
    assert!(message.contains(&stranger.signing_key_id()), "{message}");

    // `alg: none`, and garbage: typed rejections, never a panic.
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        token.token().split('.').nth(1).unwrap()
    );
    assert!(matches!(
        entra.validate(&unsigned, ARM),
        Err(TokenRejection::Malformed { .. })
    ));
    let none_signed = format!("{unsigned}AAAA");
    assert_eq!(
        entra.validate(&none_signed, ARM),
        Err(TokenRejection::Algorithm {
            alg: "none".to_owned()
        })
    );
    for garbage in ["", "Bearer", "a.b", "a.b.c", "%%%.%%%.%%%", "e30.e30.e30"] {
        let rejection = entra.validate(garbage, ARM).unwrap_err();
        assert!(
            rejection.to_string().starts_with("The token is malformed"),
            "{garbage:?}: {rejection}"
        );
    }
    let (status, message, _) = call(&entra, &arm, "a.b").await;
    assert_eq!(status, 401);
    assert!(
        message.contains("three non-empty base64url parts"),
        "{message}"
    );
}

#[tokio::test]
async fn after_a_signing_key_rollover_new_tokens_use_the_new_key_and_old_ones_stay_valid() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, None);
    let old = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let old_kid = entra.signing_key_id();

    let new_kid = entra.rotate_signing_key();
    assert_ne!(new_kid, old_kid);
    assert_eq!(entra.signing_key_id(), new_kid);
    let jwks = entra.jwks();
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(
        kids,
        [new_kid.as_str(), old_kid.as_str()],
        "the new key first"
    );

    let new = credential.get_token(&[VAULT_SCOPE]).await.unwrap();
    assert_eq!(entra.claims(new.token()).unwrap().kid, new_kid);
    assert_eq!(entra.claims(old.token()).unwrap().kid, old_kid);
    assert_eq!(call(&entra, &arm, old.token()).await.0, 200);
}

#[tokio::test]
async fn padded_tokens_have_the_length_asked_and_stay_valid_jwts() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    entra.set_access_token_length(2048);
    let credential = credential(&entra, &TestIdentity::new(), None);
    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_eq!(token.token().len(), 2048);
    assert_eq!(entra.validate(token.token(), ARM).unwrap().aud, ARM);
    assert_eq!(call(&entra, &arm, token.token()).await.0, 200);
}

#[tokio::test]
async fn a_retired_signing_key_leaves_the_jwks_and_its_tokens_are_refused_as_unknown() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, None);
    let old = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let old_kid = entra.signing_key_id();
    let new_kid = entra.rotate_signing_key();

    assert!(!entra.retire_signing_key("no-such-kid"));
    assert!(entra.retire_signing_key(&old_kid));
    assert!(!entra.retire_signing_key(&old_kid), "already retired");
    let (status, jwks) = get_json(&entra, &entra.jwks_url()).await;
    assert_eq!(status, 200);
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids, [new_kid.as_str()], "only the new key is published");

    // The resource refuses the old key's token, naming the unknown key.
    let (status, message, challenge) = call(&entra, &arm, old.token()).await;
    assert_eq!(status, 401);
    assert!(
        message.contains(&format!("no key with kid '{old_kid}'")),
        "{message}"
    );
    assert!(challenge.contains("invalid_token"), "{challenge}");
    assert_eq!(
        entra.validate(old.token(), ARM).unwrap_err(),
        TokenRejection::UnknownKey { kid: old_kid }
    );

    // Retiring the key that signs: a new key signs the next tokens (the resource accepts
    // them) and the retired key's tokens are refused.
    let signed_by_new = credential.get_token(&[VAULT_SCOPE]).await.unwrap();
    assert_eq!(entra.claims(signed_by_new.token()).unwrap().kid, new_kid);
    assert!(entra.retire_signing_key(&new_kid));
    let replacement = entra.signing_key_id();
    assert_ne!(replacement, new_kid);
    assert!(matches!(
        entra.validate(signed_by_new.token(), "https://vault.azure.net"),
        Err(TokenRejection::UnknownKey { .. })
    ));
    let other = TestIdentity::new();
    let new_token = crate::testing_kit_jwt::credential(&entra, &other, None)
        .get_token(&[ARM_SCOPE])
        .await
        .unwrap();
    assert_eq!(entra.claims(new_token.token()).unwrap().kid, replacement);
    assert_eq!(call(&entra, &arm, new_token.token()).await.0, 200);
}

#[tokio::test]
async fn the_signing_public_key_pem_verifies_tokens_of_its_key_only_with_jsonwebtoken() {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};

    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let credential = credential(&entra, &identity, None);
    let token = credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let pem = entra.signing_public_key_pem();
    assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{pem}");
    assert!(pem.ends_with("-----END PUBLIC KEY-----\n"), "{pem}");
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[ARM]);
    validation.set_issuer(&[entra.issuer(&identity.tenant_id)]);
    let key = DecodingKey::from_rsa_pem(pem.as_bytes()).unwrap();
    let claims = decode::<Value>(token.token(), &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["tid"], identity.tenant_id.as_str());

    // After a rollover the new key's PEM does not verify the old key's token.
    entra.rotate_signing_key();
    let rolled = entra.signing_public_key_pem();
    assert_ne!(rolled, pem);
    let new_key = DecodingKey::from_rsa_pem(rolled.as_bytes()).unwrap();
    let e = decode::<Value>(token.token(), &new_key, &validation).unwrap_err();
    assert_eq!(
        *e.kind(),
        jsonwebtoken::errors::ErrorKind::InvalidSignature,
        "{e}"
    );
}

/// Entra's token-signing key and the client certificate rotated without a failed call:
/// the key first (the old one still verifies the cached token), then the certificate
/// (the swapped-in credential's tokens are new ones, signed by the new key), then the
/// old key retired: what the credential hands out is still accepted.
#[cfg(unix)]
#[tokio::test]
async fn the_signing_key_then_the_certificate_then_retiring_the_old_key_fails_no_call() {
    use msi_dataplane_testing::IdentityFixture;

    let mut fx = IdentityFixture::start().await;
    let arm = ResourceServer::start(&fx.entra, ARM_SCOPE).await;
    let before = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_eq!(call(&fx.entra, &arm, before.token()).await.0, 200);
    let old_kid = fx.entra.signing_key_id();

    fx.entra.rotate_signing_key();
    let cached = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_eq!(cached.token(), before.token(), "the cached token, old key");
    assert_eq!(call(&fx.entra, &arm, cached.token()).await.0, 200);

    let next = TestCertificate::builder()
        .renewing(&fx.certificate)
        .self_signed();
    fx.rotate_to(next, BundleFormat::Pem).await;
    let after = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_ne!(after.token(), before.token());
    assert_ne!(fx.entra.claims(after.token()).unwrap().kid, old_kid);
    assert_eq!(call(&fx.entra, &arm, after.token()).await.0, 200);

    assert!(fx.entra.retire_signing_key(&old_kid));
    let served = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_eq!(call(&fx.entra, &arm, served.token()).await.0, 200);
}

/// The wrong order: the old key retired while the credential still hands out the token
/// it signed (the certificate not yet rotated): the resource refuses that token.
#[cfg(unix)]
#[tokio::test]
async fn retiring_the_old_signing_key_first_refuses_the_cached_token() {
    use msi_dataplane_testing::IdentityFixture;

    let fx = IdentityFixture::start().await;
    let arm = ResourceServer::start(&fx.entra, ARM_SCOPE).await;
    let before = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    let old_kid = fx.entra.signing_key_id();
    fx.entra.rotate_signing_key();
    assert!(fx.entra.retire_signing_key(&old_kid));
    let cached = fx.credential.get_token(&[ARM_SCOPE]).await.unwrap();
    assert_eq!(cached.token(), before.token(), "still the cached token");
    let (status, message, _) = call(&fx.entra, &arm, cached.token()).await;
    assert_eq!(status, 401);
    assert!(message.contains(&old_kid), "{message}");
}
