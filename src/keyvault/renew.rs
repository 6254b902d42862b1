//! What renewing one stored identity did ([`CredentialStore::renew`], feature
//! `keyvault`).

use time::OffsetDateTime;

use crate::keyvault::renewal::StoredProperties;
#[cfg(doc)]
use crate::keyvault::store::CredentialStore;

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
