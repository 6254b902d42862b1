//! The Key Vault storage format of a credential (the writer's side).
//!
//! Whoever stores a credential for the Secrets Store CSI driver to mount writes it as a
//! Key Vault secret the way the Go reference's `FormatUserAssignedIdentityCredentialsForStorage`
//! does:
//!
//! - name: `uamsi-<identifier>` for user-assigned identity credentials
//!   ([`format_user_assigned_identity_credentials_for_storage`]), `msi-<identifier>` for
//!   the data plane's [`ManagedIdentityCredentials`](crate::dataplane::ManagedIdentityCredentials)
//!   ([`format_managed_identity_credentials_for_storage`], whose times come from the top
//!   level, or from its one explicit identity);
//! - value: the credential JSON (compact, absent fields omitted);
//! - attributes: `enabled`, `expires` = `not_after`, `nbf` = `not_before`;
//! - tags: `renew_after` and `cannot_renew_after`, the file's RFC 3339 strings.
//!
//! All four times are required, as in the reference. [`KeyVaultSecret`] holds the result;
//! [`KeyVaultSecret::set_secret_body`] renders the body of Key Vault's REST
//! `PUT {vault}/secrets/{name}` ("Set Secret") request, for any HTTP client or SDK.
//!
//! ```
//! use msi_dataplane::{UserAssignedIdentityCredentials, keyvault};
//!
//! let creds = UserAssignedIdentityCredentials::from_slice(br#"{
//!   "authentication_endpoint": "https://login.microsoftonline.com/",
//!   "client_id": "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
//!   "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
//!   "client_secret": "TUlJQ...",
//!   "not_before": "2026-11-01T00:00:00Z",
//!   "not_after": "2027-02-01T00:00:00Z",
//!   "renew_after": "2026-12-17T00:00:00Z",
//!   "cannot_renew_after": "2027-01-31T00:00:00Z"
//! }"#)?;
//! let secret = keyvault::format_user_assigned_identity_credentials_for_storage(
//!     "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
//!     &creds,
//! )?;
//! assert_eq!(secret.name(), "uamsi-7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d");
//! assert_eq!(secret.attributes().not_before.year(), 2026);
//! assert_eq!(secret.tags()["renew_after"], "2026-12-17T00:00:00Z");
//! // The value is the credential JSON, and it is secret: it never prints.
//! assert!(!format!("{secret:?}").contains("TUlJQ"));
//! # Ok::<(), msi_dataplane::Error>(())
//! ```
//!
//! This folder holds the storage format ([`format_user_assigned_identity_credentials_for_storage`]
//! and the rest re-exported here), the store over the Azure SDK (`store`, feature
//! `keyvault`; `answer` reads Key Vault's answers without stray copies of the value) and
//! renewal (`renewal`: pure decisions; `renew`, feature `keyvault`). Uses
//! `file/` for the credential model and `dataplane/` for what it stores and renews.

#[cfg(feature = "keyvault")]
mod answer;
mod format;
#[cfg(feature = "keyvault")]
mod listing;
#[cfg(feature = "keyvault")]
pub(crate) mod renew;
pub mod renewal;
#[cfg(feature = "keyvault")]
pub mod store;

pub use format::*;
#[cfg(feature = "keyvault")]
pub use listing::{DEFAULT_MAX_LIST_BYTES, DEFAULT_MAX_LIST_ITEMS};
