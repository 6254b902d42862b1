//! Testing your component's Azure authentication without Azure, with the crate's testing
//! kit (feature `test-util`).
//!
//! Copy this file unchanged into your crate's `tests/` directory, add the dev-dependencies
//! below, run `cargo test`; then replace `MyComponent` with your own code. (CI does exactly
//! this, in a separate crate: `.ci/downstream`.)
//!
//! ```toml
//! [dev-dependencies]
//! msi-dataplane = { version = "0.1", features = ["test-util"] }
//! reqwest = { version = "0.13", default-features = false } # the kit's client brings TLS
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! The component gets a token from the reloading credential (a file the Secrets Store CSI
//! driver mounts) and calls ARM. The tests serve tokens from the kit's Entra server (it
//! verifies each assertion as Entra does) and ARM from its `ResourceServer` (it accepts
//! only tokens that server issued for ARM, and says which certificate signed them),
//! rotate the mounted file as the CSI driver does, and check which certificate is behind
//! each call. `main` runs the same scenario, for this repository's
//! `cargo run --example test_my_component --features test-util`; in `tests/`, it is unused.

use std::time::Duration;

use msi_dataplane::testing::{
    CsiMount, EntraServer, ResourceServer, TestCa, TestCertificate, TestIdentity,
};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, HttpOptions, ReloadStatus,
    UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
};

const ARM_SCOPE: &str = "https://management.azure.com/.default";

/// The component under test (in your crate, your own code): lists a subscription's
/// resource groups in ARM with its managed identity.
struct MyComponent {
    credential: UserAssignedIdentityCredential,
    http: reqwest::Client,
    arm_url: String,
}

impl MyComponent {
    /// The call's HTTP status; an error when no token could be had or ARM was unreachable.
    async fn list_resource_groups(&self) -> Result<u16, Box<dyn std::error::Error>> {
        let token = self.credential.get_token(&[ARM_SCOPE]).await?;
        let url = format!(
            "{}subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups?api-version=2021-04-01",
            self.arm_url
        );
        let response = self.http.get(url).bearer_auth(token.token()).send().await?;
        Ok(response.status().as_u16())
    }
}

/// Azure without Azure: the kit's Entra (trusting `certificate` for `identity`) and ARM,
/// and the component reading the identity's credential file, mounted with `certificate`.
async fn start(
    identity: &TestIdentity,
    certificate: &TestCertificate,
) -> (EntraServer, ResourceServer, CsiMount, MyComponent) {
    let entra = EntraServer::start().await;
    entra.register(identity, certificate);
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;
    let creds = identity.credentials(certificate, &entra.base_url(), BundleFormat::Pem);
    let mount = CsiMount::with_credentials(&creds);
    // The kit's servers use a test CA: the component's HTTP clients must trust it.
    let client = ClientCertificateCredentialOptions::default()
        .with_http_options(HttpOptions::default().with_http_client(entra.client()));
    let options = UserAssignedIdentityCredentialOptions::default()
        .with_client_options(client)
        .with_debounce(Duration::from_millis(50));
    let credential = UserAssignedIdentityCredential::new(mount.visible_path(), options)
        .await
        .expect("a credential from the mounted file");
    let (http, arm_url) = (entra.client(), arm.url());
    let component = MyComponent {
        credential,
        http,
        arm_url,
    };
    (entra, arm, mount, component)
}

/// The certificate whose key signed the assertion behind the last call's token.
fn signer_of_last_call(arm: &ResourceServer) -> String {
    let call = arm.requests().pop().expect("ARM received a call");
    let issued = call.issued.expect("a token the kit's Entra issued");
    issued.cert_sha256_hex
}

#[tokio::test(flavor = "multi_thread")]
async fn my_component_keeps_working_through_a_certificate_rotation() {
    rotation().await;
}

async fn rotation() {
    let (identity, ca) = (TestIdentity::new(), TestCa::new("my component tests"));
    let first = TestCertificate::builder().signed_by(&ca);
    let (entra, arm, mut mount, component) = start(&identity, &first).await;
    let status = component.list_resource_groups().await.expect("a call");
    assert_eq!(status, 200);
    assert_eq!(signer_of_last_call(&arm), first.sha256_hex());

    // The MSI service renews the certificate; Entra trusts only the new one; the CSI
    // driver swaps the new file in (a PKCS#12 bundle this time).
    let second = TestCertificate::builder().renewing(&first).signed_by(&ca);
    entra.clear_certificates(&identity.client_id, &identity.tenant_id);
    entra.register(&identity, &second);
    let mut reloads = component.credential.subscribe();
    let renewed = identity.credentials(&second, &entra.base_url(), BundleFormat::Pkcs12);
    mount.rotate_credentials(&renewed);
    let second_sha256 = second.sha256_hex();
    let swapped = |s: &ReloadStatus| s.thumbprint_sha256.eq_ignore_ascii_case(&second_sha256);
    tokio::time::timeout(Duration::from_secs(20), reloads.wait_for(swapped))
        .await
        .expect("the rotation is picked up within 20 s")
        .expect("the credential is alive");

    // The same component, unchanged: its next call is signed with the new certificate.
    let status = component.list_resource_groups().await.expect("a call");
    assert_eq!(status, 200);
    assert_eq!(signer_of_last_call(&arm), second_sha256);
}

#[tokio::test(flavor = "multi_thread")]
async fn my_component_fails_when_entra_does_not_trust_its_certificate() {
    let identity = TestIdentity::new();
    let (entra, arm, _mount, component) = start(&identity, &TestCertificate::self_signed()).await;
    entra.clear_certificates(&identity.client_id, &identity.tenant_id);
    let error = component.list_resource_groups().await.expect_err("fails");
    assert!(error.to_string().contains("AADSTS700027"), "{error}");
    assert!(arm.requests().is_empty(), "ARM was not called");
}

/// `cargo run --example test_my_component --features test-util`: the rotation scenario.
#[tokio::main]
async fn main() {
    rotation().await;
    println!("ok: the component's calls were authorized through a certificate rotation");
}
