//! Testing your component's Azure authentication without Azure, with the crate's testing
//! kit (the `msi-dataplane-testing` crate).
//!
//! Copy this file unchanged into your crate's `tests/` directory, add the dependencies
//! below, run `cargo test`; then replace `MyComponent` with your own code. (CI does exactly
//! this, in a separate crate: `.ci/downstream`.)
//!
//! ```toml
//! [dependencies]
//! msi-dataplane = "0.1"
//!
//! [dev-dependencies]
//! msi-dataplane-testing = "0.1"
//! # the kit's client brings TLS; add features = ["json"] if your tests call `.json()`
//! reqwest = { version = "0.13", default-features = false }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! The component gets a token from the reloading credential (a file the Secrets Store CSI
//! driver mounts) and calls ARM. The tests set up the identity in one call
//! (`IdentityFixture`: the kit's Entra server, which verifies each assertion as Entra
//! does, the mounted file and the credential), serve ARM from the kit's `ResourceServer`
//! (it accepts only tokens that server issued for ARM, and says which certificate signed
//! them), rotate the mounted file as the CSI driver does, and check which certificate is
//! behind each call. `main` runs the same scenario, for this repository's
//! `cargo run --example test_my_component`; in `tests/`, it is unused.

use msi_dataplane::{BundleFormat, UserAssignedIdentityCredential};
use msi_dataplane_testing::{IdentityFixture, ResourceServer, TestCa, TestCertificate};

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

/// Azure without Azure: the kit's Entra and an identity it trusts with `certificate`,
/// mounted as the CSI driver mounts it (the fixture), ARM, and the component on them.
async fn start(certificate: TestCertificate) -> (IdentityFixture, ResourceServer, MyComponent) {
    let fixture = IdentityFixture::start_with(certificate).await;
    let arm = ResourceServer::start(&fixture.entra, ARM_SCOPE).await;
    // The kit's servers use a test CA: the component's HTTP client must trust it.
    let component = MyComponent {
        credential: fixture.credential.clone(),
        http: fixture.entra.client(),
        arm_url: arm.url(),
    };
    (fixture, arm, component)
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
    let ca = TestCa::new("my component tests");
    let first = TestCertificate::builder().signed_by(&ca);
    let (mut fixture, arm, component) = start(first.clone()).await;
    assert_eq!(component.list_resource_groups().await.expect("a call"), 200);
    assert_eq!(signer_of_last_call(&arm), first.sha256_hex());

    // The MSI service renews the certificate; Entra trusts only the new one; the CSI
    // driver swaps the new file in (a PKCS#12 bundle this time).
    let second = TestCertificate::builder().renewing(&first).signed_by(&ca);
    fixture.distrust();
    fixture
        .rotate_to(second.clone(), BundleFormat::Pkcs12)
        .await;

    // The same component, unchanged: its next call is signed with the new certificate.
    assert_eq!(component.list_resource_groups().await.expect("a call"), 200);
    assert_eq!(signer_of_last_call(&arm), second.sha256_hex());
}

#[tokio::test(flavor = "multi_thread")]
async fn my_component_fails_when_entra_does_not_trust_its_certificate() {
    let (fixture, arm, component) = start(TestCertificate::self_signed()).await;
    fixture.distrust();
    let error = component.list_resource_groups().await.expect_err("fails");
    assert!(error.to_string().contains("AADSTS700027"), "{error}");
    assert!(arm.requests().is_empty(), "ARM was not called");
}

/// `cargo run --example test_my_component`: the rotation scenario.
#[tokio::main]
async fn main() {
    rotation().await;
    println!("ok: the component's calls were authorized through a certificate rotation");
}
