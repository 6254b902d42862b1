//! Renewing one stored identity from the data plane (feature `keyvault`): read what is
//! stored, ask the data plane for fresh credentials, and store them only when
//! [`should_store`] says so. The rule is the reading side's (the reloading credential
//! keeps the file with the later `not_before`), so a renewal never replaces a newer
//! credential with an older one, and running it again, or twice at once, stores nothing
//! new or the same thing.

use time::OffsetDateTime;

use crate::dataplane::ManagedIdentityCredentials;
use crate::dataplane::{Client, UserAssignedIdentitiesRequest};
use crate::error::{ErrorKind, KeyVaultError, Result};
use crate::file::model::UserAssignedIdentityCredentials;
use crate::keyvault::renewal::{StoredKind, StoredProperties, should_store};
use crate::keyvault::store::{CredentialStore, Stored};
use crate::keyvault::{
    format_managed_identity_credentials_for_storage,
    format_user_assigned_identity_credentials_for_storage,
};

/// What [`CredentialStore::renew`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewalOutcome {
    /// The data plane's credentials were newer and are now stored as a new version.
    Stored {
        /// The secret name.
        name: String,
        /// The new version's properties.
        properties: StoredProperties,
        /// The replaced credential's `not_before`.
        previous_not_before: OffsetDateTime,
        /// The stored credential's `not_before`.
        not_before: OffsetDateTime,
    },
    /// The data plane offered nothing newer; nothing was written.
    NotNewer {
        /// The secret name.
        name: String,
        /// The stored credential's `not_before`.
        stored_not_before: OffsetDateTime,
        /// The offered credential's `not_before`.
        offered_not_before: OffsetDateTime,
    },
}

impl CredentialStore {
    /// Renew the identity stored as `name` (`msi-<id>` or `uamsi-<id>`): ask `dataplane`
    /// (the client for the identity URL of the resource that owns it) for fresh
    /// credentials, and store them when their `not_before` is later than the stored one's.
    ///
    /// A `uamsi-` credential is asked for by its `resource_id`; an `msi-` one by the
    /// resource ids of its explicit identities, or as the system-assigned identity when it
    /// has none.
    ///
    /// # Errors
    ///
    /// The store's errors (reading and writing), the data plane's, and
    /// [`KeyVaultError::InvalidStoredSecret`] when the stored credential does not say which
    /// identity it is (no `resource_id`) or the data plane does not return it.
    pub async fn renew(&self, dataplane: &Client, name: &str) -> Result<RenewalOutcome> {
        let Some((kind, identifier)) = StoredKind::of(name) else {
            return Err(invalid(
                name,
                "the name has neither the `msi-` nor the `uamsi-` prefix",
            ));
        };
        match kind {
            StoredKind::UserAssignedIdentity => {
                let stored: Stored<UserAssignedIdentityCredentials> =
                    self.get_user_assigned_identity(identifier, None).await?;
                let stored_nbf = format_user_assigned_identity_credentials_for_storage(
                    identifier,
                    &stored.credentials,
                )?
                .attributes()
                .not_before;
                let resource_id = stored
                    .credentials
                    .resource_id
                    .clone()
                    .ok_or_else(|| invalid(name, "the stored credential has no resource_id"))?;
                let fresh = dataplane
                    .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new(
                        [resource_id.as_str()],
                    ))
                    .await?;
                let offered = fresh
                    .user_assigned_identity(&resource_id)
                    .ok_or_else(|| invalid(name, "the data plane did not return this identity"))?;
                let secret =
                    format_user_assigned_identity_credentials_for_storage(identifier, offered)?;
                self.store_if_newer(name, stored_nbf, &secret).await
            }
            StoredKind::ManagedIdentity => {
                let stored: Stored<ManagedIdentityCredentials> =
                    self.get_managed_identity(identifier, None).await?;
                let stored_nbf = format_managed_identity_credentials_for_storage(
                    identifier,
                    &stored.credentials,
                )?
                .attributes()
                .not_before;
                let ids: Vec<String> = stored
                    .credentials
                    .user_assigned_identities()
                    .iter()
                    .filter_map(|i| i.resource_id.clone())
                    .collect();
                let fresh = if stored.credentials.user_assigned_identities().is_empty() {
                    dataplane.get_system_assigned_identity_credentials().await?
                } else if ids.len() == stored.credentials.user_assigned_identities().len() {
                    dataplane
                        .get_user_assigned_identities_credentials(
                            &UserAssignedIdentitiesRequest::new(ids),
                        )
                        .await?
                } else {
                    return Err(invalid(name, "an explicit identity has no resource_id"));
                };
                let secret = format_managed_identity_credentials_for_storage(identifier, &fresh)?;
                self.store_if_newer(name, stored_nbf, &secret).await
            }
        }
    }

    async fn store_if_newer(
        &self,
        name: &str,
        stored_not_before: OffsetDateTime,
        secret: &crate::keyvault::KeyVaultSecret,
    ) -> Result<RenewalOutcome> {
        let offered_not_before = secret.attributes().not_before;
        if !should_store(stored_not_before, offered_not_before) {
            tracing::debug!(secret = name, "renewal: nothing newer to store");
            return Ok(RenewalOutcome::NotNewer {
                name: name.to_owned(),
                stored_not_before,
                offered_not_before,
            });
        }
        let properties = self.put(secret).await?;
        tracing::info!(secret = name, "renewal: stored newer credentials");
        Ok(RenewalOutcome::Stored {
            name: name.to_owned(),
            properties,
            previous_not_before: stored_not_before,
            not_before: offered_not_before,
        })
    }
}

fn invalid(name: &str, reason: &str) -> crate::error::Error {
    ErrorKind::KeyVault(KeyVaultError::InvalidStoredSecret {
        name: name.to_owned(),
        reason: reason.to_owned(),
    })
    .into()
}
