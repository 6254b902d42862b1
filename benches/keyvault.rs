//! The Key Vault credential store (feature `keyvault`) beside the same HTTPS requests made
//! by hand with `reqwest`.
//!
//! `cargo bench --bench keyvault --features keyvault -- --measurement-time 2 --warm-up-time 1`
//! (BENCHMARKS.md records the results).
//!
//! - `keyvault/list_1000_plan`: `CredentialStore::list()` over a vault of 1,000 stored
//!   credentials served in pages of 25 (40 requests following `nextLink`), then
//!   `renewal::needing_renewal`. Baseline `keyvault/list_1000_by_hand`: the same 40 GETs
//!   with `reqwest`, each page parsed as JSON and its `nextLink` followed. Target ≤ 1.2×.
//! - `keyvault/put` and `keyvault/get`: one `PUT /secrets/{name}` (a user-assigned
//!   credential in the storage format) and one `GET /secrets/{name}` into the typed
//!   object, beside `put_by_hand` / `get_by_hand` (the same request and body, parsed into
//!   a `serde_json::Value`). Target ≤ 1.1×.
//!
//! Both sides use the same HTTP client (pooled, trusting the test CA) and the same token;
//! the vault's challenge is answered before timing starts. The test servers run on their
//! own single-worker runtime; the client side on a current-thread runtime.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use msi_dataplane::renewal::needing_renewal;
use msi_dataplane::store::{CredentialStore, StoreOptions};
use msi_dataplane::{UserAssignedIdentityCredentials, keyvault};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use msi_dataplane::testing::KeyVaultServer;
use support::entra::EntraServer;
use support::fixtures::load;
use support::harness::{credential, https_client};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";
const API_VERSION: &str = "2025-07-01";
const VAULT_SCOPE: &str = "https://vault.azure.net/.default";

fn server_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("servers")
        .enable_all()
        .build()
        .expect("server runtime")
}

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
            .with_http_client(http.clone())
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

    let mut group = c.benchmark_group("keyvault");
    group.bench_function("put", |b| {
        b.iter(|| {
            client_rt
                .block_on(store.put_user_assigned_identity(ID, &creds))
                .expect("put")
        })
    });
    let put_url = format!("{vault_url}secrets/{name}?api-version={API_VERSION}");
    group.bench_function("put_by_hand", |b| {
        b.iter(|| {
            client_rt.block_on(async {
                let answer: Value = http
                    .put(&put_url)
                    .bearer_auth(token.token())
                    .header("content-type", "application/json")
                    .body(put_body.expose_secret().to_owned())
                    .send()
                    .await
                    .expect("put")
                    .error_for_status()
                    .expect("200")
                    .bytes()
                    .await
                    .map(|b| serde_json::from_slice(&b).expect("JSON"))
                    .expect("body");
                black_box(answer)
            })
        })
    });
    group.bench_function("get", |b| {
        b.iter(|| {
            client_rt
                .block_on(store.get_user_assigned_identity(ID, None))
                .expect("get")
        })
    });
    let get_url = format!("{vault_url}secrets/{name}?api-version={API_VERSION}");
    group.bench_function("get_by_hand", |b| {
        b.iter(|| {
            client_rt.block_on(async {
                let answer: Value = http
                    .get(&get_url)
                    .bearer_auth(token.token())
                    .send()
                    .await
                    .expect("get")
                    .error_for_status()
                    .expect("200")
                    .bytes()
                    .await
                    .map(|b| serde_json::from_slice(&b).expect("JSON"))
                    .expect("body");
                let creds: UserAssignedIdentityCredentials =
                    serde_json::from_str(answer["value"].as_str().expect("value"))
                        .expect("credentials");
                black_box(creds)
            })
        })
    });
    group.finish();
    vault.shutdown();
}

criterion_group!(benches, bench_keyvault);
criterion_main!(benches);
