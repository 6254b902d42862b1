//! The MSI data plane (Go: `github.com/Azure/msi-dataplane/pkg/dataplane`): the service a
//! resource provider asks for its identities' certificate credentials, which it then
//! stores in Key Vault ([`crate::keyvault`]) for the Secrets Store CSI driver to mount.
//!
//! Uses the crate's token layer (a [`TokenSource`], e.g. a
//! [`ClientCertificateCredential`](crate::ClientCertificateCredential)), its HTTP client
//! building, retry policy and response size limit. [`ClientFactory`] is built once;
//! [`ClientFactory::client`] makes a [`Client`] per identity URL (ARM's
//! `x-ms-identity-url`). Authentication follows the data plane's `WWW-Authenticate`
//! challenge ([`challenge`]).
//!
//! What a challenge decides, and what it does not:
//!
//! - The first request for a host and identity URL tenant goes without a token; its 401
//!   says a token is needed. Later ones carry the source's cached token at once (the
//!   client keeps no tokens of its own: for this crate's credentials, one cache serves
//!   the client and every other caller of the credential).
//! - Tokens are asked in the identity URL's tenant (its `tid` query parameter); only a URL
//!   without `tid` takes the tenant from the challenge's `authorization` URL. A token of
//!   one tenant is never sent for another tenant's identity URL, even on one host.
//! - The challenge's `authorization` host and scheme, and any `resource` or `scope`, are
//!   ignored: the token comes from the [`TokenSource`]'s own authority for the factory's
//!   `<audience>/.default`. A host that answers with a challenge of its choosing cannot
//!   redirect the credential or obtain a token for another audience.
//! - A 401 to a request that carried a token: one token fetched past the source's cache
//!   ([`TokenSource::replacement_token`]) and one more try; a second 401 is the error.

pub mod challenge;
mod client;
mod source;
mod types;

pub use client::{API_VERSION, Client, ClientFactory, ClientOptions};
#[cfg(feature = "azure_core")]
pub use source::AzureTokenCredential;
pub use source::{TokenFuture, TokenSource};
pub use types::{
    DelegatedResource, ManagedIdentityCredentials, MoveIdentityRequest, MoveIdentityResponse,
    SignedUrl, UserAssignedIdentitiesRequest,
};
