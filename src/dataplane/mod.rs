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
    UserAssignedIdentitiesRequest,
};
