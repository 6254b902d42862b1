//! One kit server in a `static`, shared by many `#[tokio::test]`s: each test is its own
//! runtime, started and ended while the others run, and the server (on the kit's own
//! runtime) serves them all. Public API only.

use std::sync::LazyLock;

use msi_dataplane::{
    BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
};
use msi_dataplane_testing::{EntraServer, TestCertificate, TestIdentity};

static ENTRA: LazyLock<EntraServer> = LazyLock::new(EntraServer::start_blocking);

/// One identity registered with the shared server.
static IDENTITY: LazyLock<(TestIdentity, TestCertificate)> = LazyLock::new(|| {
    let (identity, certificate) = (TestIdentity::new(), TestCertificate::self_signed());
    ENTRA.register(&identity, &certificate);
    (identity, certificate)
});

/// A credential for the shared identity, a token for `scope`, and the server's word that
/// it issued it.
async fn token_for(scope: &str) {
    let (identity, certificate) = &*IDENTITY;
    let file = identity.credentials(certificate, &ENTRA.base_url(), BundleFormat::Pem);
    let http = Environment::default().with_http_client(ENTRA.client());
    let options = ClientCertificateCredentialOptions::default().with_environment(http);
    let credential = ClientCertificateCredential::new(&file, options).unwrap();
    let token = credential.get_token(&[scope]).await.unwrap();
    let issued = ENTRA
        .issued(token.token())
        .expect("issued by the shared server");
    assert_eq!(issued.scope, scope);
}

#[tokio::test]
async fn first_runtime() {
    token_for("https://one.example/.default").await;
}

#[tokio::test]
async fn second_runtime() {
    token_for("https://two.example/.default").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_runtime_multi_thread() {
    token_for("https://three.example/.default").await;
}

#[tokio::test]
async fn fourth_runtime_after_a_pause() {
    // Started later than the others: their runtimes have ended by now.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    token_for("https://four.example/.default").await;
}

#[test]
fn a_runtime_made_by_hand_after_the_others_ended() {
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(token_for("https://five.example/.default"));
}
