//! Values the caller chose that cannot be used.

/// Values the caller chose that cannot be used: options, clouds, URLs, scopes, tenants,
/// names, environment variables and Kubernetes objects.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The authority URL the caller passed is unusable (not a URL, not https, a query or
    /// fragment, ...). A credential file's unusable `authentication_endpoint` is the
    /// file's error instead: [`FileError::InvalidField`](crate::FileError::InvalidField)
    /// naming it.
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
    /// An option's value is unusable (e.g. an `application_id` with a space or over 24
    /// characters).
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name, e.g. `application_id`.
        option: &'static str,
        /// Why the value is refused (quoting at most its start).
        reason: String,
    },
    /// A value the caller passed to a function is unusable (a Key Vault URL that is not
    /// `https`, a secret version that is not 32 hexadecimal digits, an empty client id, a
    /// tenant that cannot be used in a URL path, an empty audience, ...). The program's
    /// own value: never the credential file's, never a service's.
    #[error("invalid argument `{argument}`: {reason}")]
    InvalidArgument {
        /// The argument's name, as the function's documentation spells it (`vault_url`,
        /// `version`, `client_id`, `tenant`, `audience`, ...).
        argument: &'static str,
        /// Why the value is refused (quoting at most a bounded, escaped start of it,
        /// never a secret).
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {reason}")]
    HttpClient {
        /// Why.
        reason: String,
    },
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
    /// A Kubernetes object cannot be built from the values given (an empty Key Vault
    /// name, a volume name that is not a DNS-1123 label, ...).
    #[error("invalid {field}: {reason}")]
    InvalidKubernetesObject {
        /// The field as spelled in the object, e.g. `keyvaultName` or `metadata.name`.
        field: &'static str,
        /// Why the value is refused.
        reason: String,
    },
    /// An identity URL (ARM's `x-ms-identity-url`) is unusable: not a URL, not `https`,
    /// no host. The URL is shown without its query (it carries a signature).
    #[error("identity URL `{url}` is not usable: {reason}")]
    InvalidIdentityUrl {
        /// The URL without its query and fragment.
        url: String,
        /// Why it is refused.
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
    /// A Key Vault secret name is not 1 to 127 ASCII letters, digits and `-`.
    #[error("invalid Key Vault secret name `{name}`: {reason}")]
    InvalidSecretName {
        /// The name as it would be stored.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Formatting credentials for Key Vault storage needs a time the credentials lack.
    #[error("cannot format the credentials for Key Vault: `{field}` is missing")]
    MissingStorageTime {
        /// The missing key (`not_before`, `not_after`, `renew_after`,
        /// `cannot_renew_after`).
        field: &'static str,
    },
    /// A HyperShift managed identities file is invalid; every problem found is listed.
    #[error("invalid managed identities file: {}", problems.join("; "))]
    InvalidManagedIdentities {
        /// Each problem, naming its field (e.g. `controlPlane.disk.clientID: not a GUID`).
        problems: Vec<String>,
    },
}

impl ConfigError {
    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::InvalidAuthority { .. } => "invalid_authority",
            ConfigError::InvalidScopes { .. } => "invalid_scopes",
            ConfigError::ConflictingOptions { .. } => "conflicting_options",
            ConfigError::InvalidOption { .. } => "invalid_option",
            ConfigError::InvalidArgument { .. } => "invalid_argument",
            ConfigError::HttpClient { .. } => "http_client",
            ConfigError::UnknownCloud { .. } => "unknown_cloud",
            ConfigError::InvalidCloud { .. } => "invalid_cloud",
            ConfigError::ConflictingIdentitySources { .. } => "conflicting_identity_sources",
            ConfigError::NoIdentityPath { .. } => "no_identity_path",
            ConfigError::MissingEnvironmentVariable { .. } => "missing_environment_variable",
            ConfigError::InvalidEnvironmentVariable { .. } => "invalid_environment_variable",
            ConfigError::InvalidKubernetesObject { .. } => "invalid_kubernetes_object",
            ConfigError::InvalidIdentityUrl { .. } => "invalid_identity_url",
            ConfigError::TenantNotAllowed { .. } => "tenant_not_allowed",
            ConfigError::InvalidSecretName { .. } => "invalid_secret_name",
            ConfigError::MissingStorageTime { .. } => "missing_storage_time",
            ConfigError::InvalidManagedIdentities { .. } => "invalid_managed_identities",
        }
    }
}
