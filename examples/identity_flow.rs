//! The whole identity flow on loopback, producer to consumer: a HyperShift managed
//! identities file → the MSI data plane issues the control-plane operator's credentials →
//! the credential store puts them in Key Vault → a CSI-style writer publishes the secret
//! the way kubelet's AtomicWriter does → `UserAssignedIdentityCredential` gets a token →
//! the data plane rotates the identity → renewal stores the new version → the writer
//! swaps it in → the next token is signed by the new certificate.
//!
//! Every service is a server of the testing kit (`msi_dataplane::testing`, feature
//! `test-util`) on 127.0.0.1: Entra, the data plane and Key Vault, over HTTPS with the
//! kit's CA; the identity's key and certificates are made at run time.
//!
//! ```text
//! cargo run --example identity_flow --features keyvault,test-util
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    match support::identity_flow::run(true).await {
        Ok(report)
            if report.token_failures == 0
                && report.second_cert_sha256 == report.expected_second =>
        {
            ExitCode::SUCCESS
        }
        Ok(report) => {
            eprintln!("error: the flow did not end on the rotated certificate: {report:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
