//! Bounded label values: what a metric may say about an error. Nothing here comes from a
//! service unchecked: an AADSTS code is a number, a status is a `u16`, and the distinct
//! AADSTS codes a process reports are capped.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::error::{Error, ErrorKind};

/// The `outcome` of a request: `success`; `transient` (a failure that trying again
/// later can fix: a 429 or 5xx answer, a refused or broken connection); `refused` (any
/// other failure: an AADSTS refusal, a 4xx, an expired credential, an unusable answer).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const REQUEST_OUTCOMES: &[&str] = &["success", "transient", "refused"];

/// The `outcome` of a credential file's re-read.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const RELOAD_OUTCOMES: &[&str] = &["swapped", "unchanged", "kept_last_good"];

/// The `reason` of a credential file's re-read: `none` unless the last good credential
/// was kept; then why (see [`reload_reason`]).
#[cfg_attr(not(any(test, feature = "metrics")), allow(dead_code))]
pub(crate) const RELOAD_REASONS: &[&str] = &[
    "none",
    "not_newer",
    "not_found",
    "unreadable",
    "malformed_json",
    "bad_bundle",
    "outside_validity",
    "other",
];

/// The `outcome` of a renewal pass's credentials.
#[cfg(feature = "metrics")]
pub(crate) const RENEWAL_OUTCOMES: &[&str] = &["due", "renewed", "not_newer", "failed"];

/// The `operation` of an MSI data plane call.
#[cfg(feature = "metrics")]
pub(crate) const DATAPLANE_OPERATIONS: &[&str] = &[
    "get_system_assigned",
    "get_user_assigned",
    "delete_system_assigned",
    "move_identity",
];

/// The `operation` of a Key Vault store call.
#[cfg(all(feature = "metrics", feature = "keyvault"))]
pub(crate) const KEYVAULT_OPERATIONS: &[&str] = &[
    "put",
    "get",
    "delete",
    "get_deleted",
    "purge_deleted",
    "recover_deleted",
    "list",
    "list_deleted",
    "renew",
];

/// A request's `outcome` label (one of [`REQUEST_OUTCOMES`]).
pub(crate) fn request_outcome(error: Option<&Error>) -> &'static str {
    match error {
        None => "success",
        Some(e) if e.is_transient() => "transient",
        Some(_) => "refused",
    }
}

/// Why a re-read file was refused, as a `reason` label (one of [`RELOAD_REASONS`]):
/// `not_found` (the file is missing), `unreadable` (another read failure, not a regular
/// file, too large), `malformed_json` (not JSON, or its keys or values are wrong),
/// `bad_bundle` (`client_secret` does not decode to a usable key and certificate),
/// `outside_validity` (the certificate has expired or is not valid yet), `other`.
pub(crate) fn reload_reason(error: &Error) -> &'static str {
    match error.kind() {
        ErrorKind::Io { source } if source.kind() == std::io::ErrorKind::NotFound => "not_found",
        ErrorKind::Io { .. } | ErrorKind::Abandoned { .. } => "unreadable",
        ErrorKind::File { code, .. } => match *code {
            "not_a_regular_file" | "file_too_large" => "unreadable",
            "json" | "missing_fields" | "camel_case_keys" | "invalid_field" => "malformed_json",
            _ => "bad_bundle",
        },
        ErrorKind::Expired { .. } | ErrorKind::NotYetValid { .. } => "outside_validity",
        _ => "other",
    }
}

/// The `error_code` of a success.
#[cfg(feature = "metrics")]
pub(crate) const NONE: &str = "none";

/// At most this many distinct AADSTS codes are reported as themselves; later ones are
/// [`OTHER_AADSTS`]. A hostile or broken token endpoint cannot grow the label set.
pub(crate) const MAX_AADSTS_CODES: usize = 64;

/// The `error_code` of an AADSTS code past [`MAX_AADSTS_CODES`].
pub(crate) const OTHER_AADSTS: &str = "AADSTS_other";

/// The HTTP statuses an `error_code` label names as themselves; any other status a
/// service answers with is [`OTHER_STATUS`].
pub(crate) const ERROR_STATUSES: &[&str] = &[
    "400", "401", "403", "404", "408", "409", "429", "500", "502", "503", "504",
];

/// The `error_code` of an HTTP status outside [`ERROR_STATUSES`] (a hostile or broken
/// service cannot grow the label set with made-up statuses).
pub(crate) const OTHER_STATUS: &str = "other";

/// The `error_code` label of a failure: the HTTP status of a transient answer (`"503"`,
/// whatever its body says: an AADSTS code in a 503 names no refusal); else `AADSTS<n>`
/// when the token endpoint sent an AADSTS code; else the HTTP status a service answered
/// with (`"403"`); else the crate's own snake_case code for the failure (`"transport"`,
/// `"credential_expired"`, ...). A status is one of [`ERROR_STATUSES`] or
/// [`OTHER_STATUS`].
pub(crate) fn error_code(error: &Error) -> Cow<'static, str> {
    if error.is_transient()
        && let Some(status) = error.status()
    {
        return Cow::Borrowed(error_status(status));
    }
    if let ErrorKind::TokenEndpoint(e) = error.kind()
        && let Some(code) = e.aadsts_code()
    {
        return aadsts(code);
    }
    if let Some(status) = error.status() {
        return Cow::Borrowed(error_status(status));
    }
    Cow::Borrowed(error.kind().code())
}

/// An HTTP status a service answered with, as an `error_code`: one of
/// [`ERROR_STATUSES`], or [`OTHER_STATUS`].
pub(crate) fn error_status(status: u16) -> &'static str {
    ERROR_STATUSES
        .iter()
        .find(|known| known.parse() == Ok(status))
        .copied()
        .unwrap_or(OTHER_STATUS)
}

/// `AADSTS<code>`, or [`OTHER_AADSTS`] once the process has reported
/// [`MAX_AADSTS_CODES`] others.
fn aadsts(code: i64) -> Cow<'static, str> {
    static SEEN: Mutex<BTreeSet<i64>> = Mutex::new(BTreeSet::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.contains(&code) || seen.len() < MAX_AADSTS_CODES && seen.insert(code) {
        Cow::Owned(format!("AADSTS{code}"))
    } else {
        Cow::Borrowed(OTHER_AADSTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_a_known_one_or_other() {
        let labels: BTreeSet<&str> = (0..=u16::MAX).map(error_status).collect();
        let mut want: BTreeSet<&str> = ERROR_STATUSES.iter().copied().collect();
        want.insert(OTHER_STATUS);
        assert_eq!(labels, want);
        for (status, label) in [(503, "503"), (409, "409"), (418, "other"), (599, "other")] {
            assert_eq!(error_status(status), label, "{status}");
        }
    }

    #[test]
    fn aadsts_codes_past_the_cap_are_one_label() {
        let labels: BTreeSet<String> = (0..(MAX_AADSTS_CODES as i64 + 10))
            .map(|n| aadsts(900_000_000 + n).into_owned())
            .collect();
        // Other tests may have reported codes first: the cap holds whatever came before.
        assert!(labels.len() <= MAX_AADSTS_CODES + 1, "{}", labels.len());
        assert!(labels.contains(OTHER_AADSTS));
        assert_eq!(
            aadsts(900_000_000 + MAX_AADSTS_CODES as i64 + 5),
            OTHER_AADSTS
        );
    }
}
