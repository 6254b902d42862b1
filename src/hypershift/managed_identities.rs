//! HyperShift's managed identities file: where the identity flow starts for a cluster.
//!
//! A hosted cluster is created from a JSON file naming the Key Vault that holds its
//! identities' credentials and, per control-plane component, the identity's client ID,
//! the name of its credentials secret in that vault and how the CSI driver writes it:
//!
//! ```json
//! {
//!   "controlPlane": {
//!     "managedIdentitiesKeyVault": {"name": "aro-hcp-kv", "tenantID": "<guid>"},
//!     "cloudProvider": {"clientID": "<guid>", "credentialsSecretName": "uamsi-cp", "objectEncoding": "utf-8"},
//!     "nodePoolManagement": {...}, "controlPlaneOperator": {...}, "imageRegistry": {...},
//!     "ingress": {...}, "network": {...}, "disk": {...}, "file": {...}, "kms": {...}
//!   },
//!   "dataPlane": {"imageRegistryMSIClientID": "<guid>", "diskMSIClientID": "<guid>", "fileMSIClientID": "<guid>"}
//! }
//! ```
//!
//! [`ManagedIdentities::from_slice`] parses and validates it (GUIDs, the Key Vault name,
//! secret names, encodings; `kms` is optional), naming every problem in one
//! [`ConfigError::InvalidManagedIdentities`]. With the `k8s` feature,
//! `ManagedIdentities::kubernetes_objects` builds each component's SecretProviderClass,
//! volume and mount with the `hypershift::k8s` module.

use serde::Deserialize;

use crate::error::{ConfigError, ErrorKind, Result};
use crate::file::model::is_guid;
use crate::hypershift::rules::is_key_vault_name;
use crate::hypershift::{Component, ObjectEncoding};
use crate::keyvault::validate_secret_name;

/// A validated managed identities file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManagedIdentities {
    /// The Key Vault holding the credentials.
    pub key_vault: ManagedIdentitiesKeyVault,
    /// Each control-plane component's identity, in the file's order (`kms` when present).
    pub components: Vec<(Component, ComponentIdentity)>,
    /// The data plane's client IDs.
    pub data_plane: DataPlaneIdentities,
}

/// `controlPlane.managedIdentitiesKeyVault`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManagedIdentitiesKeyVault {
    /// The vault's name (`https://<name>.vault.azure.net`).
    pub name: String,
    /// Its tenant (a GUID).
    pub tenant_id: String,
}

/// One component's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ComponentIdentity {
    /// `clientID` (a GUID).
    pub client_id: String,
    /// `credentialsSecretName`: the Key Vault secret holding the credentials.
    pub credentials_secret_name: String,
    /// `objectEncoding`: `utf-8`, `hex` or `base64`.
    pub object_encoding: ObjectEncoding,
}

/// `dataPlane`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataPlaneIdentities {
    /// `imageRegistryMSIClientID`.
    pub image_registry_client_id: String,
    /// `diskMSIClientID`.
    pub disk_client_id: String,
    /// `fileMSIClientID`.
    pub file_client_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    control_plane: Option<RawControlPlane>,
    data_plane: Option<RawDataPlane>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawControlPlane {
    managed_identities_key_vault: Option<RawKeyVault>,
    cloud_provider: Option<RawIdentity>,
    node_pool_management: Option<RawIdentity>,
    control_plane_operator: Option<RawIdentity>,
    image_registry: Option<RawIdentity>,
    ingress: Option<RawIdentity>,
    network: Option<RawIdentity>,
    disk: Option<RawIdentity>,
    file: Option<RawIdentity>,
    kms: Option<RawIdentity>,
}

#[derive(Deserialize)]
struct RawKeyVault {
    name: Option<String>,
    #[serde(rename = "tenantID")]
    tenant_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIdentity {
    #[serde(rename = "clientID")]
    client_id: Option<String>,
    credentials_secret_name: Option<String>,
    object_encoding: Option<String>,
}

#[derive(Deserialize)]
struct RawDataPlane {
    #[serde(rename = "imageRegistryMSIClientID")]
    image_registry: Option<String>,
    #[serde(rename = "diskMSIClientID")]
    disk: Option<String>,
    #[serde(rename = "fileMSIClientID")]
    file: Option<String>,
}

/// Collects every problem, each naming its field.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, field: &str, problem: impl std::fmt::Display) {
        self.0.push(format!("{field}: {problem}"));
    }

    fn required<'a>(&mut self, field: &str, value: &'a Option<String>) -> Option<&'a str> {
        match value.as_deref() {
            None => {
                self.add(field, "is missing");
                None
            }
            Some(v) if v.trim().is_empty() => {
                self.add(field, "is empty");
                None
            }
            Some(v) => Some(v),
        }
    }

    fn guid(&mut self, field: &str, value: &Option<String>) -> String {
        let Some(v) = self.required(field, value) else {
            return String::new();
        };
        if !is_guid(v) {
            self.add(
                field,
                format_args!("`{}` is not a GUID", crate::untrusted_text::quoted_input(v)),
            );
        }
        v.to_owned()
    }
}

impl ManagedIdentities {
    /// Parse and validate a managed identities file.
    ///
    /// ```
    /// use msi_dataplane::hypershift::managed_identities::ManagedIdentities;
    ///
    /// let err = ManagedIdentities::from_slice(br#"{"controlPlane": {}}"#).unwrap_err();
    /// let text = err.to_string();
    /// assert!(text.contains("controlPlane.managedIdentitiesKeyVault: is missing"));
    /// assert!(text.contains("dataPlane: is missing"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`FileError::Json`](crate::FileError::Json) when it is not JSON of this shape;
    /// [`ConfigError::InvalidManagedIdentities`] listing every missing or invalid field.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let raw: RawFile =
            serde_json::from_slice(bytes).map_err(crate::parser_errors::json_error)?;
        let mut p = Problems::default();
        let mut key_vault = ManagedIdentitiesKeyVault {
            name: String::new(),
            tenant_id: String::new(),
        };
        let mut components = Vec::new();
        match &raw.control_plane {
            None => p.add("controlPlane", "is missing"),
            Some(cp) => {
                match &cp.managed_identities_key_vault {
                    None => p.add("controlPlane.managedIdentitiesKeyVault", "is missing"),
                    Some(kv) => {
                        let field = "controlPlane.managedIdentitiesKeyVault.name";
                        if let Some(name) = p.required(field, &kv.name) {
                            if !is_key_vault_name(name) {
                                p.add(field, format_args!("`{name}` is not a Key Vault name (3-24 of letters, digits and '-', a letter first, no '--')"));
                            }
                            key_vault.name = name.to_owned();
                        }
                        key_vault.tenant_id = p.guid(
                            "controlPlane.managedIdentitiesKeyVault.tenantID",
                            &kv.tenant_id,
                        );
                    }
                }
                use Component as C;
                let all = [
                    ("cloudProvider", C::CloudProvider, &cp.cloud_provider),
                    (
                        "nodePoolManagement",
                        C::NodePoolManagement,
                        &cp.node_pool_management,
                    ),
                    (
                        "controlPlaneOperator",
                        C::ControlPlaneOperator,
                        &cp.control_plane_operator,
                    ),
                    ("imageRegistry", C::ImageRegistry, &cp.image_registry),
                    ("ingress", C::Ingress, &cp.ingress),
                    ("network", C::Network, &cp.network),
                    ("disk", C::DiskCsi, &cp.disk),
                    ("file", C::FileCsi, &cp.file),
                    ("kms", C::Kms, &cp.kms),
                ];
                for (key, component, identity) in all {
                    let base = format!("controlPlane.{key}");
                    match identity {
                        // Only `kms` is optional.
                        None if component != C::Kms => p.add(&base, "is missing"),
                        None => {}
                        Some(id) => {
                            if let Some(identity) = component_identity(&mut p, &base, id) {
                                components.push((component, identity));
                            }
                        }
                    }
                }
            }
        }
        let data_plane = match &raw.data_plane {
            None => {
                p.add("dataPlane", "is missing");
                None
            }
            Some(dp) => Some(DataPlaneIdentities {
                image_registry_client_id: p
                    .guid("dataPlane.imageRegistryMSIClientID", &dp.image_registry),
                disk_client_id: p.guid("dataPlane.diskMSIClientID", &dp.disk),
                file_client_id: p.guid("dataPlane.fileMSIClientID", &dp.file),
            }),
        };
        match data_plane {
            Some(data_plane) if p.0.is_empty() => Ok(ManagedIdentities {
                key_vault,
                components,
                data_plane,
            }),
            _ => Err(
                ErrorKind::Config(ConfigError::InvalidManagedIdentities { problems: p.0 }).into(),
            ),
        }
    }

    /// The vault's URL in the public cloud: `https://<name>.vault.azure.net/`.
    pub fn key_vault_url(&self) -> String {
        format!("https://{}.vault.azure.net/", self.key_vault.name)
    }

    /// The identity of `component`, if the file has one.
    pub fn component(&self, component: Component) -> Option<&ComponentIdentity> {
        self.components
            .iter()
            .find(|(c, _)| *c == component)
            .map(|(_, identity)| identity)
    }
}

fn component_identity(
    p: &mut Problems,
    base: &str,
    raw: &RawIdentity,
) -> Option<ComponentIdentity> {
    let before = p.0.len();
    let client_id = p.guid(&format!("{base}.clientID"), &raw.client_id);
    let field = format!("{base}.credentialsSecretName");
    let secret = p
        .required(&field, &raw.credentials_secret_name)
        .map(str::to_owned);
    if let Some(name) = &secret
        && let Err(e) = validate_secret_name(name)
    {
        p.add(&field, e);
    }
    let field = format!("{base}.objectEncoding");
    let encoding = p.required(&field, &raw.object_encoding).and_then(|enc| {
        let encoding = ObjectEncoding::from_name(enc);
        if encoding.is_none() {
            let shown = crate::untrusted_text::quoted_input(enc);
            p.add(
                &field,
                format_args!("`{shown}` is not one of utf-8, hex, base64"),
            );
        }
        encoding
    });
    (p.0.len() == before).then(|| ComponentIdentity {
        client_id,
        credentials_secret_name: secret.unwrap_or_default(),
        object_encoding: encoding.unwrap_or_default(),
    })
}

#[cfg(feature = "k8s")]
mod kubernetes {
    use k8s_openapi::api::core::v1::{Volume, VolumeMount};

    use super::ManagedIdentities;
    use crate::error::Result;
    use crate::hypershift::Component;
    use crate::hypershift::k8s::{
        KeyVaultObject, SecretProviderClass, certs_volume_mount, csi_volume, kms_volume_mount,
    };

    /// One component's Kubernetes objects (feature `k8s`).
    #[derive(Clone, Debug)]
    #[non_exhaustive]
    pub struct ComponentObjects {
        /// The component.
        pub component: Component,
        /// Its SecretProviderClass.
        pub secret_provider_class: SecretProviderClass,
        /// Its CSI volume and mount, when HyperShift names the volume (network, disk and
        /// file mount theirs under names of their own).
        pub volume: Option<(Volume, VolumeMount)>,
    }

    impl ManagedIdentities {
        /// Every component's SecretProviderClass, volume and mount (feature `k8s`), the
        /// CSI driver reading the vault as `key_vault_user_client_id` (HyperShift's
        /// `ARO_HCP_KEY_VAULT_USER_CLIENT_ID`).
        ///
        /// # Errors
        ///
        /// [`ConfigError::InvalidKubernetesObject`](crate::ConfigError::InvalidKubernetesObject)
        /// from the builders.
        pub fn kubernetes_objects(
            &self,
            namespace: &str,
            key_vault_user_client_id: &str,
        ) -> Result<Vec<ComponentObjects>> {
            self.components
                .iter()
                .map(|(component, identity)| {
                    let spc = SecretProviderClass::for_component(*component)
                        .namespace(namespace)
                        .key_vault_name(&self.key_vault.name)
                        .tenant_id(&self.key_vault.tenant_id)
                        .user_assigned_identity_id(key_vault_user_client_id)
                        .object(KeyVaultObject::secret(
                            &identity.credentials_secret_name,
                            identity.object_encoding,
                        ))
                        .build()?;
                    let volume = match component.volume_name() {
                        None => None,
                        Some(name) => {
                            let volume = csi_volume(name, component.secret_provider_class_name())?;
                            let mount = if *component == Component::Kms {
                                kms_volume_mount(name)?
                            } else {
                                certs_volume_mount(name)?
                            };
                            Some((volume, mount))
                        }
                    };
                    Ok(ComponentObjects {
                        component: *component,
                        secret_provider_class: spc,
                        volume,
                    })
                })
                .collect()
        }
    }
}

#[cfg(feature = "k8s")]
pub use kubernetes::ComponentObjects;
