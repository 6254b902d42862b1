//! Reloading a credential file: reading it, building a credential from it, and the rule
//! that decides whether it replaces the active one.
//!
//! # The swap rule
//!
//! A file replaces the active credential only when it parses, yields a usable
//! certificate, and its **effective `not_before`** is strictly later than the active
//! one's (the Go reference's rule). The effective `not_before` is the file's
//! `not_before`, or — when the file has none — the leaf certificate's `notBefore`. A
//! `not_before` that is present but not RFC 3339 makes the file invalid (see
//! [`UserAssignedIdentityCredentials::validate`](crate::UserAssignedIdentityCredentials::validate));
//! nothing here can panic on it (the Go reference dereferences a nil pointer when the key
//! is missing).
//!
//! Anything else keeps the active credential: a missing, unreadable, truncated or
//! malformed file, a bad bundle, or a file that is not newer.
//!
//! The rule is applied to the file's times before anything costly: a file whose
//! `not_before` (or, without one, every certificate's `notBefore`) is not later than the
//! active one's is refused as not newer without its key being loaded or an assertion
//! signed.

use std::path::Path;

use aws_lc_rs::digest;
use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::file::certificate::latest_not_before;
use crate::file::model::{CredentialFile, UserAssignedIdentityCredentials, read_limited};
use crate::token::credential::ClientCertificateCredential;
use crate::token::options::ClientCertificateCredentialOptions;

/// What one re-read of the credential file ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// SHA-256 of a file's bytes, to tell whether it changed.
pub(crate) fn digest_of(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

/// Read the file through its visible path (following symlinks). Blocking.
pub(crate) fn read(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    read_limited(path)
}

/// What the file's bytes are, measured against the active credential.
pub(crate) enum Candidate {
    /// Newer: the credential built from it.
    Newer(ClientCertificateCredential),
    /// Not newer (its effective `not_before`, or the latest `notBefore` of its
    /// certificates when it has none): nothing was built.
    NotNewer(OffsetDateTime),
}

/// Build a credential from the file's bytes only when the swap rule can take it: the
/// file is parsed (once), then the rule applied to its `not_before` (or, without one, to
/// the latest `notBefore` among the bundle's certificates, decoded without the key)
/// before the key is loaded. Blocking.
pub(crate) fn build_if_newer(
    path: &Path,
    bytes: &[u8],
    active_not_before: OffsetDateTime,
    options: ClientCertificateCredentialOptions,
) -> Result<Candidate> {
    let with_path = |e: Error| e.with_path(path);
    let creds = UserAssignedIdentityCredentials::deserialize(bytes).map_err(with_path)?;
    let file = CredentialFile::parse(&creds).map_err(with_path)?;
    let latest = match file.times.not_before {
        Some(file) => Some(file),
        None => latest_not_before(file.client_secret).map_err(with_path)?,
    };
    if let Some(latest) = latest
        && decide(active_not_before, latest) == ReloadOutcome::NotNewer
    {
        return Ok(Candidate::NotNewer(latest));
    }
    let credential = ClientCertificateCredential::from_file(&file, options).map_err(with_path)?;
    let not_before = credential.window().not_before;
    Ok(match decide(active_not_before, not_before) {
        ReloadOutcome::Swapped => Candidate::Newer(credential),
        _ => Candidate::NotNewer(not_before),
    })
}

/// Build a credential from the file's bytes (the first load). Blocking (decodes the
/// bundle, loads the key).
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

/// Pure: the swap rule, for a candidate that parsed and built.
pub(crate) fn decide(
    active_not_before: OffsetDateTime,
    candidate_not_before: OffsetDateTime,
) -> ReloadOutcome {
    if candidate_not_before > active_not_before {
        ReloadOutcome::Swapped
    } else {
        ReloadOutcome::NotNewer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn only_strictly_newer_swaps() {
        let jan = datetime!(2026-01-01 00:00 UTC);
        let feb = datetime!(2026-02-01 00:00 UTC);
        assert_eq!(decide(jan, feb), ReloadOutcome::Swapped);
        assert_eq!(decide(feb, jan), ReloadOutcome::NotNewer);
        assert_eq!(decide(feb, feb), ReloadOutcome::NotNewer);
    }

    #[test]
    fn offsets_compare_as_instants() {
        let a = datetime!(2026-01-01 10:00 +02:00); // 08:00 UTC
        let b = datetime!(2026-01-01 09:00 UTC);
        assert_eq!(decide(a, b), ReloadOutcome::Swapped);
    }
}
