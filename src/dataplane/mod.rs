//! The MSI data plane (Go: `github.com/Azure/msi-dataplane/pkg/dataplane`): the producer
//! side of the credential files. A resource provider's backend (or any control-plane
//! component that manages identities) asks the data plane for an identity's certificate
//! credentials and stores them in Key Vault ([`crate::keyvault`]) for the Secrets Store CSI
//! driver to mount.
//!
//! [`ClientFactory`] is built once over a [`TokenSource`] (the service's own credential,
//! e.g. a [`ClientCertificateCredential`](crate::ClientCertificateCredential), or any
//! `azure_core` `TokenCredential`); [`ClientFactory::client`] makes a [`Client`] per
//! identity URL (ARM's `x-ms-identity-url` header for the resource). It uses the crate's
//! HTTP client building, retry policy and response size limit.
//!
//! ```no_run
//! use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
//! use msi_dataplane::{
//!     keyvault, ClientCertificate, ClientCertificateCredential, ClientCertificateCredentialOptions,
//! };
//!
//! # async fn run(identity_url: &str) -> Result<(), Box<dyn std::error::Error>> {
//! // The service's own (often multi-tenant) application certificate.
//! let app = ClientCertificateCredential::from_parts(
//!     "https://login.microsoftonline.com/",
//!     "72f988bf-86f1-41af-91ab-2d7cd011db47",
//!     "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
//!     ClientCertificate::from_bundle(&std::fs::read("/etc/service/app.pem")?)?,
//!     ClientCertificateCredentialOptions::default().with_additionally_allowed_tenants(["*"]),
//! )?;
//! let factory = ClientFactory::new(app, "https://identity.azure.net/", Default::default())?;
//! // `identity_url`: ARM's `x-ms-identity-url` header for the resource.
//! let client = factory.client(identity_url)?;
//! let id = "/subscriptions/.../userAssignedIdentities/my-identity";
//! let creds = client
//!     .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([id]))
//!     .await?;
//! let identity = creds.user_assigned_identity(id).ok_or("not returned")?;
//! let secret = keyvault::format_user_assigned_identity_credentials_for_storage("my-identity", identity)?;
//! // Store it with `keyvault::store::CredentialStore` (feature `keyvault`), or
//! // PUT secret.set_secret_body()? to {vault}/secrets/{secret.name()}
//! # Ok(()) }
//! ```
//!
//! `cargo run --example dataplane` runs the whole flow on loopback against the testing
//! kit's servers: a 401 challenge naming another tenant, a token there, the identity's
//! credentials, their Key Vault form, and a token with them.
//!
//! # Go to Rust
//!
//! | Go (`pkg/dataplane`) | Rust (`msi_dataplane::dataplane`) |
//! |---|---|
//! | `NewClientFactory(cred, audience, opts)` | [`ClientFactory::new(source, audience, Environment)`](ClientFactory::new); `ClientFactory::new(AzureTokenCredential(credential), ..)` for an `Arc<dyn TokenCredential>` (feature `azure_core`) |
//! | `ClientFactory.NewClient(identityURL)` | [`factory.client(identity_url)`](ClientFactory::client) (https only, checked before any request) |
//! | `GET` system-assigned (`Getcred`) | [`client.get_system_assigned_identity_credentials().await`](Client::get_system_assigned_identity_credentials) |
//! | `Client.GetUserAssignedIdentitiesCredentials(ctx, req)` | [`client.get_user_assigned_identities_credentials(&req).await`](Client::get_user_assigned_identities_credentials) |
//! | `DELETE` system-assigned (`Deleteidentity`) | [`client.delete_system_assigned_identity().await`](Client::delete_system_assigned_identity) (200 or 204) |
//! | `POST .../proxy/move` (`Moveidentity`) | [`client.move_identity(&MoveIdentityRequest::new(target)).await`](Client::move_identity) |
//! | `ManagedIdentityCredentials`, `DelegatedResource` | same names; the top-level keys are the [`UserAssignedIdentityCredentials`](crate::UserAssignedIdentityCredentials) in `identity` (flattened on the wire); `user_assigned_identities()`, `user_assigned_identity(id)` give the explicit ones; built in code with `ManagedIdentityCredentials::system_assigned(identity)` / `user_assigned(identities)` and `DelegatedResource::new(id)`; `identity.not_before()`, `not_after()`, `renew_after()`, `cannot_renew_after()` give the times typed (the fields stay the wire's strings) |
//! | `UserAssignedIdentitiesRequest`, `MoveIdentityRequest`, `MoveIdentityResponse` | same names (camelCase on the wire); `MoveIdentityResponse::identity_url` is a [`SignedUrl`], which prints without its query |
//! | `IdentifierForManagedIdentityCredentials(id)`, `FormatManagedIdentityCredentialsForStorage(id, creds)` | [`keyvault::identifier_for_managed_identity_credentials`](crate::keyvault::identifier_for_managed_identity_credentials), [`keyvault::format_managed_identity_credentials_for_storage`](crate::keyvault::format_managed_identity_credentials_for_storage) |
//! | `IdentifierForUserAssignedIdentityCredentials`, `FormatUserAssignedIdentityCredentialsForStorage` | [`keyvault::identifier_for_user_assigned_identity_credentials`](crate::keyvault::identifier_for_user_assigned_identity_credentials), [`keyvault::format_user_assigned_identity_credentials_for_storage`](crate::keyvault::format_user_assigned_identity_credentials_for_storage) |
//! | `azidentity.NewClientCertificateCredential(tenant, client, certs, key, opts)` with `AdditionallyAllowedTenants` | [`ClientCertificateCredential::from_parts(authority, tenant, client_id, certificate, options)`](crate::ClientCertificateCredential::from_parts), the allowed tenants in its options |
//!
//! # Authentication: the challenge
//!
//! - **The first request** for a host and identity URL tenant goes without a token; the
//!   401's `WWW-Authenticate` is parsed as RFC 9110 defines it (several
//!   challenges per field and across fields, quoted strings with commas and escapes,
//!   `token68`, case-insensitive scheme; the reference compares `Bearer`
//!   case-sensitively). The tenant in its `authorization` URL must be a GUID or a domain,
//!   and the scope is `<audience>/.default` with one `/` (the reference gives
//!   `//.default` for an audience ending in `/`). The request is retried once with the
//!   token; later ones carry the source's cached token at once (no second 401), refreshed
//!   ahead of expiry. The client keeps no tokens of its own: for this crate's
//!   credentials, one cache serves the client and every other caller of the credential.
//! - **What a challenge decides**: only the tenant to ask a token in, and only when the
//!   identity URL has no `tid` query parameter; with one, tokens are always for `tid`, so
//!   a request never carries a token of another tenant's identity, even when identities
//!   of many tenants share one regional host. The challenge's `authorization` host and
//!   scheme, and any `resource` or `scope` in it, are ignored: the token always comes
//!   from the [`TokenSource`]'s own authority for the factory's `<audience>/.default`. A
//!   host that answers with a challenge of its choosing cannot redirect the credential or
//!   obtain a token for another audience.
//! - **A refused token**: a 401 to a request that carried a token gets one token fetched
//!   past the source's cache ([`TokenSource::replacement_token`], which
//!   [`ClientCertificateCredential::get_token_replacing`](crate::ClientCertificateCredential::get_token_replacing)
//!   serves, as MSAL's `force_refresh`) and one more try; a second 401 is the error, with
//!   the service's code and message.
//! - **Tenants**: [`get_token_for_tenant`](crate::ClientCertificateCredential::get_token_for_tenant)
//!   on a `ClientCertificateCredential` caches per tenant and scope (the own tenant's
//!   cache is `get_token`'s); a tenant not among the credential's additionally allowed
//!   tenants (or `*`) is refused (code `tenant_not_allowed`),
//!   naming both tenants, before any request. An `azure_core` `TokenCredential` cannot be
//!   pointed at a tenant (azure_core 1.x has no such option): it must already be in the
//!   identity's tenant. Without the `azure_core` feature the client works with the
//!   crate's own credentials through the [`TokenSource`] trait.
//!
//! # Errors
//!
//! [`ErrorKind::Service`](crate::ErrorKind::Service) keeps the status, the
//! service's code and message (`{"error": {...}}` or a bare `{"code"}`), `x-ms-request-id`,
//! the client request id and `Retry-After`. 408/429/5xx and transient transport failures
//! are retried with the token requests' [`RetryPolicy`](crate::RetryPolicy) (one shared
//! loop; a token source's failure, already retried by the source, ends the call instead
//! of being retried again). Answers over 1 MiB and malformed bodies are
//! `invalid_data_plane_response`; no body is
//! ever logged or echoed, and the identity URL's query (it carries a signature) appears
//! in no error, log or `Debug` output, nor in any public accessor of the client.

mod challenge;
mod client;
mod source;
mod types;

pub use client::{API_VERSION, Client, ClientFactory};
#[cfg(feature = "azure_core")]
pub use source::AzureTokenCredential;
pub use source::{TokenFuture, TokenSource};
pub use types::{
    DelegatedResource, ManagedIdentityCredentials, MoveIdentityRequest, MoveIdentityResponse,
    SignedUrl, UserAssignedIdentitiesRequest,
};
