//! Bounded label values: what a metric may say about an error. Nothing here comes from a
//! service unchecked: an AADSTS code is a number, a status is a `u16`, and the distinct
//! AADSTS codes a process reports are capped.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::error::{Error, ErrorKind, TokenError};

/// The `error_code` of a success.
#[cfg(feature = "metrics")]
pub(crate) const NONE: &str = "none";

/// At most this many distinct AADSTS codes are reported as themselves; later ones are
/// [`OTHER_AADSTS`]. A hostile or broken token endpoint cannot grow the label set.
pub(crate) const MAX_AADSTS_CODES: usize = 64;

/// The `error_code` of an AADSTS code past [`MAX_AADSTS_CODES`].
pub(crate) const OTHER_AADSTS: &str = "AADSTS_other";

/// The `error_code` label of a failure: `AADSTS<n>` when the token endpoint sent an AADSTS
/// code; else the HTTP status a service answered with (`"503"`); else the crate's own
/// snake_case code for the failure (`"transport"`, `"credential_expired"`, ...).
pub(crate) fn error_code(error: &Error) -> Cow<'static, str> {
    if let ErrorKind::Token(TokenError::Endpoint(e)) = error.kind()
        && let Some(code) = e.aadsts_code()
    {
        return aadsts(code);
    }
    if let Some(status) = error.status() {
        return Cow::Owned(status.to_string());
    }
    Cow::Borrowed(error.kind().code())
}

/// A status the token server answers with, as a label: one of the statuses it sends, or
/// `other` (the set stays fixed whatever arrives).
#[cfg(feature = "metrics")]
pub(crate) fn status(status: u16) -> &'static str {
    match status {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        413 => "413",
        414 => "414",
        421 => "421",
        429 => "429",
        431 => "431",
        500 => "500",
        503 => "503",
        _ => "other",
    }
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
