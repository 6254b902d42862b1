//! Which stored credentials need renewing: pure decisions over the properties a Key Vault
//! listing returns (no values read) and `now`.
//!
//! A managing service lists its vault on a schedule (the data plane's certificates live
//! 90 days) and renews what [`needing_renewal`] reports as due. The store
//! (`keyvault::store::CredentialStore`, feature `keyvault`) produces the
//! [`StoredProperties`]; everything here is independent of it and of any I/O.
//!
//! Renewing itself (feature `keyvault`) is the store's: `CredentialStore::renew` returns
//! a [`RenewalOutcome`] and `CredentialStore::renew_due` a [`RenewalPass`], both here with
//! the decisions.
//!
//! For each stored credential, in this order:
//!
//! 1. not `msi-`/`uamsi-` named, or missing/malformed `renew_after`/`cannot_renew_after`
//!    tags → [`RenewalState::Untracked`];
//! 2. disabled, `now >= exp`, or `now >= cannot_renew_after` →
//!    [`RenewalState::Unusable`] (renewing cannot help: the identity must be re-issued);
//! 3. `now >= renew_after` → [`RenewalState::Due`];
//! 4. otherwise [`RenewalState::Current`].
//!
//! ```
//! use std::collections::BTreeMap;
//! use msi_dataplane::keyvault::renewal::{needing_renewal, StoredProperties};
//! use time::macros::datetime;
//!
//! let mut stored = StoredProperties::new("uamsi-a");
//! stored.expires = Some(datetime!(2027-02-01 0:00 UTC));
//! stored.tags = BTreeMap::from([
//!     ("renew_after".into(), "2026-12-17T00:00:00Z".into()),
//!     ("cannot_renew_after".into(), "2027-01-31T00:00:00Z".into()),
//! ]);
//! let listed = [stored];
//! let plan = needing_renewal(&listed, datetime!(2026-12-20 0:00 UTC));
//! assert_eq!(plan.due.len(), 1);
//! assert!(plan.unusable.is_empty());
//! ```

use std::collections::BTreeMap;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::clock::rfc3339;
#[cfg(feature = "keyvault")]
use crate::error::Error;

use crate::keyvault::format::{
    CANNOT_RENEW_AFTER_TAG, MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX, RENEW_AFTER_TAG,
    USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX,
};

/// Why a name of neither kind is not a stored credential.
pub(crate) const NO_PREFIX: &str = "the name has neither the `msi-` nor the `uamsi-` prefix";

/// What a stored credential holds, by its name's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoredKind {
    /// `msi-<id>`: the data plane's `ManagedIdentityCredentials`.
    ManagedIdentity,
    /// `uamsi-<id>`: a `UserAssignedIdentityCredentials`.
    UserAssignedIdentity,
}

impl StoredKind {
    /// The kind a secret name denotes, and the identifier after the prefix.
    pub fn of(name: &str) -> Option<(StoredKind, &str)> {
        // `uamsi-` first: `msi-` is not its prefix, but keep the longer one first anyway.
        if let Some(id) = name.strip_prefix(USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX) {
            return Some((StoredKind::UserAssignedIdentity, id));
        }
        name.strip_prefix(MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX)
            .map(|id| (StoredKind::ManagedIdentity, id))
    }
}

/// A stored secret's properties as Key Vault lists them: no value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredProperties {
    /// The secret name, e.g. `uamsi-<id>`.
    pub name: String,
    /// The version, when the answer named one (a listing names none).
    pub version: Option<String>,
    /// Key Vault's `enabled` attribute.
    pub enabled: Option<bool>,
    /// `nbf`: the credential's `not_before`.
    pub not_before: Option<OffsetDateTime>,
    /// `exp`: the credential's `not_after`.
    pub expires: Option<OffsetDateTime>,
    /// When this version was written.
    pub updated: Option<OffsetDateTime>,
    /// The tags (`renew_after`, `cannot_renew_after`).
    pub tags: BTreeMap<String, String>,
}

impl StoredProperties {
    /// Properties with only a name (for building listings by hand).
    pub fn new(name: impl Into<String>) -> Self {
        StoredProperties {
            name: name.into(),
            ..Default::default()
        }
    }

    /// `msi-` or `uamsi-`, with the identifier; `None` for other secrets.
    pub fn kind(&self) -> Option<(StoredKind, &str)> {
        StoredKind::of(&self.name)
    }
}

/// Why a stored credential cannot be used or renewed any more. Its `Display` says so in
/// a few words (`disabled`, `expired at ...`, `past cannot_renew_after ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// Key Vault's `enabled` attribute is false.
    #[error("disabled")]
    Disabled,
    /// `exp` (`not_after`) has passed.
    #[error("expired at {}", rfc3339(*.expires))]
    Expired {
        /// `exp`.
        expires: OffsetDateTime,
    },
    /// `cannot_renew_after` has passed.
    #[error("past cannot_renew_after {}", rfc3339(*.cannot_renew_after))]
    CannotRenew {
        /// The tag's time.
        cannot_renew_after: OffsetDateTime,
    },
}

/// One stored credential's renewal state at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewalState {
    /// Good until `renew_after`.
    Current {
        /// The `renew_after` tag.
        renew_after: OffsetDateTime,
    },
    /// `renew_after` has passed: renew it.
    Due {
        /// The `renew_after` tag.
        renew_after: OffsetDateTime,
    },
    /// Renewing cannot help.
    Unusable(Unusable),
    /// Not a credential of the storage format (name or tags).
    Untracked {
        /// What is missing or malformed.
        reason: String,
    },
}

impl RenewalState {
    /// A stable snake_case name: `current`, `due`, `unusable`, `untracked`.
    pub fn code(&self) -> &'static str {
        match self {
            RenewalState::Current { .. } => "current",
            RenewalState::Due { .. } => "due",
            RenewalState::Unusable(_) => "unusable",
            RenewalState::Untracked { .. } => "untracked",
        }
    }
}

/// The state of one stored credential at `now` (see the [module docs](self) for the rule).
pub fn renewal_state(properties: &StoredProperties, now: OffsetDateTime) -> RenewalState {
    if properties.kind().is_none() {
        return RenewalState::Untracked {
            reason: NO_PREFIX.into(),
        };
    }
    let tag = |name: &str| -> Result<OffsetDateTime, String> {
        let value = properties
            .tags
            .get(name)
            .ok_or_else(|| format!("no `{name}` tag"))?;
        OffsetDateTime::parse(value, &Rfc3339)
            .map_err(|_| format!("the `{name}` tag is not an RFC 3339 time"))
    };
    let (renew_after, cannot_renew_after) =
        match (tag(RENEW_AFTER_TAG), tag(CANNOT_RENEW_AFTER_TAG)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(reason), _) | (_, Err(reason)) => return RenewalState::Untracked { reason },
        };
    if properties.enabled == Some(false) {
        return RenewalState::Unusable(Unusable::Disabled);
    }
    if let Some(expires) = properties.expires
        && now >= expires
    {
        return RenewalState::Unusable(Unusable::Expired { expires });
    }
    if now >= cannot_renew_after {
        return RenewalState::Unusable(Unusable::CannotRenew { cannot_renew_after });
    }
    if now >= renew_after {
        RenewalState::Due { renew_after }
    } else {
        RenewalState::Current { renew_after }
    }
}

/// What a listing needs, at `now`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenewalPlan<'a> {
    /// Past `renew_after`: renew these.
    pub due: Vec<&'a StoredProperties>,
    /// Past `exp` or `cannot_renew_after`, or disabled: renewing cannot help.
    pub unusable: Vec<(&'a StoredProperties, Unusable)>,
    /// `msi-`/`uamsi-` secrets without usable tags (other secrets are left out).
    pub untracked: Vec<(&'a StoredProperties, String)>,
    /// How many are current.
    pub current: usize,
}

/// Sort a listing by [`renewal_state`] at `now`. Secrets that are not `msi-`/`uamsi-`
/// named are skipped.
pub fn needing_renewal(listed: &[StoredProperties], now: OffsetDateTime) -> RenewalPlan<'_> {
    let mut plan = RenewalPlan::default();
    for properties in listed.iter().filter(|p| p.kind().is_some()) {
        match renewal_state(properties, now) {
            RenewalState::Current { .. } => plan.current += 1,
            RenewalState::Due { .. } => plan.due.push(properties),
            RenewalState::Unusable(why) => plan.unusable.push((properties, why)),
            RenewalState::Untracked { reason } => plan.untracked.push((properties, reason)),
        }
    }
    plan
}

/// The renewal rule (the one the reloading credential applies on the reading side):
/// store the offered credential only when its `not_before` is later than the stored one's.
pub fn should_store(stored_not_before: OffsetDateTime, offered_not_before: OffsetDateTime) -> bool {
    offered_not_before > stored_not_before
}

/// What [`CredentialStore::renew`](crate::keyvault::store::CredentialStore::renew) did
/// (feature `keyvault`).
#[cfg(feature = "keyvault")]
#[cfg_attr(docsrs, doc(cfg(feature = "keyvault")))]
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

/// What a renewal pass
/// ([`CredentialStore::renew_due`](crate::keyvault::store::CredentialStore::renew_due),
/// feature `keyvault`) did: secret names by outcome.
#[cfg(feature = "keyvault")]
#[cfg_attr(docsrs, doc(cfg(feature = "keyvault")))]
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
