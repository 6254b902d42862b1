//! Waiting with a deadline for what happens in the background: a reloading credential
//! taking up a new certificate, a server receiving requests. Each returns as soon as the
//! condition holds (it is woken by the change, or polls every 2 ms for a server's
//! counts) and panics at the deadline with what it saw, so a failing test says why
//! rather than hanging. Needs a Tokio runtime with time enabled (`#[tokio::test]` has one).

use std::future::Future;
use std::time::Duration;

use super::credentials::TestCertificate;
use super::entra::EntraServer;
#[cfg(doc)]
use super::entra::IssuedToken;
use msi_dataplane::limits::MIN_REFRESH_WINDOW;
use msi_dataplane::{
    AccessToken, ClientCertificateCredential, ReloadOutcome, ReloadStatus,
    UserAssignedIdentityCredential,
};

/// Wait until `credential` serves `certificate` (its active certificate's SHA-256 is
/// `certificate`'s): a rotation is active. Returns the status then.
///
/// # Panics
///
/// When `timeout` passes first, naming both certificates and why the credential still
/// serves the old one: the outcome of its last check of the file (no check yet, the file
/// unchanged, a credential not newer than the active one, or the file refused with its
/// error); or when the credential's reload task is gone.
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
            "testing: the credential for {} still serves certificate {} after {timeout:?}, not {want}: {}",
            seen.path.display(),
            seen.thumbprint_sha256,
            why_not_swapped(&seen),
        )
    })
}

/// Pure: why a credential still serves its certificate, from its last check of the file.
fn why_not_swapped(status: &ReloadStatus) -> String {
    let Some(at) = status.last_check else {
        return "it has not checked its file since it was built (no file event, no backstop \
                re-read)"
            .to_owned();
    };
    let at = msi_dataplane::rfc3339(at);
    let outcome = match status.last_outcome {
        Some(ReloadOutcome::NotNewer) => format!(
            "its last check ({at}) found a credential not newer than the active one and kept \
             the active one (a rotation's not_before must be later than {})",
            msi_dataplane::rfc3339(status.not_before)
        ),
        Some(ReloadOutcome::Unchanged) => {
            format!("its last check ({at}) found the active credential's file unchanged")
        }
        Some(ReloadOutcome::Invalid) => format!("its last check ({at}) refused the file"),
        Some(ReloadOutcome::Swapped) => {
            format!("its last check ({at}) swapped in another certificate")
        }
        Some(other) => format!("its last check ({at}) ended {other}"),
        None => format!("its last check ({at}) has no outcome"),
    };
    match &status.last_error {
        Some(error) => format!("{outcome}: {error}"),
        None => outcome,
    }
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

/// A credential of `msi_dataplane` that
/// [`EntraServer::wait_for_refreshed_token`] asks for tokens, as a component would:
/// [`UserAssignedIdentityCredential`] and [`ClientCertificateCredential`], each in its
/// own tenant (for another tenant of a multi-tenant credential:
/// [`EntraServer::wait_for_refreshed_token_for_tenant`]). Implement it for a wrapper of
/// your own to wait on that.
pub trait Credential: Send + Sync {
    /// A token for `scope` in the credential's own tenant: its `get_token(&[scope])`.
    fn token_for(
        &self,
        scope: &str,
    ) -> impl Future<Output = msi_dataplane::Result<AccessToken>> + Send;
}

impl Credential for UserAssignedIdentityCredential {
    async fn token_for(&self, scope: &str) -> msi_dataplane::Result<AccessToken> {
        self.get_token(&[scope]).await
    }
}

impl Credential for ClientCertificateCredential {
    async fn token_for(&self, scope: &str) -> msi_dataplane::Result<AccessToken> {
        self.get_token(&[scope]).await
    }
}

impl EntraServer {
    /// Wait until `credential` hands out a token for `scope` other than `old` (a token
    /// this server issued): a background refresh is done (its answer arrived and the
    /// credential took it up), not only started. Returns the new token.
    ///
    /// It asks `credential` every 2 ms, as the component would: inside the refresh window a
    /// call starts the background refresh when none is under way (and its backoff after a
    /// failure allows), so a refresh the test expects starts even if nothing else calls.
    /// On a [`ManualClock`](msi_dataplane::ManualClock), move the clock into the token's
    /// refresh range first ([`IssuedToken::refresh_between`]): nothing is refreshed
    /// before it. [`wait_for_token_requests`](Self::wait_for_token_requests) only waits for
    /// the request to arrive.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first, with the old token's expiry, the clock's reading (the
    /// server's: share one clock with the credential), the token's refresh range (for the
    /// default 5-minute refresh window) and the last error seen.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use msi_dataplane::{ManualClock, limits::MIN_REFRESH_WINDOW};
    /// use msi_dataplane_testing::{IdentityFixture, TestCertificate};
    ///
    /// let clock = Arc::new(ManualClock::starting_now());
    /// let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    /// let arm = "https://management.azure.com/.default";
    /// let first = fx.credential.get_token(&[arm]).await.unwrap();
    /// let refresh = fx.entra.issued(first.token()).unwrap().refresh_between(MIN_REFRESH_WINDOW);
    /// clock.set(*refresh.end()); // inside the refresh window: the cached token, refreshed behind
    /// assert_eq!(fx.credential.get_token(&[arm]).await.unwrap().token(), first.token());
    /// let next = fx.entra.wait_for_refreshed_token(&fx.credential, arm, &first, Duration::from_secs(5)).await;
    /// assert_eq!(fx.entra.token_requests(), 2);
    /// // Taken up: the next call gets the new token, with no request.
    /// assert_eq!(fx.credential.get_token(&[arm]).await.unwrap().token(), next.token());
    /// assert_eq!(fx.entra.token_requests(), 2);
    /// # }
    /// ```
    pub async fn wait_for_refreshed_token(
        &self,
        credential: &impl Credential,
        scope: &str,
        old: &AccessToken,
        timeout: Duration,
    ) -> AccessToken {
        self.wait_for_token_other_than(old, scope, timeout, || credential.token_for(scope))
            .await
    }

    /// [`wait_for_refreshed_token`](Self::wait_for_refreshed_token) for a token in
    /// `tenant`, one of a multi-tenant credential's other tenants (its
    /// `get_token_for_tenant`).
    pub async fn wait_for_refreshed_token_for_tenant(
        &self,
        credential: &ClientCertificateCredential,
        scope: &str,
        tenant: &str,
        old: &AccessToken,
        timeout: Duration,
    ) -> AccessToken {
        self.wait_for_token_other_than(old, scope, timeout, || async move {
            credential.get_token_for_tenant(&[scope], tenant).await
        })
        .await
    }

    async fn wait_for_token_other_than<F>(
        &self,
        old: &AccessToken,
        scope: &str,
        timeout: Duration,
        mut ask: impl FnMut() -> F,
    ) -> AccessToken
    where
        F: Future<Output = msi_dataplane::Result<AccessToken>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_error = None;
        loop {
            match ask().await {
                Ok(token) if token.token() != old.token() => return token,
                Ok(_) => {}
                Err(e) => last_error = Some(e.to_string()),
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "testing: the credential still hands out the token for {scope} that expires at {} after {timeout:?}: {} (last error: {})",
                    msi_dataplane::rfc3339(old.expires_on()),
                    self.refresh_position(old),
                    last_error.as_deref().unwrap_or("none"),
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Where the clock is against `token`'s refresh range, for a waiter's panic.
    fn refresh_position(&self, token: &AccessToken) -> String {
        let now = self.now();
        let clock = format!("the clock reads {}", msi_dataplane::rfc3339(now));
        let Some(issued) = self.issued(token.token()) else {
            return format!("{clock}; this server did not issue the token");
        };
        let range = issued.refresh_between(MIN_REFRESH_WINDOW);
        let (start, end) = (*range.start(), *range.end());
        let position = if now < start {
            "before its refresh range: move the credential's clock into it"
        } else if now <= end {
            "inside its refresh range"
        } else {
            "past its refresh range"
        };
        format!(
            "{clock}, {position} ({} to {} for the default refresh window)",
            msi_dataplane::rfc3339(start),
            msi_dataplane::rfc3339(end),
        )
    }

    /// Wait until the server has received at least `count` token requests (a refresh
    /// in the background, say), and return how many it has. The answer may not have
    /// reached the credential yet: [`wait_for_refreshed_token`](Self::wait_for_refreshed_token)
    /// waits for that.
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
