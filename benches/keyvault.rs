//! The Key Vault credential store (feature `keyvault`) beside the same HTTPS requests made
//! by hand with `reqwest`.
//!
//! `cargo bench --bench keyvault --features full -- --measurement-time 2 --warm-up-time 1`
//! (BENCHMARKS.md records the results; run it with `RUST_BACKTRACE` unset, see there).
//!
//! - `keyvault/list_1000_plan`: `CredentialStore::list()` over a vault of 1,000 stored
//!   credentials served in pages of 25 (40 requests following `nextLink`), then
//!   `renewal::needing_renewal`. Baseline `keyvault/list_1000_by_hand`: the same 40 GETs
//!   with `reqwest`, each page parsed as JSON and its `nextLink` followed. Target ≤ 1.2×.
//! - `keyvault/put`: one `PUT /secrets/{name}` of a user-assigned credential from the typed
//!   object. Baseline `put_by_hand`: the same request with the body rendered by hand from
//!   the same typed object on every request (value, content type, times, tags), the answer
//!   parsed into a `serde_json::Value`. `put_prebuilt_by_hand` sends a body rendered once,
//!   outside the timing (the earlier baseline; no client renders nothing).
//! - `keyvault/get`: one `GET /secrets/{name}` into the typed object. Baseline
//!   `get_by_hand`: the same request, the answer parsed into a `Value` and its `value` into
//!   `UserAssignedIdentityCredentials`. Target ≤ 1.1×.
//! - `sdk_floor/get_secret` and `sdk_floor/set_secret`: the Azure SDK's `SecretClient` on an
//!   in-memory transport that answers at once with the vault's recorded bytes: the SDK's
//!   fixed cost per request, without a network, a server or this crate's transport;
//!   `sdk_floor/parse_answer_only` is the model parse alone, which any client pays.
//! - Decomposition of `put` and `get`: `put_prebuilt_sdk_headers_by_hand` (a pre-rendered
//!   body by hand, with the headers the SDK adds), `put_sdk_only` / `get_sdk_only` (the
//!   SDK's `SecretClient` from `CredentialStore::secret_client`, the store's transport, no
//!   rendering or parsing by the crate), `put_formatted` (`CredentialStore::put` of a secret
//!   formatted once: the body rendered and the answer parsed).
//! - Diagnosis: `get_by_hand_timeout` (the by-hand GET with a per-request timeout, as the
//!   store's transport sets) and `get_by_hand_sdk_headers` (the SDK's headers and URL).
//!
//! Both sides use the same HTTP client (pooled, trusting the test CA) and the same token;
//! the vault's challenge is answered before timing starts. The test servers run on their
//! own single-worker runtime; the client side on a current-thread runtime.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;

use azure_core::http::RequestContent;
use criterion::{Criterion, criterion_group, criterion_main};
use msi_dataplane::keyvault::renewal::needing_renewal;
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::{Environment, UserAssignedIdentityCredentials, keyvault};
use serde_json::{Value, json};

use msi_dataplane_testing::KeyVaultServer;
use support::entra::EntraServer;
use support::fixtures::load;
use support::harness::{credential, https_client, server_runtime};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";
const API_VERSION: &str = "2025-07-01";
const VAULT_SCOPE: &str = "https://vault.azure.net/.default";

/// All pages of `GET /secrets` by hand: the count of items seen.
async fn list_by_hand(http: &reqwest::Client, vault: &str, token: &str) -> usize {
    let mut next = Some(format!(
        "{vault}secrets?maxresults=25&api-version={API_VERSION}"
    ));
    let mut count = 0;
    while let Some(url) = next.take() {
        let page: Value = http
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .expect("page")
            .error_for_status()
            .expect("200")
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).expect("page JSON"))
            .expect("page body");
        count += page["value"].as_array().map_or(0, Vec::len);
        next = page["nextLink"].as_str().map(str::to_owned);
    }
    count
}

fn bench_keyvault(c: &mut Criterion) {
    let server_rt = server_runtime();
    let (entra, vault) = server_rt.block_on(async {
        let entra = EntraServer::start().await;
        let vault = KeyVaultServer::start(&entra, TENANT).await;
        (entra, vault)
    });
    vault.set_recording(false);
    let creds: UserAssignedIdentityCredentials = load("rotation-1");
    let secret = keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds)
        .expect("storage format");
    let value = creds.to_json().expect("json");
    let tags = json!(secret.tags());
    let nbf = secret.attributes().not_before.unix_timestamp();
    let exp = secret.attributes().expires.unix_timestamp();
    for i in 0..1000 {
        vault.seed(
            &format!("uamsi-bench-{i:04}"),
            &value,
            tags.clone(),
            nbf,
            exp,
        );
    }
    vault.set_page_size(25);

    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let http = https_client();
    let app = credential(&entra, "pem-pkcs8");
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(app.clone()),
        StoreOptions::default()
            .with_environment(Environment::default().with_http_client(http.clone()))
            .verify_challenge_resource(false)
            .with_page_size(25),
    )
    .expect("store");
    let vault_url = vault.url();
    let name = secret.name().to_owned();
    let put_body = secret.set_secret_body().expect("body");
    let token = client_rt
        .block_on(app.get_token(&[VAULT_SCOPE]))
        .expect("token");

    // Outside the timing: the challenge is answered, both paths see the same vault.
    client_rt.block_on(async {
        store
            .put_user_assigned_identity(ID, &creds)
            .await
            .expect("put");
        let stored = store
            .put_user_assigned_identity(ID, &creds)
            .await
            .expect("put");
        // The body by hand stores what the store stores.
        let url = format!("{vault_url}secrets/{name}?api-version={API_VERSION}");
        http.put(&url)
            .bearer_auth(token.token())
            .header("content-type", "application/json")
            .body(hand_made_put_body(&creds))
            .send()
            .await
            .expect("put by hand")
            .error_for_status()
            .expect("200");
        let by_hand = store
            .get_user_assigned_identity(ID, None)
            .await
            .expect("get");
        assert_eq!(by_hand.properties.tags, stored.tags);
        assert_eq!(by_hand.properties.not_before, stored.not_before);
        assert_eq!(by_hand.properties.expires, stored.expires);
        assert_eq!(by_hand.credentials.to_json().ok(), creds.to_json().ok());
        let listed = store.list().await.expect("list");
        assert_eq!(listed.len(), 1001);
        assert_eq!(list_by_hand(&http, &vault_url, token.token()).await, 1001);
    });

    let mut group = c.benchmark_group("keyvault");
    group.sample_size(20);
    group.bench_function("list_1000_plan", |b| {
        b.iter(|| {
            client_rt.block_on(async {
                let listed = store.list().await.expect("list");
                let now = time::OffsetDateTime::now_utc();
                let plan = needing_renewal(&listed, now);
                black_box((listed.len(), plan.due.len()))
            })
        })
    });
    group.bench_function("list_1000_by_hand", |b| {
        b.iter(|| client_rt.block_on(list_by_hand(&http, &vault_url, token.token())))
    });
    group.finish();

    // Put and get, the store beside the same requests by hand. One table of cases serves
    // criterion and the interleaved comparison (`KEYVAULT_INTERLEAVED`, see `interleaved`).
    let put_url = format!("{vault_url}secrets/{name}?api-version={API_VERSION}");
    let get_url = format!("{vault_url}secrets/{name}?api-version={API_VERSION}");
    // The SDK's get URL ends in `/` (the server treats both alike).
    let get_url_sdk = format!("{vault_url}secrets/{name}/?api-version={API_VERSION}");
    let prebuilt = put_body.expose_secret().as_bytes().to_vec();
    let (http, token, store, secret, creds) = (&http, &token, &store, &secret, &creds);
    let (client_rt, name) = (&client_rt, name.as_str());
    let send = |request: reqwest::RequestBuilder| {
        client_rt.block_on(async {
            request
                .bearer_auth(token.token())
                .send()
                .await
                .expect("send")
                .error_for_status()
                .expect("2xx")
                .bytes()
                .await
                .expect("body")
        })
    };
    let put_by_hand = |body: Vec<u8>, with_sdk_headers: bool| {
        let mut request = http
            .put(&put_url)
            .header("content-type", "application/json");
        if with_sdk_headers {
            request = sdk_headers(request);
        }
        send(request.body(body))
    };
    let get_by_hand = |url: &str, timeout: bool, with_sdk_headers: bool| {
        let mut request = http.get(url);
        if timeout {
            request = request.timeout(std::time::Duration::from_secs(30));
        }
        if with_sdk_headers {
            request = sdk_headers(request)
                .header("content-length", "0")
                .body(Vec::new());
        }
        send(request)
    };
    let cases: Vec<Case<'_>> = vec![
        (
            "put",
            Box::new(|| {
                let stored = client_rt.block_on(store.put_user_assigned_identity(ID, creds));
                black_box(stored.expect("put"));
            }),
        ),
        // By hand from the typed credentials, as the store starts: the body rendered on
        // every request (value, content type, the times as attributes and tags), the
        // answer parsed.
        (
            "put_by_hand",
            Box::new(|| {
                let answer = put_by_hand(hand_made_put_body(creds), false);
                black_box(serde_json::from_slice::<Value>(&answer).expect("JSON"));
            }),
        ),
        // The previous baseline: a body rendered once, outside the timing, the answer
        // parsed.
        (
            "put_prebuilt_by_hand",
            Box::new(|| {
                let answer = put_by_hand(prebuilt.clone(), false);
                black_box(serde_json::from_slice::<Value>(&answer).expect("JSON"));
            }),
        ),
        // The decomposition of `put`: the pre-rendered body by hand with the SDK's
        // headers, answer not parsed; the same through the SDK's `SecretClient` alone (the
        // store's transport, nothing rendered or parsed by the crate); `CredentialStore::put`
        // of a secret formatted once (the body rendered, the answer parsed).
        (
            "put_prebuilt_sdk_headers_by_hand",
            Box::new(|| {
                black_box(put_by_hand(prebuilt.clone(), true));
            }),
        ),
        (
            "put_sdk_only",
            Box::new(|| {
                let body = RequestContent::from(prebuilt.clone());
                let response = client_rt
                    .block_on(store.secret_client().set_secret(name, body, None))
                    .expect("set");
                black_box(response.into_body());
            }),
        ),
        (
            "put_formatted",
            Box::new(|| {
                black_box(client_rt.block_on(store.put(secret)).expect("put"));
            }),
        ),
        (
            "get",
            Box::new(|| {
                let got = client_rt.block_on(store.get_user_assigned_identity(ID, None));
                black_box(got.expect("get"));
            }),
        ),
        // The answer parsed, its value into the typed credentials.
        (
            "get_by_hand",
            Box::new(|| {
                let answer: Value =
                    serde_json::from_slice(&get_by_hand(&get_url, false, false)).expect("JSON");
                let creds: UserAssignedIdentityCredentials =
                    serde_json::from_str(answer["value"].as_str().expect("value"))
                        .expect("credentials");
                black_box(creds);
            }),
        ),
        // Decomposition and diagnosis of `get`, answers not parsed: the SDK alone; by hand
        // with a per-request timeout (as the store's transport sets); by hand with the
        // SDK's headers and URL.
        (
            "get_sdk_only",
            Box::new(|| {
                let response = client_rt
                    .block_on(store.secret_client().get_secret(name, None))
                    .expect("get");
                black_box(response.into_body());
            }),
        ),
        (
            "get_by_hand_timeout",
            Box::new(|| {
                black_box(get_by_hand(&get_url, true, false));
            }),
        ),
        (
            "get_by_hand_sdk_headers",
            Box::new(|| {
                black_box(get_by_hand(&get_url_sdk, false, true));
            }),
        ),
    ];
    if let Some(rounds) = std::env::var("KEYVAULT_INTERLEAVED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        interleaved(&cases, rounds, 200);
    }
    let mut group = c.benchmark_group("keyvault");
    for (label, case) in &cases {
        group.bench_function(*label, |b| b.iter(case));
    }
    group.finish();

    // The SDK's own floor: the same calls on a SecretClient over an in-memory transport
    // that answers at once with the vault's bytes.
    let get_answer = send(http.get(&get_url));
    let put_answer = send(
        http.put(&put_url)
            .header("content-type", "application/json")
            .body(prebuilt.clone()),
    );
    floor::bench(
        c,
        client_rt,
        Arc::new(app.clone()),
        floor::Canned {
            get: get_answer,
            put: put_answer,
        },
        name,
        &prebuilt,
    );
    vault.shutdown();
}

/// The Azure SDK's fixed cost per request, without a network or a server.
mod floor {
    use std::hint::black_box;
    use std::sync::Arc;

    use azure_core::credentials::TokenCredential;
    use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
    use azure_core::http::{
        AsyncRawResponse, ClientOptions, HttpClient, Method, Request, RequestContent, StatusCode,
        Transport,
    };
    use azure_security_keyvault_secrets::models::Secret;
    use azure_security_keyvault_secrets::{SecretClient, SecretClientOptions};
    use criterion::Criterion;
    use tokio::runtime::Runtime;

    /// Key Vault's answers, recorded from the test vault.
    #[derive(Debug)]
    pub struct Canned {
        pub get: bytes::Bytes,
        pub put: bytes::Bytes,
    }

    fn headers(pairs: &[(&str, String)]) -> Headers {
        let mut headers = Headers::new();
        for (name, value) in pairs {
            headers.insert(
                HeaderName::from((*name).to_owned()),
                HeaderValue::from(value.clone()),
            );
        }
        headers
    }

    #[async_trait::async_trait]
    impl HttpClient for Canned {
        async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
            let authorized = request
                .headers()
                .iter()
                .any(|(name, _)| name.as_str() == "authorization");
            if !authorized {
                let challenge = format!(
                    "Bearer authorization=\"https://login.microsoftonline.com/{}\", resource=\"https://vault.azure.net\"",
                    super::TENANT
                );
                return Ok(AsyncRawResponse::from_bytes(
                    StatusCode::Unauthorized,
                    headers(&[("www-authenticate", challenge)]),
                    bytes::Bytes::new(),
                ));
            }
            let body = if request.method() == Method::Put {
                self.put.clone()
            } else {
                self.get.clone()
            };
            Ok(AsyncRawResponse::from_bytes(
                StatusCode::Ok,
                headers(&[("content-type", "application/json".to_owned())]),
                body,
            ))
        }
    }

    pub fn bench(
        c: &mut Criterion,
        rt: &Runtime,
        credential: Arc<dyn TokenCredential>,
        canned: Canned,
        name: &str,
        put_body: &[u8],
    ) {
        let get_answer = canned.get.clone();
        let options = SecretClientOptions {
            client_options: ClientOptions {
                transport: Some(Transport::new(Arc::new(canned))),
                ..Default::default()
            },
            verify_challenge_resource: Some(false),
            ..Default::default()
        };
        let client = SecretClient::new("https://bench.vault.azure.net/", credential, Some(options))
            .expect("client");
        let put_body = bytes::Bytes::copy_from_slice(put_body);
        // The challenge, outside the timing.
        rt.block_on(client.get_secret(name, None))
            .expect("challenge");

        let mut group = c.benchmark_group("sdk_floor");
        group.bench_function("get_secret", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let secret: Secret = client
                        .get_secret(name, None)
                        .await
                        .expect("get")
                        .into_model()
                        .expect("model");
                    black_box(secret)
                })
            })
        });
        group.bench_function("set_secret", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let body = RequestContent::from(put_body.to_vec());
                    let secret: Secret = client
                        .set_secret(name, body, None)
                        .await
                        .expect("set")
                        .into_model()
                        .expect("model");
                    black_box(secret)
                })
            })
        });
        // What any client pays for the same answer: parsing it into the SDK's model.
        group.bench_function("parse_answer_only", |b| {
            b.iter(|| {
                let secret: Secret = serde_json::from_slice(&get_answer).expect("model");
                black_box(secret)
            })
        });
        group.finish();
    }
}

/// A named operation to time.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

/// Every case `per_round` times per round, the cases in turn, `rounds` rounds: each
/// case's median and quartiles of the per-round means, and its median against
/// `put_by_hand` / `get_by_hand`. On a shared VM, consecutive criterion benchmarks see
/// different machine phases; alternating within one process compares like with like.
fn interleaved(cases: &[Case<'_>], rounds: usize, per_round: u32) {
    let mut means: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for ((_, case), times) in cases.iter().zip(&mut means) {
            let start = std::time::Instant::now();
            for _ in 0..per_round {
                case();
            }
            times.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(per_round));
        }
    }
    let medians: Vec<f64> = means
        .iter_mut()
        .map(|times| {
            times.sort_by(f64::total_cmp);
            times[times.len() / 2]
        })
        .collect();
    let median_of = |label: &str| {
        cases
            .iter()
            .position(|(l, _)| *l == label)
            .map(|i| medians[i])
    };
    println!("interleaved: {rounds} rounds of {per_round} per case (µs per call)");
    for ((label, _), times) in cases.iter().zip(&means) {
        let median = times[times.len() / 2];
        let (q1, q3) = (times[times.len() / 4], times[times.len() * 3 / 4]);
        let base = if label.starts_with("put") {
            "put_by_hand"
        } else {
            "get_by_hand"
        };
        let ratio = median_of(base).map_or(f64::NAN, |b| median / b);
        println!("  {label:34} {median:8.1}   [{q1:.1} .. {q3:.1}]   {ratio:.2}x {base}");
    }
}

/// The headers the Azure SDK adds to every Key Vault request (request id, user agent,
/// accept), for the by-hand requests that measure what they cost.
fn sdk_headers(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header("accept", "application/json")
        .header(
            "x-ms-client-request-id",
            "0b6b7a0e-4c59-4d4e-9d8b-3c1f0d6f7a11",
        )
        .header(
            "user-agent",
            "azsdk-rust-security_keyvault_secrets/1.0.1 (1.90.0; linux; x86_64)",
        )
}

/// The body of a "Set Secret" request written by hand from typed credentials: the
/// credential JSON as the value, its `not_before` / `not_after` as `nbf` / `exp`, its
/// renewal times as tags (what the storage format puts there).
fn hand_made_put_body(creds: &UserAssignedIdentityCredentials) -> Vec<u8> {
    use time::format_description::well_known::Rfc3339;
    let unix = |t: &Option<String>| {
        time::OffsetDateTime::parse(t.as_deref().expect("time"), &Rfc3339)
            .expect("RFC 3339")
            .unix_timestamp()
    };
    let body = json!({
        "value": serde_json::to_string(creds).expect("credential JSON"),
        "contentType": "application/json",
        "attributes": {
            "enabled": true,
            "nbf": unix(&creds.not_before),
            "exp": unix(&creds.not_after),
        },
        "tags": {
            "renew_after": creds.renew_after,
            "cannot_renew_after": creds.cannot_renew_after,
        },
    });
    serde_json::to_vec(&body).expect("body")
}

criterion_group!(benches, bench_keyvault);
criterion_main!(benches);
