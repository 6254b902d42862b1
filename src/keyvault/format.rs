//! The storage format: secret names, the value, attributes and tags, decided in one
//! place for every writer (the store here, or any other client).

use std::collections::BTreeMap;

use serde::Serialize;
use time::OffsetDateTime;

use crate::dataplane::ManagedIdentityCredentials;
use crate::error::{Error, Result};
use crate::file::model::{UserAssignedIdentityCredentials, parse_time};
use crate::secret::SecretString;

/// Secret name prefix for user-assigned identity credentials (Go:
/// `UserAssignedIdentityCredentialsStoragePrefix`).
pub const USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX: &str = "uamsi-";

/// Secret name prefix for cluster-level managed identity credentials (Go:
/// `ManagedIdentityCredentialsStoragePrefix`).
pub const MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX: &str = "msi-";

/// Tag holding the RFC 3339 time after which the credential should be renewed (Go:
/// `RenewAfterKeyVaultTag`).
pub const RENEW_AFTER_TAG: &str = "renew_after";

/// Tag holding the RFC 3339 time after which the credential can no longer be renewed (Go:
/// `CannotRenewAfterKeyVaultTag`).
pub const CANNOT_RENEW_AFTER_TAG: &str = "cannot_renew_after";

/// The longest secret name Key Vault accepts.
pub const MAX_SECRET_NAME_LEN: usize = 127;

/// The secret name for user-assigned identity credentials: `uamsi-<identifier>` (Go:
/// `IdentifierForUserAssignedIdentityCredentials`). Not validated; see
/// [`validate_secret_name`].
pub fn identifier_for_user_assigned_identity_credentials(identifier: &str) -> String {
    format!("{USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX}{identifier}")
}

/// The secret name for cluster-level managed identity credentials: `msi-<identifier>`
/// (Go: `IdentifierForManagedIdentityCredentials`). Not validated; see
/// [`validate_secret_name`].
pub fn identifier_for_managed_identity_credentials(identifier: &str) -> String {
    format!("{MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX}{identifier}")
}

/// Check a name against Key Vault's rule for secret names: 1 to 127 characters, each an
/// ASCII letter, digit or `-`. (The Go reference does not check; Key Vault then refuses
/// the request. Checking first gives an error that names the problem.)
///
/// # Errors
///
/// `invalid_secret_name` (an [`ErrorKind::Config`](crate::ErrorKind::Config)).
pub fn validate_secret_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_SECRET_NAME_LEN {
        "is longer than 127 characters"
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        "may hold only ASCII letters, digits and '-'"
    } else {
        return Ok(());
    };
    let name = crate::untrusted_text::quoted_input(name);
    let message = format!("invalid Key Vault secret name `{name}`: {reason}");
    Err(Error::config("invalid_secret_name", "name", message))
}

/// Check a secret version against Key Vault's form: 32 hexadecimal digits (Key Vault
/// writes them in lower case). A version is a URL path segment, so anything else (a `/`,
/// `..`, a query) could reach another secret than the one named.
///
/// # Errors
///
/// `invalid_argument` naming `version`.
///
/// ```
/// use msi_dataplane::keyvault::validate_secret_version;
/// assert!(validate_secret_version("0123456789abcdef0123456789abcdef").is_ok());
/// assert!(validate_secret_version("../../secrets/other").is_err());
/// ```
pub fn validate_secret_version(version: &str) -> Result<()> {
    if version.len() == 32 && version.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    let version = crate::untrusted_text::quoted_input(version);
    let reason = format!("`{version}` is not a Key Vault secret version (32 hexadecimal digits)");
    Err(Error::invalid_argument("version", reason))
}

/// Format user-assigned identity credentials for Key Vault (Go:
/// `FormatUserAssignedIdentityCredentialsForStorage`): name `uamsi-<identifier>`, the
/// credential JSON as value, `expires`/`nbf` from `not_after`/`not_before`, and the
/// `renew_after`/`cannot_renew_after` tags.
///
/// # Errors
///
/// - `missing_storage_time` naming the first of `not_after`, `not_before`,
///   `renew_after`, `cannot_renew_after` that is absent;
/// - `invalid_field` when one of them is not RFC 3339;
/// - `invalid_secret_name` when the name breaks Key Vault's rule.
pub fn format_user_assigned_identity_credentials_for_storage(
    identifier: &str,
    credentials: &UserAssignedIdentityCredentials,
) -> Result<KeyVaultSecret> {
    let name = identifier_for_user_assigned_identity_credentials(identifier);
    secret(name, credentials, || credentials.to_json())
}

/// Format managed identity credentials, as the data plane returns them, for Key Vault
/// (Go: `FormatManagedIdentityCredentialsForStorage`): name `msi-<identifier>`, the
/// compact JSON of the whole object (absent fields omitted) as value, and attributes
/// and tags as for [`format_user_assigned_identity_credentials_for_storage`]. The four
/// times come from the top level when there are no explicit identities, and from the one
/// explicit identity when there is exactly one.
///
/// ```
/// use msi_dataplane::{dataplane::ManagedIdentityCredentials, keyvault};
///
/// let creds: ManagedIdentityCredentials = serde_json::from_str(r#"{
///   "client_id": "c", "client_secret": "TUlJQ...",
///   "explicit_identities": [{
///     "client_id": "u",
///     "not_before": "2026-11-01T00:00:00Z", "not_after": "2027-02-01T00:00:00Z",
///     "renew_after": "2026-12-17T00:00:00Z", "cannot_renew_after": "2027-01-31T00:00:00Z"
///   }]
/// }"#).unwrap();
/// let secret = keyvault::format_managed_identity_credentials_for_storage("cluster-1", &creds)?;
/// assert_eq!(secret.name(), "msi-cluster-1");
/// assert_eq!(secret.tags()["renew_after"], "2026-12-17T00:00:00Z");
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
///
/// # Errors
///
/// As [`format_user_assigned_identity_credentials_for_storage`], and
/// `invalid_argument` naming `credentials` when their
/// `explicit_identities` hold two or more (which one's times would be ambiguous).
pub fn format_managed_identity_credentials_for_storage(
    identifier: &str,
    credentials: &ManagedIdentityCredentials,
) -> Result<KeyVaultSecret> {
    let name = identifier_for_managed_identity_credentials(identifier);
    let times = match credentials.user_assigned_identities() {
        [] => &credentials.identity,
        [one] => one,
        more => {
            let reason = format!(
                "`explicit_identities` holds {} identities; the storage format takes its times \
                 from at most one",
                more.len()
            );
            return Err(Error::invalid_argument("credentials", reason));
        }
    };
    secret(name, times, || credentials.to_json())
}

/// The one place that builds a stored secret: checks the name, the times `times` carries
/// (the credentials', or their one identity's: all four present, then each RFC 3339, in
/// the Go reference's order of checks), and renders the value.
fn secret(
    name: String,
    times: &UserAssignedIdentityCredentials,
    value: impl FnOnce() -> Result<String>,
) -> Result<KeyVaultSecret> {
    validate_secret_name(&name)?;
    let all = [
        ("not_after", &times.not_after),
        ("not_before", &times.not_before),
        // The tags, named as their fields.
        (RENEW_AFTER_TAG, &times.renew_after),
        (CANNOT_RENEW_AFTER_TAG, &times.cannot_renew_after),
    ];
    let missing = |field: &'static str| {
        let message = format!("cannot format the credentials for Key Vault: `{field}` is missing");
        Error::config("missing_storage_time", field, message)
    };
    if let Some(&(field, _)) = all.iter().find(|(_, time)| time.is_none()) {
        return Err(missing(field));
    }
    let mut parsed = [OffsetDateTime::UNIX_EPOCH; 4];
    for (slot, (field, time)) in parsed.iter_mut().zip(all) {
        *slot = parse_time(field, time.as_deref())?.ok_or_else(|| missing(field))?;
    }
    Ok(KeyVaultSecret {
        name,
        value: SecretString::from(value()?),
        attributes: SecretAttributes {
            enabled: true,
            expires: parsed[0],
            not_before: parsed[1],
        },
        tags: all[2..]
            .iter()
            .filter_map(|&(tag, time)| Some((tag.to_owned(), time.clone()?)))
            .collect(),
    })
}

/// A Key Vault secret ready to be stored: name, value (secret), attributes and tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyVaultSecret {
    name: String,
    value: SecretString,
    attributes: SecretAttributes,
    tags: BTreeMap<String, String>,
}

/// A Key Vault secret's attributes as this format sets them. Serialized as Key Vault's
/// REST API writes them: `enabled`, and `exp` and `nbf` in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SecretAttributes {
    /// Always `true`.
    pub enabled: bool,
    /// `exp`: the credential's `not_after`.
    #[serde(rename = "exp", with = "time::serde::timestamp")]
    pub expires: OffsetDateTime,
    /// `nbf`: the credential's `not_before`.
    #[serde(rename = "nbf", with = "time::serde::timestamp")]
    pub not_before: OffsetDateTime,
}

impl KeyVaultSecret {
    /// The secret name, e.g. `uamsi-<identifier>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The secret value: the credential JSON, which holds `client_secret`.
    pub fn value(&self) -> &SecretString {
        &self.value
    }

    /// `enabled`, `expires` and `nbf`.
    pub fn attributes(&self) -> &SecretAttributes {
        &self.attributes
    }

    /// The `renew_after` and `cannot_renew_after` tags.
    pub fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }

    /// The JSON body of Key Vault's "Set Secret" REST request (`PUT
    /// {vault}/secrets/{name}?api-version=7.4`): `value`, `attributes` with `enabled` and
    /// `nbf`/`exp` in Unix seconds, and `tags`. It holds the credential, so it is returned
    /// as a [`SecretString`].
    pub fn set_secret_body(&self) -> Result<SecretString> {
        self.render_set_secret_body(None).map(SecretString::from)
    }

    /// The "Set Secret" body in one pass, with `contentType` when given: the one place
    /// that renders it (the store sends it with `application/json`).
    pub(crate) fn render_set_secret_body(&self, content_type: Option<&str>) -> Result<String> {
        #[derive(Serialize)]
        struct Body<'a> {
            value: &'a SecretString,
            #[serde(rename = "contentType", skip_serializing_if = "Option::is_none")]
            content_type: Option<&'a str>,
            attributes: &'a SecretAttributes,
            tags: &'a BTreeMap<String, String>,
        }
        let body = Body {
            value: &self.value,
            content_type,
            attributes: &self.attributes,
            tags: &self.tags,
        };
        // The value is JSON, so its quotes are escaped: an eighth more covers them.
        let value = self.value.expose_secret().len();
        let tags: usize = self.tags.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
        crate::file::model::secret_json(&body, value + value / 8 + tags + 192)
    }
}
