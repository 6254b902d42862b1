//! HyperShift's names for managed Azure (ARO HCP), and where a component finds its
//! credential file.
//!
//! HyperShift's control-plane operator mounts each component's identity from Key Vault with
//! the Secrets Store CSI driver and tells the component where the file is through an
//! environment variable. This module mirrors the names HyperShift uses (its
//! `support/config/constants.go`, `support/azureutil/azureutil.go` and the `AroHCP`
//! constant of its API), so a Rust component reads the same variables and a Rust operator
//! writes the same objects as the Go ones. The Kubernetes objects themselves are built by
//! the `k8s` module (feature `k8s`).
//!
//! | environment variable | meaning | read by |
//! |---|---|---|
//! | [`CREDENTIALS_FILE_PATH_ENV`] | the credential file: an absolute path, or a bare secret name under [`CERTS_MOUNT_PATH`] | [`credentials_path`], [`credential_from_env`] |
//! | [`MANAGED_SERVICE_ENV`] | [`ARO_HCP`] on managed Azure | [`is_aro_hcp`] |
//! | [`KEY_VAULT_USER_CLIENT_ID_ENV`] | client ID of the identity the CSI driver uses to read Key Vault | [`key_vault_user_client_id`] |
//! | [`SECRET_PROVIDER_CLASS_ENV`] | a SecretProviderClass name | (name only) |
//!
//! Every reader has a pure core taking the value (`resolve_credentials_path`,
//! `is_aro_hcp_value`) and a `*_from` variant taking the lookup function, so tests never
//! need to change the process environment.
//!
//! ```no_run
//! use msi_dataplane::{ReloadOptions, hypershift};
//!
//! # async fn run() -> Result<(), msi_dataplane::Error> {
//! if hypershift::is_aro_hcp() {
//!     // MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH=/mnt/certs/<secret> (or just <secret>)
//!     let credential =
//!         hypershift::credential_from_env(Default::default(), ReloadOptions::default())
//!             .await?;
//!     let token = credential.get_token(&["https://management.azure.com/.default"]).await?;
//!     # let _ = token;
//! }
//! # Ok(()) }
//! ```
//!
//! `cargo run --example cpo_component` runs such a component against a loopback Entra (it
//! starts itself as a child process with the variables set).
//!
//! Besides the variables, the module names the mounts ([`CERTS_MOUNT_PATH`],
//! [`KMS_MOUNT_PATH`]), the CSI driver ([`SECRETS_STORE_CSI_DRIVER`]) and its
//! [`SECRET_PROVIDER_CLASS_ATTRIBUTE`], and each control-plane [`Component`]'s
//! SecretProviderClass (`managed-azure-cpo`, `managed-azure-cloud-provider`, ...) and
//! volume name.
//!
//! With the feature `k8s`, the `k8s` module builds the pod pieces exactly as HyperShift's
//! `support/azureutil` does (the CSI volume, the `/mnt/certs` and `/mnt/kms` mounts, the
//! environment variable) and a typed `secrets-store.csi.x-k8s.io/v1` SecretProviderClass
//! with HyperShift's Azure parameters, as `k8s-openapi` types; values are checked (GUIDs,
//! Key Vault and DNS-1123 names), and `tests/it/k8s.rs` parses their YAML back. It also
//! builds the native sidecar that runs the `msi-credential` crate's token server for
//! containers using a stock Azure SDK (`TokenServerSidecar`). `managed_identities`
//! parses and validates HyperShift's managed identities file, where a cluster's identity
//! flow starts.
//!
//! This folder: `k8s` and `sidecar` (feature `k8s`), `managed_identities`, and `rules` (the
//! naming rules they check, below all three). Uses `reload/`
//! (the credential from the environment) and `keyvault/` (secret names).

#[cfg(feature = "k8s")]
#[cfg_attr(docsrs, doc(cfg(feature = "k8s")))]
pub mod k8s;
pub mod managed_identities;
mod rules;
#[cfg(feature = "k8s")]
mod sidecar;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::reload::options::ReloadOptions;
use crate::reload::user_assigned::UserAssignedIdentityCredential;
use crate::token::options::ClientCertificateCredentialOptions;
use rules::{bare_name_problem, text_problem};

/// Environment variable naming a component's credential file (HyperShift:
/// `config.ManagedAzureCredentialsFilePath`). HyperShift sets it to
/// `/mnt/certs/<credentials secret name>`; some operators set only the secret name. See
/// [`resolve_credentials_path`].
pub const CREDENTIALS_FILE_PATH_ENV: &str = "MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH";

/// Environment variable naming the managed service a pod runs under; [`ARO_HCP`] means
/// managed Azure (HyperShift: `azureutil.IsAroHCP`).
pub const MANAGED_SERVICE_ENV: &str = "MANAGED_SERVICE";

/// The value of [`MANAGED_SERVICE_ENV`] for ARO HCP (HyperShift: `hyperv1.AroHCP`).
pub const ARO_HCP: &str = "ARO-HCP";

/// Environment variable holding the client ID of the managed identity that the Secrets
/// Store CSI driver uses to read Key Vault on the management cluster; it becomes the
/// SecretProviderClass `userAssignedIdentityID` (HyperShift:
/// `config.AROHCPKeyVaultManagedIdentityClientID`).
pub const KEY_VAULT_USER_CLIENT_ID_ENV: &str = "ARO_HCP_KEY_VAULT_USER_CLIENT_ID";

/// Environment variable holding a SecretProviderClass name (HyperShift:
/// `config.ManagedAzureSecretProviderClassEnvVarKey`).
pub const SECRET_PROVIDER_CLASS_ENV: &str = "ARO_HCP_SECRET_PROVIDER_CLASS";

/// Where the credential volume is mounted in a component's container (HyperShift:
/// `config.ManagedAzureCertificateMountPath`); a bare secret name resolves under it.
pub const CERTS_MOUNT_PATH: &str = "/mnt/certs";

/// The loopback port the `msi-credential` token server listens on by default (the
/// sidecar's too): the App Service managed identity protocol's.
pub const TOKEN_SERVER_PORT: u16 = 50342;

/// The path the `msi-credential` token server serves tokens on by default
/// (`IDENTITY_ENDPOINT`'s path).
pub const TOKEN_SERVER_PATH: &str = "/msi/token";

/// Where the KMS credential volume is mounted (HyperShift:
/// `config.ManagedAzureCredentialsMountPathForKMS`).
pub const KMS_MOUNT_PATH: &str = "/mnt/kms";

/// The Secrets Store CSI driver's name, the `driver` of the credential volume (HyperShift:
/// `config.ManagedAzureSecretsStoreCSIDriver`).
pub const SECRETS_STORE_CSI_DRIVER: &str = "secrets-store.csi.k8s.io";

/// The CSI volume attribute naming the SecretProviderClass (HyperShift:
/// `config.ManagedAzureSecretProviderClass`).
pub const SECRET_PROVIDER_CLASS_ATTRIBUTE: &str = "secretProviderClass";

/// A control-plane component with a managed identity, and the names HyperShift gives its
/// SecretProviderClass and its CSI volume.
///
/// | component | SecretProviderClass | volume |
/// |---|---|---|
/// | [`ControlPlaneOperator`](Self::ControlPlaneOperator) | `managed-azure-cpo` | `cpo-cert` |
/// | [`CloudProvider`](Self::CloudProvider) | `managed-azure-cloud-provider` | `cloud-provider-cert` |
/// | [`NodePoolManagement`](Self::NodePoolManagement) | `managed-azure-nodepool-management` | `nodepool-management-cert` |
/// | [`Ingress`](Self::Ingress) | `managed-azure-ingress` | `ingress-cert` |
/// | [`Network`](Self::Network) | `managed-azure-network` | none in HyperShift |
/// | [`DiskCsi`](Self::DiskCsi) | `managed-azure-disk-csi` | none in HyperShift |
/// | [`FileCsi`](Self::FileCsi) | `managed-azure-file-csi` | none in HyperShift |
/// | [`ImageRegistry`](Self::ImageRegistry) | `managed-azure-image-registry` | `image-registry-cert` |
/// | [`Kms`](Self::Kms) | `managed-azure-kms` | `kms-cert` |
///
/// HyperShift creates the network, disk and file SecretProviderClasses but defines no
/// volume name for them: the network and storage operators mount those volumes under
/// names of their own, so [`volume_name`](Self::volume_name) returns `None` rather than a
/// guess.
///
/// ```
/// use msi_dataplane::hypershift::Component;
///
/// let cpo = Component::ControlPlaneOperator;
/// assert_eq!(cpo.secret_provider_class_name(), "managed-azure-cpo");
/// assert_eq!(cpo.volume_name(), Some("cpo-cert"));
/// assert_eq!(Component::from_secret_provider_class_name("managed-azure-kms"), Some(Component::Kms));
/// assert_eq!(Component::Network.volume_name(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Component {
    /// The control-plane operator (`managed-azure-cpo`).
    ControlPlaneOperator,
    /// The cloud controller manager (`managed-azure-cloud-provider`).
    CloudProvider,
    /// Node pool management, Cluster API provider Azure (`managed-azure-nodepool-management`).
    NodePoolManagement,
    /// The ingress operator (`managed-azure-ingress`).
    Ingress,
    /// The cluster network operator (`managed-azure-network`).
    Network,
    /// The Azure Disk CSI driver (`managed-azure-disk-csi`).
    DiskCsi,
    /// The Azure File CSI driver (`managed-azure-file-csi`).
    FileCsi,
    /// The image registry operator (`managed-azure-image-registry`).
    ImageRegistry,
    /// KMS encryption of secrets at rest, in the API server (`managed-azure-kms`).
    Kms,
}

/// Each [`Component`]'s SecretProviderClass and volume names, in declaration order.
const NAMES: [(&str, Option<&str>); 9] = [
    ("managed-azure-cpo", Some("cpo-cert")),
    ("managed-azure-cloud-provider", Some("cloud-provider-cert")),
    (
        "managed-azure-nodepool-management",
        Some("nodepool-management-cert"),
    ),
    ("managed-azure-ingress", Some("ingress-cert")),
    ("managed-azure-network", None),
    ("managed-azure-disk-csi", None),
    ("managed-azure-file-csi", None),
    ("managed-azure-image-registry", Some("image-registry-cert")),
    ("managed-azure-kms", Some("kms-cert")),
];

impl Component {
    /// Every component, in declaration order.
    pub const ALL: [Component; 9] = [
        Component::ControlPlaneOperator,
        Component::CloudProvider,
        Component::NodePoolManagement,
        Component::Ingress,
        Component::Network,
        Component::DiskCsi,
        Component::FileCsi,
        Component::ImageRegistry,
        Component::Kms,
    ];

    /// The name HyperShift gives this component's SecretProviderClass.
    pub const fn secret_provider_class_name(self) -> &'static str {
        NAMES[self as usize].0
    }

    /// The name HyperShift gives this component's credential volume, if it defines one
    /// (see the table above: network, disk and file have none in HyperShift).
    pub const fn volume_name(self) -> Option<&'static str> {
        NAMES[self as usize].1
    }

    /// The component whose SecretProviderClass is named `name` (exact match).
    pub fn from_secret_provider_class_name(name: &str) -> Option<Component> {
        Component::ALL
            .into_iter()
            .find(|c| c.secret_provider_class_name() == name)
    }
}

/// How a Key Vault secret's value is written to its file (`objectEncoding`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ObjectEncoding {
    /// `utf-8`: the value as it is (the provider's default; the credential JSON).
    #[default]
    #[serde(rename = "utf-8")]
    Utf8,
    /// `hex`: the value is hex-decoded before it is written.
    #[serde(rename = "hex")]
    Hex,
    /// `base64`: the value is base64-decoded before it is written.
    #[serde(rename = "base64")]
    Base64,
}

impl ObjectEncoding {
    /// The encoding written `name` in `objectEncoding` (exact match).
    pub fn from_name(name: &str) -> Option<ObjectEncoding> {
        [Self::Utf8, Self::Hex, Self::Base64]
            .into_iter()
            .find(|e| e.as_str() == name)
    }

    /// The value as written in `objectEncoding`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ObjectEncoding::Utf8 => "utf-8",
            ObjectEncoding::Hex => "hex",
            ObjectEncoding::Base64 => "base64",
        }
    }
}

impl fmt::Display for ObjectEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the credential file named by [`CREDENTIALS_FILE_PATH_ENV`]'s `value` is.
///
/// - An absolute path is used as it is: `/mnt/certs/cpo-creds` →
///   `/mnt/certs/cpo-creds`.
/// - A bare secret name (no `/`) is joined to [`CERTS_MOUNT_PATH`]: `cpo-creds` →
///   `/mnt/certs/cpo-creds` (one operator sets the variable this way).
///
/// Refused, with `invalid_environment_variable` naming the variable: an empty
/// value; leading or trailing whitespace; a NUL or other control character; a relative
/// path with a `/` in it (`certs/x`, `./x`: resolving it against the working directory
/// would depend on where the process started); a `..` component; a trailing `/` (a
/// directory, not a file); `.` or `..` as the name; a name longer than 255 bytes.
///
/// ```
/// use std::path::Path;
/// use msi_dataplane::{hypershift::resolve_credentials_path, ErrorKind};
///
/// assert_eq!(resolve_credentials_path("cpo-creds")?, Path::new("/mnt/certs/cpo-creds"));
/// assert_eq!(resolve_credentials_path("/var/run/id/creds")?, Path::new("/var/run/id/creds"));
/// let err = resolve_credentials_path("certs/cpo-creds").unwrap_err();
/// assert!(matches!(err.kind(), ErrorKind::Config { code: "invalid_environment_variable", .. }));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
pub fn resolve_credentials_path(value: &str) -> Result<PathBuf> {
    let invalid = |reason: String| invalid_variable(CREDENTIALS_FILE_PATH_ENV, reason);
    if let Some(problem) = text_problem(value) {
        return Err(invalid(problem));
    }
    if value.starts_with('/') {
        if value.ends_with('/') {
            return Err(invalid(format!(
                "{value:?} ends with `/`: it names a directory, not the credential file"
            )));
        }
        if value.split('/').any(|part| part == "..") {
            return Err(invalid(format!("{value:?} contains a `..` component")));
        }
        return Ok(PathBuf::from(value));
    }
    if value.contains('/') {
        return Err(invalid(format!(
            "{value:?} is a relative path; give an absolute path or a bare secret name \
             (which is looked up under {CERTS_MOUNT_PATH})"
        )));
    }
    if let Some(problem) = bare_name_problem(value) {
        return Err(invalid(problem));
    }
    Ok(PathBuf::from(format!("{CERTS_MOUNT_PATH}/{value}")))
}

/// As [`resolve_credentials_path`], reading [`CREDENTIALS_FILE_PATH_ENV`] through
/// `lookup` (called with the variable's name; `|name| std::env::var_os(name)` reads the
/// process environment). Unset: `missing_environment_variable`; not UTF-8:
/// `invalid_environment_variable`.
///
/// ```
/// use std::collections::HashMap;
/// use std::ffi::OsString;
/// use std::path::Path;
/// use msi_dataplane::hypershift::{credentials_path_from, CREDENTIALS_FILE_PATH_ENV};
///
/// let env: HashMap<&str, OsString> = [(CREDENTIALS_FILE_PATH_ENV, "cpo-creds".into())].into();
/// let path = credentials_path_from(|name| env.get(name).cloned())?;
/// assert_eq!(path, Path::new("/mnt/certs/cpo-creds"));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
pub fn credentials_path_from(lookup: impl FnOnce(&str) -> Option<OsString>) -> Result<PathBuf> {
    let value = required_utf8(CREDENTIALS_FILE_PATH_ENV, lookup)?;
    resolve_credentials_path(&value)
}

/// As [`credentials_path_from`], reading the process environment.
pub fn credentials_path() -> Result<PathBuf> {
    credentials_path_from(|name| std::env::var_os(name))
}

/// Whether a [`MANAGED_SERVICE_ENV`] value means ARO HCP: exactly [`ARO_HCP`],
/// case-sensitive and untrimmed, as HyperShift's `IsAroHCP` compares it, so a Rust
/// component and the Go operators always agree on the same pod.
///
/// ```
/// use msi_dataplane::hypershift::is_aro_hcp_value;
///
/// assert!(is_aro_hcp_value("ARO-HCP"));
/// assert!(!is_aro_hcp_value("aro-hcp"));
/// assert!(!is_aro_hcp_value("ROSA-HCP"));
/// ```
pub fn is_aro_hcp_value(value: &str) -> bool {
    value == ARO_HCP
}

/// Whether [`MANAGED_SERVICE_ENV`], read through `lookup`, says ARO HCP (see
/// [`is_aro_hcp_value`]). Unset or not UTF-8 is not ARO HCP.
pub fn is_aro_hcp_from(lookup: impl FnOnce(&str) -> Option<OsString>) -> bool {
    lookup(MANAGED_SERVICE_ENV)
        .as_deref()
        .and_then(|v| v.to_str())
        .is_some_and(is_aro_hcp_value)
}

/// Whether this process runs on ARO HCP ([`MANAGED_SERVICE_ENV`] is [`ARO_HCP`]):
/// HyperShift's `azureutil.IsAroHCP`.
pub fn is_aro_hcp() -> bool {
    is_aro_hcp_from(|name| std::env::var_os(name))
}

/// The client ID in [`KEY_VAULT_USER_CLIENT_ID_ENV`], read through `lookup` (HyperShift's
/// `GetKeyVaultAuthorizedUser`, which returns `""` when it is unset; this is an error
/// here, as are an empty value, whitespace and control characters).
pub fn key_vault_user_client_id_from(
    lookup: impl FnOnce(&str) -> Option<OsString>,
) -> Result<String> {
    let value = required_utf8(KEY_VAULT_USER_CLIENT_ID_ENV, lookup)?;
    match text_problem(&value) {
        Some(reason) => Err(invalid_variable(KEY_VAULT_USER_CLIENT_ID_ENV, reason)),
        None => Ok(value),
    }
}

/// As [`key_vault_user_client_id_from`], reading the process environment.
pub fn key_vault_user_client_id() -> Result<String> {
    key_vault_user_client_id_from(|name| std::env::var_os(name))
}

/// The reloading credential ([`UserAssignedIdentityCredential`]) for the file named by
/// HyperShift's [`CREDENTIALS_FILE_PATH_ENV`] (`MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH`,
/// not the usual `AZURE_*` variables; an absolute path or a bare secret name under
/// `/mnt/certs`; see [`resolve_credentials_path`]): what a HyperShift-managed component
/// does at start.
///
/// Fails with `missing_environment_variable` when the variable is unset,
/// `invalid_environment_variable` when its value is unusable, and as
/// [`UserAssignedIdentityCredential::new`] when the file cannot be loaded. Needs a Tokio
/// runtime.
///
/// ```no_run
/// use msi_dataplane::{ClientCertificateCredentialOptions, ReloadOptions, hypershift};
///
/// # async fn run() -> Result<(), msi_dataplane::Error> {
/// let credential = hypershift::credential_from_env(
///     ClientCertificateCredentialOptions::default(),
///     ReloadOptions::default(),
/// )
/// .await?;
/// println!("serving {}", credential.path().display());
/// # Ok(()) }
/// ```
pub async fn credential_from_env(
    options: ClientCertificateCredentialOptions,
    reload: ReloadOptions,
) -> Result<UserAssignedIdentityCredential> {
    let path = credentials_path()?;
    tracing::debug!(
        variable = CREDENTIALS_FILE_PATH_ENV,
        path = %path.display(),
        "credential file named by the environment"
    );
    UserAssignedIdentityCredential::new(path, options, reload).await
}

/// The value of `name`, which must be set and UTF-8.
fn required_utf8(
    name: &'static str,
    lookup: impl FnOnce(&str) -> Option<OsString>,
) -> Result<String> {
    let value = lookup(name).ok_or_else(|| {
        let message = format!("environment variable {name} is not set");
        Error::config("missing_environment_variable", name, message)
    })?;
    value.into_string().map_err(|raw| {
        let reason = format!("{:?} is not valid UTF-8", raw.to_string_lossy());
        invalid_variable(name, reason)
    })
}

/// The variable `name` is set to a value that cannot be used (it holds a name or a path,
/// never a secret: `reason` may quote it).
fn invalid_variable(name: &'static str, reason: String) -> Error {
    let message = format!("environment variable {name} is invalid: {reason}");
    Error::config("invalid_environment_variable", name, message)
}
