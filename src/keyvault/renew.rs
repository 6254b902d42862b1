//! What renewing did: one stored identity ([`CredentialStore::renew`]) and a pass over
//! the vault ([`CredentialStore::renew_due`]), feature `keyvault`. Reached through
//! `keyvault::renewal`, the home of everything about renewal.

use time::OffsetDateTime;

use crate::error::Error;

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

/// What a renewal pass ([`CredentialStore::renew_due`]) did: secret names by outcome.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RenewalPass {
    /// How many stored credentials were past `renew_after`.
    pub due: usize,
    /// Renewed: a newer credential is now stored.
    pub renewed: Vec<String>,
    /// The data plane offered nothing newer.
    pub not_newer: Vec<String>,
    /// The renewal failed, with why.
    pub failed: Vec<(String, Error)>,
}
