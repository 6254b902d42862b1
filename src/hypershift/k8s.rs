//! Kubernetes objects for a managed identity, as HyperShift builds them (feature `k8s`).
//!
//! The counterparts of HyperShift's `support/azureutil` helpers and of its
//! `ReconcileManagedAzureSecretProviderClass`, as [`k8s_openapi`] types with the same
//! shapes, so a Rust operator writes what the Go one writes:
//!
//! | HyperShift (Go) | here |
//! |---|---|
//! | `CreateVolumeForAzureSecretStoreProviderClass(volume, spc)` | [`csi_volume`] |
//! | `CreateVolumeMountForAzureSecretStoreProviderClass(volume)` | [`certs_volume_mount`] |
//! | `CreateVolumeMountForKMSAzureSecretStoreProviderClass(volume)` | [`kms_volume_mount`] |
//! | `CreateEnvVarsForAzureManagedIdentity(secretName)` | [`credentials_env_var`] |
//! | `ReconcileManagedAzureSecretProviderClass(spc, hcp, identity)` | [`SecretProviderClass::builder`] |
//! | `formatSecretProviderClassObject(name, encoding)` | [`objects_parameter`] |
//!
//! And, with no HyperShift counterpart, [`TokenServerSidecar`]: `msi-credential serve` as
//! a native sidecar, so that containers using a stock Azure SDK get the identity.
//!
//! Names and values are checked before anything is built (DNS-1123 names, Key Vault
//! naming rules, GUIDs); bad input is an error (code `invalid_kubernetes_object`) naming the
//! field. Every type is `serde` `Serialize` + `Deserialize` with the field names `kubectl`
//! expects; write them with the serializer of your choice (`kubectl apply` takes JSON and
//! YAML alike). This crate ships no YAML serializer of its own.
//!
//! `k8s-openapi` needs exactly one Kubernetes version feature in the final build; like
//! every library on it, this crate enables none, so an application using `k8s` selects
//! one itself, e.g. `k8s-openapi = { version = "0.29", features = ["latest"] }`. The
//! matching `k8s_openapi` is re-exported here.
//!
//! ```
//! use msi_dataplane::hypershift::Component;
//! use msi_dataplane::hypershift::k8s::{self, KeyVaultObject, ObjectEncoding, SecretProviderClass};
//!
//! let component = Component::ControlPlaneOperator;
//! let volume_name = component.volume_name().unwrap_or("cpo-cert");
//!
//! // The pod: the CSI volume, its read-only mount at /mnt/certs, and the variable that
//! // tells the component where its file is.
//! let volume = k8s::csi_volume(volume_name, component.secret_provider_class_name())?;
//! let mount = k8s::certs_volume_mount(volume_name)?;
//! let env = k8s::credentials_env_var("cpo-credentials")?;
//! assert_eq!(env.value.as_deref(), Some("/mnt/certs/cpo-credentials"));
//!
//! // The SecretProviderClass the volume names.
//! let spc = SecretProviderClass::for_component(component)
//!     .namespace("clusters-demo")
//!     .key_vault_name("demo-mi-kv")
//!     .tenant_id("72f988bf-86f1-41af-91ab-2d7cd011db47")
//!     .user_assigned_identity_id("0e2d7c3a-5d6e-4f3a-9b1c-2a4d6e8f0a1b")
//!     .object(KeyVaultObject::secret("cpo-credentials", ObjectEncoding::Utf8))
//!     .build()?;
//! println!("{}", serde_json::to_string_pretty(&spc)?);
//! # let _ = (volume, mount);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{CSIVolumeSource, EnvVar, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::error::Result;
pub use crate::hypershift::ObjectEncoding;
use crate::hypershift::rules::{
    Rule, bare_name_problem, check, dns1123_label_problem, dns1123_subdomain_problem, guid_problem,
    key_vault_name_problem, secret_name_problem,
};
use crate::hypershift::{
    CERTS_MOUNT_PATH, CREDENTIALS_FILE_PATH_ENV, Component, KMS_MOUNT_PATH,
    SECRET_PROVIDER_CLASS_ATTRIBUTE, SECRETS_STORE_CSI_DRIVER,
};

pub use crate::hypershift::sidecar::{
    IDENTITY_HEADER_KEY, PREVIOUS_IDENTITY_HEADER_KEY, SECRET_MOUNT_PATH, SIDECAR_NAME,
    TOKEN_SERVER_PATH, TOKEN_SERVER_PORT, TokenServerSidecar,
};

/// The `k8s-openapi` this module's types come from.
pub use k8s_openapi;

/// `apiVersion` of a SecretProviderClass (the Secrets Store CSI driver's `v1` API).
pub const SECRET_PROVIDER_CLASS_API_VERSION: &str = "secrets-store.csi.x-k8s.io/v1";

/// `kind` of a SecretProviderClass.
pub const SECRET_PROVIDER_CLASS_KIND: &str = "SecretProviderClass";

/// `spec.provider` for Azure Key Vault.
pub const AZURE_PROVIDER: &str = "azure";

/// The CSI volume that mounts a SecretProviderClass's objects: `driver`
/// `secrets-store.csi.k8s.io`, `readOnly: true`, and the `secretProviderClass` attribute
/// (HyperShift's `CreateVolumeForAzureSecretStoreProviderClass`).
///
/// `volume_name` must be a DNS-1123 label and `secret_provider_class` a DNS-1123
/// subdomain.
///
/// ```
/// use msi_dataplane::hypershift::k8s::csi_volume;
///
/// let volume = csi_volume("cpo-cert", "managed-azure-cpo")?;
/// let json = serde_json::to_value(&volume).expect("serializes");
/// assert_eq!(json, serde_json::json!({
///     "name": "cpo-cert",
///     "csi": {
///         "driver": "secrets-store.csi.k8s.io",
///         "readOnly": true,
///         "volumeAttributes": { "secretProviderClass": "managed-azure-cpo" }
///     }
/// }));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
pub fn csi_volume(volume_name: &str, secret_provider_class: &str) -> Result<Volume> {
    check("Volume.name", dns1123_label_problem(volume_name))?;
    check(
        "volumeAttributes.secretProviderClass",
        dns1123_subdomain_problem(secret_provider_class),
    )?;
    Ok(Volume {
        name: volume_name.to_owned(),
        csi: Some(CSIVolumeSource {
            driver: SECRETS_STORE_CSI_DRIVER.to_owned(),
            read_only: Some(true),
            volume_attributes: Some(BTreeMap::from([(
                SECRET_PROVIDER_CLASS_ATTRIBUTE.to_owned(),
                secret_provider_class.to_owned(),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The read-only mount of `volume_name` at `/mnt/certs` (HyperShift's
/// `CreateVolumeMountForAzureSecretStoreProviderClass`).
///
/// ```
/// let mount = msi_dataplane::hypershift::k8s::certs_volume_mount("cpo-cert")?;
/// assert_eq!(mount.mount_path, "/mnt/certs");
/// assert_eq!(mount.read_only, Some(true));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
pub fn certs_volume_mount(volume_name: &str) -> Result<VolumeMount> {
    read_only_mount(volume_name, CERTS_MOUNT_PATH)
}

/// The read-only mount of `volume_name` at `/mnt/kms`, for the KMS identity next to
/// another one at `/mnt/certs` (HyperShift's
/// `CreateVolumeMountForKMSAzureSecretStoreProviderClass`).
pub fn kms_volume_mount(volume_name: &str) -> Result<VolumeMount> {
    read_only_mount(volume_name, KMS_MOUNT_PATH)
}

/// `MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH=/mnt/certs/<credentials_secret_name>`
/// (HyperShift's `CreateEnvVarsForAzureManagedIdentity`, which returns this one variable
/// in a list). The name is the Key Vault object's file name in the mount, so it must be a
/// plain file name (no `/`, not empty, no whitespace around it).
///
/// ```
/// let env = msi_dataplane::hypershift::k8s::credentials_env_var("cpo-credentials")?;
/// assert_eq!(env.name, "MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH");
/// assert_eq!(env.value.as_deref(), Some("/mnt/certs/cpo-credentials"));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
pub fn credentials_env_var(credentials_secret_name: &str) -> Result<EnvVar> {
    check("EnvVar.value", bare_name_problem(credentials_secret_name))?;
    Ok(EnvVar {
        name: CREDENTIALS_FILE_PATH_ENV.to_owned(),
        value: Some(format!("{CERTS_MOUNT_PATH}/{credentials_secret_name}")),
        ..Default::default()
    })
}

fn read_only_mount(volume_name: &str, mount_path: &str) -> Result<VolumeMount> {
    check("VolumeMount.name", dns1123_label_problem(volume_name))?;
    Ok(VolumeMount {
        name: volume_name.to_owned(),
        mount_path: mount_path.to_owned(),
        read_only: Some(true),
        ..Default::default()
    })
}

/// One entry of a SecretProviderClass's `objects` parameter: which Key Vault secret to
/// mount (its file is named after it) and how. Serialized, it is the YAML map inside one
/// `array` item, less its `objectType` (always `secret`: a managed-identity credential is
/// stored as a secret, and that is the only kind this module writes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KeyVaultObject {
    /// The Key Vault object's name (1 to 127 of `0-9`, `a-z`, `A-Z`, `-`).
    pub object_name: String,
    /// How its value is decoded into the file.
    pub object_encoding: ObjectEncoding,
}

impl KeyVaultObject {
    /// The Key Vault secret `name`, decoded with `encoding`.
    pub fn secret(name: impl Into<String>, encoding: ObjectEncoding) -> Self {
        KeyVaultObject {
            object_name: name.into(),
            object_encoding: encoding,
        }
    }
}

/// The `objects` parameter listing `objects`, byte for byte as HyperShift's
/// `formatSecretProviderClassObject` writes it for one object (a leading newline, then a
/// YAML `array` of block-literal strings, each a YAML map):
///
/// ```
/// use msi_dataplane::hypershift::k8s::{objects_parameter, KeyVaultObject, ObjectEncoding};
///
/// let objects = objects_parameter(&[KeyVaultObject::secret("cpo-credentials", ObjectEncoding::Utf8)])?;
/// assert_eq!(
///     objects,
///     "\narray:\n  - |\n    objectName: cpo-credentials\n    objectEncoding: utf-8\n    objectType: secret\n"
/// );
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
///
/// At least one object is required, names must follow Key Vault's rules (so each one is a
/// plain YAML scalar: nothing can escape its line), and no name may repeat (the files
/// would collide).
pub fn objects_parameter(objects: &[KeyVaultObject]) -> Result<String> {
    let none = objects
        .is_empty()
        .then(|| "no Key Vault object is listed".to_owned());
    check("spec.parameters.objects", none)?;
    let mut out = String::from("\narray:\n");
    for (i, object) in objects.iter().enumerate() {
        check("objectName", secret_name_problem(&object.object_name))?;
        let twice = objects[..i]
            .iter()
            .any(|o| o.object_name == object.object_name)
            .then(|| format!("{:?} is listed twice", object.object_name));
        check("objectName", twice)?;
        out.push_str("  - |\n    objectName: ");
        out.push_str(&object.object_name);
        out.push_str("\n    objectEncoding: ");
        out.push_str(object.object_encoding.as_str());
        out.push_str("\n    objectType: secret\n");
    }
    Ok(out)
}

/// A Secrets Store CSI driver `SecretProviderClass` (`secrets-store.csi.x-k8s.io/v1`).
///
/// `apiVersion` and `kind` are fixed: they are written on serialization and checked on
/// deserialization (another kind is an error). `spec` keeps any field it does not model
/// (such as `secretObjects`) in [`SecretProviderClassSpec::other`]; a `status` is
/// ignored. It implements `k8s_openapi`'s `Resource`, `ListableResource` and `Metadata`
/// traits, so clients built on them (kube's `Api<K>`, for one) can work with it.
///
/// Build the Azure Key Vault one HyperShift writes with [`builder`](Self::builder) or
/// [`for_component`](Self::for_component).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SecretProviderClass {
    api_version: ApiVersion,
    kind: Kind,
    /// Standard object metadata (name, namespace, labels, ...).
    pub metadata: ObjectMeta,
    /// The provider and its parameters.
    pub spec: SecretProviderClassSpec,
}

/// The `spec` of a [`SecretProviderClass`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SecretProviderClassSpec {
    /// The provider, e.g. [`AZURE_PROVIDER`].
    pub provider: String,
    /// The provider's parameters (all strings; for Azure, `objects` is itself YAML).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    /// Any other `spec` field (e.g. `secretObjects`), kept as it was read.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The one `apiVersion` a [`SecretProviderClass`] has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum ApiVersion {
    #[default]
    #[serde(rename = "secrets-store.csi.x-k8s.io/v1")]
    V1,
}

/// The one `kind` a [`SecretProviderClass`] has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    #[default]
    SecretProviderClass,
}

impl SecretProviderClass {
    /// A builder for the Azure Key Vault SecretProviderClass named `name`, with the
    /// parameters HyperShift's `ReconcileManagedAzureSecretProviderClass` sets:
    /// `usePodIdentity: "false"`, `useVMManagedIdentity: "true"`,
    /// `userAssignedIdentityID`, `keyvaultName`, `tenantId` and `objects`.
    ///
    /// ```
    /// use msi_dataplane::hypershift::k8s::{KeyVaultObject, ObjectEncoding, SecretProviderClass};
    ///
    /// let spc = SecretProviderClass::builder("managed-azure-ingress")
    ///     .namespace("clusters-demo")
    ///     .key_vault_name("demo-mi-kv")
    ///     .tenant_id("72f988bf-86f1-41af-91ab-2d7cd011db47")
    ///     .user_assigned_identity_id("0e2d7c3a-5d6e-4f3a-9b1c-2a4d6e8f0a1b")
    ///     .object(KeyVaultObject::secret("ingress-credentials", ObjectEncoding::Utf8))
    ///     .build()?;
    /// assert_eq!(spc.spec.provider, "azure");
    /// assert_eq!(spc.spec.parameters["useVMManagedIdentity"], "true");
    /// assert_eq!(spc.spec.parameters["keyvaultName"], "demo-mi-kv");
    /// # Ok::<(), msi_dataplane::Error>(())
    /// ```
    pub fn builder(name: impl Into<String>) -> SecretProviderClassBuilder {
        SecretProviderClassBuilder {
            name: name.into(),
            ..SecretProviderClassBuilder::default()
        }
    }

    /// [`builder`](Self::builder) with HyperShift's name for `component`'s
    /// SecretProviderClass (e.g. `managed-azure-cpo`).
    pub fn for_component(component: Component) -> SecretProviderClassBuilder {
        Self::builder(component.secret_provider_class_name())
    }
}

impl k8s_openapi::Resource for SecretProviderClass {
    const API_VERSION: &'static str = SECRET_PROVIDER_CLASS_API_VERSION;
    const GROUP: &'static str = "secrets-store.csi.x-k8s.io";
    const KIND: &'static str = SECRET_PROVIDER_CLASS_KIND;
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "secretproviderclasses";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for SecretProviderClass {
    const LIST_KIND: &'static str = "SecretProviderClassList";
}

impl k8s_openapi::Metadata for SecretProviderClass {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Builds the Azure Key Vault [`SecretProviderClass`] HyperShift writes for a managed
/// identity; see [`SecretProviderClass::builder`]. Every setter takes the value as it
/// will appear; [`build`](Self::build) checks them all.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct SecretProviderClassBuilder {
    name: String,
    namespace: Option<String>,
    key_vault_name: Option<String>,
    tenant_id: Option<String>,
    user_assigned_identity_id: Option<String>,
    objects: Vec<KeyVaultObject>,
}

impl SecretProviderClassBuilder {
    /// `metadata.namespace` (a DNS-1123 label). Unset: the namespace it is applied in.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// `keyvaultName`: the Key Vault holding the credentials (3 to 24 of `0-9`, `a-z`,
    /// `A-Z`, `-`; starts with a letter, ends with a letter or digit, no `--`).
    pub fn key_vault_name(mut self, name: impl Into<String>) -> Self {
        self.key_vault_name = Some(name.into());
        self
    }

    /// `tenantId`: the Key Vault's tenant (a GUID).
    pub fn tenant_id(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// `userAssignedIdentityID`: the client ID (a GUID) of the identity the CSI driver
    /// reads Key Vault with; HyperShift takes it from `ARO_HCP_KEY_VAULT_USER_CLIENT_ID`
    /// (see [`crate::hypershift::key_vault_user_client_id`]).
    pub fn user_assigned_identity_id(mut self, client_id: impl Into<String>) -> Self {
        self.user_assigned_identity_id = Some(client_id.into());
        self
    }

    /// Add a Key Vault object to `objects` (HyperShift lists one: the credentials secret).
    pub fn object(mut self, object: KeyVaultObject) -> Self {
        self.objects.push(object);
        self
    }

    /// The SecretProviderClass, or an `invalid_kubernetes_object` error naming the
    /// first field that is missing or invalid.
    pub fn build(self) -> Result<SecretProviderClass> {
        check("metadata.name", dns1123_subdomain_problem(&self.name))?;
        if let Some(namespace) = &self.namespace {
            check("metadata.namespace", dns1123_label_problem(namespace))?;
        }
        let mut parameters = BTreeMap::from([
            ("usePodIdentity".to_owned(), "false".to_owned()),
            ("useVMManagedIdentity".to_owned(), "true".to_owned()),
        ]);
        // Each required parameter: its field (`spec.parameters.<key>`), value and rule.
        let required: [(&str, Option<String>, Rule); 3] = [
            (
                "spec.parameters.keyvaultName",
                self.key_vault_name,
                key_vault_name_problem,
            ),
            ("spec.parameters.tenantId", self.tenant_id, guid_problem),
            (
                "spec.parameters.userAssignedIdentityID",
                self.user_assigned_identity_id,
                guid_problem,
            ),
        ];
        for (field, value, rule) in required {
            let problem = value
                .as_deref()
                .map_or_else(|| Some("is not set".to_owned()), rule);
            check(field, problem)?;
            let key = field.trim_start_matches("spec.parameters.");
            parameters.insert(key.to_owned(), value.unwrap_or_default());
        }
        parameters.insert("objects".to_owned(), objects_parameter(&self.objects)?);
        let metadata = ObjectMeta {
            name: Some(self.name),
            namespace: self.namespace,
            ..Default::default()
        };
        let spec = SecretProviderClassSpec {
            provider: AZURE_PROVIDER.to_owned(),
            parameters,
            other: BTreeMap::new(),
        };
        Ok(SecretProviderClass {
            metadata,
            spec,
            ..Default::default()
        })
    }
}
