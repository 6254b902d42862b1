//! Azure identity without Azure in one call: the kit's Entra server, an identity with a
//! certificate it trusts, the credential file mounted as the CSI driver mounts it, and
//! the reloading credential on that file, all wired to trust the kit's test CA.

use std::sync::Arc;
use std::time::Duration;

use super::credentials::{TestCertificate, TestIdentity};
use super::csi::CsiMount;
use super::entra::EntraServer;
use super::wait::wait_for_certificate;
use msi_dataplane::BundleFormat;
use msi_dataplane::ClientCertificateCredentialOptions;
use msi_dataplane::{Clock, Environment};
use msi_dataplane::{ReloadOptions, ReloadStatus, UserAssignedIdentityCredential};

/// How long [`IdentityFixture::rotate_to`] waits for the credential to take up a rotation.
const ROTATION_TIMEOUT: Duration = Duration::from_secs(20);

/// The pieces of one managed identity under test (Unix only, as [`CsiMount`]).
///
/// ```
/// # async fn demo() {
/// use msi_dataplane::BundleFormat;
/// use msi_dataplane_testing::{IdentityFixture, TestCertificate};
///
/// let mut fixture = IdentityFixture::start().await;
/// let token = fixture.credential.get_token(&["https://management.azure.com/.default"]).await.unwrap();
/// assert!(fixture.entra.issued(token.token()).is_some());
/// // The MSI service renews the certificate, the CSI driver swaps the file in.
/// let renewed = TestCertificate::builder().renewing(&fixture.certificate).self_signed();
/// fixture.rotate_to(renewed, BundleFormat::Pkcs12).await;
/// # }
/// ```
#[non_exhaustive]
pub struct IdentityFixture {
    /// The Entra server, trusting [`certificate`](Self::certificate) for the identity.
    pub entra: EntraServer,
    /// The identity (client id, tenant, ...).
    pub identity: TestIdentity,
    /// The certificate in the mounted file.
    pub certificate: TestCertificate,
    /// The mount holding the credential file, named as the CSI driver names it.
    pub mount: CsiMount,
    /// The reloading credential on the mounted file. It forgets a failed token request at
    /// once (`failure_memory` zero), so that each scripted answer reaches the next call;
    /// build a credential of your own to test the failure memory.
    pub credential: UserAssignedIdentityCredential,
}

impl IdentityFixture {
    /// With a self-signed certificate valid from an hour ago for the kit's default span.
    pub async fn start() -> IdentityFixture {
        IdentityFixture::start_with(TestCertificate::self_signed()).await
    }

    /// With `certificate` (from a [`TestCa`](super::TestCa), or with chosen validity).
    ///
    /// # Panics
    ///
    /// When the credential cannot be built from the file (a certificate the crate
    /// refuses), naming why.
    pub async fn start_with(certificate: TestCertificate) -> IdentityFixture {
        IdentityFixture::start_inner(certificate, None).await
    }

    /// With `certificate`, and time read from `clock` by the Entra server
    /// ([`EntraServer::use_clock`]) and the credential (its options' `clock`): move a
    /// [`ManualClock`](msi_dataplane::ManualClock) (`ManualClock::starting_now()`, for
    /// the kit's certificates valid from an hour ago) and the test crosses refresh ahead,
    /// expiry and the certificate's end without waiting. The CSI mount and the reload
    /// watcher still run on real time.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use msi_dataplane::ManualClock;
    /// use msi_dataplane_testing::{IdentityFixture, TestCertificate};
    ///
    /// let clock = Arc::new(ManualClock::starting_now());
    /// let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    /// let arm = "https://management.azure.com/.default";
    /// let first = fx.credential.get_token(&[arm]).await.unwrap();
    /// clock.advance(Duration::from_secs(2 * 3600)); // the token has expired
    /// let next = fx.credential.get_token(&[arm]).await.unwrap();
    /// assert_ne!(first.token(), next.token());
    /// assert_eq!(fx.entra.requests()[1].received_at, fx.entra.now());
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// As [`start_with`](Self::start_with) (a certificate not valid at the clock's time
    /// is one the crate refuses).
    pub async fn start_with_clock(
        certificate: TestCertificate,
        clock: Arc<dyn Clock>,
    ) -> IdentityFixture {
        IdentityFixture::start_inner(certificate, Some(clock)).await
    }

    async fn start_inner(
        certificate: TestCertificate,
        clock: Option<Arc<dyn Clock>>,
    ) -> IdentityFixture {
        let entra = EntraServer::start().await;
        if let Some(clock) = &clock {
            entra.use_clock(clock.clone());
        }
        let identity = TestIdentity::new();
        entra.register(&identity, &certificate);
        let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
        let mount =
            CsiMount::with_credentials_named(&format!("uamsi-{}", identity.client_id), &file);
        let mut environment = Environment::default().with_http_client(entra.client());
        if let Some(clock) = clock {
            environment = environment.with_clock(clock);
        }
        let client = ClientCertificateCredentialOptions::default()
            .with_environment(environment)
            .with_failure_memory(Duration::ZERO);
        let reload = ReloadOptions::default().with_debounce(Duration::from_millis(50));
        let credential = UserAssignedIdentityCredential::new(mount.visible_path(), client, reload)
            .await
            .unwrap_or_else(|e| panic!("testing: a credential from the mounted file: {e}"));
        IdentityFixture {
            entra,
            identity,
            certificate,
            mount,
            credential,
        }
    }

    /// HTTP settings that trust the kit's test CA: for every builder that talks to the
    /// kit's servers (a credential, the data plane client, the Key Vault store), and
    /// [`EntraServer::client`] for your component's own calls.
    pub fn environment(&self) -> Environment {
        Environment::default().with_http_client(self.entra.client())
    }

    /// A renewal: Entra trusts `next` (the old certificate stays trusted, as it stays
    /// valid), the CSI driver swaps in the file with `next` in `format`, and this waits
    /// until the credential serves it. Returns the credential's status then.
    ///
    /// # Panics
    ///
    /// When the credential has not taken it up within 20 s, with what it serves.
    pub async fn rotate_to(&mut self, next: TestCertificate, format: BundleFormat) -> ReloadStatus {
        self.entra.register(&self.identity, &next);
        let file = self
            .identity
            .credentials(&next, &self.entra.base_url(), format);
        self.mount.rotate_credentials(&file);
        let status = wait_for_certificate(&self.credential, &next, ROTATION_TIMEOUT).await;
        self.certificate = next;
        status
    }

    /// Entra stops trusting every certificate of the identity (a certificate the MSI
    /// service revoked, or one never registered): token requests fail with AADSTS700027.
    pub fn distrust(&self) {
        let identity = &self.identity;
        self.entra
            .clear_certificates(&identity.client_id, &identity.tenant_id);
    }
}
