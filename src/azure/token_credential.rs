//! `azure_core::credentials::TokenCredential` for the credentials (feature `azure_core`).
//!
//! With the `azure_core` feature (on by default), [`ClientCertificateCredential`] and the
//! reloading [`UserAssignedIdentityCredential`] implement
//! [`azure_core::credentials::TokenCredential`], so either can be handed to any
//! Azure SDK for Rust client, or to azure_core's `BearerTokenAuthorizationPolicy`, as an
//! `Arc<dyn TokenCredential>`: wrap it with [`Arc::new`].
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use azure_core::credentials::TokenCredential;
//! use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
//! use msi_dataplane::{ClientCertificateCredential, UserAssignedIdentityCredentials};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let creds = UserAssignedIdentityCredentials::from_path("/mnt/certs/my-identity")?;
//! let credential: Arc<dyn TokenCredential> =
//!     Arc::new(ClientCertificateCredential::new(&creds, Default::default())?);
//!
//! // Hand it to an Azure SDK client (`SomeClient::new(endpoint, credential.clone(), None)`)
//! // or to a pipeline policy of your own:
//! let policy = BearerTokenAuthorizationPolicy::new(
//!     credential.clone(),
//!     ["https://management.azure.com/.default"],
//! );
//!
//! // Or ask it for a token directly:
//! let token = credential
//!     .get_token(&["https://management.azure.com/.default"], None)
//!     .await?;
//! println!("expires on {}", token.expires_on);
//! # let _ = policy;
//! # Ok(()) }
//! ```
//!
//! azure_core's `BearerTokenAuthorizationPolicy` keeps the token it got until close to
//! its expiry. After a rotation, a client built earlier therefore goes on presenting the
//! token it holds (still valid: a rotation changes the certificate that signs *new*
//! token requests, not the validity of issued tokens); the tokens the credential hands out
//! after the swap are requested with the rotated certificate.
//!
//! Errors come back as an [`azure_core::Error`] of kind
//! [`ErrorKind::Credential`](azure_core::error::ErrorKind::Credential) whose source is this
//! crate's [`Error`]: `err.downcast_ref::<msi_dataplane::Error>()` recovers it with its
//! [`kind`](Error::kind), [`path`](Error::path) and
//! [`is_transient`](Error::is_transient).

#[cfg(doc)]
use std::sync::Arc;

use azure_core::credentials::{self, TokenCredential, TokenRequestOptions};
use azure_core::error::ErrorKind as AzureErrorKind;

use crate::error::{Error, Result};
use crate::reload::user_assigned::UserAssignedIdentityCredential;
use crate::token::access_token::AccessToken;
use crate::token::credential::ClientCertificateCredential;

/// For Azure SDK for Rust clients and azure_core pipelines: use it as an
/// `Arc<dyn TokenCredential>` (`Arc::new(credential)`), on a Tokio runtime.
///
/// `get_token` is [`ClientCertificateCredential::get_token`] (cached, single flight,
/// refresh ahead); the [`TokenRequestOptions`] are not used. The token's `expires_on` is
/// passed on unchanged (azure_core 1.x's `AccessToken` has no `refresh_on`). A failure is
/// an [`azure_core::Error`] of kind
/// [`ErrorKind::Credential`](azure_core::error::ErrorKind::Credential) whose source is the
/// crate's [`Error`].
#[async_trait::async_trait]
impl TokenCredential for ClientCertificateCredential {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<credentials::AccessToken> {
        to_azure(ClientCertificateCredential::get_token(self, scopes).await)
    }
}

/// For Azure SDK for Rust clients: the reloading credential, as an
/// `Arc<dyn TokenCredential>`. Long-running components should hand SDK clients this one,
/// so that every request after a rotation is signed with the rotated certificate.
///
/// `get_token` is [`UserAssignedIdentityCredential::get_token`]: the active credential's
/// cache (never blocked by a reload). Tokens and errors are mapped as for
/// [`ClientCertificateCredential`].
#[async_trait::async_trait]
impl TokenCredential for UserAssignedIdentityCredential {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<credentials::AccessToken> {
        to_azure(UserAssignedIdentityCredential::get_token(self, scopes).await)
    }
}

/// Our token as azure_core's (same text, same `expires_on`), or our error as azure_core's:
/// kind `Credential`, our error as the source (its `Display` never holds secrets, so
/// neither does the wrapper's).
fn to_azure(result: Result<AccessToken>) -> azure_core::Result<credentials::AccessToken> {
    result
        .map(|token| credentials::AccessToken::new(token.token().to_owned(), token.expires_on()))
        .map_err(|error: Error| azure_core::Error::new(AzureErrorKind::Credential, error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use time::macros::datetime;

    #[test]
    fn token_keeps_text_and_exact_expiry() {
        let expires_on = datetime!(2026-03-04 05:06:07.123_456_789 UTC);
        let ours = AccessToken::new("eyJ0eXAi.abc.def", expires_on)
            .with_refresh_on(Some(datetime!(2026-03-04 04:36:07 UTC)));
        let theirs = to_azure(Ok(ours)).unwrap();
        assert_eq!(theirs.token.secret(), "eyJ0eXAi.abc.def");
        assert_eq!(theirs.expires_on, expires_on);
        assert!(!format!("{theirs:?}").contains("eyJ0eXAi"));
    }

    #[test]
    fn error_is_credential_kind_with_our_error_as_source() {
        let ours = Error::from(ErrorKind::Expired {
            expired_at: datetime!(2020-01-01 00:00 UTC),
            now: datetime!(2020-01-02 00:00 UTC),
        });
        let message = ours.to_string();
        let theirs = to_azure(Err(ours)).unwrap_err();
        assert_eq!(theirs.kind(), &AzureErrorKind::Credential);
        assert_eq!(theirs.to_string(), message);
        let source = std::error::Error::source(&theirs).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some(message.as_str()));
        let inner = theirs.downcast_ref::<Error>().map(Error::kind);
        assert!(matches!(inner, Some(ErrorKind::Expired { .. })));
    }

    #[test]
    fn usable_as_dyn_token_credential() {
        fn check<T: TokenCredential + 'static>() {}
        check::<ClientCertificateCredential>();
        check::<UserAssignedIdentityCredential>();
    }
}
