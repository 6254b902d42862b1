//! The credential file: `UserAssignedIdentityCredentials`, as the Secrets Store CSI driver
//! mounts it from Key Vault.
//!
//! Every key is optional in the schema, as in the Go reference (which models them as
//! pointers); [`validate`](UserAssignedIdentityCredentials::validate) then insists on the
//! four that a token needs and names every missing one at once. Unknown keys are ignored.
//! Keys are snake_case; a file written with camelCase keys gets an error that says so.

use std::collections::HashMap;
use std::path::Path;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::{CREDENTIAL_FILE, Error, Result, quoted};
use crate::parser_errors::json_error;
use crate::regular_file::{check_size, read_limited_as};
use crate::secret::SecretString;
use crate::untrusted_text::quoted_input;
use zeroize::{Zeroize, Zeroizing};

/// Credential files larger than this (1 MiB) are refused before they are parsed.
pub const MAX_CREDENTIAL_FILE_BYTES: u64 = crate::regular_file::MAX_FILE_BYTES;

/// A user-assigned managed identity's credential, as stored in Key Vault and mounted
/// into the pod (`/mnt/certs/<secret-name>`).
///
/// Field names and meanings follow the Go reference's `UserAssignedIdentityCredentials`.
/// Times are kept as the strings the file holds, so the struct serializes back to the same
/// JSON; the typed accessors ([`not_before`](Self::not_before), ...) parse them.
///
/// ```
/// use msi_dataplane::UserAssignedIdentityCredentials;
///
/// let json = br#"{
///   "authentication_endpoint": "https://login.microsoftonline.com/",
///   "client_id": "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
///   "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
///   "client_secret": "LS0tLS1CRUdJTi...",
///   "not_before": "2026-01-15T10:00:00Z"
/// }"#;
/// let creds = UserAssignedIdentityCredentials::from_slice(json)?;
/// assert_eq!(creds.client_id.as_deref(), Some("7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d"));
/// assert_eq!(creds.not_before()?.unwrap().year(), 2026);
/// // The secret never prints.
/// assert!(!format!("{creds:?}").contains("LS0tLS1CRUdJTi"));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UserAssignedIdentityCredentials {
    /// Entra authority host for this identity, e.g. `https://login.microsoftonline.com/`.
    /// May be regional and may carry a path. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication_endpoint: Option<String>,
    /// RFC 3339 time after which the credential can no longer be renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cannot_renew_after: Option<String>,
    /// Application (client) id. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Standard base64 of the certificate bundle (PEM or PKCS#12). Required. Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretString>,
    /// Where the MSI service serves this secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_url: Option<String>,
    /// Claims the MSI service asks to be carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_claims: Option<CustomClaims>,
    /// The mTLS variant of the authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls_authentication_endpoint: Option<String>,
    /// RFC 3339 end of this credential's validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// RFC 3339 start of this credential's validity; reloads only move to a file whose
    /// `not_before` is later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// The identity's object (principal) id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_id: Option<String>,
    /// RFC 3339 time after which the credential should be renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_after: Option<String>,
    /// The identity's ARM resource id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// Directory (tenant) id. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// The `custom_claims` object of a credential file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CustomClaims {
    /// Network perimeter ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xms_az_nwperimid: Option<Vec<String>>,
    /// Trust mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xms_az_tm: Option<String>,
}

/// Every key of the file with its camelCase spelling, in schema order.
const KEYS: [(&str, &str); 13] = [
    ("authentication_endpoint", "authenticationEndpoint"),
    ("cannot_renew_after", "cannotRenewAfter"),
    ("client_id", "clientId"),
    ("client_secret", "clientSecret"),
    ("client_secret_url", "clientSecretUrl"),
    ("custom_claims", "customClaims"),
    ("mtls_authentication_endpoint", "mtlsAuthenticationEndpoint"),
    ("not_after", "notAfter"),
    ("not_before", "notBefore"),
    ("object_id", "objectId"),
    ("renew_after", "renewAfter"),
    ("resource_id", "resourceId"),
    ("tenant_id", "tenantId"),
];

impl UserAssignedIdentityCredentials {
    /// Parse and [validate](Self::validate) a credential file's bytes.
    ///
    /// Refuses input over [`MAX_CREDENTIAL_FILE_BYTES`]. The bundle in `client_secret` is
    /// not decoded here; [`ClientCertificate::from_credentials`](crate::ClientCertificate::from_credentials)
    /// or building a credential does that.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let creds = Self::deserialize(bytes)?;
        creds.validate()?;
        Ok(creds)
    }

    /// The bytes as the schema reads them, not validated: for the crate's readers, which
    /// then parse them once ([`CredentialFile::parse`]).
    pub(crate) fn deserialize(bytes: &[u8]) -> Result<Self> {
        check_size(bytes)?;
        let creds: Self = serde_json::from_slice(bytes).map_err(json_error)?;
        check_camel_case(bytes)?;
        Ok(creds)
    }

    /// Read, parse and validate a credential file. Errors name the file.
    ///
    /// This reads the file synchronously; from async code, call it inside
    /// `tokio::task::spawn_blocking`.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = read_limited(path)?;
        Self::from_slice(&bytes).map_err(|e| e.with_path(path))
    }

    /// Check the file's content: the required keys `authentication_endpoint`, `client_id`,
    /// `tenant_id` and `client_secret` are present (all missing ones are named in one
    /// error) and non-empty, `tenant_id` is usable in a URL path, `client_id` (and
    /// `object_id` when present) is a GUID, `resource_id` when present has the shape of
    /// an Azure resource id (`/subscriptions/...`), and every time that is present is
    /// RFC 3339. Errors quote at most a short, escaped prefix of a refused value, so a
    /// secret pasted into the wrong key is never repeated.
    pub fn validate(&self) -> Result<()> {
        CredentialFile::parse(self).map(drop)
    }

    /// `not_before`, parsed. `Ok(None)` when absent; an error naming the key when it is
    /// not RFC 3339.
    pub fn not_before(&self) -> Result<Option<OffsetDateTime>> {
        parse_time("not_before", self.not_before.as_deref())
    }

    /// `not_after`, parsed.
    pub fn not_after(&self) -> Result<Option<OffsetDateTime>> {
        parse_time("not_after", self.not_after.as_deref())
    }

    /// `renew_after`, parsed.
    pub fn renew_after(&self) -> Result<Option<OffsetDateTime>> {
        parse_time("renew_after", self.renew_after.as_deref())
    }

    /// `cannot_renew_after`, parsed.
    pub fn cannot_renew_after(&self) -> Result<Option<OffsetDateTime>> {
        parse_time("cannot_renew_after", self.cannot_renew_after.as_deref())
    }

    /// Serialize back to JSON (the same keys and values as were read; unknown keys are
    /// not kept). Compact, so it is never larger than an accepted input and always parses
    /// back. The output contains `client_secret`: treat it as a secret.
    pub fn to_json(&self) -> Result<String> {
        // The secret is nearly all of it; other keys and values (ids, URLs, times) fit in
        // 2 KiB. A longer output only grows the buffer, which stays zeroized.
        let secret = self
            .client_secret
            .as_ref()
            .map_or(0, |s| s.expose_secret().len());
        secret_json(self, secret + 2048)
    }
}

/// A credential file parsed and validated once ([`parse`](Self::parse)): its required
/// keys as text, its times as times. What building a credential, the reload rule and
/// `inspect` take; nothing downstream checks the file again.
pub(crate) struct CredentialFile<'a> {
    /// `authentication_endpoint`, as the file holds it.
    pub(crate) authority: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) tenant_id: &'a str,
    /// `client_secret`: the certificate bundle, standard base64. Secret.
    pub(crate) client_secret: &'a str,
    pub(crate) object_id: Option<&'a str>,
    pub(crate) resource_id: Option<&'a str>,
    pub(crate) times: FileTimes,
}

impl<'a> CredentialFile<'a> {
    /// Check the file's content (see [`UserAssignedIdentityCredentials::validate`]) and
    /// keep it typed: the crate's one validation of a credential file.
    pub(crate) fn parse(creds: &'a UserAssignedIdentityCredentials) -> Result<Self> {
        let mut missing = Vec::new();
        let mut required = |field: &'static str, value: Option<&'a str>| {
            value.unwrap_or_else(|| {
                missing.push(field);
                ""
            })
        };
        let authority = required(
            "authentication_endpoint",
            creds.authentication_endpoint.as_deref(),
        );
        let client_id = required("client_id", creds.client_id.as_deref());
        let tenant_id = required("tenant_id", creds.tenant_id.as_deref());
        let secret = creds
            .client_secret
            .as_ref()
            .map(SecretString::expose_secret);
        let client_secret = required("client_secret", secret);
        if !missing.is_empty() {
            let message = format!("missing required key(s): {}", missing.join(", "));
            return Err(Error::file("missing_fields", None, message));
        }
        let required = [
            ("authentication_endpoint", authority),
            ("client_id", client_id),
            ("tenant_id", tenant_id),
            ("client_secret", client_secret),
        ];
        if let Some((field, _)) = required.iter().find(|(_, v)| v.trim().is_empty()) {
            return Err(Error::invalid_field(field, "is empty"));
        }
        if !is_url_safe_tenant(tenant_id) {
            return Err(Error::invalid_field("tenant_id", TENANT_RULE));
        }
        let ids = [
            ("client_id", Some(client_id)),
            ("object_id", creds.object_id.as_deref()),
        ];
        if let Some((field, Some(id))) = ids
            .into_iter()
            .find(|(_, id)| id.is_some_and(|id| !is_guid(id)))
        {
            let reason = format!(
                "`{}` is not a GUID (8-4-4-4-12 hexadecimal digits)",
                quoted_input(id)
            );
            return Err(Error::invalid_field(field, reason));
        }
        if let Some(resource_id) = &creds.resource_id {
            check_resource_id(resource_id)?;
        }
        let times = FileTimes {
            not_before: creds.not_before()?,
            not_after: creds.not_after()?,
            renew_after: creds.renew_after()?,
            cannot_renew_after: creds.cannot_renew_after()?,
        };
        Ok(CredentialFile {
            authority,
            client_id,
            tenant_id,
            client_secret,
            object_id: creds.object_id.as_deref(),
            resource_id: creds.resource_id.as_deref(),
            times,
        })
    }
}

/// The times a credential file states (each optional in the schema).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FileTimes {
    /// `not_before`.
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_before: Option<OffsetDateTime>,
    /// `not_after`.
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
    /// `renew_after`.
    #[serde(with = "time::serde::rfc3339::option")]
    pub renew_after: Option<OffsetDateTime>,
    /// `cannot_renew_after`.
    #[serde(with = "time::serde::rfc3339::option")]
    pub cannot_renew_after: Option<OffsetDateTime>,
}

/// Why a tenant cannot be used in a URL path ([`is_url_safe_tenant`]).
pub(crate) const TENANT_RULE: &str =
    "must be non-empty and hold only letters, digits, '-', '.' and '_'";

/// Pure: a tenant id usable as a URL path segment: non-empty, letters, digits, `-`, `.`
/// and `_` only. The crate's one tenant rule (credential files, `from_parts`, other
/// tenants asked for).
pub(crate) fn is_url_safe_tenant(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// Read at most `MAX_CREDENTIAL_FILE_BYTES + 1` bytes, so a huge or growing file is refused
/// without being read whole. The buffer holds `client_secret`: it is zeroized on drop.
pub(crate) fn read_limited(path: &Path) -> Result<Zeroizing<Vec<u8>>> {
    read_limited_as(path, CREDENTIAL_FILE)
}

/// Look for camelCase spellings of absent keys: a file written with camelCase keys should
/// be told so, not just told that keys are missing. Only the top-level keys are kept;
/// every value is skipped unread, so no copy of `client_secret` is made.
fn check_camel_case(bytes: &[u8]) -> Result<()> {
    let Ok(present) = serde_json::from_slice::<HashMap<String, IgnoredAny>>(bytes) else {
        return Ok(());
    };
    let (keys, expected): (Vec<String>, Vec<String>) = KEYS
        .iter()
        .filter(|(snake, camel)| present.contains_key(*camel) && !present.contains_key(*snake))
        .map(|(snake, camel)| ((*camel).to_owned(), (*snake).to_owned()))
        .unzip();
    if keys.is_empty() {
        Ok(())
    } else {
        let (keys, expected) = (quoted(&keys), quoted(&expected));
        let message = format!(
            "found camelCase key(s) {keys}; credential files use snake_case keys (e.g. {expected})"
        );
        Err(Error::file("camel_case_keys", None, message))
    }
}

pub(crate) fn parse_time(
    field: &'static str,
    value: Option<&str>,
) -> Result<Option<OffsetDateTime>> {
    match value {
        None => Ok(None),
        Some(v) => OffsetDateTime::parse(v.trim(), &Rfc3339)
            .map(Some)
            .map_err(|e| {
                // A short prefix says which value it was; `time`'s own message quotes
                // nothing of the input.
                Error::invalid_field(
                    field,
                    format!("`{}` is not an RFC 3339 time ({e})", quoted_input(v)),
                )
            }),
    }
}

/// Pure: `value` is a GUID in its usual form (`8-4-4-4-12` hexadecimal digits), as Entra
/// writes tenant, application and object ids. The crate's one GUID check.
pub(crate) fn is_guid(value: &str) -> bool {
    let mut groups = value.split('-');
    [8, 4, 4, 4, 12].iter().all(|&len| {
        groups
            .next()
            .is_some_and(|g| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
    }) && groups.next().is_none()
}

/// The longest `resource_id` accepted (an ARM id of a user-assigned identity is well
/// under this).
const MAX_RESOURCE_ID_LEN: usize = 1024;

/// Pure: `value` has the shape of an ARM resource id: `/subscriptions/...`, printable
/// ASCII without spaces, at most [`MAX_RESOURCE_ID_LEN`] bytes.
fn check_resource_id(value: &str) -> Result<()> {
    let shaped = value.len() <= MAX_RESOURCE_ID_LEN
        && value.bytes().all(|b| b.is_ascii_graphic())
        && (value.get(..15)).is_some_and(|p| p.eq_ignore_ascii_case("/subscriptions/"));
    if shaped {
        return Ok(());
    }
    let reason = format!(
        "`{}` is not an Azure resource id (`/subscriptions/...`, printable ASCII without \
         spaces, at most {MAX_RESOURCE_ID_LEN} bytes)",
        quoted_input(value)
    );
    Err(Error::invalid_field("resource_id", reason))
}

/// Compact JSON of a value that holds a secret, in one pass. `size_hint` is the expected
/// length: a good hint means one allocation. When the buffer must grow, the content moves
/// to a larger one and the old one is zeroized first (a `Vec`'s own growth would free
/// partial copies of the secret unzeroized).
pub(crate) fn secret_json<T: Serialize>(value: &T, size_hint: usize) -> Result<String> {
    let mut out = ZeroizingBuffer(Zeroizing::new(Vec::with_capacity(size_hint)));
    serde_json::to_writer(&mut out, value).map_err(json_error)?;
    // serde_json writes UTF-8; the buffer moves into the String without a copy.
    String::from_utf8(std::mem::take(&mut *out.0)).map_err(|_| {
        Error::file(
            "json",
            None,
            "invalid JSON at line 0, column 0: serialization produced invalid UTF-8",
        )
    })
}

/// A byte buffer that never leaves a copy of its content behind when it grows.
struct ZeroizingBuffer(Zeroizing<Vec<u8>>);

impl std::io::Write for ZeroizingBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let needed = self.0.len() + buf.len();
        if needed > self.0.capacity() {
            let mut larger = Vec::with_capacity(needed.max(self.0.capacity() * 2));
            larger.extend_from_slice(&self.0);
            // The whole old allocation (contents and spare capacity) is zeroed before it
            // is freed.
            let mut old = std::mem::replace(&mut *self.0, larger);
            old.zeroize();
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_usable_in_a_url_path() {
        assert!(is_url_safe_tenant("72f988bf-86f1-41af-91ab-2d7cd011db47"));
        assert!(!is_url_safe_tenant("a/b"));
        assert!(!is_url_safe_tenant(""));
    }

    #[test]
    fn secret_json_is_serde_json_s_output_whatever_the_size_hint() {
        let creds: UserAssignedIdentityCredentials = serde_json::from_str(&format!(
            r#"{{"authentication_endpoint":"https://login.example/","client_id":"7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d","tenant_id":"t","client_secret":"{}","not_before":"2026-11-01T00:00:00Z"}}"#,
            "QUJD".repeat(2_000)
        ))
        .unwrap();
        let expected = serde_json::to_string(&creds).unwrap();
        // 0 grows the buffer many times; the exact size and a larger one grow it never.
        for hint in [0, 1, 100, expected.len() - 1, expected.len(), 1 << 20] {
            assert_eq!(secret_json(&creds, hint).unwrap(), expected, "hint {hint}");
        }
        assert_eq!(creds.to_json().unwrap(), expected);
    }

    #[test]
    fn camel_case_table_matches_snake_case_keys() {
        for (snake, camel) in KEYS {
            let mut expect = String::new();
            let mut upper = false;
            for c in snake.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    expect.push(c.to_ascii_uppercase());
                    upper = false;
                } else {
                    expect.push(c);
                }
            }
            assert_eq!(camel, expect);
        }
    }

    #[test]
    fn time_with_offset_parses() {
        let t = parse_time("not_before", Some("2026-01-15T12:00:00+02:00"))
            .unwrap()
            .unwrap();
        assert_eq!(t.unix_timestamp(), 1768471200);
    }

    #[test]
    fn bad_time_names_field() {
        let err = parse_time("not_after", Some("yesterday")).unwrap_err();
        assert!(matches!(
            err.kind(),
            crate::error::ErrorKind::File {
                field: Some("not_after"),
                ..
            }
        ));
    }
}
