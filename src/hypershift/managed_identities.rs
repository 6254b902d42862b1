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
//! error (code `invalid_managed_identities`). With the `k8s` feature,
//! `ManagedIdentities::kubernetes_objects` builds each component's SecretProviderClass,
//! volume and mount with the `hypershift::k8s` module.

#[cfg(feature = "k8s")]
use k8s_openapi::api::core::v1::{Volume, VolumeMount};
use serde_json::Value;

use crate::error::{Error, Result};
#[cfg(feature = "k8s")]
use crate::hypershift::k8s::{
    KeyVaultObject, SecretProviderClass, certs_volume_mount, csi_volume, kms_volume_mount,
};
use crate::hypershift::rules::{Rule, guid_problem, key_vault_name_problem, secret_name_problem};
use crate::hypershift::{Component, ObjectEncoding};
use crate::untrusted_text::quoted_input;

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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// The control plane's components, by their key in the file (only `kms` is optional).
const COMPONENTS: [(&str, Component); 9] = [
    ("cloudProvider", Component::CloudProvider),
    ("nodePoolManagement", Component::NodePoolManagement),
    ("controlPlaneOperator", Component::ControlPlaneOperator),
    ("imageRegistry", Component::ImageRegistry),
    ("ingress", Component::Ingress),
    ("network", Component::Network),
    ("disk", Component::DiskCsi),
    ("file", Component::FileCsi),
    ("kms", Component::Kms),
];

/// Reads the file's values, collecting every problem, each naming its field
/// (`base.key`).
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, base: &str, key: &str, problem: impl std::fmt::Display) {
        let dot = if base.is_empty() { "" } else { "." };
        self.0.push(format!("{base}{dot}{key}: {problem}"));
    }

    /// The object `parent.key`; a problem when it is missing (and `required`) or not an
    /// object.
    fn section<'a>(
        &mut self,
        parent: &'a Value,
        base: &str,
        key: &str,
        required: bool,
    ) -> Option<&'a Value> {
        match parent.get(key) {
            Some(v) if v.is_object() => return Some(v),
            None | Some(Value::Null) if !required => {}
            None | Some(Value::Null) => self.add(base, key, "is missing"),
            Some(_) => self.add(base, key, "is not an object"),
        }
        None
    }

    /// The string `parent.key`; a problem (and an empty string) when it is missing, blank,
    /// not a string, or breaks `rule`.
    fn text(&mut self, parent: &Value, base: &str, key: &str, rule: Rule) -> String {
        let problem = match parent.get(key) {
            Some(Value::String(v)) if !v.trim().is_empty() => match rule(v) {
                Some(problem) => problem,
                None => return v.clone(),
            },
            Some(Value::String(_)) => "is empty".to_owned(),
            None | Some(Value::Null) => "is missing".to_owned(),
            Some(_) => "is not a string".to_owned(),
        };
        self.add(base, key, problem);
        String::new()
    }

    /// One component's identity, when every field of it is valid.
    fn identity(&mut self, raw: &Value, base: &str) -> Option<ComponentIdentity> {
        let before = self.0.len();
        let client_id = self.text(raw, base, "clientID", guid_problem);
        let secret = self.text(raw, base, "credentialsSecretName", secret_name_problem);
        let encoding = self.text(raw, base, "objectEncoding", |encoding| {
            let shown = quoted_input(encoding);
            let known = ObjectEncoding::from_name(encoding).is_some();
            (!known).then(|| format!("`{shown}` is not one of utf-8, hex, base64"))
        });
        (self.0.len() == before).then(|| ComponentIdentity {
            client_id,
            credentials_secret_name: secret,
            object_encoding: ObjectEncoding::from_name(&encoding).unwrap_or_default(),
        })
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
    /// `json` when it is not JSON; `invalid_managed_identities` listing every missing or invalid field.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let file: Value =
            serde_json::from_slice(bytes).map_err(crate::parser_errors::json_error)?;
        let mut p = Problems::default();
        let mut key_vault = ManagedIdentitiesKeyVault::default();
        let mut components = Vec::new();
        if let Some(cp) = p.section(&file, "", "controlPlane", true) {
            let base = "controlPlane.managedIdentitiesKeyVault";
            if let Some(kv) = p.section(cp, "controlPlane", "managedIdentitiesKeyVault", true) {
                key_vault.name = p.text(kv, base, "name", key_vault_name_problem);
                key_vault.tenant_id = p.text(kv, base, "tenantID", guid_problem);
            }
            for (key, component) in COMPONENTS {
                let required = component != Component::Kms;
                if let Some(raw) = p.section(cp, "controlPlane", key, required)
                    && let Some(identity) = p.identity(raw, &format!("controlPlane.{key}"))
                {
                    components.push((component, identity));
                }
            }
        }
        let data_plane = p.section(&file, "", "dataPlane", true).map(|dp| {
            let mut id = |key| p.text(dp, "dataPlane", key, guid_problem);
            DataPlaneIdentities {
                image_registry_client_id: id("imageRegistryMSIClientID"),
                disk_client_id: id("diskMSIClientID"),
                file_client_id: id("fileMSIClientID"),
            }
        });
        match data_plane {
            Some(data_plane) if p.0.is_empty() => Ok(ManagedIdentities {
                key_vault,
                components,
                data_plane,
            }),
            _ => {
                let message = format!("invalid managed identities file: {}", p.0.join("; "));
                Err(Error::config(
                    "invalid_managed_identities",
                    "managed identities file",
                    message,
                ))
            }
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

    /// Every component's SecretProviderClass, volume and mount (feature `k8s`), the
    /// CSI driver reading the vault as `key_vault_user_client_id` (HyperShift's
    /// `ARO_HCP_KEY_VAULT_USER_CLIENT_ID`).
    ///
    /// # Errors
    ///
    /// `invalid_kubernetes_object` from the builders.
    #[cfg(feature = "k8s")]
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
                let volume = component.volume_name().map(|name| {
                    let volume = csi_volume(name, component.secret_provider_class_name())?;
                    let mount = match component {
                        Component::Kms => kms_volume_mount(name)?,
                        _ => certs_volume_mount(name)?,
                    };
                    Ok::<_, Error>((volume, mount))
                });
                Ok(ComponentObjects {
                    component: *component,
                    secret_provider_class: spc,
                    volume: volume.transpose()?,
                })
            })
            .collect()
    }
}

/// One component's Kubernetes objects (feature `k8s`).
#[cfg(feature = "k8s")]
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
