//! Waiting with a deadline for what happens in the background: a reloading credential
//! taking up a new certificate, a server receiving requests. Each returns as soon as the
//! condition holds (it is woken by the change, or polls every 2 ms for a server's
//! counts) and panics at the deadline with what it saw, so a failing test says why
//! rather than hanging. Needs a Tokio runtime with time enabled (`#[tokio::test]` has one).

use std::time::Duration;

use super::credentials::TestCertificate;
use super::entra::EntraServer;
use msi_dataplane::dataplane::TokenSource;
use msi_dataplane::{AccessToken, ReloadStatus, UserAssignedIdentityCredential};

/// Wait until `credential` serves `certificate` (its active certificate's SHA-256 is
/// `certificate`'s): a rotation is active. Returns the status then.
///
/// # Panics
///
/// When `timeout` passes first, naming both certificates and the last reload error; or
/// when the credential's reload task is gone.
///
/// ```no_run
/// # async fn demo(
/// #     credential: msi_dataplane::UserAssignedIdentityCredential,
/// #     mut mount: msi_dataplane_testing::CsiMount,
/// #     renewed: msi_dataplane_testing::TestCertificate,
/// #     file: msi_dataplane::UserAssignedIdentityCredentials,
/// # ) {
/// use std::time::Duration;
/// use msi_dataplane_testing::wait_for_certificate;
///
/// // The renewed certificate's file, swapped in as the CSI driver does.
/// mount.rotate_credentials(&file);
/// let status = wait_for_certificate(&credential, &renewed, Duration::from_secs(5)).await;
/// assert_eq!(status.reloads, 1);
/// # }
/// ```
pub async fn wait_for_certificate(
    credential: &UserAssignedIdentityCredential,
    certificate: &TestCertificate,
    timeout: Duration,
) -> ReloadStatus {
    let want = certificate.sha256_hex();
    wait_for_status(credential, timeout, |s| {
        s.thumbprint_sha256.eq_ignore_ascii_case(&want)
    })
    .await
    .unwrap_or_else(|seen| {
        panic!(
            "testing: the credential for {} still serves certificate {} after {timeout:?}, not {want} (last reload error: {})",
            seen.path.display(),
            seen.thumbprint_sha256,
            seen.last_error.map_or_else(|| "none".to_owned(), |e| e.to_string()),
        )
    })
}

/// Wait until `ready` holds for `credential`'s status (checked now, then after each
/// re-read). `Err` with the last status seen when `timeout` passes first.
///
/// # Panics
///
/// When the credential's reload task is gone (its status can no longer change).
pub async fn wait_for_status(
    credential: &UserAssignedIdentityCredential,
    timeout: Duration,
    mut ready: impl FnMut(&ReloadStatus) -> bool,
) -> Result<ReloadStatus, ReloadStatus> {
    let mut statuses = credential.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let status = statuses.borrow_and_update().clone();
        if ready(&status) {
            return Ok(status);
        }
        match tokio::time::timeout_at(deadline, statuses.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("testing: the credential's reload task is gone"),
            Err(_) => return Err(status),
        }
    }
}

/// Wait until `credential` hands out a token for `scope` in `tenant` other than `old`:
/// a background refresh is done (its answer arrived and the credential took it up), not
/// only started. Returns the new token.
///
/// It asks `credential` every 2 ms, as the component would: inside the refresh window a
/// call starts the background refresh when none is under way (and its backoff after a
/// failure allows), so a refresh the test expects starts even if nothing else calls.
/// [`EntraServer::wait_for_token_requests`] only waits for the request to arrive.
///
/// # Panics
///
/// When `timeout` passes first, with the old token's expiry and the last error seen.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use msi_dataplane::{ManualClock, limits::MIN_REFRESH_WINDOW};
/// use msi_dataplane_testing::{IdentityFixture, TestCertificate, wait_for_refreshed_token};
///
/// let clock = Arc::new(ManualClock::starting_now());
/// let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
/// let arm = "https://management.azure.com/.default";
/// let first = fx.credential.get_token(&[arm]).await.unwrap();
/// let refresh = fx.entra.issued(first.token()).unwrap().refresh_between(MIN_REFRESH_WINDOW);
/// clock.set(*refresh.end()); // inside the refresh window: the cached token, refreshed behind
/// assert_eq!(fx.credential.get_token(&[arm]).await.unwrap().token(), first.token());
/// let tenant = &fx.identity.tenant_id;
/// let next = wait_for_refreshed_token(&fx.credential, arm, tenant, &first, Duration::from_secs(5)).await;
/// assert_eq!(fx.entra.token_requests(), 2);
/// // Taken up: the next call gets the new token, with no request.
/// assert_eq!(fx.credential.get_token(&[arm]).await.unwrap().token(), next.token());
/// assert_eq!(fx.entra.token_requests(), 2);
/// # }
/// ```
pub async fn wait_for_refreshed_token(
    credential: &dyn TokenSource,
    scope: &str,
    tenant: &str,
    old: &AccessToken,
    timeout: Duration,
) -> AccessToken {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match credential.token(scope, tenant).await {
            Ok(token) if token.token() != old.token() => return token,
            Ok(_) => {}
            Err(e) => last_error = Some(e.to_string()),
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "testing: {credential:?} still hands out the token for {scope} that expires at {} after {timeout:?} (last error: {})",
                msi_dataplane::rfc3339(old.expires_on()),
                last_error.as_deref().unwrap_or("none"),
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

impl EntraServer {
    /// Wait until the server has received at least `count` token requests (a refresh
    /// in the background, say), and return how many it has. The answer may not have
    /// reached the credential yet: [`wait_for_refreshed_token`] waits for that.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first, with the count and the requests received.
    pub async fn wait_for_token_requests(&self, count: usize, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let seen = self.token_requests();
            if seen >= count {
                return seen;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "testing: {seen} token requests after {timeout:?}, not {count}: {:#?}",
                    self.requests()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}
