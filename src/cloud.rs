//! Azure clouds: the sovereign clouds by name, custom clouds, and `.default` scopes.
//!
//! A [`Cloud`] supplies the *defaults* a component needs besides its identity: the Entra
//! authority host, the Azure Resource Manager (ARM) endpoint and the ARM token audience.
//! The authority that tokens are requested from is always the credential file's
//! `authentication_endpoint`, as in the Go reference; a cloud never overrides it.
//!
//! Names are matched case-insensitively, with the aliases cloud-provider-azure and the
//! Azure CLI use. An unknown name is an error: unlike cloud-provider-azure, which silently
//! falls back to the public cloud, this crate refuses to guess, because a wrong guess
//! sends a sovereign-cloud identity's requests to the wrong cloud.
//!
//! ```
//! use msi_dataplane::Cloud;
//!
//! let cloud: Cloud = "azureusgovernment".parse()?;
//! assert_eq!(cloud, Cloud::AZURE_US_GOVERNMENT);
//! assert_eq!(cloud.resource_manager_endpoint(), "https://management.usgovcloudapi.net");
//! assert_eq!(
//!     cloud.resource_manager_scope(),
//!     "https://management.core.usgovcloudapi.net/.default"
//! );
//! assert!("AzureGermanCloud".parse::<Cloud>().is_err());
//! # Ok::<(), msi_dataplane::Error>(())
//! ```

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::http::base_url::base_url;

/// An Azure cloud: its canonical name, Entra authority host, ARM endpoint and ARM audience.
///
/// The three sovereign clouds are constants ([`Cloud::AZURE_PUBLIC`],
/// [`Cloud::AZURE_US_GOVERNMENT`], [`Cloud::AZURE_CHINA`]); [`Cloud::from_name`] (or
/// `str::parse`) finds them by name or alias; [`Cloud::custom`] describes any other
/// cloud (Azure Stack, an air-gapped cloud, a test endpoint).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cloud {
    name: Cow<'static, str>,
    authority_host: Cow<'static, str>,
    resource_manager_endpoint: Cow<'static, str>,
    resource_manager_audience: Cow<'static, str>,
}

/// Every well-known cloud with the names it answers to (compared case-insensitively).
const KNOWN: [(&Cloud, &[&str]); 3] = [
    (&Cloud::AZURE_PUBLIC, &["AzurePublicCloud", "AzureCloud"]),
    (
        &Cloud::AZURE_US_GOVERNMENT,
        &["AzureUSGovernmentCloud", "AzureUSGovernment"],
    ),
    (&Cloud::AZURE_CHINA, &["AzureChinaCloud"]),
];

impl Cloud {
    /// The Azure public cloud (`AzurePublicCloud`, alias `AzureCloud`).
    pub const AZURE_PUBLIC: Cloud = Cloud {
        name: Cow::Borrowed("AzurePublicCloud"),
        authority_host: Cow::Borrowed("https://login.microsoftonline.com/"),
        resource_manager_endpoint: Cow::Borrowed("https://management.azure.com"),
        resource_manager_audience: Cow::Borrowed("https://management.core.windows.net/"),
    };

    /// Azure US Government (`AzureUSGovernmentCloud`, alias `AzureUSGovernment`).
    pub const AZURE_US_GOVERNMENT: Cloud = Cloud {
        name: Cow::Borrowed("AzureUSGovernmentCloud"),
        authority_host: Cow::Borrowed("https://login.microsoftonline.us/"),
        resource_manager_endpoint: Cow::Borrowed("https://management.usgovcloudapi.net"),
        resource_manager_audience: Cow::Borrowed("https://management.core.usgovcloudapi.net/"),
    };

    /// Azure operated by 21Vianet in China (`AzureChinaCloud`).
    pub const AZURE_CHINA: Cloud = Cloud {
        name: Cow::Borrowed("AzureChinaCloud"),
        authority_host: Cow::Borrowed("https://login.chinacloudapi.cn/"),
        resource_manager_endpoint: Cow::Borrowed("https://management.chinacloudapi.cn"),
        resource_manager_audience: Cow::Borrowed("https://management.core.chinacloudapi.cn/"),
    };

    /// The well-known clouds, public first.
    pub fn well_known() -> [Cloud; 3] {
        KNOWN.map(|(cloud, _)| cloud.clone())
    }

    /// Find a well-known cloud by name or alias, case-insensitively, ignoring surrounding
    /// whitespace: `AzurePublicCloud`/`AzureCloud`, `AzureUSGovernmentCloud`/
    /// `AzureUSGovernment`, `AzureChinaCloud`.
    ///
    /// # Errors
    ///
    /// `unknown_cloud` for any other name, including the empty string; the
    /// error lists the names that are known.
    pub fn from_name(name: &str) -> Result<Cloud> {
        let wanted = name.trim();
        KNOWN
            .iter()
            .find(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(wanted)))
            .map(|(cloud, _)| (*cloud).clone())
            .ok_or_else(|| {
                let message = format!(
                    "unknown cloud `{name}`; known clouds: AzurePublicCloud (AzureCloud), \
                     AzureUSGovernmentCloud (AzureUSGovernment), AzureChinaCloud"
                );
                Error::config("unknown_cloud", "cloud", message)
            })
    }

    /// Describe a cloud that is not one of the well-known ones.
    ///
    /// `authority_host` gets a trailing `/` if it has none (it is a prefix for
    /// `{tenant}/oauth2/v2.0/token`); the ARM endpoint loses any trailing `/`.
    ///
    /// ```
    /// use msi_dataplane::Cloud;
    ///
    /// let stack = Cloud::custom(
    ///     "AzureStackHub",
    ///     "https://login.stack.example.com",
    ///     "https://management.stack.example.com/",
    ///     "https://management.stack.example.com/",
    /// )?;
    /// assert_eq!(stack.authority_host(), "https://login.stack.example.com/");
    /// assert_eq!(stack.resource_manager_endpoint(), "https://management.stack.example.com");
    /// # Ok::<(), msi_dataplane::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `invalid_cloud` naming the field when the name is empty or a URL is
    /// not an absolute `https` URL without query or fragment.
    pub fn custom(
        name: impl Into<String>,
        authority_host: impl Into<String>,
        resource_manager_endpoint: impl Into<String>,
        resource_manager_audience: impl Into<String>,
    ) -> Result<Cloud> {
        let name = name.into();
        if name.trim().is_empty() {
            return Err(invalid_cloud("name", "is empty"));
        }
        let mut authority_host = https_url("authority_host", authority_host)?;
        if !authority_host.ends_with('/') {
            authority_host.push('/');
        }
        let endpoint = https_url("resource_manager_endpoint", resource_manager_endpoint)?;
        let audience = https_url("resource_manager_audience", resource_manager_audience)?;
        Ok(Cloud {
            name: name.into(),
            authority_host: authority_host.into(),
            resource_manager_endpoint: endpoint.trim_end_matches('/').to_owned().into(),
            resource_manager_audience: audience.into(),
        })
    }

    /// The well-known cloud whose authority host `authentication_endpoint` (a credential
    /// file's value, such as `https://login.microsoftonline.com/`) is on, if any. Compares
    /// scheme and host only, case-insensitively.
    ///
    /// ```
    /// use msi_dataplane::Cloud;
    ///
    /// let cloud = Cloud::for_authority("https://login.chinacloudapi.cn/");
    /// assert_eq!(cloud, Some(Cloud::AZURE_CHINA));
    /// assert_eq!(Cloud::for_authority("https://login.example.com/"), None);
    /// ```
    pub fn for_authority(authentication_endpoint: &str) -> Option<Cloud> {
        // The URL parser lower-cases the host.
        let url = url::Url::parse(authentication_endpoint).ok()?;
        let origin = (url.scheme(), url.host_str());
        KNOWN
            .iter()
            .find(|(cloud, _)| {
                let known = url::Url::parse(&cloud.authority_host);
                known.is_ok_and(|known| (known.scheme(), known.host_str()) == origin)
            })
            .map(|(cloud, _)| (*cloud).clone())
    }

    /// The canonical name, e.g. `AzurePublicCloud`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Entra ID authority host, with a trailing `/`, e.g.
    /// `https://login.microsoftonline.com/`.
    pub fn authority_host(&self) -> &str {
        &self.authority_host
    }

    /// The Azure Resource Manager endpoint, without a trailing `/`, e.g.
    /// `https://management.azure.com`.
    pub fn resource_manager_endpoint(&self) -> &str {
        &self.resource_manager_endpoint
    }

    /// The audience of ARM tokens, e.g. `https://management.core.windows.net/`.
    pub fn resource_manager_audience(&self) -> &str {
        &self.resource_manager_audience
    }

    /// The scope to request ARM tokens with: [`default_scope`] of the ARM audience, e.g.
    /// `https://management.core.windows.net/.default`.
    pub fn resource_manager_scope(&self) -> String {
        default_scope(&self.resource_manager_audience)
    }

    /// Whether this is one of the well-known clouds (a [`custom`](Self::custom) cloud with
    /// the same name and URLs is one too).
    pub fn is_well_known(&self) -> bool {
        KNOWN.iter().any(|(cloud, _)| *cloud == self)
    }
}

impl Default for Cloud {
    /// [`Cloud::AZURE_PUBLIC`].
    fn default() -> Self {
        Cloud::AZURE_PUBLIC
    }
}

impl FromStr for Cloud {
    type Err = crate::error::Error;

    /// [`Cloud::from_name`].
    fn from_str(s: &str) -> Result<Cloud> {
        Cloud::from_name(s)
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The `.default` scope of a resource: the resource (an App ID URI or a URL) without
/// trailing `/`, followed by `/.default`. A value that already ends in `/.default` is
/// returned unchanged.
///
/// ```
/// use msi_dataplane::default_scope;
///
/// assert_eq!(default_scope("https://vault.azure.net"), "https://vault.azure.net/.default");
/// assert_eq!(
///     default_scope("https://management.core.windows.net/"),
///     "https://management.core.windows.net/.default"
/// );
/// assert_eq!(default_scope("api://my-app/.default"), "api://my-app/.default");
/// ```
pub fn default_scope(resource: &str) -> String {
    let resource = resource.trim();
    if resource.ends_with("/.default") {
        return resource.to_owned();
    }
    format!("{}/.default", resource.trim_end_matches('/'))
}

fn https_url(field: &'static str, value: impl Into<String>) -> Result<String> {
    let value = value.into();
    let value = value.trim();
    base_url(value, false, false).map_err(|reason| invalid_cloud(field, &reason))?;
    Ok(value.to_owned())
}

fn invalid_cloud(field: &'static str, reason: &str) -> Error {
    Error::config(
        "invalid_cloud",
        field,
        format!("invalid custom cloud: `{field}` {reason}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_finds_its_cloud_in_any_case() {
        for (cloud, names) in KNOWN {
            for name in names {
                for spelling in [
                    name.to_string(),
                    name.to_lowercase(),
                    name.to_uppercase(),
                    format!("  {name}\n"),
                ] {
                    assert_eq!(&Cloud::from_name(&spelling).unwrap(), cloud, "{spelling}");
                }
            }
        }
    }

    #[test]
    fn default_scope_is_idempotent() {
        for r in [
            "https://a.example",
            "https://a.example/",
            "https://a.example//",
            " https://a.example/ ",
        ] {
            let once = default_scope(r);
            assert_eq!(once, "https://a.example/.default");
            assert_eq!(default_scope(&once), once);
        }
    }
}
