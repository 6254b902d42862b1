//! The first token on a new credential: load the credential file, build the credential
//! (with a fresh HTTP client, so a new TCP connection and TLS handshake), sign an
//! assertion and POST it, beside the same parts done by hand, measured in the same run.
//!
//! `cargo bench --bench first_token` (BENCHMARKS.md records the results; the target
//! is `first_token/crate` ≤ 1.2 × `first_token/by_hand`).
//!
//! - `first_token/crate`: `UserAssignedIdentityCredentials::from_path` +
//!   `ClientCertificateCredential::new` (options with a freshly built `reqwest::Client`
//!   trusting the test CA) + `get_token(&[ARM])`: what a program does for a new identity.
//! - `first_token/by_hand`: the same work without the crate, in the fewest steps that
//!   still get a token: read the file, `serde_json` into a struct of the four fields
//!   needed, base64-decode the bundle, `pem::parse_many`, parse the leaf with
//!   `x509-parser` (its validity must be known), load the key with AWS-LC, hash the leaf
//!   for `x5t#S256`, serialize header and claims, sign PS256 with AWS-LC, build the same
//!   `reqwest::Client`, POST the same form with the same headers, parse the JSON answer.
//! - `first_token/part/load`: the by-hand steps up to the loaded key and encoded header.
//! - `first_token/build`: `from_path` + `ClientCertificateCredential::new` with a client
//!   already built: what building a credential from its file costs (every rotation
//!   does it), against `part/load` (target ≤ 1.25×).
//! - `first_token/part/first_sign`: the by-hand claims + PS256 signature + encoding with a
//!   key loaded just before (untimed): AWS-LC finishes a key's precomputation (Montgomery
//!   constants, blinding) on its first private-key operation, so a new credential's first
//!   signature costs about twice a later one.
//! - `first_token/part/sign`: the same with a key that has signed before.
//! - `first_token/part/client_build`: building the `reqwest::Client` (rustls config,
//!   the test CA as the only root).
//! - `first_token/part/connect_post`: a fresh client + TCP connect + TLS handshake + the
//!   POST of a pre-signed assertion + parsing the answer.
//! - `first_token/crate_shared_client`: `from_path` + `new` + `get_token` with one
//!   client shared across iterations (its pooled connection stays open): what a new
//!   identity costs in a process that already talks to Entra, since the crate's default
//!   client is one per process.
//!
//! The Entra-compatible server runs on its own runtime thread, verifies every assertion's
//! signature, and has its replay check off for the whole group (the `connect_post` part
//! re-sends one assertion), so every POST costs it the same. The client side runs on a
//! current-thread runtime, as in `benches/token.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PSS_SHA256, RsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    UserAssignedIdentityCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use x509_parser::prelude::{FromDer, X509Certificate};

use support::by_hand::{Claims, post_token_request};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, https_client, register, server_runtime};

const FIXTURE: &str = "pem-pkcs8";

/// The fields of the credential file a token needs.
#[derive(Deserialize)]
struct File {
    authentication_endpoint: String,
    client_id: String,
    tenant_id: String,
    client_secret: String,
}

#[derive(Serialize)]
struct JwsHeader<'a> {
    alg: &'static str,
    typ: &'static str,
    #[serde(rename = "x5t#S256")]
    x5t_s256: String,
    x5c: [&'a str; 1],
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: i64,
}

/// A credential loaded by hand: what signing and posting need.
struct Loaded {
    key: RsaKeyPair,
    /// base64url(header JSON) + '.'.
    header_prefix: String,
    client_id: String,
    token_url: String,
}

fn load_by_hand(path: &Path) -> Loaded {
    let bytes = std::fs::read(path).expect("read credential file");
    let file: File = serde_json::from_slice(&bytes).expect("credential JSON");
    let bundle = STANDARD.decode(&file.client_secret).expect("base64 bundle");
    let blocks = pem::parse_many(&bundle).expect("PEM bundle");
    let block = |tag: &str| {
        blocks
            .iter()
            .find(|b| b.tag() == tag)
            .map(pem::Pem::contents)
            .expect("PEM block")
    };
    let cert_der = block("CERTIFICATE");
    let (_, cert) = X509Certificate::from_der(cert_der).expect("leaf certificate");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let validity = cert.validity();
    assert!(validity.not_before.timestamp() <= now && now <= validity.not_after.timestamp());
    let key = RsaKeyPair::from_pkcs8(block("PRIVATE KEY")).expect("key");
    let x5c = STANDARD.encode(cert_der);
    let header = JwsHeader {
        alg: "PS256",
        typ: "JWT",
        x5t_s256: URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(cert_der)),
        x5c: [&x5c],
    };
    let mut header_prefix = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("header"));
    header_prefix.push('.');
    let token_url = format!(
        "{}/{}/oauth2/v2.0/token",
        file.authentication_endpoint.trim_end_matches('/'),
        file.tenant_id
    );
    Loaded {
        key,
        header_prefix,
        client_id: file.client_id,
        token_url,
    }
}

fn sign_by_hand(loaded: &Loaded, rng: &SystemRandom) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let jti = uuid::Uuid::new_v4().to_string();
    let claims = Claims::new(&loaded.token_url, &loaded.client_id, &jti, now);
    let mut jwt = loaded.header_prefix.clone();
    URL_SAFE_NO_PAD.encode_string(serde_json::to_vec(&claims).expect("claims"), &mut jwt);
    let mut signature = vec![0u8; loaded.key.public_modulus_len()];
    loaded
        .key
        .sign(&RSA_PSS_SHA256, rng, jwt.as_bytes(), &mut signature)
        .expect("sign");
    jwt.push('.');
    URL_SAFE_NO_PAD.encode_string(&signature, &mut jwt);
    jwt
}

async fn post_by_hand(client: &reqwest::Client, loaded: &Loaded, assertion: &str) -> String {
    let client_request_id = uuid::Uuid::new_v4().to_string();
    let (status, body) = post_token_request(
        client,
        &loaded.token_url,
        &loaded.client_id,
        ARM,
        assertion,
        &client_request_id,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: TokenResponse = serde_json::from_slice(&body).expect("token response");
    assert!(answer.expires_in > 0);
    answer.access_token
}

/// A copy of the fixture pointing at `server`, in a temporary directory.
struct CredentialFile {
    dir: PathBuf,
    path: PathBuf,
}

impl CredentialFile {
    fn new(server: &EntraServer) -> Self {
        let dir = std::env::temp_dir().join(format!("msi-dp-bench-first-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("identity");
        let json = load_with_endpoint(FIXTURE, &server.base_url())
            .to_json()
            .expect("to_json");
        std::fs::write(&path, json).expect("write credential file");
        CredentialFile { dir, path }
    }
}

impl Drop for CredentialFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn new_credential(path: &Path, client: reqwest::Client) -> ClientCertificateCredential {
    let creds = UserAssignedIdentityCredentials::from_path(path).expect("from_path");
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(client));
    ClientCertificateCredential::new(&creds, options).expect("new")
}

fn bench_first_token(c: &mut Criterion) {
    let server_rt = server_runtime();
    let server = server_rt.block_on(EntraServer::start());
    server.set_replay_check(false);
    register(&server, FIXTURE);
    let file = CredentialFile::new(&server);
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let rng = SystemRandom::new();

    // Outside the timing: both paths get a token from this server.
    client_rt.block_on(async {
        let cred = new_credential(&file.path, https_client());
        cred.get_token(&[ARM]).await.expect("crate path");
        let loaded = load_by_hand(&file.path);
        post_by_hand(&https_client(), &loaded, &sign_by_hand(&loaded, &rng)).await;
    });
    server.clear_requests();

    let mut g = c.benchmark_group("first_token");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(5));

    g.bench_function("crate", |b| {
        b.to_async(&client_rt).iter(|| async {
            let cred = new_credential(&file.path, https_client());
            black_box(cred.get_token(&[ARM]).await.expect("get_token"))
        })
    });
    server.clear_requests();

    g.bench_function("by_hand", |b| {
        b.to_async(&client_rt).iter(|| async {
            let loaded = load_by_hand(&file.path);
            let assertion = sign_by_hand(&loaded, &rng);
            let client = https_client();
            black_box(post_by_hand(&client, &loaded, &assertion).await)
        })
    });
    server.clear_requests();

    g.bench_function("part/load", |b| {
        b.iter(|| load_by_hand(black_box(&file.path)))
    });
    // Building a credential from its file (what every rotation does), against
    // `part/load` (target: at most 1.25x): `from_path` + `new` with a client already
    // built, so no TLS configuration is timed.
    let built_client = https_client();
    g.bench_function("build", |b| {
        b.iter(|| new_credential(black_box(&file.path), built_client.clone()))
    });
    g.bench_function("part/first_sign", |b| {
        b.iter_batched_ref(
            || load_by_hand(&file.path),
            |fresh| sign_by_hand(fresh, &rng),
            BatchSize::SmallInput,
        )
    });
    let loaded = load_by_hand(&file.path);
    g.bench_function("part/sign", |b| b.iter(|| sign_by_hand(&loaded, &rng)));
    g.bench_function("part/client_build", |b| b.iter(https_client));
    let assertion = sign_by_hand(&loaded, &rng);
    g.bench_function("part/connect_post", |b| {
        b.to_async(&client_rt).iter(|| async {
            let client = https_client();
            black_box(post_by_hand(&client, &loaded, &assertion).await)
        })
    });
    server.clear_requests();

    let shared = https_client();
    g.bench_function("crate_shared_client", |b| {
        b.to_async(&client_rt).iter(|| async {
            let cred = new_credential(&file.path, shared.clone());
            black_box(cred.get_token(&[ARM]).await.expect("get_token"))
        })
    });
    server.clear_requests();

    g.finish();
    server.set_replay_check(true);
    server.shutdown();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = bench_first_token
}
criterion_main!(benches);
