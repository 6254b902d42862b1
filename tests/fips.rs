//! The `fips` feature: AWS-LC's FIPS module signs, rustls runs in FIPS mode, and a whole
//! token flow works that way against the verifying server. Run by CI as
//! `cargo test --features full,fips --test fips` (its build needs CMake and Go).
#![cfg(feature = "fips")]

mod support;

use support::entra::EntraServer;
use support::harness::{ARM, credential};

#[test]
fn aws_lc_runs_its_fips_module() {
    // Ok only when the library was built as the FIPS module and its power-on self tests
    // passed.
    aws_lc_rs::try_fips_mode().expect("aws-lc-rs is in FIPS mode");
}

#[test]
fn the_tls_provider_the_http_client_uses_is_fips() {
    // reqwest builds its rustls config from the process default provider, or else from
    // this one; with the feature on, every algorithm in it is FIPS-approved.
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    assert!(provider.fips(), "rustls' aws-lc-rs provider is FIPS");
    if let Some(installed) = rustls::crypto::CryptoProvider::get_default() {
        assert!(
            installed.fips(),
            "an installed default provider is FIPS too"
        );
    }
}

#[tokio::test]
async fn a_token_is_signed_and_fetched_in_fips_mode() {
    let server = EntraServer::start().await;
    let credential = credential(&server, "pem-pkcs8");
    // The server verifies the PS256 signature with an independent implementation.
    let token = credential
        .get_token(&[ARM])
        .await
        .expect("token in FIPS mode");
    assert!(!token.token().is_empty());
    assert_eq!(server.token_requests(), 1);
    assert!(aws_lc_rs::try_fips_mode().is_ok());
}
