//! Where the data plane client gets its tokens: [`TokenSource`], implemented by this
//! crate's credentials and, with the `azure_core` feature, by any azure_core
//! `TokenCredential` through [`AzureTokenCredential`].

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;
use crate::reload::user_assigned::UserAssignedIdentityCredential;
use crate::token::access_token::AccessToken;
use crate::token::credential::ClientCertificateCredential;

/// The future a [`TokenSource`] returns.
pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<AccessToken>> + Send + 'a>>;

/// A source of access tokens for the data plane client: a token for one scope in the
/// tenant a data plane challenge named.
///
/// Implemented by [`ClientCertificateCredential`] (tokens in other tenants as its
/// `additionally_allowed_tenants` allow), by [`UserAssignedIdentityCredential`] (as the
/// credential it holds) and, with the `azure_core` feature, by `AzureTokenCredential` around any
/// `azure_core` `TokenCredential`. The client keeps no tokens of its own: it asks the
/// source for every request, so a source must cache (this crate's credentials do, in the
/// one cache all their consumers share; `azure_identity`'s credentials do too).
pub trait TokenSource: Send + Sync + std::fmt::Debug {
    /// A token for `scope` (`<audience>/.default`) in `tenant` (a GUID or a domain).
    fn token<'a>(&'a self, scope: &'a str, tenant: &'a str) -> TokenFuture<'a>;

    /// A token to replace `rejected`, which the data plane refused: fetched past any
    /// cache the source keeps (as MSAL's `force_refresh`). The client asks for one at most
    /// once per call, after a 401 to a request that carried `rejected`. The default asks
    /// [`token`](Self::token) again: right for a source that keeps no cache.
    fn replacement_token<'a>(
        &'a self,
        rejected: &'a AccessToken,
        scope: &'a str,
        tenant: &'a str,
    ) -> TokenFuture<'a> {
        let _ = rejected;
        self.token(scope, tenant)
    }
}

impl TokenSource for ClientCertificateCredential {
    fn token<'a>(&'a self, scope: &'a str, tenant: &'a str) -> TokenFuture<'a> {
        Box::pin(async move { self.get_token_for_tenant(&[scope], tenant).await })
    }

    fn replacement_token<'a>(
        &'a self,
        rejected: &'a AccessToken,
        scope: &'a str,
        tenant: &'a str,
    ) -> TokenFuture<'a> {
        Box::pin(async move {
            self.get_token_replacing(rejected, &[scope], Some(tenant))
                .await
        })
    }
}

/// The active credential's: a rotation changes the credential that answers, not the
/// tenants it may serve.
impl TokenSource for UserAssignedIdentityCredential {
    fn token<'a>(&'a self, scope: &'a str, tenant: &'a str) -> TokenFuture<'a> {
        Box::pin(async move { self.current().token(scope, tenant).await })
    }

    fn replacement_token<'a>(
        &'a self,
        rejected: &'a AccessToken,
        scope: &'a str,
        tenant: &'a str,
    ) -> TokenFuture<'a> {
        Box::pin(async move {
            let current = self.current();
            current.replacement_token(rejected, scope, tenant).await
        })
    }
}

#[cfg(feature = "azure_core")]
pub use azure::AzureTokenCredential;

#[cfg(feature = "azure_core")]
mod azure {
    use std::sync::Arc;

    use azure_core::credentials::TokenCredential;

    use super::{TokenFuture, TokenSource};
    use crate::error::Error;
    use crate::token::access_token::AccessToken;

    /// Any `azure_core` `TokenCredential` (an `azure_identity` credential, say) as a
    /// [`TokenSource`] (feature `azure_core`).
    ///
    /// azure_core 1.x cannot ask a credential for a particular tenant, so the challenge's
    /// tenant is not passed on: the credential must already be in the identity's tenant.
    /// When it is not, the data plane refuses the token and the call fails with its 401.
    /// For multi-tenant services prefer [`ClientCertificateCredential::from_parts`]
    /// with `additionally_allowed_tenants`.
    ///
    /// [`ClientCertificateCredential::from_parts`]: crate::ClientCertificateCredential::from_parts
    #[derive(Clone, Debug)]
    pub struct AzureTokenCredential(pub Arc<dyn TokenCredential>);

    impl TokenSource for AzureTokenCredential {
        fn token<'a>(&'a self, scope: &'a str, _tenant: &'a str) -> TokenFuture<'a> {
            Box::pin(async move {
                match self.0.get_token(&[scope], None).await {
                    Ok(token) => Ok(AccessToken::new(token.token.secret(), token.expires_on)),
                    Err(e) => Err(match e.downcast_ref::<Error>() {
                        Some(ours) => ours.clone(),
                        None => Error::external(e),
                    }),
                }
            })
        }
    }
}
