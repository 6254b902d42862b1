//! The data plane's request and response bodies (API version 2024-01-01).
//!
//! Responses are snake_case, request bodies camelCase, as on the wire. Every field is
//! optional, as in the Go reference; absent fields are omitted when serialized and
//! unknown keys are ignored when parsing.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::file::model::{CustomClaims, UserAssignedIdentityCredentials};

/// An identity's credentials as the MSI data plane returns them: the system-assigned
/// identity's certificate at the top level, user-assigned ones in
/// [`explicit_identities`](Self::explicit_identities).
///
/// `client_secret` (standard base64 of a PKCS#12 archive or PEM bundle) never prints.
///
/// ```
/// use msi_dataplane::dataplane::ManagedIdentityCredentials;
///
/// let creds: ManagedIdentityCredentials = serde_json::from_str(r#"{
///   "client_id": "c", "tenant_id": "t", "client_secret": "TUlJQ...",
///   "explicit_identities": [{"client_id": "u", "resource_id": "/subscriptions/s/x"}],
///   "some_future_key": 1
/// }"#).unwrap();
/// assert_eq!(creds.user_assigned_identities().len(), 1);
/// assert!(!format!("{creds:?}").contains("TUlJQ"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ManagedIdentityCredentials {
    /// The top-level identity (the system-assigned one): its keys sit at the top level on
    /// the wire, as in the Go reference. It is what
    /// [`ClientCertificateCredential::new`](crate::ClientCertificateCredential::new) takes,
    /// and its typed accessors (`identity.not_after()`, ...) parse its times.
    #[serde(flatten)]
    pub identity: UserAssignedIdentityCredentials,
    /// Delegated resources' identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_resources: Option<Vec<DelegatedResource>>,
    /// The delegation URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_url: Option<String>,
    /// The user-assigned identities asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_identities: Option<Vec<UserAssignedIdentityCredentials>>,
    /// The MSI service's internal id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_id: Option<String>,
}

/// A delegated resource's identities.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DelegatedResource {
    /// The delegation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_id: Option<String>,
    /// The delegation URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_url: Option<String>,
    /// The resource's user-assigned identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_identities: Option<Vec<UserAssignedIdentityCredentials>>,
    /// The resource's system-assigned identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implicit_identity: Option<UserAssignedIdentityCredentials>,
    /// The MSI service's internal id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_id: Option<String>,
    /// The resource's ARM id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
}

/// The body of "get user-assigned identities' credentials" (camelCase on the wire).
///
/// ```
/// use msi_dataplane::dataplane::UserAssignedIdentitiesRequest;
///
/// let request = UserAssignedIdentitiesRequest::new(["/subscriptions/s/resourcegroups/g/providers/Microsoft.ManagedIdentity/userAssignedIdentities/a"]);
/// let json = serde_json::to_string(&request).unwrap();
/// assert!(json.starts_with(r#"{"identityIds":["/subscriptions/s/"#));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UserAssignedIdentitiesRequest {
    /// Claims to carry in the identities' tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_claims: Option<CustomClaims>,
    /// Delegated resources' ARM ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_resources: Option<Vec<String>>,
    /// The user-assigned identities' ARM resource ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ids: Option<Vec<String>>,
}

impl UserAssignedIdentitiesRequest {
    /// A request for these identities (ARM resource ids).
    pub fn new<I, S>(identity_ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        UserAssignedIdentitiesRequest {
            identity_ids: Some(identity_ids.into_iter().map(Into::into).collect()),
            ..Default::default()
        }
    }

    /// Add delegated resources.
    pub fn with_delegated_resources<I, S>(mut self, resources: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.delegated_resources = Some(resources.into_iter().map(Into::into).collect());
        self
    }
}

/// The body of "move identity" (camelCase on the wire).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MoveIdentityRequest {
    /// The ARM id of the resource the identity moves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resource_id: Option<String>,
}

impl MoveIdentityRequest {
    /// Move to this resource.
    pub fn new(target_resource_id: impl Into<String>) -> Self {
        MoveIdentityRequest {
            target_resource_id: Some(target_resource_id.into()),
        }
    }
}

/// The answer to "move identity" (camelCase on the wire).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MoveIdentityResponse {
    /// The identity's new identity URL (signed: it prints without its query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_url: Option<SignedUrl>,
}

impl MoveIdentityResponse {
    /// An answer naming the identity's new identity URL.
    pub fn new(identity_url: impl Into<String>) -> Self {
        MoveIdentityResponse {
            identity_url: Some(SignedUrl::new(identity_url)),
        }
    }
}

/// A URL whose query carries a signature, such as an identity URL: it grants access to
/// the identity's credentials. `Debug` and `Display` show it without its query and
/// fragment; [`expose_secret`](Self::expose_secret) gives the whole URL (for
/// [`ClientFactory::client`](crate::dataplane::ClientFactory::client)). Serialized as
/// the plain string.
///
/// ```
/// use msi_dataplane::dataplane::SignedUrl;
///
/// let url = SignedUrl::new("https://eastus.identity.azure.net/x/credentials/v2/identities?sig=SECRET");
/// assert_eq!(url.to_string(), "https://eastus.identity.azure.net/x/credentials/v2/identities");
/// assert!(!format!("{url:?}").contains("SECRET"));
/// assert!(url.expose_secret().ends_with("sig=SECRET"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SignedUrl(String);

impl SignedUrl {
    /// Wrap a signed URL.
    pub fn new(url: impl Into<String>) -> Self {
        SignedUrl(url.into())
    }

    /// The whole URL, signature included: do not log it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SignedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.split(['?', '#']).next().unwrap_or_default())
    }
}

impl fmt::Debug for SignedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SignedUrl({self} ?** redacted **)")
    }
}

impl DelegatedResource {
    /// The delegated resource `resource_id` (an ARM id), with nothing else set.
    pub fn new(resource_id: impl Into<String>) -> Self {
        DelegatedResource {
            resource_id: Some(resource_id.into()),
            ..Default::default()
        }
    }

    /// Its system-assigned identity.
    pub fn with_implicit_identity(mut self, identity: UserAssignedIdentityCredentials) -> Self {
        self.implicit_identity = Some(identity);
        self
    }
}

impl ManagedIdentityCredentials {
    /// The answer for a system-assigned identity: `identity`'s fields at the top level
    /// (its `resource_id` is not part of it).
    pub fn system_assigned(identity: UserAssignedIdentityCredentials) -> Self {
        ManagedIdentityCredentials {
            identity: UserAssignedIdentityCredentials {
                resource_id: None,
                ..identity
            },
            ..Default::default()
        }
    }

    /// The answer for user-assigned identities: these in
    /// [`explicit_identities`](Self::explicit_identities), nothing at the top level.
    pub fn user_assigned(
        identities: impl IntoIterator<Item = UserAssignedIdentityCredentials>,
    ) -> Self {
        ManagedIdentityCredentials {
            explicit_identities: Some(identities.into_iter().collect()),
            ..Default::default()
        }
    }

    /// The user-assigned identities (`explicit_identities`), as credentials that
    /// [`ClientCertificateCredential::new`](crate::ClientCertificateCredential::new) and
    /// the reloading credential accept (empty when there are none).
    pub fn user_assigned_identities(&self) -> &[UserAssignedIdentityCredentials] {
        self.explicit_identities.as_deref().unwrap_or_default()
    }

    /// The user-assigned identity with this ARM resource id (compared
    /// case-insensitively, as ARM ids are).
    pub fn user_assigned_identity(
        &self,
        resource_id: &str,
    ) -> Option<&UserAssignedIdentityCredentials> {
        self.user_assigned_identities().iter().find(|i| {
            i.resource_id
                .as_deref()
                .is_some_and(|r| r.eq_ignore_ascii_case(resource_id))
        })
    }

    /// Compact JSON, absent fields omitted. It holds `client_secret`: treat it as a
    /// secret.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(crate::parser_errors::json_error)
    }
}
