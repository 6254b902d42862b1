//! Azure glue: the cloud config file (`azure.json`), the credentials as azure_core
//! `TokenCredential`s, and azure_core's `HttpClient` over the crate's own client for the
//! Azure SDK clients the crate builds (the Key Vault store). Uses `token/` and `reload/`.

pub(crate) mod cloud_config;
#[cfg(feature = "keyvault")]
pub(crate) mod sdk_transport;
#[cfg(feature = "azure_core")]
pub(crate) mod token_credential;
