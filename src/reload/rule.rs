//! The swap rule: whether a re-read credential file replaces the active credential.
//!
//! A file replaces the active credential only when it parses fully (its JSON, its
//! fields, its certificate bundle and its key: the credential builds) **and** its
//! **effective `not_before`** is strictly later than the active one's (the Go reference's
//! rule). The effective `not_before` is the file's `not_before`, or — when the file has
//! none — the leaf certificate's `notBefore`. A `not_before` that is present but not
//! RFC 3339 makes the file invalid (see
//! [`UserAssignedIdentityCredentials::validate`](crate::UserAssignedIdentityCredentials::validate));
//! nothing here can panic on it (the Go reference dereferences a nil pointer when the key
//! is missing).
//!
//! Anything else keeps the last good credential: a missing, unreadable, truncated or
//! malformed file, a bad bundle, or a file that is not newer.

use std::path::Path;

use aws_lc_rs::digest;
use serde::Serialize;
use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::file::model::{CredentialFile, UserAssignedIdentityCredentials};
use crate::token::credential::ClientCertificateCredential;
use crate::token::options::ClientCertificateCredentialOptions;

/// What one re-read of the credential file ended in. Its JSON and `Display` form is its
/// [`as_str`](Self::as_str) name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReloadOutcome {
    /// The file held a newer credential, which is now active.
    Swapped,
    /// The file's bytes are those of the active credential.
    Unchanged,
    /// The file is valid but its effective `not_before` is not later than the active
    /// one's; the active credential stays.
    NotNewer,
    /// The file could not be used (missing, unreadable, malformed, bad bundle); the
    /// active credential stays. The reason is in [`ReloadStatus::last_error`](crate::ReloadStatus::last_error).
    Invalid,
}

impl ReloadOutcome {
    /// The outcome's stable name: `swapped`, `unchanged`, `not_newer` or `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadOutcome::Swapped => "swapped",
            ReloadOutcome::Unchanged => "unchanged",
            ReloadOutcome::NotNewer => "not_newer",
            ReloadOutcome::Invalid => "invalid",
        }
    }
}

impl std::fmt::Display for ReloadOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pure: the swap rule, for the active credential's effective `not_before` and the
/// re-read file's (`None`: the file did not build).
pub(crate) fn decide(active: OffsetDateTime, file: Option<OffsetDateTime>) -> ReloadOutcome {
    match file {
        None => ReloadOutcome::Invalid,
        Some(file) if file > active => ReloadOutcome::Swapped,
        Some(_) => ReloadOutcome::NotNewer,
    }
}

/// Build a credential from a file's bytes, all of it (JSON, fields, bundle, key); errors
/// name `path`. Blocking: CPU work, no I/O.
pub(crate) fn build(
    path: &Path,
    bytes: &[u8],
    options: ClientCertificateCredentialOptions,
) -> Result<ClientCertificateCredential> {
    let with_path = |e: Error| e.with_path(path);
    let creds = UserAssignedIdentityCredentials::deserialize(bytes).map_err(with_path)?;
    let file = CredentialFile::parse(&creds).map_err(with_path)?;
    ClientCertificateCredential::from_file(&file, options).map_err(with_path)
}

/// SHA-256 of a file's bytes, to tell whether it changed.
pub(crate) fn digest_of(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn only_a_strictly_later_file_that_built_swaps() {
        let jan = datetime!(2026-01-01 00:00 UTC);
        let feb = datetime!(2026-02-01 00:00 UTC);
        assert_eq!(decide(jan, Some(feb)), ReloadOutcome::Swapped);
        assert_eq!(decide(feb, Some(jan)), ReloadOutcome::NotNewer);
        assert_eq!(decide(feb, Some(feb)), ReloadOutcome::NotNewer);
        assert_eq!(decide(jan, None), ReloadOutcome::Invalid);
    }

    #[test]
    fn offsets_compare_as_instants() {
        let a = datetime!(2026-01-01 10:00 +02:00); // 08:00 UTC
        let b = datetime!(2026-01-01 09:00 UTC);
        assert_eq!(decide(a, Some(b)), ReloadOutcome::Swapped);
    }
}
