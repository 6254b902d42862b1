//! The crate's one error type.
//!
//! [`Error`] pairs an [`ErrorKind`] (what failed, with the details a caller can act on) with
//! the credential file it concerns, when there is one. Every message is written so that it
//! never contains secret material: no `client_secret`, no key bytes, no assertion and no
//! access token. Values echoed from parsers are redacted before they reach a message.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

/// How messages name a credential file.
pub(crate) const CREDENTIAL_FILE: &str = "credential file";

/// Shorthand for `Result<T, msi_dataplane::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from loading a credential or acquiring a token.
///
/// `Error` is cheap to clone (it is shared between every caller waiting on one token
/// request) and carries:
/// - [`kind`](Error::kind): the failure class, with its details;
/// - [`path`](Error::path): the credential file concerned, when the error came from one;
/// - [`is_transient`](Error::is_transient): whether trying again later can help.
///
/// ```
/// # use msi_dataplane::{ErrorKind, UserAssignedIdentityCredentials};
/// let err = UserAssignedIdentityCredentials::from_slice(br#"{"client_id": "x"}"#).unwrap_err();
/// match err.kind() {
///     ErrorKind::MissingFields { fields } => {
///         assert_eq!(fields, &["authentication_endpoint", "tenant_id", "client_secret"]);
///     }
///     other => panic!("unexpected: {other}"),
/// }
/// assert!(!err.is_transient());
/// ```
#[derive(Clone)]
pub struct Error {
    kind: Box<ErrorKind>,
    /// The file concerned, shared (one pointer keeps `Error` two words).
    file: Option<Arc<FileRef>>,
}

/// A file an error is about, and what kind of file it is.
struct FileRef {
    /// For messages: "credential file", "cloud config file".
    role: &'static str,
    path: std::path::PathBuf,
}

impl Error {
    /// The failure class and its details.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The file this error is about (a credential file, or a cloud config file), if it
    /// came from one.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref().map(|f| f.path.as_path())
    }

    /// Whether the same operation may succeed if tried again later without any change on
    /// the caller's side: transport failures, timeouts, and HTTP 408, 429, 500, 502, 503
    /// and 504 answers, exactly what [`RetryPolicy`](crate::RetryPolicy) retries. Bad
    /// files, bad certificates, a credential outside its validity, 400/401 answers and
    /// [`ErrorKind::RequestAbandoned`] (no Tokio runtime, or one shutting down) are not
    /// transient.
    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }

    /// Attach the credential file this error concerns (kept if one is already set).
    pub(crate) fn with_path(self, path: &Path) -> Self {
        self.with_file(path, CREDENTIAL_FILE)
    }

    /// Attach the file this error concerns and what kind of file it is (kept if a file is
    /// already set).
    pub(crate) fn with_file(mut self, path: &Path, role: &'static str) -> Self {
        if self.file.is_none() {
            self.file = Some(Arc::new(FileRef {
                role,
                path: path.to_path_buf(),
            }));
        }
        self
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error {
            kind: Box::new(kind),
            file: None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.file.as_deref() {
            Some(file) => write!(f, "{} {}: {}", file.role, file.path.display(), self.kind),
            None => fmt::Display::fmt(&self.kind, f),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("path", &self.path())
            .finish()
    }
}

/// The underlying error itself (not the `Arc` sharing it), so that a caller can
/// `downcast_ref::<reqwest::Error>()` a transport failure's source, or
/// `downcast_ref::<std::io::Error>()` an I/O failure's.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.kind {
            ErrorKind::Transport {
                source: Some(source),
                ..
            } => Some(&**source),
            ErrorKind::Io { source } => Some(&**source),
            kind => std::error::Error::source(kind),
        }
    }
}

/// What failed. Marked `#[non_exhaustive]`: new classes may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    // ---- the credential file ----
    /// The credential file could not be read.
    #[error("cannot be read: {source}")]
    Io {
        /// The underlying I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The path names something other than a regular file (a FIFO, a device, a socket, a
    /// directory): it is refused without being read, since reading it may never end.
    #[error("is a {kind}, not a regular file")]
    NotARegularFile {
        /// What it is: `"FIFO"`, `"character device"`, `"block device"`, `"socket"`,
        /// `"directory"` or `"special file"`.
        kind: &'static str,
    },
    /// The credential file is larger than the limit.
    #[error("is {size} bytes; credential files over {limit} bytes are refused")]
    FileTooLarge {
        /// Size seen, in bytes (at least `limit + 1`).
        size: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The credential file is not valid JSON or a value has the wrong type.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the parser found; quoted values from the file are redacted.
        message: String,
    },
    /// Required keys are missing from the credential file; every missing key is named.
    #[error("missing required key(s): {}", fields.join(", "))]
    MissingFields {
        /// The missing keys, in schema order.
        fields: Vec<&'static str>,
    },
    /// The file uses camelCase keys; the format (like the Go reference) is snake_case.
    #[error(
        "found camelCase key(s) {}; credential files use snake_case keys (e.g. {})",
        quoted(keys),
        quoted(expected)
    )]
    CamelCaseKeys {
        /// The camelCase keys seen.
        keys: Vec<String>,
        /// The snake_case key each one should have been.
        expected: Vec<String>,
    },
    /// A key is present but its value is unusable.
    #[error("invalid value for `{field}`: {reason}")]
    InvalidField {
        /// The key, as spelled in the file.
        field: &'static str,
        /// Why the value is refused (never the value itself when it is secret).
        reason: String,
    },

    // ---- the certificate bundle in `client_secret` ----
    /// `client_secret` is not standard base64.
    #[error("`client_secret` is not valid base64: {reason}")]
    SecretNotBase64 {
        /// The decoder's complaint (offsets only, no content).
        reason: String,
    },
    /// The decoded `client_secret` is neither a PEM bundle nor a PKCS#12 archive.
    #[error("`client_secret` holds neither a PEM bundle nor a PKCS#12 (PFX) archive: {reason}")]
    UnknownBundleFormat {
        /// What was tried and why it failed.
        reason: String,
    },
    /// The PKCS#12 archive could not be opened with an empty password.
    #[error("PKCS#12 archive cannot be read: {reason}")]
    Pkcs12 {
        /// Why (for example a MAC that does not verify: the archive has a password).
        reason: String,
    },
    /// The PKCS#12 archive asks for more work than is accepted (iterations, bags or
    /// containers over the documented bounds); refused before any key derivation.
    #[error(
        "PKCS#12 archive refused before decryption: {what} is {value}, at most {limit} are accepted"
    )]
    Pkcs12Limit {
        /// What is over the bound ("bags", "containers", or the iterations of an item
        /// with its byte offset).
        what: String,
        /// The value seen.
        value: u64,
        /// The bound.
        limit: u64,
    },
    /// The bundle holds no private key.
    #[error("the certificate bundle holds no private key")]
    NoPrivateKey,
    /// The bundle holds more than one private key.
    #[error("the certificate bundle holds {count} private keys; exactly one is expected")]
    MultiplePrivateKeys {
        /// How many keys were found.
        count: usize,
    },
    /// The private key is encrypted; only unencrypted keys are supported.
    #[error("the private key is encrypted ({format}); an unencrypted key is required")]
    EncryptedPrivateKey {
        /// Which encrypted form was seen.
        format: &'static str,
    },
    /// The private key is not RSA.
    #[error("the private key is {algorithm}; only RSA keys are supported")]
    UnsupportedKeyType {
        /// The key algorithm seen (e.g. `EC`).
        algorithm: String,
    },
    /// The RSA key is shorter than 2048 bits.
    #[error("the RSA key has {bits} bits; at least {min_bits} are required")]
    KeyTooSmall {
        /// Modulus size seen.
        bits: usize,
        /// The minimum accepted.
        min_bits: usize,
    },
    /// The private key could not be decoded.
    #[error("the private key cannot be decoded: {reason}")]
    InvalidPrivateKey {
        /// Why (no key bytes are included).
        reason: String,
    },
    /// The bundle holds no certificate.
    #[error("the certificate bundle holds no certificate")]
    NoCertificate,
    /// A certificate could not be parsed.
    #[error("certificate #{index} in the bundle cannot be parsed: {reason}")]
    InvalidCertificate {
        /// 0-based position in the bundle.
        index: usize,
        /// The parser's complaint.
        reason: String,
    },
    /// No certificate in the bundle carries the private key's public key.
    #[error(
        "no certificate in the bundle matches the private key ({certificates} certificate(s) checked)"
    )]
    NoMatchingCertificate {
        /// How many certificates were compared.
        certificates: usize,
    },
    /// The bundle has more certificates than the limit.
    #[error("the certificate bundle holds {count} certificates; at most {limit} are accepted")]
    TooManyCertificates {
        /// How many were found.
        count: usize,
        /// The limit.
        limit: usize,
    },

    // ---- using the credential ----
    /// The credential's validity has ended: `now` is past the earlier of the leaf
    /// certificate's `notAfter` and the file's `not_after`. Checked before any network
    /// call. Not transient: the credential file must be renewed.
    #[error("the credential expired at {} (now {})", rfc3339(*expired_at), rfc3339(*now))]
    CredentialExpired {
        /// The end of the validity that was passed.
        expired_at: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
    /// The credential is not valid yet: the leaf certificate's `notBefore` is more than the
    /// allowed clock skew (5 minutes) after `now`. Checked before any network call. Not
    /// transient in the retry sense (it can be hours): the credential becomes usable 5
    /// minutes before `valid_from`, or a clock is wrong.
    #[error(
        "the credential is not valid until {} (now {})",
        rfc3339(*valid_from),
        rfc3339(*now)
    )]
    CredentialNotYetValid {
        /// The start of the validity (the leaf certificate's `notBefore`).
        valid_from: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
    /// The authority URL is unusable (not a URL, not https, a query or fragment, ...).
    #[error("authority `{authority}` is not usable: {reason}")]
    InvalidAuthority {
        /// The authority as given (a URL, not a secret).
        authority: String,
        /// Why it is refused.
        reason: String,
    },
    /// A token was requested for no scope, or for an empty scope.
    #[error("invalid scopes: {reason}")]
    InvalidScopes {
        /// Why they are refused.
        reason: String,
    },
    /// Signing the client assertion failed.
    #[error("cannot sign the client assertion")]
    Signing,
    /// Two options that cannot be used together were both set (e.g. `http_client` and
    /// `extra_root_certificates`: the roots apply only to the crate-built client).
    #[error("options `{first}` and `{second}` cannot both be set: {hint}")]
    ConflictingOptions {
        /// The first option's name.
        first: &'static str,
        /// The second option's name.
        second: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {reason}")]
    HttpClient {
        /// Why.
        reason: String,
    },
    /// The token request did not complete: connection, TLS, or I/O failure, or a timeout.
    ///
    /// `message` (in the `Display`) already spells out the HTTP client's error and its
    /// causes; [`source`](std::error::Error::source) is that error itself, for matching
    /// (`reqwest::Error::is_connect`, `is_timeout`, the I/O error below it, ...).
    #[error("token request to {url} failed{}: {message}", if *timeout { " (timeout)" } else { "" })]
    Transport {
        /// The token URL.
        url: String,
        /// Whether the failure was a timeout.
        timeout: bool,
        /// What went wrong: the HTTP client's error and each of its causes.
        message: String,
        /// The HTTP client's error (shared, so the error stays cheap to clone). Its
        /// `Display` and `Debug` name the token URL, never the request body.
        #[source]
        source: Option<Arc<reqwest::Error>>,
    },
    /// The token endpoint answered with an error (an Entra `AADSTS` error when the body
    /// had that shape).
    #[error("{0}")]
    TokenEndpoint(Box<TokenEndpointError>),
    /// The shared token request this call waited on ended without an answer.
    #[error("the token request was abandoned: {reason}")]
    RequestAbandoned {
        /// Why.
        reason: &'static str,
    },
    /// The task that follows the credential file stopped without being asked to: the
    /// Tokio runtime it ran on shut down. The active credential keeps serving;
    /// `check_now` still re-reads on request.
    #[error("the credential file is no longer watched: {reason}")]
    ReloadStopped {
        /// Why.
        reason: &'static str,
    },
    /// The token endpoint answered 2xx with a body that is not a usable token response.
    #[error("the token endpoint answered HTTP {status} with an unusable body: {reason}")]
    InvalidTokenResponse {
        /// HTTP status.
        status: u16,
        /// What is wrong (the body itself is never included: it may hold a token).
        reason: String,
    },

    // ---- clouds, cloud config and Key Vault storage ----
    /// A cloud name that is not one of the well-known clouds or their aliases.
    #[error(
        "unknown cloud `{name}`; known clouds: AzurePublicCloud (AzureCloud), \
         AzureUSGovernmentCloud (AzureUSGovernment), AzureChinaCloud"
    )]
    UnknownCloud {
        /// The name as given.
        name: String,
    },
    /// A custom cloud description is unusable.
    #[error("invalid custom cloud: `{field}` {reason}")]
    InvalidCloud {
        /// The field of the description (`name`, `authority_host`, ...).
        field: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// A cloud config (`azure.json`) selects the VM's managed identity
    /// (`useManagedIdentityExtension: true`) *and* names a data-plane identity file
    /// (`aadMSIDataPlaneIdentityPath`): cloud-provider-azure would use the VM metadata
    /// endpoint and ignore the file. Nothing is chosen silently; fix the config.
    #[error(
        "`useManagedIdentityExtension` is true and `aadMSIDataPlaneIdentityPath` is set \
         ({identity_path}): the config selects both the VM managed identity (IMDS) and a \
         credential file; set `useManagedIdentityExtension` to false to use the file, or \
         choose it explicitly in code (`CloudConfig::credential_file_path`)"
    )]
    ConflictingIdentitySources {
        /// The `aadMSIDataPlaneIdentityPath` value.
        identity_path: String,
    },
    /// A cloud config names no data-plane identity file.
    #[error(
        "`aadMSIDataPlaneIdentityPath` is not set{}",
        if *uses_managed_identity_extension {
            " (the config selects the VM managed identity through IMDS, \
             `useManagedIdentityExtension: true`, which this crate does not provide)"
        } else {
            ""
        }
    )]
    NoIdentityPath {
        /// Whether the config has `useManagedIdentityExtension: true`.
        uses_managed_identity_extension: bool,
    },
    /// Formatting credentials for Key Vault storage needs a time the credentials lack.
    #[error("cannot format the credentials for Key Vault: `{field}` is missing")]
    MissingStorageTime {
        /// The missing key (`not_before`, `not_after`, `renew_after`,
        /// `cannot_renew_after`).
        field: &'static str,
    },
    /// A Key Vault secret name is not 1 to 127 ASCII letters, digits and `-`.
    #[error("invalid Key Vault secret name `{name}`: {reason}")]
    InvalidSecretName {
        /// The name as it would be stored.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },

    // ---- the environment and Kubernetes objects (`hypershift`, `k8s`) ----
    /// A required environment variable is not set.
    #[error("environment variable {name} is not set")]
    MissingEnvironmentVariable {
        /// The variable, e.g. `MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH`.
        name: &'static str,
    },
    /// An environment variable is set to a value that cannot be used.
    #[error("environment variable {name} is invalid: {reason}")]
    InvalidEnvironmentVariable {
        /// The variable.
        name: &'static str,
        /// Why the value is refused (it quotes the value: these variables hold names and
        /// paths, never secrets).
        reason: String,
    },
    // ---- the MSI data plane (`dataplane`) ----
    /// An identity URL (ARM's `x-ms-identity-url`) is unusable: not a URL, not `https`,
    /// no host. The URL is shown without its query (it carries a signature).
    #[error("identity URL `{url}` is not usable: {reason}")]
    InvalidIdentityUrl {
        /// The URL without its query and fragment.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// The data plane's `WWW-Authenticate` challenge cannot be used: not RFC 9110
    /// syntax, no `Bearer` challenge, or no usable tenant in its `authorization` URL.
    #[error("cannot use the data plane's authentication challenge: {reason}")]
    InvalidChallenge {
        /// What is wrong.
        reason: String,
    },
    /// A token was asked for in a tenant this credential may not request tokens in.
    #[error(
        "the credential of tenant {credential_tenant} may not request tokens in tenant \
         {tenant}; add it to `additionally_allowed_tenants` (or `*` for any tenant)"
    )]
    TenantNotAllowed {
        /// The tenant asked for.
        tenant: String,
        /// The credential's own tenant.
        credential_tenant: String,
    },
    /// A data plane request did not complete: connection, TLS, or I/O failure, or a
    /// timeout.
    #[error("data plane request to {url} failed{}: {message}", if *timeout { " (timeout)" } else { "" })]
    DataPlaneTransport {
        /// The request URL without its query.
        url: String,
        /// Whether the failure was a timeout.
        timeout: bool,
        /// What went wrong.
        message: String,
    },
    /// The data plane answered with an error status.
    #[error("{0}")]
    DataPlane(Box<crate::dataplane::DataPlaneError>),
    /// The data plane answered 2xx with a body that is not what the operation returns.
    #[error("the data plane answered HTTP {status} with an unusable body: {reason}")]
    InvalidDataPlaneResponse {
        /// HTTP status.
        status: u16,
        /// What is wrong (the body itself is never included: it may hold secrets).
        reason: String,
    },
    /// A token source other than this crate's credentials (an `azure_core`
    /// `TokenCredential`) failed.
    #[error("the token credential failed: {message}")]
    ExternalCredential {
        /// Its error message.
        message: String,
    },

    /// A Kubernetes object cannot be built from the values given (an empty Key Vault
    /// name, a volume name that is not a DNS-1123 label, ...).
    #[error("invalid {field}: {reason}")]
    InvalidKubernetesObject {
        /// The field as spelled in the object, e.g. `keyvaultName` or `metadata.name`.
        field: &'static str,
        /// Why the value is refused.
        reason: String,
    },

    // ---- the Key Vault store (`store`, feature `keyvault`) ----
    /// Key Vault answered a store operation with an error status.
    #[error("Key Vault {operation} of secret `{name}` failed: HTTP {status}{}{}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(), message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    KeyVault {
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
    /// A Key Vault request did not complete (connection, TLS, I/O) or the client could
    /// not be built.
    #[error("Key Vault request failed: {message}")]
    KeyVaultTransport {
        /// What went wrong.
        message: String,
    },
    /// Key Vault answered something the store does not use: an answer over
    /// [`MAX_RESPONSE_BYTES`](crate::limits::MAX_RESPONSE_BYTES) (read no further and never
    /// retried: the same answer would come again), or one that is not the JSON the
    /// operation expects (the message says where it stopped, never what the values were).
    #[error("Key Vault {operation}: the answer is not usable: {reason}")]
    InvalidKeyVaultResponse {
        /// The store's operation (`list`, `get`, ...).
        operation: &'static str,
        /// What is wrong with the answer.
        reason: String,
    },
    /// A link a service handed back (Key Vault's `nextLink`) was not followed: it leads
    /// to another origin than the service's own, repeats one already followed, or the
    /// listing reached its page limit. Nothing was sent to the link.
    #[error("{service} {operation} stopped: {fault}")]
    RefusedLink {
        /// The service (`Key Vault`).
        service: &'static str,
        /// The operation (`list`, `list deleted`).
        operation: &'static str,
        /// Why the link was not followed.
        fault: crate::service_link::LinkFault,
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
    /// A HyperShift managed identities file is invalid; every problem found is listed.
    #[error("invalid managed identities file: {}", problems.join("; "))]
    InvalidManagedIdentities {
        /// Each problem, naming its field (e.g. `controlPlane.disk.clientID: not a GUID`).
        problems: Vec<String>,
    },
}

impl ErrorKind {
    /// A stable snake_case name for the failure class (`"missing_fields"`,
    /// `"credential_expired"`, `"token_endpoint"`, ...), for metrics labels and
    /// machine-readable output such as `msi-credential --json`. Never contains details.
    ///
    /// ```
    /// # use msi_dataplane::UserAssignedIdentityCredentials;
    /// let err = UserAssignedIdentityCredentials::from_slice(b"{}").unwrap_err();
    /// assert_eq!(err.kind().code(), "missing_fields");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::Io { .. } => "io",
            ErrorKind::ConflictingOptions { .. } => "conflicting_options",
            ErrorKind::FileTooLarge { .. } => "file_too_large",
            ErrorKind::NotARegularFile { .. } => "not_a_regular_file",
            ErrorKind::Json { .. } => "json",
            ErrorKind::MissingFields { .. } => "missing_fields",
            ErrorKind::CamelCaseKeys { .. } => "camel_case_keys",
            ErrorKind::InvalidField { .. } => "invalid_field",
            ErrorKind::SecretNotBase64 { .. } => "secret_not_base64",
            ErrorKind::UnknownBundleFormat { .. } => "unknown_bundle_format",
            ErrorKind::Pkcs12 { .. } => "pkcs12",
            ErrorKind::Pkcs12Limit { .. } => "pkcs12_limit",
            ErrorKind::NoPrivateKey => "no_private_key",
            ErrorKind::MultiplePrivateKeys { .. } => "multiple_private_keys",
            ErrorKind::EncryptedPrivateKey { .. } => "encrypted_private_key",
            ErrorKind::UnsupportedKeyType { .. } => "unsupported_key_type",
            ErrorKind::KeyTooSmall { .. } => "key_too_small",
            ErrorKind::InvalidPrivateKey { .. } => "invalid_private_key",
            ErrorKind::NoCertificate => "no_certificate",
            ErrorKind::InvalidCertificate { .. } => "invalid_certificate",
            ErrorKind::NoMatchingCertificate { .. } => "no_matching_certificate",
            ErrorKind::TooManyCertificates { .. } => "too_many_certificates",
            ErrorKind::CredentialExpired { .. } => "credential_expired",
            ErrorKind::CredentialNotYetValid { .. } => "credential_not_yet_valid",
            ErrorKind::InvalidAuthority { .. } => "invalid_authority",
            ErrorKind::InvalidScopes { .. } => "invalid_scopes",
            ErrorKind::Signing => "signing",
            ErrorKind::HttpClient { .. } => "http_client",
            ErrorKind::Transport { .. } => "transport",
            ErrorKind::TokenEndpoint(_) => "token_endpoint",
            ErrorKind::RequestAbandoned { .. } => "request_abandoned",
            ErrorKind::ReloadStopped { .. } => "reload_stopped",
            ErrorKind::InvalidTokenResponse { .. } => "invalid_token_response",
            ErrorKind::UnknownCloud { .. } => "unknown_cloud",
            ErrorKind::InvalidCloud { .. } => "invalid_cloud",
            ErrorKind::ConflictingIdentitySources { .. } => "conflicting_identity_sources",
            ErrorKind::NoIdentityPath { .. } => "no_identity_path",
            ErrorKind::MissingStorageTime { .. } => "missing_storage_time",
            ErrorKind::InvalidSecretName { .. } => "invalid_secret_name",
            ErrorKind::MissingEnvironmentVariable { .. } => "missing_environment_variable",
            ErrorKind::InvalidEnvironmentVariable { .. } => "invalid_environment_variable",
            ErrorKind::InvalidKubernetesObject { .. } => "invalid_kubernetes_object",
            ErrorKind::InvalidIdentityUrl { .. } => "invalid_identity_url",
            ErrorKind::InvalidChallenge { .. } => "invalid_challenge",
            ErrorKind::TenantNotAllowed { .. } => "tenant_not_allowed",
            ErrorKind::DataPlaneTransport { .. } => "data_plane_transport",
            ErrorKind::DataPlane(_) => "data_plane",
            ErrorKind::InvalidDataPlaneResponse { .. } => "invalid_data_plane_response",
            ErrorKind::ExternalCredential { .. } => "external_credential",
            ErrorKind::KeyVault { .. } => "key_vault",
            ErrorKind::SecretNameHeldByDeletedSecret { .. } => "secret_name_held_by_deleted_secret",
            ErrorKind::KeyVaultTransport { .. } => "key_vault_transport",
            ErrorKind::InvalidKeyVaultResponse { .. } => "invalid_key_vault_response",
            ErrorKind::RefusedLink { .. } => "refused_link",
            ErrorKind::InvalidStoredSecret { .. } => "invalid_stored_secret",
            ErrorKind::InvalidManagedIdentities { .. } => "invalid_managed_identities",
        }
    }

    /// The one rule for both [`Error::is_transient`] and the retry policy.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            // Not `RequestAbandoned`: no runtime, or one shutting down, is not fixed by
            // waiting.
            ErrorKind::Transport { .. } => true,
            ErrorKind::TokenEndpoint(e) => is_transient_status(e.status),
            ErrorKind::DataPlaneTransport { .. } => true,
            ErrorKind::DataPlane(e) => is_transient_status(e.status),
            ErrorKind::KeyVaultTransport { .. } => true,
            ErrorKind::KeyVault { status, .. } => is_transient_status(*status),
            _ => false,
        }
    }
}

/// RFC 3339 for messages, to the second in UTC.
fn rfc3339(t: OffsetDateTime) -> crate::clock::Rfc3339 {
    crate::clock::Rfc3339(t)
}

/// Whether an HTTP status from a token endpoint is worth retrying.
pub(crate) fn is_transient_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// An error answer from the token endpoint, with every Entra error field it carried.
///
/// Every field but `status` is optional: endpoints and proxies answer with bodies of any
/// shape, and none of these fields is guaranteed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenEndpointError {
    /// HTTP status code.
    pub status: u16,
    /// The OAuth `error` code, e.g. `invalid_client`.
    pub error: Option<String>,
    /// Entra's `error_description` (starts with `AADSTSnnnnnn:`).
    pub error_description: Option<String>,
    /// Entra's `error_codes`, e.g. `[700027]`.
    pub error_codes: Vec<i64>,
    /// Entra's `trace_id`.
    pub trace_id: Option<String>,
    /// Entra's `correlation_id` (the request's `client-request-id`).
    pub correlation_id: Option<String>,
    /// Entra's `timestamp`.
    pub timestamp: Option<String>,
    /// The `Retry-After` the server asked for, if any.
    pub retry_after: Option<Duration>,
    /// The `client-request-id` this crate sent with the request.
    pub client_request_id: Option<String>,
}

impl TokenEndpointError {
    /// The first `AADSTS` code, from `error_codes` or else parsed from the description.
    pub fn aadsts_code(&self) -> Option<i64> {
        if let Some(code) = self.error_codes.first() {
            return Some(*code);
        }
        let rest = self.error_description.as_deref()?.strip_prefix("AADSTS")?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..digits].parse().ok()
    }
}

impl fmt::Display for TokenEndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the token endpoint answered HTTP {}", self.status)?;
        if let Some(error) = &self.error {
            write!(f, " {error}")?;
        }
        if let Some(description) = &self.error_description {
            // Entra's description repeats the ids on extra lines; the first line says it.
            let first = description.lines().next().unwrap_or_default();
            write!(f, ": {first}")?;
        }
        if let Some(trace) = &self.trace_id {
            write!(f, " (trace id {trace}")?;
            if let Some(corr) = &self.correlation_id {
                write!(f, ", correlation id {corr}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<std::io::Error> for ErrorKind {
    fn from(source: std::io::Error) -> Self {
        ErrorKind::Io {
            source: Arc::new(source),
        }
    }
}

/// Redact the values that a parser echoes back: double-quoted ones (serde_json quotes the
/// offending string in `invalid type: string "..."` messages) always, and backtick-quoted
/// ones unless they look like a schema key (up to 32 characters of `a-z`, `0-9`, `_`, `#`)
/// or a token of the grammar (one or two punctuation characters), so "missing field
/// `access_token`" and "expected `,` or `}`" stay whole and nothing long is ever echoed.
pub(crate) fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(['"', '`']) {
        let quote = &rest[at..at + 1];
        out.push_str(&rest[..=at]);
        let inner = &rest[at + 1..];
        let Some(close) = inner.find(quote) else {
            // An unterminated quote: drop what follows it.
            out.push('…');
            return out;
        };
        let value = &inner[..close];
        let keep = quote == "`"
            && ((value.len() <= 32
                && !value.is_empty()
                && value.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'#'
                }))
                || (value.len() <= 2 && value.bytes().all(|b| b.is_ascii_punctuation())));
        out.push_str(if keep { value } else { "…" });
        out.push_str(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_and_small() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Error>();
        assert!(std::mem::size_of::<Error>() <= 2 * std::mem::size_of::<usize>());
    }

    #[test]
    fn redacts_quoted_values() {
        assert_eq!(
            redact_quoted(r#"invalid type: string "c2VjcmV0", expected a sequence"#),
            r#"invalid type: string "…", expected a sequence"#
        );
        assert_eq!(
            redact_quoted("missing field `access_token`"),
            "missing field `access_token`"
        );
        assert_eq!(redact_quoted("expected `,` or `}`"), "expected `,` or `}`");
        assert_eq!(
            redact_quoted("unknown field `LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t`, expected `a`"),
            "unknown field `…`, expected `a`"
        );
        assert_eq!(redact_quoted(r#"string "abc"#), r#"string "…"#);
    }

    #[test]
    fn aadsts_code_from_description_when_codes_absent() {
        let e = TokenEndpointError {
            status: 401,
            error_description: Some("AADSTS700027: Client assertion failed".into()),
            ..Default::default()
        };
        assert_eq!(e.aadsts_code(), Some(700027));
        let e = TokenEndpointError {
            status: 401,
            error_codes: vec![7000215],
            ..Default::default()
        };
        assert_eq!(e.aadsts_code(), Some(7000215));
    }

    #[test]
    fn transient_classes() {
        for (status, transient) in [
            (400, false),
            (401, false),
            (408, true),
            (429, true),
            (500, true),
            (503, true),
            (404, false),
        ] {
            let e = Error::from(ErrorKind::TokenEndpoint(Box::new(TokenEndpointError {
                status,
                ..Default::default()
            })));
            assert_eq!(e.is_transient(), transient, "status {status}");
        }
        assert!(!Error::from(ErrorKind::NoPrivateKey).is_transient());
    }

    #[test]
    fn transient_is_exactly_what_the_retry_policy_retries() {
        let endpoint = |status| {
            ErrorKind::TokenEndpoint(Box::new(TokenEndpointError {
                status,
                ..Default::default()
            }))
        };
        let at = time::macros::datetime!(2026-01-01 00:00 UTC);
        let cases = [
            (
                ErrorKind::Transport {
                    url: "https://login.example/t/oauth2/v2.0/token".into(),
                    timeout: false,
                    message: "connection refused".into(),
                    source: None,
                },
                true,
            ),
            (endpoint(503), true),
            (endpoint(429), true),
            (endpoint(401), false),
            (endpoint(501), false),
            (
                ErrorKind::RequestAbandoned {
                    reason: "no Tokio runtime to run it on",
                },
                false,
            ),
            (
                ErrorKind::CredentialExpired {
                    expired_at: at,
                    now: at,
                },
                false,
            ),
            (
                ErrorKind::CredentialNotYetValid {
                    valid_from: at,
                    now: at,
                },
                false,
            ),
            (ErrorKind::Signing, false),
            (ErrorKind::NoPrivateKey, false),
        ];
        for (kind, transient) in cases {
            let code = kind.code();
            let e = Error::from(kind);
            assert_eq!(e.is_transient(), transient, "{code}");
            assert_eq!(crate::token::retry::is_retryable(&e), transient, "{code}");
        }
    }

    #[test]
    fn validity_errors_are_two_kinds_with_their_instants() {
        let expired = ErrorKind::CredentialExpired {
            expired_at: time::macros::datetime!(2026-02-01 00:00 UTC),
            now: time::macros::datetime!(2026-02-01 00:00:01 UTC),
        };
        assert_eq!(expired.code(), "credential_expired");
        assert_eq!(
            expired.to_string(),
            "the credential expired at 2026-02-01T00:00:00Z (now 2026-02-01T00:00:01Z)"
        );
        let early = ErrorKind::CredentialNotYetValid {
            valid_from: time::macros::datetime!(2026-02-01 12:00 UTC),
            now: time::macros::datetime!(2026-02-01 11:00 UTC),
        };
        assert_eq!(early.code(), "credential_not_yet_valid");
        assert_eq!(
            early.to_string(),
            "the credential is not valid until 2026-02-01T12:00:00Z (now 2026-02-01T11:00:00Z)"
        );
    }

    #[test]
    fn io_source_is_the_io_error_itself() {
        let e = Error::from(ErrorKind::from(std::io::Error::from(
            std::io::ErrorKind::NotFound,
        )));
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(|s| s.kind()), Some(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn environment_and_kubernetes_errors_are_not_transient() {
        // Setting the variable (or fixing the input) is a change on the caller's side.
        for kind in [
            ErrorKind::MissingEnvironmentVariable { name: "X" },
            ErrorKind::InvalidEnvironmentVariable {
                name: "X",
                reason: "r".into(),
            },
            ErrorKind::InvalidKubernetesObject {
                field: "f",
                reason: "r".into(),
            },
        ] {
            assert!(!Error::from(kind).is_transient());
        }
    }
}
