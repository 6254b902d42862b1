//! A credential store on Key Vault, over the official Azure SDK client
//! (`azure_security_keyvault_secrets` 1.x; feature `keyvault`).
//!
//! [`CredentialStore`] puts the data plane's credentials as Key Vault secrets in the
//! storage format of [`crate::keyvault`] (`msi-<id>`, `uamsi-<id>`, with its attributes
//! and tags, decided there), reads them back as typed objects, deletes (soft), purges and
//! recovers them, and lists what is stored without reading values; [`crate::keyvault::renewal`]
//! decides from that listing what needs renewing, and [`CredentialStore::renew`] renews
//! one identity from the data plane: every method of the store is in this file.
//!
//! The SDK runs on this crate's own HTTP client (rustls, no redirects, optional extra
//! roots): no second HTTP/TLS stack. It authenticates with Key Vault's challenge: the
//! first request goes without a token; the 401 names the resource, the credential is
//! asked for `https://vault.azure.net/.default`, and the request is sent again.
//!
//! ```no_run
//! use std::sync::Arc;
//! use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
//! use msi_dataplane::{ClientCertificateCredential, UserAssignedIdentityCredentials};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let app = UserAssignedIdentityCredentials::from_path("/etc/service/app.json")?;
//! let credential = Arc::new(ClientCertificateCredential::new(&app, Default::default())?);
//! let store = CredentialStore::new(
//!     "https://my-vault.vault.azure.net/",
//!     credential,
//!     StoreOptions::default(),
//! )?;
//! let listed = store.list().await?;
//! let plan = msi_dataplane::keyvault::renewal::needing_renewal(&listed, time::OffsetDateTime::now_utc());
//! for due in plan.due {
//!     println!("{} needs renewing", due.name);
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::http::pager::{Page, Pager, PagerContinuation};
use azure_core::http::response::ResponseBody;
use azure_core::http::{
    ClientOptions, ExponentialRetryOptions, RequestContent, Response, RetryOptions, Transport,
};
use azure_security_keyvault_secrets::models::{
    DeletedSecretProperties, ListDeletedSecretPropertiesResult, Secret,
    SecretAttributes as SdkAttributes, SecretClientGetSecretOptions,
    SecretClientListDeletedSecretPropertiesOptions, SecretClientListSecretPropertiesOptions,
};
use azure_security_keyvault_secrets::{SecretClient, SecretClientOptions};
use futures::TryStreamExt as _;
use time::OffsetDateTime;

use crate::azure::sdk_transport::ReqwestTransport;
use crate::dataplane::{Client, ManagedIdentityCredentials, UserAssignedIdentitiesRequest};
use crate::environment::Environment;
use crate::error::{
    Error, ErrorKind, KEY_VAULT, LinkFault, Result, ServiceError, TransportError, TransportFault,
    cause_chain, classify_transport,
};
use crate::file::model::UserAssignedIdentityCredentials;
use crate::http::base_url::base_url;
use crate::http::retry::RetryPolicy;
use crate::http::service_link::LinkGuard;
use crate::keyvault::format::{
    self as keyvault, KeyVaultSecret, format_managed_identity_credentials_for_storage,
    format_user_assigned_identity_credentials_for_storage, validate_secret_name,
    validate_secret_version,
};
use crate::keyvault::renewal::{
    NO_PREFIX, RenewalOutcome, RenewalPass, StoredKind, StoredProperties, needing_renewal,
    should_store,
};
use crate::secret::SecretString;
use crate::telemetry::{self, Service};
use crate::untrusted_text::{service_text, service_text_opt};

/// The largest page Key Vault serves (`maxresults` 1..=25).
pub const MAX_PAGE_SIZE: i32 = 25;

/// The default of [`StoreOptions::with_max_list_pages`].
pub const DEFAULT_MAX_LIST_PAGES: usize = 10_000;

/// The default of [`StoreOptions::with_max_list_items`].
pub const DEFAULT_MAX_LIST_ITEMS: usize = 100_000;

/// The default of [`StoreOptions::with_max_list_bytes`]: 64 MiB.
pub const DEFAULT_MAX_LIST_BYTES: usize = 64 * 1024 * 1024;

/// Options for [`CredentialStore::new`]: the vault's own settings, and the
/// [`Environment`] (HTTP, retries) set with [`with_environment`](Self::with_environment).
/// Each setting has a setter, which clamps it where it has bounds.
///
/// ```
/// use msi_dataplane::keyvault::store::StoreOptions;
/// let options = StoreOptions::default().with_page_size(100);
/// assert!(format!("{options:?}").contains("page_size: 25"));
/// ```
#[derive(Clone, Debug)]
pub struct StoreOptions {
    // Each setting is documented on its setter.
    environment: Environment,
    verify_challenge_resource: bool,
    /// 1..=25.
    page_size: i32,
    api_version: Option<String>,
    /// At least 1, as are the two below.
    max_list_pages: usize,
    max_list_items: usize,
    max_list_bytes: usize,
    list_deadline: Duration,
}

/// The default of [`StoreOptions::with_list_deadline`].
pub const DEFAULT_LIST_DEADLINE: Duration = Duration::from_secs(5 * 60);

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            environment: Environment::default(),
            verify_challenge_resource: true,
            page_size: MAX_PAGE_SIZE,
            api_version: None,
            max_list_pages: DEFAULT_MAX_LIST_PAGES,
            max_list_items: DEFAULT_MAX_LIST_ITEMS,
            max_list_bytes: DEFAULT_MAX_LIST_BYTES,
            list_deadline: DEFAULT_LIST_DEADLINE,
        }
    }
}

impl StoreOptions {
    /// Run in this environment (HTTP, retries), replacing any set before: e.g. one
    /// [`Environment`] shared with the credential and the data plane client
    /// ([`RetryPolicy::none`] in it for one request per operation).
    ///
    /// From the environment the store uses the HTTP client (or extra roots for the
    /// crate-built one; setting both is refused with
    /// `conflicting_options`), the request timeout (default 30 s), the
    /// application id of the `User-Agent`, and the retry policy, applied through the
    /// SDK's exponential back-off (429 and 503 honour `Retry-After`). Its
    /// `allow_http_loopback` and clock do not apply: the SDK authenticates only over
    /// `https` and keeps its own time. Every request to the vault carries the crate's
    /// `User-Agent` ([`Environment::user_agent`], with the application id first) followed
    /// by the Azure SDK's own; the SDK's `application_id` option is not used, so the id
    /// appears once.
    pub fn with_environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }

    /// Check that the challenge's resource matches the vault's host (the SDK's
    /// `verify_challenge_resource`). Default `true`; turn off only for a test vault on a
    /// loopback address.
    pub fn verify_challenge_resource(mut self, verify: bool) -> Self {
        self.verify_challenge_resource = verify;
        self
    }

    /// Set the `maxresults` of a listing's pages, clamped to 1..=25. Default 25.
    pub fn with_page_size(mut self, page_size: i32) -> Self {
        self.page_size = page_size.clamp(1, MAX_PAGE_SIZE);
        self
    }

    /// Read at most this many pages (at least 1) in one listing
    /// ([`CredentialStore::list`], [`CredentialStore::list_deleted`]); past it the
    /// listing fails with `refused_link`. Default
    /// [`DEFAULT_MAX_LIST_PAGES`] (10,000 pages: 250,000 secrets at 25 a page, and Key
    /// Vault may answer pages with fewer, even none).
    pub fn with_max_list_pages(mut self, max_list_pages: usize) -> Self {
        self.max_list_pages = max_list_pages.max(1);
        self
    }

    /// Take at most this many items (at least 1) in one listing; past it the listing
    /// fails with `refused_link`
    ///. Default [`DEFAULT_MAX_LIST_ITEMS`]
    /// (100,000).
    pub fn with_max_list_items(mut self, max_list_items: usize) -> Self {
        self.max_list_items = max_list_items.max(1);
        self
    }

    /// Keep at most this many bytes of items (at least 1) in one listing (names,
    /// versions and tags, counted as they arrive); past it the listing fails with
    /// `refused_link`.
    /// Default [`DEFAULT_MAX_LIST_BYTES`] (64 MiB).
    pub fn with_max_list_bytes(mut self, max_list_bytes: usize) -> Self {
        self.max_list_bytes = max_list_bytes.max(1);
        self
    }

    /// End a listing that takes longer than this, all pages and retries included: it
    /// fails with `refused_link`.
    /// Default [`DEFAULT_LIST_DEADLINE`], 5 minutes.
    pub fn with_list_deadline(mut self, deadline: Duration) -> Self {
        self.list_deadline = deadline;
        self
    }

    /// Use this Key Vault API version. Default: the SDK's.
    pub fn with_api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = Some(version.into());
        self
    }
}

/// A stored credential read back: the typed object and its secret's properties.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Stored<T> {
    /// The credentials (their `Debug` never shows the secret).
    pub credentials: T,
    /// The secret's properties (version, attributes, tags).
    pub properties: StoredProperties,
}

/// A soft-deleted secret.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeletedCredential {
    /// Its properties as they were.
    pub properties: StoredProperties,
    /// The URL to recover it from.
    pub recovery_id: Option<String>,
    /// When it was deleted.
    pub deleted_date: Option<OffsetDateTime>,
    /// When Key Vault purges it by itself.
    pub scheduled_purge_date: Option<OffsetDateTime>,
}

/// Credentials stored in one Key Vault. Cheap to clone.
#[derive(Clone)]
pub struct CredentialStore {
    client: Arc<SecretClient>,
    /// The vault's URL, parsed: the origin every `nextLink` must share.
    vault: url::Url,
    /// The listing's settings (the environment in it is spent on the client).
    options: StoreOptions,
}

impl fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialStore")
            .field("vault_url", &self.vault.as_str())
            .field("page_size", &self.options.page_size)
            .finish_non_exhaustive()
    }
}

impl CredentialStore {
    /// A store for the vault at `vault_url` (e.g. `https://my-vault.vault.azure.net/`),
    /// authenticating with `credential`: this crate's credentials or any azure_core
    /// `TokenCredential`.
    ///
    /// # Errors
    ///
    /// `invalid_argument` naming `vault_url` when it is not an `https` URL
    /// with a host and without user information, query or fragment (the rule of every
    /// service URL the crate is given);
    /// `http_client` when the HTTP client cannot be built;
    /// `conflicting_options` when both an HTTP client and extra roots are set.
    pub fn new(
        vault_url: &str,
        credential: Arc<dyn TokenCredential>,
        options: StoreOptions,
    ) -> Result<Self> {
        let parsed = base_url(vault_url, false, false).map_err(|reason| {
            let shown = crate::untrusted_text::quoted_input(vault_url);
            Error::invalid_argument("vault_url", format!("`{shown}`: {reason}"))
        })?;
        // One vault host: a loopback vault (tests) is never reached through a proxy.
        let direct = crate::http::loopback::is_loopback(&parsed);
        let http = options.environment.client(direct)?;
        // The transport sets the `User-Agent`: the crate's (with the caller's application
        // id) and then the SDK's. The SDK's own `application_id` stays unset, so the id
        // appears once, first.
        let transport = ReqwestTransport::new(
            http,
            options.environment.request_timeout(),
            options.environment.user_agent_header(),
        );
        let mut sdk_options = SecretClientOptions {
            client_options: ClientOptions {
                transport: Some(Transport::new(Arc::new(transport))),
                retry: sdk_retry(options.environment.retry_policy()),
                ..Default::default()
            },
            verify_challenge_resource: Some(options.verify_challenge_resource),
            ..Default::default()
        };
        if let Some(version) = &options.api_version {
            sdk_options.api_version = version.clone();
        }
        let client = SecretClient::new(parsed.as_str(), credential, Some(sdk_options))
            .map_err(|e| Error::invalid_argument("vault_url", e.to_string()))?;
        Ok(CredentialStore {
            client: Arc::new(client),
            vault: parsed,
            options,
        })
    }

    /// The vault URL.
    pub fn vault_url(&self) -> &str {
        self.vault.as_str()
    }

    /// The Azure SDK's `SecretClient` the store sends through: the same vault, credential,
    /// transport (this crate's HTTP client, roots, timeout and `User-Agent`) and retry
    /// options. For Key
    /// Vault operations the store does not wrap; values it returns are the SDK's types,
    /// without this crate's secret hygiene.
    pub fn secret_client(&self) -> &SecretClient {
        &self.client
    }

    /// Put the data plane's `ManagedIdentityCredentials` under `msi-<identifier>` (Go:
    /// `FormatManagedIdentityCredentialsForStorage`, then set). Returns the new version's
    /// properties.
    ///
    /// # Errors
    ///
    /// As [`crate::keyvault::format_managed_identity_credentials_for_storage`] (nothing is sent),
    /// a [`ServiceError`] saying to purge or recover on Key Vault's 409, and
    /// [`ErrorKind::Service`] / [`ErrorKind::Transport`].
    pub async fn put_managed_identity(
        &self,
        identifier: &str,
        credentials: &ManagedIdentityCredentials,
    ) -> Result<StoredProperties> {
        let secret = format_managed_identity_credentials_for_storage(identifier, credentials)?;
        self.put(&secret).await
    }

    /// Put a `UserAssignedIdentityCredentials` under `uamsi-<identifier>`; see
    /// [`put_managed_identity`](Self::put_managed_identity).
    ///
    /// # Errors
    ///
    /// As [`put_managed_identity`](Self::put_managed_identity).
    pub async fn put_user_assigned_identity(
        &self,
        identifier: &str,
        credentials: &UserAssignedIdentityCredentials,
    ) -> Result<StoredProperties> {
        let secret =
            format_user_assigned_identity_credentials_for_storage(identifier, credentials)?;
        self.put(&secret).await
    }

    /// Set a formatted secret (a new version when the name exists).
    ///
    /// # Errors
    ///
    /// As [`put_managed_identity`](Self::put_managed_identity).
    pub async fn put(&self, secret: &KeyVaultSecret) -> Result<StoredProperties> {
        let name = secret.name();
        let send = || {
            // The body rendered once from the formatted secret: the SDK's
            // `SetSecretParameters` would take copies of the value and tags first.
            let json = secret.render_set_secret_body(Some("application/json"))?;
            let body = RequestContent::from(json.into_bytes());
            Ok(self.client.set_secret(name, body, None))
        };
        self.call(("put", "set"), name, send, |answer| {
            let stored = described(name, true, model(name, &answer)?).properties;
            tracing::info!(secret = name, "stored a credential in Key Vault");
            Ok(stored)
        })
        .await
    }

    /// The `ManagedIdentityCredentials` stored as `msi-<identifier>`: the latest version,
    /// or `version`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Service`] (404 `SecretNotFound`, ...), [`ErrorKind::Transport`],
    /// `invalid_stored_secret` when the value is not the credential JSON.
    pub async fn get_managed_identity(
        &self,
        identifier: &str,
        version: Option<&str>,
    ) -> Result<Stored<ManagedIdentityCredentials>> {
        let name = keyvault::identifier_for_managed_identity_credentials(identifier);
        self.get_typed(&name, version, parse_managed).await
    }

    /// The `UserAssignedIdentityCredentials` stored as `uamsi-<identifier>`.
    ///
    /// # Errors
    ///
    /// As [`get_managed_identity`](Self::get_managed_identity).
    pub async fn get_user_assigned_identity(
        &self,
        identifier: &str,
        version: Option<&str>,
    ) -> Result<Stored<UserAssignedIdentityCredentials>> {
        let name = keyvault::identifier_for_user_assigned_identity_credentials(identifier);
        self.get_typed(&name, version, parse_user_assigned).await
    }

    /// A stored credential by secret name, of either kind.
    ///
    /// # Errors
    ///
    /// As [`get_managed_identity`](Self::get_managed_identity), and
    /// `invalid_stored_secret` for a name of neither prefix.
    pub async fn get(&self, name: &str, version: Option<&str>) -> Result<Stored<AnyCredentials>> {
        self.get_typed(name, version, AnyCredentials::parse).await
    }

    async fn get_typed<T>(
        &self,
        name: &str,
        version: Option<&str>,
        parse: fn(&str, &str) -> Result<T>,
    ) -> Result<Stored<T>> {
        let (value, properties) = self.get_value(name, version).await?;
        Ok(Stored {
            credentials: parse(name, value.expose_secret())?,
            properties,
        })
    }

    /// A secret's value as stored (the credential JSON, as a [`SecretString`]) and its
    /// properties: what the Secrets Store CSI driver reads and writes to the mounted file.
    ///
    /// # Errors
    ///
    /// As [`get_managed_identity`](Self::get_managed_identity).
    ///
    /// [`SecretString`]: crate::SecretString
    pub async fn get_value(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<(SecretString, StoredProperties)> {
        let send = || {
            version.map(validate_secret_version).transpose()?;
            let secret_version = version.map(str::to_owned);
            let options = SecretClientGetSecretOptions {
                secret_version,
                ..Default::default()
            };
            Ok(self.client.get_secret(name, Some(options)))
        };
        self.call(("get", "get"), name, send, |answer| {
            // The SDK's model holds the value as a plain `String` (see SECURITY.md).
            let secret: Secret = model(name, &answer)?;
            let value = secret
                .value
                .ok_or_else(|| invalid(name, "Key Vault returned no value"))?;
            let properties =
                properties_of(name, secret.id.as_deref(), secret.attributes, secret.tags);
            Ok((SecretString::from(value), properties))
        })
        .await
    }

    /// Delete a secret (soft: it can be recovered or purged until its scheduled purge
    /// date; its name stays held until then).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Service`] (404 when there is no such secret),
    /// [`ErrorKind::Transport`].
    pub async fn delete(&self, name: &str) -> Result<DeletedCredential> {
        let send = || Ok(self.client.delete_secret(name, None));
        self.call(("delete", "delete"), name, send, |answer| {
            let deleted = described(name, true, model(name, &answer)?);
            tracing::info!(secret = name, "deleted a stored credential (soft)");
            Ok(deleted)
        })
        .await
    }

    /// A soft-deleted secret.
    ///
    /// # Errors
    ///
    /// As [`delete`](Self::delete).
    pub async fn get_deleted(&self, name: &str) -> Result<DeletedCredential> {
        let send = || Ok(self.client.get_deleted_secret(name, None));
        self.call(("get_deleted", "get deleted"), name, send, |answer| {
            Ok(described(name, true, model(name, &answer)?))
        })
        .await
    }

    /// Purge a soft-deleted secret for good, freeing its name.
    ///
    /// # Errors
    ///
    /// As [`delete`](Self::delete).
    pub async fn purge_deleted(&self, name: &str) -> Result<()> {
        let send = || Ok(self.client.purge_deleted_secret(name, None));
        self.call(("purge_deleted", "purge"), name, send, |_| {
            tracing::info!(secret = name, "purged a deleted credential");
            Ok(())
        })
        .await
    }

    /// Recover a soft-deleted secret (its latest version becomes current again).
    ///
    /// # Errors
    ///
    /// As [`delete`](Self::delete).
    pub async fn recover_deleted(&self, name: &str) -> Result<StoredProperties> {
        let send = || Ok(self.client.recover_deleted_secret(name, None));
        self.call(("recover_deleted", "recover"), name, send, |answer| {
            let recovered = described(name, true, model(name, &answer)?).properties;
            tracing::info!(secret = name, "recovered a deleted credential");
            Ok(recovered)
        })
        .await
    }

    /// One request about the secret `name`, in its `keyvault_request` span (`metric`):
    /// the name checked, then `send`'s own checks, before anything is sent; Key Vault's
    /// error as the crate's (`operation`, as its messages name it); and the answer's body
    /// handed to `done`.
    async fn call<M, F, T, Sent>(
        &self,
        (metric, operation): (&'static str, &'static str),
        name: &str,
        send: impl FnOnce() -> Result<Sent>,
        done: impl FnOnce(ResponseBody) -> Result<T>,
    ) -> Result<T>
    where
        Sent: Future<Output = azure_core::Result<Response<M, F>>>,
    {
        let call = async {
            validate_secret_name(name)?;
            let answer = send()?.await;
            let answer = answer.map_err(|e| map_error(self.vault.as_str(), operation, name, e))?;
            done(answer.into_body())
        };
        telemetry::service_call(Service::KeyVault, metric, call).await
    }

    /// The properties of every stored credential (`msi-` and `uamsi-` secrets), across
    /// all pages (Key Vault's `nextLink`), without reading any value: [`list_with`]
    /// collected.
    ///
    /// [`list_with`]: Self::list_with
    ///
    /// # Errors
    ///
    /// As [`list_with`](Self::list_with).
    pub async fn list(&self) -> Result<Vec<StoredProperties>> {
        let mut listed = Vec::new();
        self.list_with(|item| listed.push(item)).await?;
        Ok(listed)
    }

    /// Hand `each` the properties of every stored credential (`msi-` and `uamsi-`
    /// secrets) as its page arrives, across all pages (Key Vault's `nextLink`), without
    /// reading any value; the number handed. For output that can be written as it comes
    /// (`msi-credential vault list` prints each row so). The listing is bounded: at most
    /// [`StoreOptions::with_max_list_pages`] pages, [`StoreOptions::with_max_list_items`] items and
    /// [`StoreOptions::with_max_list_bytes`] bytes of them, within
    /// [`StoreOptions::with_list_deadline`]; items handed before a limit was reached stay
    /// handed.
    ///
    /// ```no_run
    /// # async fn demo(store: &msi_dataplane::keyvault::store::CredentialStore) -> msi_dataplane::Result<()> {
    /// let count = store.list_with(|p| println!("{}", p.name)).await?;
    /// println!("{count} stored credentials");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Service`], `refused_link` (a link to another
    /// origin, a paging loop, or a limit reached), [`ErrorKind::Transport`].
    pub async fn list_with<F>(&self, mut each: F) -> Result<usize>
    where
        F: FnMut(StoredProperties) + Send,
    {
        let options = SecretClientListSecretPropertiesOptions {
            maxresults: Some(self.options.page_size),
            ..Default::default()
        };
        let pager = self.client.list_secret_properties(Some(options));
        self.walk(("list", "list"), pager, |item| each(item.properties))
            .await
    }

    /// The soft-deleted credentials (`msi-` and `uamsi-` secrets awaiting purge or
    /// recovery), across all pages (Key Vault's `GET /deletedsecrets` and its `nextLink`),
    /// without any value: Go's `GetDeletedCredentialsObjectPager`, read to the end. Bounded
    /// as [`list_with`](Self::list_with).
    ///
    /// # Errors
    ///
    /// As [`list_with`](Self::list_with).
    pub async fn list_deleted(&self) -> Result<Vec<DeletedCredential>> {
        let options = SecretClientListDeletedSecretPropertiesOptions {
            maxresults: Some(self.options.page_size),
            ..Default::default()
        };
        let pager = self.client.list_deleted_secret_properties(Some(options));
        let mut listed = Vec::new();
        let walk = self.walk(("list_deleted", "list deleted"), pager, |item| {
            listed.push(item)
        });
        walk.await?;
        Ok(listed)
    }

    /// One listing, in its `keyvault_request` span (`metric`; `operation` as its messages
    /// name it): every stored credential of its pages handed to `each` as its page arrives
    /// (both listings' pages read as the deleted one's, whose items add three fields),
    /// within the store's bounds (pages, links, items, bytes, deadline); the number handed.
    async fn walk<P: Page + serde::de::DeserializeOwned + Send>(
        &self,
        (metric, operation): (&'static str, &'static str),
        pager: azure_core::Result<Pager<P>>,
        mut each: impl FnMut(DeletedCredential) + Send,
    ) -> Result<usize> {
        let fail = |e| map_error(self.vault.as_str(), operation, "*", e);
        let refused = |fault: LinkFault| {
            Error::answer(
                "refused_link",
                format!("Key Vault {operation} stopped: {fault}"),
            )
        };
        let (max_items, max_bytes) = (self.options.max_list_items, self.options.max_list_bytes);
        let walk = async {
            let mut pages = pager.map_err(fail)?.into_pages();
            let mut guard = LinkGuard::new(&self.vault, self.options.max_list_pages);
            let (mut handed, mut bytes) = (0, 0usize);
            while let Some(page) = pages.try_next().await.map_err(fail)? {
                let page: ListDeletedSecretPropertiesResult = page.body().json().map_err(fail)?;
                for item in page.value {
                    let Some(name) = stored_name(item.id.as_deref()) else {
                        continue;
                    };
                    let deleted = described(&name, false, item);
                    // About the bytes it holds: its strings, a fixed part for it and each tag.
                    let tags = deleted.properties.tags.iter();
                    let tags: usize = tags.map(|(k, v)| k.len() + v.len() + 64).sum();
                    let weight = std::mem::size_of::<StoredProperties>() + name.len() + tags;
                    bytes = bytes.saturating_add(weight);
                    if handed >= max_items {
                        return Err(refused(LinkFault::TooManyItems { limit: max_items }));
                    }
                    if bytes > max_bytes {
                        return Err(refused(LinkFault::TooManyBytes { limit: max_bytes }));
                    }
                    each(deleted);
                    handed += 1;
                }
                // Before the next page is requested: its link must pass the guard.
                match pages.continuation() {
                    None => {}
                    Some(PagerContinuation::Link(link)) => guard.follow(link).map_err(refused)?,
                    // Key Vault pages by link only; anything else is not followed.
                    Some(other) => {
                        let other = crate::untrusted_text::quoted_input(other.as_ref());
                        let reason = format!("a continuation that is not a link: `{other}`");
                        return Err(unusable(operation, reason));
                    }
                }
            }
            Ok(handed)
        };
        let deadline = self.options.list_deadline;
        let deadline_or_walk = async {
            let walked = tokio::time::timeout(deadline, walk).await;
            walked.unwrap_or_else(|_| Err(refused(LinkFault::Deadline { after: deadline })))
        };
        telemetry::service_call(Service::KeyVault, metric, deadline_or_walk).await
    }

    /// Renew the identity stored as `name` (`msi-<id>` or `uamsi-<id>`): ask `dataplane`
    /// (the client for the identity URL of the resource that owns it) for fresh
    /// credentials, and store them when their `not_before` is later than the stored one's
    /// ([`should_store`]). The rule is the reading side's (the reloading credential keeps
    /// the file with the later `not_before`), so a renewal never replaces a newer
    /// credential with an older one, and running it again, or twice at once, stores
    /// nothing new or the same thing.
    ///
    /// A `uamsi-` credential is asked for by its `resource_id`; an `msi-` one by the
    /// resource ids of its explicit identities, or as the system-assigned identity when it
    /// has none.
    ///
    /// # Errors
    ///
    /// The store's errors (reading and writing), the data plane's, and
    /// `invalid_stored_secret` when the stored credential does not say which
    /// identity it is (no `resource_id`) or the data plane does not return it.
    pub async fn renew(&self, dataplane: &Client, name: &str) -> Result<RenewalOutcome> {
        let renewal = self.renew_once(dataplane, name);
        let result = telemetry::service_call(Service::KeyVault, "renew", renewal).await;
        let outcome = match &result {
            Ok(RenewalOutcome::Stored { .. }) => "renewed",
            Ok(RenewalOutcome::NotNewer { .. }) => "not_newer",
            Err(_) => "failed",
        };
        telemetry::renewals(outcome, 1);
        result
    }

    /// A renewal pass: list the stored credentials, and [`renew`](Self::renew) each one
    /// past its `renew_after` at `now` ([`needing_renewal`]), one after the other; a
    /// failure is recorded and the pass goes on. `dataplane` is the client for the
    /// identity URL of the resource that owns the vault's identities.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     store: &msi_dataplane::keyvault::store::CredentialStore,
    /// #     dataplane: &msi_dataplane::dataplane::Client,
    /// # ) -> msi_dataplane::Result<()> {
    /// let pass = store.renew_due(dataplane, time::OffsetDateTime::now_utc()).await?;
    /// for (name, error) in &pass.failed {
    ///     eprintln!("{name}: {error}");
    /// }
    /// println!("{} due, {} renewed", pass.due, pass.renewed.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Only the listing's ([`list`](Self::list)); each renewal's error is in
    /// [`RenewalPass::failed`].
    pub async fn renew_due(&self, dataplane: &Client, now: OffsetDateTime) -> Result<RenewalPass> {
        let listed = self.list().await?;
        let plan = needing_renewal(&listed, now);
        let mut pass = RenewalPass {
            due: plan.due.len(),
            ..RenewalPass::default()
        };
        telemetry::renewals("due", pass.due);
        for properties in plan.due {
            let name = properties.name.clone();
            match self.renew(dataplane, &name).await {
                Ok(RenewalOutcome::Stored { .. }) => pass.renewed.push(name),
                Ok(RenewalOutcome::NotNewer { .. }) => pass.not_newer.push(name),
                Err(error) => pass.failed.push((name, error)),
            }
        }
        Ok(pass)
    }

    async fn renew_once(&self, dataplane: &Client, name: &str) -> Result<RenewalOutcome> {
        let Some((_, identifier)) = StoredKind::of(name) else {
            return Err(invalid(name, NO_PREFIX));
        };
        let (stored, fresh) = match self.get(name, None).await?.credentials {
            AnyCredentials::UserAssignedIdentity(stored) => {
                let no_id = || invalid(name, "the stored credential has no resource_id");
                let resource_id = stored.resource_id.as_deref().ok_or_else(no_id)?;
                let request = UserAssignedIdentitiesRequest::new([resource_id]);
                let fresh = dataplane
                    .get_user_assigned_identities_credentials(&request)
                    .await?;
                let offered = fresh
                    .user_assigned_identity(resource_id)
                    .ok_or_else(|| invalid(name, "the data plane did not return this identity"))?;
                (
                    format_user_assigned_identity_credentials_for_storage(identifier, &stored)?,
                    format_user_assigned_identity_credentials_for_storage(identifier, offered)?,
                )
            }
            AnyCredentials::ManagedIdentity(stored) => {
                let identities = stored.user_assigned_identities();
                let ids: Option<Vec<String>> =
                    identities.iter().map(|i| i.resource_id.clone()).collect();
                let fresh = match ids {
                    _ if identities.is_empty() => {
                        dataplane.get_system_assigned_identity_credentials().await?
                    }
                    Some(ids) => {
                        let request = UserAssignedIdentitiesRequest::new(ids);
                        dataplane
                            .get_user_assigned_identities_credentials(&request)
                            .await?
                    }
                    None => return Err(invalid(name, "an explicit identity has no resource_id")),
                };
                (
                    format_managed_identity_credentials_for_storage(identifier, &stored)?,
                    format_managed_identity_credentials_for_storage(identifier, &fresh)?,
                )
            }
        };
        let stored_not_before = stored.attributes().not_before;
        let offered_not_before = fresh.attributes().not_before;
        if !should_store(stored_not_before, offered_not_before) {
            tracing::debug!(secret = name, "renewal: nothing newer to store");
            return Ok(RenewalOutcome::NotNewer {
                name: name.to_owned(),
                stored_not_before,
                offered_not_before,
            });
        }
        let properties = self.put(&fresh).await?;
        tracing::info!(secret = name, "renewal: stored newer credentials");
        Ok(RenewalOutcome::Stored {
            name: name.to_owned(),
            properties,
            previous_not_before: stored_not_before,
            not_before: offered_not_before,
        })
    }
}

/// The name of a listed secret when it is a stored credential (`msi-` or `uamsi-`) with a
/// valid Key Vault name; anything else a vault lists is skipped, so no name this crate
/// returns holds more than ASCII letters, digits and `-`.
fn stored_name(id: Option<&str>) -> Option<String> {
    let (name, _) = split_id(id?)?;
    if validate_secret_name(&name).is_err() {
        tracing::debug!(
            name = %service_text(&name),
            "skipped a listed secret whose name Key Vault would not accept"
        );
        return None;
    }
    StoredKind::of(&name).is_some().then_some(name)
}

/// Key Vault answered `operation` with something the store does not use.
fn unusable(operation: &str, reason: impl std::fmt::Display) -> Error {
    let message = format!("Key Vault {operation}: the answer is not usable: {reason}");
    Error::answer("invalid_key_vault_response", message)
}

/// A stored credential of either kind.
#[derive(Clone, Debug)]
pub enum AnyCredentials {
    /// From an `msi-` secret.
    ManagedIdentity(ManagedIdentityCredentials),
    /// From a `uamsi-` secret.
    UserAssignedIdentity(UserAssignedIdentityCredentials),
}

impl AnyCredentials {
    fn parse(name: &str, value: &str) -> Result<Self> {
        match StoredKind::of(name) {
            Some((StoredKind::ManagedIdentity, _)) => {
                parse_managed(name, value).map(Self::ManagedIdentity)
            }
            Some((StoredKind::UserAssignedIdentity, _)) => {
                parse_user_assigned(name, value).map(Self::UserAssignedIdentity)
            }
            None => Err(invalid(name, NO_PREFIX)),
        }
    }
}

/// A stored value as `ManagedIdentityCredentials`; serde_json's line and column, never
/// the value.
fn parse_managed(name: &str, value: &str) -> Result<ManagedIdentityCredentials> {
    serde_json::from_str(value).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        let reason = format!("not ManagedIdentityCredentials JSON (line {line}, column {column})");
        invalid(name, &reason)
    })
}

/// A stored value as `UserAssignedIdentityCredentials`.
fn parse_user_assigned(name: &str, value: &str) -> Result<UserAssignedIdentityCredentials> {
    UserAssignedIdentityCredentials::from_slice(value.as_bytes())
        .map_err(|e| invalid(name, &format!("not UserAssignedIdentityCredentials: {e}")))
}

/// `https://vault/secrets/<name>[/<version>]` → `(name, version)`. Plain string work on
/// the id Key Vault returned (once per answer, and per item of a listing): no URL parser.
fn split_id(id: &str) -> Option<(String, Option<String>)> {
    let (scheme, rest) = id.split_once("://")?;
    if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let path = &rest[rest.find('/')?..];
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let mut segments = path.trim_start_matches('/').split('/');
    match segments.next()? {
        "secrets" | "deletedsecrets" => {}
        _ => return None,
    }
    let name = segments.next().filter(|s| !s.is_empty())?.to_owned();
    let version = segments.next().filter(|s| !s.is_empty()).map(str::to_owned);
    Some((name, version))
}

/// A secret Key Vault described, without its value (an answer about one secret, read
/// as the deleted one's model, a superset of the others without the value; or an item of
/// a listing, whose id names no version and is not read for one: `versioned` false).
fn described(name: &str, versioned: bool, item: DeletedSecretProperties) -> DeletedCredential {
    let id = item.id.as_deref().filter(|_| versioned);
    DeletedCredential {
        properties: properties_of(name, id, item.attributes, item.tags),
        recovery_id: item.recovery_id.map(|id| service_text(&id)),
        deleted_date: item.deleted_date,
        scheduled_purge_date: item.scheduled_purge_date,
    }
}

/// Key Vault's answer about the secret `name`, read as the SDK's model `M`.
fn model<M: serde::de::DeserializeOwned>(name: &str, answer: &ResponseBody) -> Result<M> {
    answer.json().map_err(|e| {
        let reason = format!("Key Vault's answer cannot be read: {}", e.kind());
        invalid(name, &reason)
    })
}

/// The properties of the secret `name` from the parts of an SDK model: the version from
/// `id`, when given.
fn properties_of(
    name: &str,
    id: Option<&str>,
    attributes: Option<SdkAttributes>,
    tags: Option<HashMap<String, String>>,
) -> StoredProperties {
    let a = attributes.unwrap_or_default();
    StoredProperties {
        name: name.to_owned(),
        version: id.and_then(split_id).and_then(|(_, version)| version),
        enabled: a.enabled,
        not_before: a.not_before,
        expires: a.expires,
        updated: a.updated,
        tags: tags.unwrap_or_default().into_iter().collect(),
    }
}

/// An SDK error as the crate's: Key Vault's status with its error code and message, the
/// 409 of a name held by a deleted secret, a credential failure, or a transport failure.
fn map_error(vault_url: &str, operation: &'static str, name: &str, e: azure_core::Error) -> Error {
    // An error of this crate's own that the SDK carried (from the credential, or from the
    // transport: an answer over the size limit) comes back as it was, with the store's
    // operation named when the transport, which does not know it, refused the answer.
    if let Some(ours) = source_of::<Error>(&e) {
        return match ours.kind() {
            ErrorKind::InvalidAnswer {
                code: "invalid_key_vault_response",
                message,
            } => Error::answer(
                "invalid_key_vault_response",
                format!("Key Vault {operation}: {message}"),
            ),
            _ => ours.clone(),
        };
    }
    match e.kind() {
        AzureErrorKind::HttpResponse {
            status,
            error_code,
            raw_response,
        } => {
            let status = u16::from(*status);
            let (code, message) = raw_response
                .as_ref()
                .map(|r| crate::http::azure_error_body::parse_error_body(r.body()))
                .unwrap_or_default();
            // A name held by a deleted secret: what to do instead of Key Vault's message.
            let held = (status == 409 && operation == "set").then(|| {
                format!(
                    "secret `{name}` is deleted but recoverable, so its name cannot be reused: \
                     purge it (`purge_deleted`) or recover it (`recover_deleted`) first"
                )
            });
            ErrorKind::Service(Box::new(ServiceError {
                service: KEY_VAULT,
                status,
                code: code.or_else(|| service_text_opt(error_code.clone())),
                message: held.or(message),
                request: format!("{operation} of secret `{name}`"),
                ..Default::default()
            }))
            .into()
        }
        AzureErrorKind::Credential => Error::external(e),
        AzureErrorKind::DataConversion => {
            // serde's message without the values it quotes, and where it stopped.
            let reason = source_of::<serde_json::Error>(&e).map(|json| {
                let (line, column) = (json.line(), json.column());
                format!(
                    "{} at line {line}, column {column}",
                    crate::parser_errors::json(json)
                )
            });
            unusable(
                operation,
                reason.as_deref().unwrap_or("the answer cannot be decoded"),
            )
        }
        kind => {
            // The transport put reqwest's error inside (see `azure::sdk_transport`): the
            // crate's one classification, which also chose the kind the SDK retried by.
            // Without one, what the SDK itself retries (`Io`, `Connection`) is transient.
            let (timeout, fault) = match source_of::<reqwest::Error>(&e) {
                Some(r) => (r.is_timeout(), classify_transport(r)),
                None if matches!(kind, AzureErrorKind::Io | AzureErrorKind::Connection) => {
                    (false, TransportFault::Passing)
                }
                None => (false, TransportFault::Protocol),
            };
            let message = service_text(&format!("{operation} `{name}`: {}", cause_chain(&e)));
            let source = Some(Arc::new(e) as Arc<dyn std::error::Error + Send + Sync>);
            TransportError::new(KEY_VAULT, vault_url, timeout, fault, message, source).into()
        }
    }
}

/// The crate's retry policy as the SDK's options (the SDK counts retries, not attempts).
fn sdk_retry(policy: &RetryPolicy) -> RetryOptions {
    if policy.max_attempts <= 1 {
        return RetryOptions::none();
    }
    let span = |d: Duration| time::Duration::try_from(d).unwrap_or(time::Duration::MAX);
    RetryOptions::exponential(ExponentialRetryOptions {
        initial_delay: span(policy.initial_delay),
        max_retries: policy.max_attempts - 1,
        max_total_elapsed: span(policy.max_total),
        max_delay: span(policy.max_delay),
    })
}

/// The first error of type `T` in an SDK error's chain of sources (azure_core wraps the
/// cause: this crate's own error, or serde's).
fn source_of<T: std::error::Error + 'static>(e: &azure_core::Error) -> Option<&T> {
    std::iter::successors(std::error::Error::source(e), |s| s.source())
        .find_map(|s| s.downcast_ref::<T>())
}

/// The stored secret `name` cannot be renewed, for `reason`.
fn invalid(name: &str, reason: &str) -> Error {
    Error::answer(
        "invalid_stored_secret",
        format!("stored secret `{name}` is not usable: {reason}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_split_into_name_and_version() {
        assert_eq!(
            split_id("https://v.vault.azure.net/secrets/uamsi-a/0123"),
            Some(("uamsi-a".into(), Some("0123".into())))
        );
        assert_eq!(
            split_id("https://v.vault.azure.net/secrets/uamsi-a"),
            Some(("uamsi-a".into(), None))
        );
        assert_eq!(split_id("https://v.vault.azure.net/keys/a"), None);
        assert_eq!(split_id("not a url"), None);
        assert_eq!(
            split_id("https://v.vault.azure.net/deletedsecrets/msi-b?x=1"),
            Some(("msi-b".into(), None))
        );
        assert_eq!(split_id("https://v.vault.azure.net"), None);
        assert_eq!(split_id("https://v.vault.azure.net/secrets/"), None);
        assert_eq!(split_id("://v/secrets/a"), None);
    }
}
