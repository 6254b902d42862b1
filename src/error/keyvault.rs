//! Failures of the Key Vault store.

/// Failures of the Key Vault store: Key Vault's error answers, unusable answers, links
/// not followed, and stored secrets that are not credentials.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyVaultError {
    /// Key Vault answered a store operation with an error status.
    #[error("Key Vault {operation} of secret `{name}` failed: HTTP {status}{}{}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(), message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Service {
        /// The operation: `set`, `get`, `delete`, `get deleted`, `purge`, `recover`, `list`.
        operation: &'static str,
        /// The secret name (`*` for a listing).
        name: String,
        /// HTTP status.
        status: u16,
        /// Key Vault's error code, e.g. `SecretNotFound`.
        code: Option<String>,
        /// Key Vault's error message.
        message: Option<String>,
    },
    /// A secret name is still held by a deleted secret (HTTP 409): Key Vault keeps the name
    /// until the deleted secret is purged or recovered.
    #[error(
        "secret `{name}` is deleted but recoverable, so its name cannot be reused: purge it \
         (`purge_deleted`) or recover it (`recover_deleted`) first"
    )]
    SecretNameHeldByDeletedSecret {
        /// The secret name.
        name: String,
    },
    /// Key Vault answered something the store does not use: an answer over
    /// [`MAX_RESPONSE_BYTES`](crate::limits::MAX_RESPONSE_BYTES) (read no further and never
    /// retried: the same answer would come again), or one that is not the JSON the
    /// operation expects (the message says where it stopped, never what the values were).
    #[error("Key Vault {operation}: the answer is not usable: {reason}")]
    InvalidResponse {
        /// The store's operation (`list`, `get`, ...).
        operation: &'static str,
        /// What is wrong with the answer.
        reason: String,
    },
    /// A link a service handed back (Key Vault's `nextLink`) was not followed: it leads
    /// to another origin than the service's own, repeats one already followed, or the
    /// listing reached its page, item, memory or time limit. Nothing was sent to the link.
    #[error("{service} {operation} stopped: {fault}")]
    RefusedLink {
        /// The service (`Key Vault`).
        service: &'static str,
        /// The operation (`list`, `list deleted`).
        operation: &'static str,
        /// Why the link was not followed.
        fault: LinkFault,
    },
    /// An exchange with Key Vault ended without an answer: the task running it ended
    /// abnormally or its runtime is gone. Not transient.
    #[error("the Key Vault request was abandoned: {reason}")]
    RequestAbandoned {
        /// Why.
        reason: &'static str,
    },
    /// A stored secret is not a credential of the storage format (no value, not the
    /// credential JSON, a name without the `msi-`/`uamsi-` prefix, ...).
    #[error("stored secret `{name}` is not usable: {reason}")]
    InvalidStoredSecret {
        /// The secret name.
        name: String,
        /// What is wrong (never the value).
        reason: String,
    },
}

impl KeyVaultError {
    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            KeyVaultError::Service { .. } => "key_vault",
            KeyVaultError::SecretNameHeldByDeletedSecret { .. } => {
                "secret_name_held_by_deleted_secret"
            }
            KeyVaultError::InvalidResponse { .. } => "invalid_key_vault_response",
            KeyVaultError::RefusedLink { .. } => "refused_link",
            KeyVaultError::InvalidStoredSecret { .. } => "invalid_stored_secret",
            KeyVaultError::RequestAbandoned { .. } => "key_vault_request_abandoned",
        }
    }
}

/// Why a link that a service handed back was not followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkFault {
    /// The link leads to another scheme, host or port than the service's own.
    #[error("the link leads to {link_origin}, not to the service's own origin {service_origin}")]
    ForeignOrigin {
        /// Where the link leads (scheme, host and port; bounded and escaped).
        link_origin: String,
        /// The service's own origin.
        service_origin: String,
    },
    /// The link was already followed in this walk: the service is paging in a loop.
    #[error("the link for page {page} repeats one already followed (a paging loop)")]
    Loop {
        /// The page (counted from 1) whose link repeated an earlier one.
        page: usize,
    },
    /// The walk reached its page limit.
    #[error("the listing has more than {limit} pages (the configured limit)")]
    TooManyPages {
        /// The limit.
        limit: usize,
    },
    /// The walk reached its item limit.
    #[error("the listing has more than {limit} items (the configured limit)")]
    TooManyItems {
        /// The limit.
        limit: usize,
    },
    /// The items kept so far reached the listing's memory limit.
    #[error("the listing's items take more than {limit} bytes (the configured limit)")]
    TooManyBytes {
        /// The limit.
        limit: usize,
    },
    /// The walk did not end within its deadline.
    #[error("the listing did not end within {} s (the configured deadline)", after.as_secs())]
    Deadline {
        /// The deadline.
        after: std::time::Duration,
    },
}
