//! Self-test of the Entra-compatible test token server (tests/support/entra.rs).
//!
//! Independent of the `msi_dataplane` library: assertions are built and signed here with
//! the `rsa` crate, and POSTed with reqwest, to prove the server verifies like Entra ID.

use crate::support;

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rsa::RsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey as _;
use rsa::signature::{RandomizedSigner as _, SignatureEncoding as _, Signer as _};
use serde_json::{Value, json};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};
use support::entra::{EntraServer, Outcome, Scripted, TokenShape};
use support::fixtures::{credential_path, identity_pem_path, leaf_pem_path};
use support::harness::{ARM as SCOPE, https_client, server_with};

struct Fixture {
    client_id: String,
    tenant_id: String,
    leaf_pem: Vec<u8>,
    leaf_der: Vec<u8>,
    key: RsaPrivateKey,
}

/// Loads `fixtures/credentials/NAME.json` (client id, tenant, key from the bundle) and
/// `fixtures/certs/NAME.leaf.pem`.
fn fixture(name: &str) -> Fixture {
    let json_path = credential_path(name);
    let json: Value = serde_json::from_slice(
        &std::fs::read(&json_path)
            .unwrap_or_else(|e| panic!("{}: {e} (run fixtures/generate.sh)", json_path.display())),
    )
    .unwrap();
    let bundle = STANDARD
        .decode(json["client_secret"].as_str().unwrap())
        .unwrap();
    let blocks = pem::parse_many(&bundle).unwrap();
    let key_block = blocks
        .iter()
        .find(|b| b.tag() == "PRIVATE KEY")
        .expect("PRIVATE KEY block in bundle");
    let key = RsaPrivateKey::from_pkcs8_der(key_block.contents()).unwrap();
    let leaf_pem = std::fs::read(leaf_pem_path(name)).unwrap();
    let leaf_der = pem::parse(&leaf_pem).unwrap().contents().to_vec();
    assert!(
        blocks
            .iter()
            .any(|b| b.tag() == "CERTIFICATE" && b.contents() == leaf_der.as_slice()),
        "the bundle holds the leaf"
    );
    Fixture {
        client_id: json["client_id"].as_str().unwrap().to_owned(),
        tenant_id: json["tenant_id"].as_str().unwrap().to_owned(),
        leaf_pem,
        leaf_der,
        key,
    }
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn x5t(der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha1::digest(der))
}

fn x5t_s256(der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(der))
}

/// A client assertion under construction; every field can be broken by a test.
#[derive(Clone)]
struct Assertion {
    header: serde_json::Map<String, Value>,
    claims: serde_json::Map<String, Value>,
}

impl Assertion {
    /// A valid RS256 assertion with `x5t` for `fx`, addressed to `aud`.
    fn new(fx: &Fixture, aud: &str) -> Assertion {
        let t = now();
        let header = json!({
            "alg": "RS256",
            "typ": "JWT",
            "x5t": x5t(&fx.leaf_der),
            "x5c": [STANDARD.encode(&fx.leaf_der)],
        });
        let claims = json!({
            "aud": aud,
            "iss": fx.client_id,
            "sub": fx.client_id,
            "jti": uuid::Uuid::new_v4().to_string(),
            "nbf": t,
            "iat": t,
            "exp": t + 600,
        });
        Assertion {
            header: header.as_object().unwrap().clone(),
            claims: claims.as_object().unwrap().clone(),
        }
    }

    /// Switch to PS256 identified by `x5t#S256` only.
    fn ps256(mut self, fx: &Fixture) -> Assertion {
        self.header.insert("alg".into(), json!("PS256"));
        self.header.remove("x5t");
        self.header
            .insert("x5t#S256".into(), json!(x5t_s256(&fx.leaf_der)));
        self
    }

    fn header(mut self, k: &str, v: Value) -> Assertion {
        self.header.insert(k.into(), v);
        self
    }

    fn claim(mut self, k: &str, v: Value) -> Assertion {
        self.claims.insert(k.into(), v);
        self
    }

    fn sign(&self, key: &RsaPrivateKey) -> String {
        let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&self.header).unwrap());
        let c = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&self.claims).unwrap());
        let input = format!("{h}.{c}");
        let sig = match self.header["alg"].as_str().unwrap() {
            "PS256" => rsa::pss::SigningKey::<Sha256>::new(key.clone())
                .sign_with_rng(&mut rsa::rand_core::OsRng, input.as_bytes())
                .to_vec(),
            _ => rsa::pkcs1v15::SigningKey::<Sha256>::new(key.clone())
                .sign(input.as_bytes())
                .to_vec(),
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    fn error_codes(&self) -> Vec<u64> {
        self.json()["error_codes"]
            .as_array()
            .unwrap_or_else(|| panic!("no error_codes: {}", self.text))
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    }

    fn access_token(&self) -> String {
        assert_eq!(self.status, 200, "{}", self.text);
        self.json()["access_token"].as_str().unwrap().to_owned()
    }
}

async fn post_form(client: &reqwest::Client, url: &str, form: &[(&str, &str)]) -> Reply {
    let resp = client.post(url).form(form).send().await.unwrap();
    Reply {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        text: resp.text().await.unwrap(),
    }
}

/// The client-credentials form with `assertion` for `fx`.
fn assertion_form<'a>(
    fx: &'a Fixture,
    scope: &'a str,
    assertion: &'a str,
) -> [(&'a str, &'a str); 5] {
    [
        ("grant_type", "client_credentials"),
        ("client_id", &fx.client_id),
        ("scope", scope),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", assertion),
    ]
}

async fn post_assertion(
    client: &reqwest::Client,
    url: &str,
    fx: &Fixture,
    scope: &str,
    assertion: &str,
) -> Reply {
    post_form(client, url, &assertion_form(fx, scope, assertion)).await
}

/// Post `assertion` for `fx` (scope ARM) and expect Entra's 401 `invalid_client` with
/// AADSTS `code`.
async fn assert_refused(
    client: &reqwest::Client,
    url: &str,
    fx: &Fixture,
    assertion: &str,
    code: u64,
) {
    let reply = post_assertion(client, url, fx, SCOPE, assertion).await;
    assert_entra_error(&reply, 401, "invalid_client", code);
}

/// A started HTTPS server with `pem-pkcs8` registered, a client trusting it, the fixture
/// and its token URL.
async fn setup() -> (EntraServer, reqwest::Client, Fixture, String) {
    let server = server_with("pem-pkcs8").await;
    let fx = fixture("pem-pkcs8");
    let url = server.token_url(&fx.tenant_id);
    (server, https_client(), fx, url)
}

fn assert_entra_error(reply: &Reply, status: u16, error: &str, code: u64) {
    assert_eq!(reply.status, status, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["error"], error, "{}", reply.text);
    assert_eq!(reply.error_codes(), vec![code], "{}", reply.text);
    let description = body["error_description"].as_str().unwrap();
    assert!(
        description.starts_with(&format!("AADSTS{code}: ")),
        "{description}"
    );
    assert!(description.contains("\r\nTrace ID: "), "{description}");
    assert!(
        description.contains("\r\nCorrelation ID: "),
        "{description}"
    );
    assert_eq!(
        body["error_uri"],
        format!("https://login.microsoftonline.com/error?code={code}")
    );
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

#[tokio::test]
async fn valid_rs256_with_x5t_gets_a_token() {
    let (server, client, fx, url) = setup().await;
    assert_eq!(
        url,
        format!("{}{}/oauth2/v2.0/token", server.base_url(), fx.tenant_id)
    );
    assert!(server.base_url().starts_with("https://127.0.0.1:"));
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);
    let reply = post_assertion(&client, &url, &fx, SCOPE, &assertion).await;
    let token = reply.access_token();
    let body = reply.json();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3599);
    assert_eq!(body["ext_expires_in"], 3599);
    assert!(body.get("refresh_in").is_none());

    let issued = server.issued(&token).expect("issued() knows the token");
    assert_eq!(issued.client_id, fx.client_id);
    assert_eq!(issued.tenant, fx.tenant_id);
    assert_eq!(issued.scope, SCOPE);
    assert_eq!(issued.alg, "RS256");
    assert_eq!(issued.expires_in, 3599);
    let sha256_hex: String = Sha256::digest(&fx.leaf_der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(issued.cert_sha256_hex, sha256_hex);
    assert!(server.issued("not-a-token").is_none());

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(server.token_requests(), 1);
    let r = &requests[0];
    assert_eq!(r.tenant.as_deref(), Some(fx.tenant_id.as_str()));
    assert_eq!(r.client_id.as_deref(), Some(fx.client_id.as_str()));
    assert_eq!(r.scope.as_deref(), Some(SCOPE));
    assert_eq!(r.alg.as_deref(), Some("RS256"));
    assert_eq!(r.x5t.as_deref(), Some(x5t(&fx.leaf_der).as_str()));
    assert_eq!(r.x5t_s256, None);
    assert_eq!(r.x5c_len, 1);
    assert_eq!(r.aud.as_deref(), Some(url.as_str()));
    assert_eq!(r.expected_aud, url);
    assert!(r.jti.is_some());
    assert_eq!(r.outcome, Outcome::Token(token));
    assert_eq!(r.matched_cert_sha256.as_deref(), Some(sha256_hex.as_str()));
    assert!(r.header("content-type").is_some());
}

#[tokio::test]
async fn valid_ps256_with_x5t_s256_gets_a_token() {
    let (server, client, fx, url) = setup().await;
    let assertion = Assertion::new(&fx, &url).ps256(&fx).sign(&fx.key);
    let reply = post_assertion(&client, &url, &fx, SCOPE, &assertion).await;
    let token = reply.access_token();
    let issued = server.issued(&token).unwrap();
    assert_eq!(issued.alg, "PS256");
    let r = &server.requests()[0];
    assert_eq!(r.x5t, None);
    assert_eq!(r.x5t_s256.as_deref(), Some(x5t_s256(&fx.leaf_der).as_str()));

    // Both thumbprints, consistent: accepted.
    let assertion = Assertion::new(&fx, &url)
        .header("x5t#S256", json!(x5t_s256(&fx.leaf_der)))
        .sign(&fx.key);
    post_assertion(&client, &url, &fx, SCOPE, &assertion)
        .await
        .access_token();
}

#[tokio::test]
async fn wrong_aud_is_700023() {
    let (server, client, fx, url) = setup().await;
    for aud in [
        format!(
            "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
            fx.tenant_id
        ),
        format!("{url}/"),
        url.replace("127.0.0.1", "localhost"),
        server.base_url(),
    ] {
        let assertion = Assertion::new(&fx, &aud).sign(&fx.key);
        assert_refused(&client, &url, &fx, &assertion, 700023).await;
    }
    // aud as an array is not the exact URL either.
    let assertion = Assertion::new(&fx, &url)
        .claim("aud", json!([url]))
        .sign(&fx.key);
    assert_refused(&client, &url, &fx, &assertion, 700023).await;
    let r = server.requests().pop().unwrap();
    assert_eq!(
        r.outcome,
        Outcome::Error {
            status: 401,
            code: 700023,
            error: "invalid_client".into()
        }
    );
    // The signature verified before the claims were checked.
    assert!(r.matched_cert_sha256.is_some());
}

#[tokio::test]
async fn replayed_jti_is_rejected() {
    let (server, client, fx, url) = setup().await;
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);
    post_assertion(&client, &url, &fx, SCOPE, &assertion)
        .await
        .access_token();
    let reply = post_assertion(&client, &url, &fx, SCOPE, &assertion).await;
    assert_entra_error(&reply, 401, "invalid_client", 50027);
    assert!(reply.text.contains("replay"), "{}", reply.text);

    // Same jti in a freshly signed assertion: still a replay.
    let jti = server.requests()[0].jti.clone().unwrap();
    let again = Assertion::new(&fx, &url)
        .claim("jti", json!(jti))
        .sign(&fx.key);
    assert_refused(&client, &url, &fx, &again, 50027).await;

    // Missing jti.
    let mut no_jti = Assertion::new(&fx, &url);
    no_jti.claims.remove("jti");
    let reply = post_assertion(&client, &url, &fx, SCOPE, &no_jti.sign(&fx.key)).await;
    assert_eq!(reply.status, 401);
}

#[tokio::test]
async fn tampered_signature_is_700027() {
    let (server, client, fx, url) = setup().await;
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);

    // Flip a bit of the signature.
    let (input, sig) = assertion.rsplit_once('.').unwrap();
    let mut sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    sig[17] ^= 0x01;
    let tampered = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&sig));
    let reply = post_assertion(&client, &url, &fx, SCOPE, &tampered).await;
    assert_entra_error(&reply, 401, "invalid_client", 700027);
    assert!(
        reply.text.contains("signature validation"),
        "{}",
        reply.text
    );
    assert_eq!(server.requests()[0].matched_cert_sha256, None);

    // Change the claims after signing.
    let (_, claims_b64) = input.split_once('.').unwrap();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims_b64).unwrap()).unwrap();
    claims["exp"] = json!(claims["exp"].as_i64().unwrap() + 60);
    let header_b64 = input.split('.').next().unwrap();
    let forged = format!(
        "{header_b64}.{}.{}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap()),
        URL_SAFE_NO_PAD.encode(&sig)
    );
    assert_refused(&client, &url, &fx, &forged, 700027).await;

    // Signed by another key while claiming the registered certificate.
    let other = fixture("rotation-1");
    let assertion = Assertion::new(&fx, &url).sign(&other.key);
    assert_refused(&client, &url, &fx, &assertion, 700027).await;

    // RS256 signature presented as PS256.
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);
    let (_, sig) = assertion.rsplit_once('.').unwrap();
    let ps = Assertion::new(&fx, &url).header("alg", json!("PS256"));
    let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&ps.header).unwrap());
    let c = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&ps.claims).unwrap());
    assert_refused(&client, &url, &fx, &format!("{h}.{c}.{sig}"), 700027).await;
}

#[tokio::test]
async fn unregistered_certificate_is_700027() {
    let (server, client, fx, url) = setup().await;
    let other = fixture("rotation-1");

    // Correctly signed by an unregistered certificate.
    let assertion = Assertion::new(&other, &url).sign(&other.key);
    let reply = post_assertion(&client, &url, &fx, SCOPE, &assertion).await;
    assert_entra_error(&reply, 401, "invalid_client", 700027);
    assert!(reply.text.contains("not registered"), "{}", reply.text);

    // Same with x5t#S256.
    let assertion = Assertion::new(&other, &url).ps256(&other).sign(&other.key);
    assert_refused(&client, &url, &fx, &assertion, 700027).await;

    // x5t of the registered cert, x5t#S256 of another: inconsistent.
    let assertion = Assertion::new(&fx, &url)
        .header("x5t#S256", json!(x5t_s256(&other.leaf_der)))
        .sign(&fx.key);
    assert_refused(&client, &url, &fx, &assertion, 700027).await;

    // No thumbprint at all.
    let mut none = Assertion::new(&fx, &url);
    none.header.remove("x5t");
    assert_refused(&client, &url, &fx, &none.sign(&fx.key), 700027).await;

    // Padded x5t is not base64url without padding.
    let padded = Assertion::new(&fx, &url)
        .header("x5t", json!(STANDARD.encode(Sha1::digest(&fx.leaf_der))))
        .sign(&fx.key);
    assert_refused(&client, &url, &fx, &padded, 700027).await;

    // After registering it too (a client may have several), the other cert works.
    server.register_certificate_pem(&fx.client_id, &fx.tenant_id, &other.leaf_pem);
    let assertion = Assertion::new(&other, &url).sign(&other.key);
    let token = post_assertion(&client, &url, &fx, SCOPE, &assertion)
        .await
        .access_token();
    let sha: String = Sha256::digest(&other.leaf_der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(server.issued(&token).unwrap().cert_sha256_hex, sha);
    // ... and the first one still does.
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);
    post_assertion(&client, &url, &fx, SCOPE, &assertion)
        .await
        .access_token();
}

#[tokio::test]
async fn x5c_must_hold_the_matched_certificate() {
    let (server, client, fx, url) = setup().await;
    let other = fixture("rotation-1");

    let mut missing = Assertion::new(&fx, &url);
    missing.header.remove("x5c");
    assert_refused(&client, &url, &fx, &missing.sign(&fx.key), 700027).await;

    let empty = Assertion::new(&fx, &url).header("x5c", json!([]));
    assert_refused(&client, &url, &fx, &empty.sign(&fx.key), 700027).await;

    let url_safe =
        Assertion::new(&fx, &url).header("x5c", json!([URL_SAFE_NO_PAD.encode(&fx.leaf_der)]));
    assert_refused(&client, &url, &fx, &url_safe.sign(&fx.key), 700027).await;

    let wrong = Assertion::new(&fx, &url).header("x5c", json!([STANDARD.encode(&other.leaf_der)]));
    assert_refused(&client, &url, &fx, &wrong.sign(&fx.key), 700030).await;

    // A chain (leaf first) is fine.
    let intermediate =
        pem::parse(std::fs::read(identity_pem_path("intermediate")).unwrap()).unwrap();
    let chain = Assertion::new(&fx, &url).header(
        "x5c",
        json!([
            STANDARD.encode(&fx.leaf_der),
            STANDARD.encode(intermediate.contents())
        ]),
    );
    post_assertion(&client, &url, &fx, SCOPE, &chain.sign(&fx.key))
        .await
        .access_token();
    assert_eq!(server.requests().last().unwrap().x5c_len, 2);
}

#[tokio::test]
async fn header_alg_and_typ_are_checked() {
    let (_server, client, fx, url) = setup().await;
    for alg in ["ES256", "none", "HS256", "RS384"] {
        let a = Assertion::new(&fx, &url).header("alg", json!(alg));
        let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&a.header).unwrap());
        let c = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&a.claims).unwrap());
        assert_refused(&client, &url, &fx, &format!("{h}.{c}.AAAA"), 5002738).await;
    }
    let bad_typ = Assertion::new(&fx, &url).header("typ", json!("JOSE+JSON"));
    assert_refused(&client, &url, &fx, &bad_typ.sign(&fx.key), 50027).await;
    let mut no_typ = Assertion::new(&fx, &url);
    no_typ.header.remove("typ");
    post_assertion(&client, &url, &fx, SCOPE, &no_typ.sign(&fx.key))
        .await
        .access_token();
    for junk in ["not-a-jwt", "a.b", "a.b.c.d", "e30.e30.", "!!!.e30.AAAA"] {
        assert_refused(&client, &url, &fx, junk, 50027).await;
    }
}

#[tokio::test]
async fn time_claims_are_checked_700024() {
    let (_server, client, fx, url) = setup().await;
    let t = now();
    let cases = [
        ("exp", json!(t - 600)),                // expired
        ("exp", json!(t)),                      // exp must be > now
        ("nbf", json!(t + 3600)),               // not yet valid (beyond 300 s skew)
        ("exp", json!(t + 2 * 86_400)),         // lifetime > 1 day
        ("exp", json!((t + 600) as f64 + 0.5)), // not an integer
        ("nbf", json!((t + 1).to_string())),    // not a number
    ];
    for (claim, value) in cases {
        let a = Assertion::new(&fx, &url).claim(claim, value.clone());
        assert_refused(&client, &url, &fx, &a.sign(&fx.key), 700024).await;
        let _ = (claim, value);
    }
    let mut no_iat = Assertion::new(&fx, &url);
    no_iat.claims.remove("iat");
    assert_refused(&client, &url, &fx, &no_iat.sign(&fx.key), 700024).await;

    // Within the skew: fine.
    let a = Assertion::new(&fx, &url).claim("nbf", json!(t + 120));
    post_assertion(&client, &url, &fx, SCOPE, &a.sign(&fx.key))
        .await
        .access_token();
}

#[tokio::test]
async fn expired_registered_certificate_is_700027() {
    let server = EntraServer::start().await;
    let client = https_client();
    let fx = fixture("expired");
    server.register_certificate_pem(&fx.client_id, &fx.tenant_id, &fx.leaf_pem);
    let url = server.token_url(&fx.tenant_id);
    let a = Assertion::new(&fx, &url);
    let reply = post_assertion(&client, &url, &fx, SCOPE, &a.sign(&fx.key)).await;
    assert_entra_error(&reply, 401, "invalid_client", 700027);
    assert!(reply.text.contains("expired"), "{}", reply.text);
}

#[tokio::test]
async fn iss_or_sub_not_client_id_is_700021() {
    let (_server, client, fx, url) = setup().await;
    let other = "00000000-0000-0000-0000-000000000000";
    for claim in ["iss", "sub"] {
        let a = Assertion::new(&fx, &url).claim(claim, json!(other));
        assert_refused(&client, &url, &fx, &a.sign(&fx.key), 700021).await;
    }
    let mut no_sub = Assertion::new(&fx, &url);
    no_sub.claims.remove("sub");
    assert_refused(&client, &url, &fx, &no_sub.sign(&fx.key), 700021).await;
}

#[tokio::test]
async fn form_fields_are_checked() {
    let (server, client, fx, url) = setup().await;
    let assertion = Assertion::new(&fx, &url).sign(&fx.key);
    let jwt_bearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

    for scope in [
        "https://management.azure.com/",
        "https://management.azure.com/user_impersonation",
        "https://vault.azure.net/.default https://management.azure.com",
        "",
    ] {
        let reply = post_assertion(&client, &url, &fx, scope, &assertion).await;
        assert_entra_error(&reply, 400, "invalid_scope", 1002012);
    }

    let base = |grant: &'static str, atype: &'static str, cid: &str| {
        vec![
            ("grant_type".to_owned(), grant.to_owned()),
            ("client_id".to_owned(), cid.to_owned()),
            ("scope".to_owned(), SCOPE.to_owned()),
            ("client_assertion_type".to_owned(), atype.to_owned()),
            ("client_assertion".to_owned(), assertion.clone()),
        ]
    };
    let send = |form: Vec<(String, String)>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let form: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            post_form(&client, &url, &form).await
        }
    };
    let reply = send(base("authorization_code", jwt_bearer, &fx.client_id)).await;
    assert_entra_error(&reply, 400, "unsupported_grant_type", 70003);
    let reply = send(base("client_credentials", "urn:other", &fx.client_id)).await;
    assert_entra_error(&reply, 400, "invalid_request", 50027);
    let reply = send(base(
        "client_credentials",
        jwt_bearer,
        "11111111-1111-1111-1111-111111111111",
    ))
    .await;
    assert_entra_error(&reply, 400, "unauthorized_client", 700016);
    let mut no_assertion = base("client_credentials", jwt_bearer, &fx.client_id);
    no_assertion.pop();
    let reply = send(no_assertion).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    let mut duplicated = base("client_credentials", jwt_bearer, &fx.client_id);
    duplicated.push(("scope".to_owned(), SCOPE.to_owned()));
    let reply = send(duplicated).await;
    assert_entra_error(&reply, 400, "invalid_request", 9000411);

    // Unknown tenant.
    let other_url = server.token_url("11111111-2222-3333-4444-555555555555");
    let reply = post_assertion(&client, &other_url, &fx, SCOPE, &assertion).await;
    assert_entra_error(&reply, 400, "invalid_request", 90002);

    // Not form-encoded.
    let resp = client
        .post(&url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // GET on the token path.
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);

    // Other paths: 404, not recorded.
    let before = server.token_requests();
    for path in [
        "",
        "x",
        "oauth2/v2.0/token",
        "t/oauth2/v2.0/token/",
        "t/oauth2/token",
    ] {
        let resp = client
            .post(format!("{}{path}", server.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
    assert_eq!(server.token_requests(), before);

    // The original assertion was never consumed by these failures.
    post_assertion(&client, &url, &fx, SCOPE, &assertion)
        .await
        .access_token();
}

#[tokio::test]
async fn path_prefix_authority_works() {
    let (server, client, fx, _) = setup().await;
    let url = format!(
        "{}prefix/{}/oauth2/v2.0/token",
        server.base_url(),
        fx.tenant_id
    );
    let a = Assertion::new(&fx, &url);
    let token = post_assertion(&client, &url, &fx, SCOPE, &a.sign(&fx.key))
        .await
        .access_token();
    assert_eq!(server.issued(&token).unwrap().tenant, fx.tenant_id);
    assert_eq!(
        server.requests()[0].path,
        format!("/prefix/{}/oauth2/v2.0/token", fx.tenant_id)
    );
    // The aud must include the prefix.
    let a = Assertion::new(&fx, &server.token_url(&fx.tenant_id));
    assert_refused(&client, &url, &fx, &a.sign(&fx.key), 700023).await;
}

#[tokio::test]
async fn scripted_answers_are_verbatim_then_service_resumes() {
    let (server, client, fx, url) = setup().await;
    server.enqueue(
        Scripted::status(503)
            .retry_after("7")
            .header("x-ms-test", "yes"),
    );
    server.enqueue(
        Scripted::aadsts(429, "temporarily_unavailable", 50196, "throttled").retry_after("1"),
    );
    server.enqueue(
        Scripted::status(502)
            .header("content-type", "text/html")
            .body("<html>Bad gateway</html>"),
    );
    assert_eq!(server.pending_scripted(), 3);

    let a = Assertion::new(&fx, &url).sign(&fx.key);
    let reply = post_assertion(&client, &url, &fx, SCOPE, &a).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.headers["retry-after"], "7");
    assert_eq!(reply.headers["x-ms-test"], "yes");
    assert_eq!(reply.text, "{}");

    let reply = post_assertion(&client, &url, &fx, SCOPE, &a).await;
    assert_entra_error(&reply, 429, "temporarily_unavailable", 50196);
    assert_eq!(reply.headers["retry-after"], "1");

    let reply = post_assertion(&client, &url, &fx, SCOPE, &a).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.headers["content-type"], "text/html");
    assert_eq!(reply.text, "<html>Bad gateway</html>");

    // Scripted answers did not consume the jti: the same assertion now works.
    let token = post_assertion(&client, &url, &fx, SCOPE, &a)
        .await
        .access_token();
    let outcomes: Vec<Outcome> = server.requests().into_iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Scripted(503),
            Outcome::Scripted(429),
            Outcome::Scripted(502),
            Outcome::Token(token)
        ]
    );
    assert_eq!(server.pending_scripted(), 0);
}

#[tokio::test]
async fn scripted_close_connection_drops_without_answer() {
    let (server, client, fx, url) = setup().await;
    server.enqueue(Scripted::close_connection());
    server.enqueue(Scripted::close_connection().delayed(Duration::from_millis(50)));
    let a = Assertion::new(&fx, &url).sign(&fx.key);
    let form = assertion_form(&fx, SCOPE, &a);
    for n in 1..=2 {
        let err = client.post(&url).form(&form).send().await.unwrap_err();
        assert!(!err.is_status(), "{err:?}");
        assert_eq!(server.token_requests(), n);
    }
    let outcomes: Vec<Outcome> = server.requests().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, vec![Outcome::Scripted(0), Outcome::Scripted(0)]);
    // Normal service after that.
    post_assertion(&client, &url, &fx, SCOPE, &a)
        .await
        .access_token();
}

#[tokio::test]
async fn scripted_delay_and_scope_delay_do_not_block_others() {
    let (server, client, fx, url) = setup().await;
    let slow_scope = "https://vault.azure.net/.default";
    server.set_scope_delay(slow_scope, Duration::from_millis(4000));

    let slow = {
        let (client, url) = (client.clone(), url.clone());
        let a = Assertion::new(&fx, &url).sign(&fx.key);
        let fx2 = fixture("pem-pkcs8");
        tokio::spawn(async move {
            let start = Instant::now();
            let reply = post_assertion(&client, &url, &fx2, slow_scope, &a).await;
            (start.elapsed(), reply.access_token())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let a = Assertion::new(&fx, &url).sign(&fx.key);
    post_assertion(&client, &url, &fx, SCOPE, &a)
        .await
        .access_token();
    assert!(
        start.elapsed() < Duration::from_millis(3000),
        "{:?}",
        start.elapsed()
    );
    let (elapsed, token) = slow.await.unwrap();
    assert!(elapsed >= Duration::from_millis(4000), "{elapsed:?}");
    assert_eq!(server.issued(&token).unwrap().scope, slow_scope);

    server.enqueue(Scripted::status(500).delayed(Duration::from_millis(300)));
    let start = Instant::now();
    let reply = post_assertion(&client, &url, &fx, SCOPE, &a).await;
    assert_eq!(reply.status, 500);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn token_shape_and_client_request_id() {
    let (server, client, fx, url) = setup().await;
    server.set_token_shape(TokenShape {
        expires_in: 86399,
        expires_in_as_string: true,
        ext_expires_in: None,
        refresh_in: Some(43200),
        token_type: None,
    });
    let a = Assertion::new(&fx, &url).sign(&fx.key);
    let resp = client
        .post(&url)
        .header("client-request-id", "9f3e0f7e-1111-4222-8333-944445555666")
        .header("return-client-request-id", "true")
        .form(&assertion_form(&fx, SCOPE, &a))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["client-request-id"],
        "9f3e0f7e-1111-4222-8333-944445555666"
    );
    assert_eq!(
        resp.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(body["expires_in"], "86399");
    assert_eq!(body["refresh_in"], 43200);
    assert!(body.get("ext_expires_in").is_none());
    assert!(body.get("token_type").is_none());
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(server.issued(token).unwrap().expires_in, 86399);
    assert_eq!(
        server.requests()[0].header("Client-Request-Id"),
        Some("9f3e0f7e-1111-4222-8333-944445555666")
    );

    // Errors carry the caller's correlation id; no echo header unless asked.
    let resp = client
        .post(&url)
        .header("client-request-id", "0a0a0a0a-1111-4222-8333-944445555666")
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.headers().get("client-request-id").is_none());
    let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(
        body["correlation_id"],
        "0a0a0a0a-1111-4222-8333-944445555666"
    );
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("Correlation ID: 0a0a0a0a-1111-4222-8333-944445555666")
    );
}

#[tokio::test]
async fn plain_http_mode_works() {
    let server = EntraServer::start_http().await;
    let fx = fixture("pem-pkcs8");
    server.register_certificate_pem(&fx.client_id, &fx.tenant_id, &fx.leaf_pem);
    assert!(server.base_url().starts_with("http://127.0.0.1:"));
    let url = server.token_url(&fx.tenant_id);
    assert!(url.starts_with("http://127.0.0.1:"));
    let client = reqwest::Client::new();
    let a = Assertion::new(&fx, &url).ps256(&fx);
    let token = post_assertion(&client, &url, &fx, SCOPE, &a.sign(&fx.key))
        .await
        .access_token();
    assert!(server.issued(&token).is_some());
    // An https aud does not match an http endpoint.
    let a = Assertion::new(&fx, &url.replace("http://", "https://"));
    assert_refused(&client, &url, &fx, &a.sign(&fx.key), 700023).await;
}

#[tokio::test]
async fn https_rejects_untrusted_clients_and_shutdown_stops_it() {
    let (server, client, fx, url) = setup().await;
    // Without the test CA the server certificate is not trusted.
    let untrusted = reqwest::Client::builder()
        .tls_certs_only([])
        .build()
        .unwrap();
    assert!(untrusted.post(&url).send().await.is_err());

    // Keep-alive: several requests on one client.
    for _ in 0..3 {
        let a = Assertion::new(&fx, &url).sign(&fx.key);
        post_assertion(&client, &url, &fx, SCOPE, &a)
            .await
            .access_token();
    }
    server.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = https_client();
    let a = Assertion::new(&fx, &url).sign(&fx.key);
    let result = fresh
        .post(&url)
        .form(&[("client_assertion", a.as_str())])
        .send()
        .await;
    assert!(result.is_err(), "{result:?}");
}
