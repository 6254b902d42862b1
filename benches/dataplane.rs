//! The MSI data plane client: what a call costs beside the same HTTPS request made by
//! hand, and what the first call's challenge adds.
//!
//! `cargo bench --bench dataplane -- --measurement-time 2 --warm-up-time 1`
//! (BENCHMARKS.md records the results).
//!
//! - `dataplane/cached_token`: `get_system_assigned_identity_credentials()` on a client
//!   whose host already answered its challenge: one GET with the kept token, the answer
//!   parsed into `ManagedIdentityCredentials`.
//! - `dataplane/by_hand`: the baseline: the same GET made with `reqwest` directly (same
//!   URL with the identity URL's query and `api-version`, same headers, the same token),
//!   the body read and parsed into the same type. Target: `cached_token` ≤ 1.1 × this.
//! - `dataplane/first_call`: a new factory (so no challenge is known for the host) over the
//!   same credential (its token cache warm) and HTTP client: the unauthenticated GET, its
//!   401 challenge, parsing it, a cached token for the tenant, and the GET again. Target:
//!   one extra round trip, i.e. ≈ 2 × `by_hand`, not more.
//!
//! The test Entra and data plane servers run on their own single-worker runtime (their own
//! OS thread); the client side runs on a current-thread runtime, as in `benches/token.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use msi_dataplane::dataplane::{ClientFactory, ManagedIdentityCredentials};
use msi_dataplane::{ClientCertificate, ClientCertificateCredential, Environment};

use msi_dataplane_testing::DataPlaneServer;
use support::by_hand::get_data_plane_by_hand;
use support::entra::EntraServer;
use support::fixtures::{fixture_credentials, leaf_pem_path, load};

const AUDIENCE: &str = DataPlaneServer::AUDIENCE;
use support::harness::{https_client, options, server_runtime};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

fn bench_dataplane(c: &mut Criterion) {
    let server_rt = server_runtime();
    let (entra, dp) = server_rt.block_on(async {
        let entra = EntraServer::start().await;
        let dp = DataPlaneServer::start(&entra, TENANT, AUDIENCE).await;
        (entra, dp)
    });
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let http = https_client();
    let http_options = Environment::default().with_http_client(http.clone());
    let creds = load("pem-pkcs8");
    let client_id = creds.client_id.clone().expect("client id");
    entra.register_certificate_file(&client_id, TENANT, leaf_pem_path("pem-pkcs8"));
    let credential = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        TENANT,
        &client_id,
        ClientCertificate::from_credentials(&creds).expect("certificate"),
        options().with_environment(http_options.clone()),
    )
    .expect("credential");
    let client_options = || http_options.clone();
    let factory =
        ClientFactory::new(credential.clone(), AUDIENCE, client_options()).expect("factory");
    let identity_url = dp.identity_url();
    let client = factory.client(&identity_url).expect("client");
    // What the client sends to: the identity URL and the API version.
    let url = format!(
        "{identity_url}&api-version={}",
        DataPlaneServer::API_VERSION
    );

    // Outside the timing: the challenge is answered, and both paths work.
    let token = client_rt.block_on(async {
        client
            .get_system_assigned_identity_credentials()
            .await
            .expect("data plane GET");
        let token = credential
            .get_token(&[factory.scope()])
            .await
            .expect("token");
        let (status, body) = get_data_plane_by_hand(&http, &url, token.token()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        token
    });
    assert_eq!(dp.challenges_sent(), 1);
    dp.clear_requests();

    let mut g = c.benchmark_group("dataplane");
    g.sample_size(30);

    g.bench_function("cached_token", |b| {
        b.to_async(&client_rt).iter(|| async {
            black_box(
                client
                    .get_system_assigned_identity_credentials()
                    .await
                    .expect("GET"),
            )
        })
    });
    dp.clear_requests();

    g.bench_function("by_hand", |b| {
        b.to_async(&client_rt).iter(|| async {
            let (status, body) = get_data_plane_by_hand(&http, &url, token.token()).await;
            debug_assert_eq!(status, 200);
            let creds: ManagedIdentityCredentials =
                serde_json::from_slice(&body).expect("credentials");
            black_box(creds)
        })
    });
    dp.clear_requests();

    g.bench_function("first_call", |b| {
        b.to_async(&client_rt).iter(|| async {
            let factory = ClientFactory::new(credential.clone(), AUDIENCE, client_options())
                .expect("factory");
            let client = factory.client(&identity_url).expect("client");
            black_box(
                client
                    .get_system_assigned_identity_credentials()
                    .await
                    .expect("GET"),
            )
        })
    });
    // Every first call paid exactly one challenge and fetched no new token.
    let requests = dp.requests();
    let challenges = requests.iter().filter(|r| r.status == 401).count();
    assert_eq!(challenges * 2, requests.len(), "one 401 per first call");
    assert_eq!(
        entra.tokens_issued(),
        1,
        "the token came from the credential's cache"
    );

    g.finish();
    dp.shutdown();
    entra.shutdown();
    drop(client_rt);
    server_rt.shutdown_timeout(Duration::from_secs(1));
}

criterion_group!(benches, bench_dataplane);
criterion_main!(benches);
