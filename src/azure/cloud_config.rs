//! The cloud-provider-azure cloud config (`azure.json`) and the credential it names.
//!
//! Kubernetes components on Azure read their Azure settings from a JSON "cloud config"
//! (often `/etc/kubernetes/azure.json`). For ARO HCP, its `aadMSIDataPlaneIdentityPath`
//! names the managed-identity credential file mounted by the Secrets Store CSI driver.
//! [`CloudConfig`] reads the file; [`CloudConfig::identity_path`] decides which identity
//! it selects; [`CloudConfig::identity_credential`] builds the reloading
//! credential from it.
//!
//! When `useManagedIdentityExtension` is `true`, cloud-provider-azure authenticates with
//! the VM's managed identity through the instance metadata service and never reads
//! `aadMSIDataPlaneIdentityPath`. A config that sets both is ambiguous, so
//! [`CloudConfig::identity_path`] (and [`CloudConfig::identity_credential`])
//! refuse it (code `conflicting_identity_sources`) instead of silently choosing.
//! HyperShift's generated config for ARO HCP does set both; a component that knows it runs
//! there makes the choice explicitly with [`CloudConfig::credential_file_path`].
//!
//! ```
//! use msi_dataplane::{CloudConfig, Cloud, ErrorKind};
//!
//! let config = CloudConfig::from_slice(br#"{
//!     "cloud": "AzurePublicCloud",
//!     "tenantId": "72f988bf-86f1-41af-91ab-2d7cd011db47",
//!     "subscriptionId": "00000000-0000-0000-0000-000000000000",
//!     "resourceGroup": "hcp-rg",
//!     "location": "eastus",
//!     "useManagedIdentityExtension": false,
//!     "aadMSIDataPlaneIdentityPath": "/mnt/certs/cloud-provider"
//! }"#)?;
//! assert_eq!(config.cloud()?, Cloud::AZURE_PUBLIC);
//! assert_eq!(config.identity_path()?, std::path::Path::new("/mnt/certs/cloud-provider"));
//!
//! let both = CloudConfig::from_slice(br#"{
//!     "useManagedIdentityExtension": true,
//!     "aadMSIDataPlaneIdentityPath": "/mnt/certs/cloud-provider"
//! }"#)?;
//! assert!(matches!(
//!     both.identity_path().unwrap_err().kind(),
//!     ErrorKind::Config { code: "conflicting_identity_sources", .. }
//! ));
//! # Ok::<(), msi_dataplane::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cloud::Cloud;
use crate::error::{Error, Result};
use crate::parser_errors::json_error;
use crate::regular_file::{check_size, read_limited_as};
use crate::reload::options::ReloadOptions;
use crate::reload::user_assigned::UserAssignedIdentityCredential;
use crate::token::options::ClientCertificateCredentialOptions;

/// How errors name a cloud config file.
const CLOUD_CONFIG_FILE: &str = "cloud config file";

/// A cloud-provider-azure cloud config (`azure.json`): the keys this crate uses, typed,
/// and every other key kept as it was read.
///
/// Keys are camelCase, as cloud-provider-azure writes them. Only JSON is read (the YAML
/// form cloud-provider-azure also accepts is not). Other keys, which may include
/// secrets such as `aadClientSecret`, are kept in [`other`](Self::other) and shown by
/// `Debug` by name only.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct CloudConfig {
    /// Cloud name (`AzurePublicCloud`, ...); absent or empty means the public cloud.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud: Option<String>,
    /// The cluster's tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The subscription of the cluster's resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<String>,
    /// The resource group of the cluster's resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_group: Option<String>,
    /// The Azure region.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// `true` selects the VM's managed identity (IMDS) in cloud-provider-azure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_managed_identity_extension: Option<bool>,
    /// Client ID of the VM user-assigned identity to use with IMDS.
    #[serde(rename = "userAssignedIdentityID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_assigned_identity_id: Option<String>,
    /// Path of the managed-identity credential file (ARO HCP's data-plane identity).
    #[serde(rename = "aadMSIDataPlaneIdentityPath")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aad_msi_data_plane_identity_path: Option<String>,
    /// Every other key, as read. May hold secrets (`aadClientSecret`,
    /// `aadClientCertPassword`); `Debug` prints only the key names.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl CloudConfig {
    /// Parse a cloud config's bytes (at most
    /// [`MAX_CREDENTIAL_FILE_BYTES`](crate::limits::MAX_CREDENTIAL_FILE_BYTES)).
    ///
    /// # Errors
    ///
    /// `file_too_large`, or `json` with the line and column (quoted
    /// values in the message are redacted).
    pub fn from_slice(bytes: &[u8]) -> Result<CloudConfig> {
        check_size(bytes)?;
        serde_json::from_slice(bytes).map_err(json_error)
    }

    /// Read and parse a cloud config file. Errors name the file ("cloud config file
    /// PATH: ..."). Reads synchronously.
    pub fn from_path(path: impl AsRef<Path>) -> Result<CloudConfig> {
        let path = path.as_ref();
        let bytes = read_limited_as(path, CLOUD_CONFIG_FILE)?;
        Self::from_slice(&bytes).map_err(|e| e.with_file(path, CLOUD_CONFIG_FILE))
    }

    /// The cloud the config names: [`Cloud::from_name`] of `cloud`, or
    /// [`Cloud::AZURE_PUBLIC`] when `cloud` is absent or empty (as in
    /// cloud-provider-azure).
    ///
    /// # Errors
    ///
    /// `unknown_cloud` for a name that is not a well-known cloud; unlike
    /// cloud-provider-azure, an unknown name never falls back to the public cloud.
    pub fn cloud(&self) -> Result<Cloud> {
        match self.cloud.as_deref().map(str::trim) {
            None | Some("") => Ok(Cloud::AZURE_PUBLIC),
            Some(name) => Cloud::from_name(name),
        }
    }

    /// The credential file the config selects: `aadMSIDataPlaneIdentityPath`, used as
    /// written (a relative path is relative to the working directory, as in
    /// cloud-provider-azure).
    ///
    /// # Errors
    ///
    /// - `conflicting_identity_sources` when `useManagedIdentityExtension` is
    ///   also `true`;
    /// - `no_identity_path` when the path is absent or blank (saying whether
    ///   the config selects the VM identity instead).
    pub fn identity_path(&self) -> Result<&Path> {
        let path = self.credential_file_path()?;
        if self.use_managed_identity_extension == Some(true) {
            let message = format!(
                "`useManagedIdentityExtension` is true and `aadMSIDataPlaneIdentityPath` is set \
                 ({}): the config selects both the VM managed identity (IMDS) and a credential \
                 file; set `useManagedIdentityExtension` to false to use the file, or choose it \
                 explicitly in code (`CloudConfig::credential_file_path`)",
                path.display()
            );
            let field = "useManagedIdentityExtension";
            return Err(Error::config(
                "conflicting_identity_sources",
                field,
                message,
            ));
        }
        Ok(path)
    }

    /// `aadMSIDataPlaneIdentityPath`, chosen explicitly by the caller whatever
    /// `useManagedIdentityExtension` says.
    ///
    /// HyperShift's generated `azure.json` for ARO HCP sets both
    /// `useManagedIdentityExtension: true` and `aadMSIDataPlaneIdentityPath`, and a
    /// component that knows it runs there (see
    /// [`hypershift::is_aro_hcp`](crate::hypershift::is_aro_hcp)) wants the file. This is
    /// that choice made in code, where a reader sees it.
    /// [`identity_path`](Self::identity_path) stays the strict reading.
    ///
    /// # Errors
    ///
    /// `no_identity_path` when the path is absent or blank.
    pub fn credential_file_path(&self) -> Result<&Path> {
        let imds = match self.use_managed_identity_extension == Some(true) {
            true => {
                " (the config selects the VM managed identity through IMDS, \
                 `useManagedIdentityExtension: true`, which this crate does not provide)"
            }
            false => "",
        };
        let path = (self.aad_msi_data_plane_identity_path.as_deref())
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| {
                let message = format!("`aadMSIDataPlaneIdentityPath` is not set{imds}");
                Error::config("no_identity_path", "aadMSIDataPlaneIdentityPath", message)
            })?;
        Ok(Path::new(path))
    }

    /// The reloading credential ([`UserAssignedIdentityCredential`]) for the file this
    /// config selects ([`identity_path`](Self::identity_path)), built with
    /// [`UserAssignedIdentityCredential::new`] from `options` and `reload`.
    ///
    /// ```no_run
    /// use msi_dataplane::CloudConfig;
    ///
    /// # async fn run() -> Result<(), msi_dataplane::Error> {
    /// let config = CloudConfig::from_path("/etc/kubernetes/azure.json")?;
    /// let credential = config
    ///     .identity_credential(Default::default(), Default::default())
    ///     .await?;
    /// let scope = config.cloud()?.resource_manager_scope();
    /// let token = credential.get_token(&[scope.as_str()]).await?;
    /// # let _ = token; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The errors of [`identity_path`](Self::identity_path), then those of
    /// [`UserAssignedIdentityCredential::new`] (naming the credential file).
    pub async fn identity_credential(
        &self,
        options: ClientCertificateCredentialOptions,
        reload: ReloadOptions,
    ) -> Result<UserAssignedIdentityCredential> {
        let path = self.identity_path()?;
        UserAssignedIdentityCredential::new(path, options, reload).await
    }
}

impl fmt::Debug for CloudConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudConfig")
            .field("cloud", &self.cloud)
            .field("tenant_id", &self.tenant_id)
            .field("subscription_id", &self.subscription_id)
            .field("resource_group", &self.resource_group)
            .field("location", &self.location)
            .field(
                "use_managed_identity_extension",
                &self.use_managed_identity_extension,
            )
            .field("user_assigned_identity_id", &self.user_assigned_identity_id)
            .field(
                "aad_msi_data_plane_identity_path",
                &self.aad_msi_data_plane_identity_path,
            )
            .field("other_keys", &self.other.keys().collect::<Vec<_>>())
            .finish()
    }
}
