//! Key Vault: the storage format of a credential (the writer's side of the CSI mount),
//! the credential store, and renewal.
//!
//! # The storage format
//!
//! Whoever stores a credential for the Secrets Store CSI driver to mount writes it as a
//! Key Vault secret the way the Go reference's `FormatUserAssignedIdentityCredentialsForStorage`
//! does:
//!
//! - name: `uamsi-<identifier>` for user-assigned identity credentials
//!   ([`format_user_assigned_identity_credentials_for_storage`]), `msi-<identifier>` for
//!   the data plane's [`ManagedIdentityCredentials`](crate::dataplane::ManagedIdentityCredentials)
//!   ([`format_managed_identity_credentials_for_storage`], Go's
//!   `FormatManagedIdentityCredentialsForStorage`); the name is checked against Key
//!   Vault's rule (1–127 letters, digits, `-`), which the reference leaves to Key Vault;
//! - value: the credential JSON (compact, absent fields omitted);
//! - attributes: `enabled`, `expires` = `not_after`, `nbf` = `not_before`;
//! - tags: `renew_after` and `cannot_renew_after`, the file's RFC 3339 strings.
//!
//! For `ManagedIdentityCredentials` the times come from the top level when it has no
//! explicit identities, from the one explicit identity when it has exactly one, and are
//! an error (`invalid_argument` naming
//! `credentials`) when it has more.
//!
//! All four times are required, as in the reference
//! (`missing_storage_time` names the
//! missing one). [`KeyVaultSecret`] holds the result;
//! [`KeyVaultSecret::set_secret_body`] renders the body of Key Vault's REST
//! `PUT {vault}/secrets/{name}` ("Set Secret") request, for any HTTP client or SDK; it and
//! the value are [`SecretString`](crate::SecretString)s.
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
//! # Storing and renewing identities
//!
//! With the `keyvault` feature, [`store::CredentialStore`] keeps the data plane's
//! credentials in Key Vault through the official SDK client
//! (`azure_security_keyvault_secrets` 1.x) on this crate's own HTTP stack: put (`msi-` and
//! `uamsi-` secrets in the format above), get (latest or a version), soft delete, get
//! deleted, purge, recover (a name still held by a deleted secret is Key Vault's 409,
//! its message saying to purge or recover), and `list()` (and `list_deleted()` for soft-deleted ones)
//! across every page without reading values. `store.secret_client()` is the SDK client it
//! sends through, for Key Vault operations the store does not wrap.
//!
//! [`renewal::needing_renewal(&listed, now)`](renewal::needing_renewal) is a pure
//! function: due (past `renew_after`), unusable (past `exp` or `cannot_renew_after`, or
//! disabled), untracked, current. `store.renew(&dataplane_client, name)` asks the data
//! plane for fresh credentials and stores them only when their `not_before` is later than
//! the stored one's (the reloading credential's rule), so it is idempotent and safe to run
//! twice at once; `renew_due` makes a pass over the vault. `msi-credential vault list
//! VAULT_URL --credential FILE [--json]` (the `msi-credential` crate) prints each stored
//! credential's renewal state, never a value. A cluster's managed identities file is
//! [`hypershift::managed_identities`](crate::hypershift::managed_identities).
//!
//! `cargo run --example identity_flow --features keyvault,metrics` runs the whole flow on
//! loopback (the testing kit's Entra, data plane and Key Vault servers), checking each
//! step (`cargo test` runs it too):
//!
//! ```text
//! 1. managed identities file: vault aro-hcp-msi-test (tenant 72f988bf-...), controlPlaneOperator client 7c6a1e2b-... -> secret uamsi-control-plane-operator
//! 2. data plane issued credentials: not_before 2026-11-23T21:31:14Z, renew_after 2027-01-22T21:31:14Z
//! 3. stored in Key Vault as uamsi-control-plane-operator version 00000000000000000000000000000001
//! 4. CSI writer published /tmp/.../uamsi-control-plane-operator (..2026_11_23_22_31_14.6096176631 via ..data)
//! 5. token from the mounted file, signed by certificate 091902c5e5f4de95
//! 6. data plane rotated the identity (new certificate c72c7a28595ba6f0)
//! 7. renewal: 1 due at renew_after; stored version 00000000000000000000000000000002 (not_before 2026-11-23T21:31:14Z -> 2026-11-23T21:31:15Z)
//! 8. CSI writer swapped in ..2026_11_23_22_31_14.7968529042 via ..data
//! 9. next token signed by certificate c72c7a28595ba6f0; 37 get_token calls during the rotation, 0 failed
//! ```
//!
//! It ends with the producer side's metrics ([`crate::telemetry`]): it installs
//! `metrics-exporter-prometheus`'s recorder first and writes the scrape to the file its
//! argument names (`-- flow.prom`; `promtool check metrics < flow.prom`), or to stdout:
//! the data plane and Key Vault calls by `operation`, the renewal
//! (`msi_dataplane_renewals_total{outcome="renewed"} 1`), and both credentials' token
//! requests and gauges. Its test runs `promtool check metrics` on the scrape and checks
//! those values. The store's cost against a hand-made request is in the
//! [`performance`](crate::guide::performance) chapter.
//!
//! This folder holds the storage format (re-exported here), the store over the Azure SDK
//! (`store`; `answer` reads Key Vault's answers without stray copies of the value) and
//! renewal (`renewal`: pure decisions, and what renewing did). Uses `file/` for the
//! credential model and `dataplane/` for what it stores and renews.

#[cfg(feature = "keyvault")]
mod answer;
mod format;
#[cfg(feature = "keyvault")]
mod listing;
pub mod renewal;
#[cfg(feature = "keyvault")]
pub mod store;

pub use format::*;
#[cfg(feature = "keyvault")]
pub use listing::{DEFAULT_MAX_LIST_BYTES, DEFAULT_MAX_LIST_ITEMS};
