//! End to end on loopback: data plane → Key Vault → CSI mount → reloading credential →
//! token, then a rotation through renewal (tests/support/identity_flow.rs; the example
//! `identity_flow` runs the same code).
#![cfg(feature = "keyvault")]

mod support;

use msi_dataplane::RenewalOutcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_flow_with_a_rotation_and_no_failed_token_request() {
    let report = support::identity_flow::run(false).await.unwrap();
    assert_eq!(report.secret_name, "uamsi-control-plane-operator");
    assert_eq!(
        report.first_cert_sha256, report.expected_first,
        "the first token is signed by the issued certificate"
    );
    assert_eq!(
        report.second_cert_sha256, report.expected_second,
        "after the swap, by the rotated one"
    );
    assert!(
        matches!(report.renewal, RenewalOutcome::Stored { .. }),
        "{:?}",
        report.renewal
    );
    assert_eq!(report.versions_stored, 2);
    assert!(report.token_calls > 0);
    assert_eq!(
        report.token_failures, 0,
        "no get_token failed across the rotation"
    );
    assert_eq!(report.steps.len(), 9);
}
