//! `ClientCertificateCredential`: a parsed credential file turned into access tokens.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use reqwest::Url;
use time::OffsetDateTime;
use tokio::sync::Notify;
use tracing::Instrument as _;

use crate::clock::{Clock, Rfc3339, saturating_add, to_time};
use crate::environment::Environment;
use crate::error::{ConfigError, Error, ErrorKind, FileError, Result};
use crate::file::certificate::ClientCertificate;
use crate::file::model::UserAssignedIdentityCredentials;
use crate::http::exchange;
use crate::http::retry::{self, RetryPolicy};
use crate::secret::SecretString;
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::assertion::{AssertionAlgorithm, AssertionSigner};
use crate::token::cache::{Fetch, TokenCache};
use crate::token::endpoint::{self, TokenRequest};
use crate::token::refresh::{FAILURE_MEMORY, Limits, MAX_CACHED_SCOPES, REFRESH_WINDOW};
use crate::untrusted_text::service_text;

/// How far ahead of the clock a certificate's `notBefore` may be (clock skew between the
/// issuer and this machine) before the credential is refused as not yet valid.
pub const NOT_BEFORE_SKEW: Duration = Duration::from_secs(5 * 60);

/// How close to its end (or past its `renew_after`) a credential counts as expiring soon:
/// 7 days. A credential warns then (the default of
/// [`with_expiry_warning_margin`](ClientCertificateCredentialOptions::with_expiry_warning_margin)),
/// and a [`CredentialReport`](crate::inspect::CredentialReport) made with this margin
/// has a [`ProblemKind::ExpiresSoon`](crate::inspect::ProblemKind::ExpiresSoon) warning.
pub const EXPIRES_SOON_MARGIN: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Options for [`ClientCertificateCredential`] (and, with [`ReloadOptions`](crate::ReloadOptions),
/// for [`UserAssignedIdentityCredential`](crate::UserAssignedIdentityCredential)): what
/// the credential does with its tokens, and the [`Environment`] it runs in (HTTP, clock,
/// retries), set with [`with_environment`](Self::with_environment).
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::{AssertionAlgorithm, ClientCertificateCredentialOptions, Environment};
///
/// let options = ClientCertificateCredentialOptions::default()
///     .with_assertion_algorithm(AssertionAlgorithm::Rs256)
///     .with_environment(Environment::default().with_request_timeout(Duration::from_secs(10))?);
/// assert_eq!(options.environment().request_timeout(), Duration::from_secs(10));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
///
/// Each setting has a setter (`with_…`), which clamps it where it has bounds; the
/// settings other parts of a program read back have a getter of the same name.
#[derive(Clone)]
pub struct ClientCertificateCredentialOptions {
    // Each setting is documented on its setter or its getter.
    environment: Environment,
    assertion_algorithm: AssertionAlgorithm,
    expiry_warning_margin: Duration,
    additionally_allowed_tenants: Vec<String>,
    /// See [`with_ready_assertion`](Self::with_ready_assertion).
    ready_assertion: bool,
    refresh_window: Duration,
    max_cached_scopes: usize,
    failure_memory: Duration,
}

impl Default for ClientCertificateCredentialOptions {
    fn default() -> Self {
        ClientCertificateCredentialOptions {
            environment: Environment::default(),
            assertion_algorithm: AssertionAlgorithm::default(),
            expiry_warning_margin: EXPIRES_SOON_MARGIN,
            additionally_allowed_tenants: Vec::new(),
            ready_assertion: true,
            refresh_window: REFRESH_WINDOW,
            max_cached_scopes: MAX_CACHED_SCOPES,
            failure_memory: FAILURE_MEMORY,
        }
    }
}

impl ClientCertificateCredentialOptions {
    /// Run in this environment (HTTP, clock, retries), replacing any set before: e.g. one
    /// [`Environment`] shared with the data plane client, the Key Vault store and the
    /// token server.
    pub fn with_environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }

    /// Choose the assertion algorithm: PS256 with `x5t#S256` (default) or RS256 with
    /// `x5t`.
    pub fn with_assertion_algorithm(mut self, algorithm: AssertionAlgorithm) -> Self {
        self.assertion_algorithm = algorithm;
        self
    }

    /// Warn (once per credential, through `tracing`) when a token is requested within
    /// this long of the credential's end, or after its `renew_after`. Default 7 days.
    pub fn with_expiry_warning_margin(mut self, margin: Duration) -> Self {
        self.expiry_warning_margin = margin;
        self
    }

    /// Keep one signed, single-use client assertion ready (default) or not: signed after
    /// the credential is built and after each use, on a background thread of the
    /// crate's, never on the caller's, so that a cold token request does not sign. A
    /// request that finds one being signed waits for it (at most one signature's time)
    /// rather than signing a second; building a credential does not sign at all. Each is
    /// sent at most once and is discarded unused once older than half its lifetime.
    pub fn with_ready_assertion(mut self, ready: bool) -> Self {
        self.ready_assertion = ready;
        self
    }

    /// Start refreshing cached tokens at least this long before they expire (see
    /// [`refresh_window`](Self::refresh_window); less than 5 minutes is taken as 5).
    pub fn with_refresh_window(mut self, window: Duration) -> Self {
        self.refresh_window = window.max(REFRESH_WINDOW);
        self
    }

    /// Cache tokens for at most this many scope sets (see
    /// [`max_cached_scopes`](Self::max_cached_scopes); 0 is taken as 1).
    pub fn with_max_cached_scopes(mut self, max: usize) -> Self {
        self.max_cached_scopes = max.max(1);
        self
    }

    /// Answer a scope's failed request with its error for this long (see
    /// [`failure_memory`](Self::failure_memory)).
    pub fn with_failure_memory(mut self, memory: Duration) -> Self {
        self.failure_memory = memory;
        self
    }

    /// Allow tokens in these tenants besides the credential's own (`"*"` for any), through
    /// [`get_token_for_tenant`](ClientCertificateCredential::get_token_for_tenant): a
    /// multi-tenant application answering data plane challenges. Default: none.
    pub fn with_additionally_allowed_tenants<I, S>(mut self, tenants: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.additionally_allowed_tenants = tenants.into_iter().map(Into::into).collect();
        self
    }
}

/// The settings other parts of a program read back, each as its setter left it.
impl ClientCertificateCredentialOptions {
    /// The environment: the HTTP client (or extra roots for the crate-built one),
    /// `http://` loopback authorities, the request timeout (default 30 s), the application
    /// id of the `User-Agent` every token request carries, the clock and the retry policy
    /// of token requests. See [`Environment`].
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// How long before a cached token expires its background refresh starts, at least
    /// (half the token's lifetime caps it; the server's `refresh_in` and the half-life of
    /// tokens over 2 hours may start it earlier). Default and minimum
    /// [`MIN_REFRESH_WINDOW`](crate::limits::MIN_REFRESH_WINDOW), 5 minutes: what
    /// `azure_core`'s bearer policy needs. Wider for a credential whose tokens are handed
    /// on to clients that treat a token with 5 minutes left as stale, as the token server
    /// does.
    pub fn refresh_window(&self) -> Duration {
        self.refresh_window
    }

    /// At most this many scope sets (a tenant and its scopes) have tokens cached: past it
    /// the least recently used leave, an eighth of the bound at a time (those with a
    /// request in flight stay). Every consumer of the credential shares the bound: its
    /// own tenant, its other tenants, data plane clients over it, the token server.
    /// Default [`MAX_CACHED_SCOPES`](crate::limits::MAX_CACHED_SCOPES), 1,000; at least 1.
    pub fn max_cached_scopes(&self) -> usize {
        self.max_cached_scopes
    }

    /// After a token request for a scope failed at Entra or on the way there (its answer
    /// or a transport failure, once its retries are spent), callers without a usable token
    /// for that scope get the same error for this long instead of a new request (callers
    /// with one keep getting it). Refusals made before any request (the credential
    /// expired, say) are not remembered. Default
    /// [`FAILURE_MEMORY`](crate::limits::FAILURE_MEMORY), 5 seconds; zero forgets at once.
    pub fn failure_memory(&self) -> Duration {
        self.failure_memory
    }
}

impl fmt::Debug for ClientCertificateCredentialOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificateCredentialOptions")
            .field("environment", &self.environment)
            .field("assertion_algorithm", &self.assertion_algorithm)
            .field("expiry_warning_margin", &self.expiry_warning_margin)
            .field(
                "additionally_allowed_tenants",
                &self.additionally_allowed_tenants,
            )
            .field("ready_assertion", &self.ready_assertion)
            .field("refresh_window", &self.refresh_window)
            .field("max_cached_scopes", &self.max_cached_scopes)
            .field("failure_memory", &self.failure_memory)
            .finish()
    }
}

/// A credential that authenticates as a user-assigned managed identity with its
/// certificate: the Rust counterpart of what Go's `GetCredential` returns
/// (`azidentity.ClientCertificateCredential`).
///
/// Built from a parsed [`UserAssignedIdentityCredentials`]; it decodes the bundle once,
/// then every [`get_token`](Self::get_token) signs a fresh client assertion and exchanges
/// it at `{authentication_endpoint}/{tenant_id}/oauth2/v2.0/token`. Cloning is cheap and
/// clones share everything.
///
/// ```no_run
/// use msi_dataplane::{ClientCertificateCredential, UserAssignedIdentityCredentials};
///
/// # async fn run() -> Result<(), msi_dataplane::Error> {
/// let creds = UserAssignedIdentityCredentials::from_path("/mnt/certs/my-identity")?;
/// let credential = ClientCertificateCredential::new(&creds, Default::default())?;
/// let token = credential.get_token(&["https://management.azure.com/.default"]).await?;
/// println!("token expires on {}", token.expires_on());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClientCertificateCredential {
    inner: Arc<Inner>,
}

struct Inner {
    client_id: String,
    tenant_id: String,
    token_url: Url,
    certificate: ClientCertificate,
    signer: AssertionSigner,
    file_not_after: Option<OffsetDateTime>,
    renew_after: Option<OffsetDateTime>,
    /// The file's `cannot_renew_after`, for the metrics.
    cannot_renew_after: Option<OffsetDateTime>,
    expiry_warning_margin: time::Duration,
    expiry_warned: AtomicBool,
    http: reqwest::Client,
    /// The `User-Agent` of every token request.
    user_agent: reqwest::header::HeaderValue,
    timeout: Duration,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    /// Tokens in the own tenant and in others, keyed by tenant and scopes.
    cache: TokenCache,
    /// For other tenants' token URLs.
    authority: String,
    allow_http_loopback: bool,
    /// Lower-cased; may hold `*`.
    allowed_tenants: Vec<String>,
    /// Keep a [`Spare`] assertion for the own token URL.
    ready_assertion: bool,
    /// The ready assertion, if one is signed and unused.
    spare: Mutex<Option<Spare>>,
    /// A refill of `spare` is queued or running.
    refilling: AtomicBool,
    /// Woken when a refill ends.
    refilled: Notify,
    /// Whether the credential still writes its client id's credential gauges: until a
    /// reloading credential retires it for the next file's. Held while writing, so that a
    /// request in flight on a retired credential cannot overwrite its successor's times.
    writes_gauges: Mutex<bool>,
}

/// A signed client assertion for the credential's own token URL, not yet sent.
struct Spare {
    assertion: SecretString,
    signed_at: OffsetDateTime,
    /// The thread that signed it: tests check it was not the caller's.
    #[cfg(test)]
    #[cfg_attr(not(test), allow(dead_code))]
    signed_on: Option<String>,
}

/// A running refill of the ready assertion; ends it however its task ends (also when the
/// task is dropped unrun at runtime shutdown).
struct Refill(Weak<Inner>);

impl Drop for Refill {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.refilling.store(false, Ordering::Release);
            inner.refilled.notify_waiters();
        }
    }
}

/// A ready assertion older than this is discarded unused: half its lifetime, so that
/// the server always gets at least as long as it does with one signed on the spot.
const SPARE_MAX_AGE: time::Duration =
    time::Duration::seconds(crate::token::assertion::ASSERTION_LIFETIME_SECS / 2);

/// Pure: whether a ready assertion signed at `signed_at` may be sent at `now` (not from
/// the future, not older than [`SPARE_MAX_AGE`]).
pub(crate) fn spare_usable(signed_at: OffsetDateTime, now: OffsetDateTime) -> bool {
    now >= signed_at && now - signed_at <= SPARE_MAX_AGE
}

impl ClientCertificateCredential {
    /// Build the credential: validate the file's content, decode the certificate bundle,
    /// and check the authority. Makes no network call. (The Go reference's
    /// `dataplane.GetCredential`.)
    #[doc(alias = "get_credential", alias = "GetCredential")]
    pub fn new(
        creds: &UserAssignedIdentityCredentials,
        options: ClientCertificateCredentialOptions,
    ) -> Result<Self> {
        creds.validate()?;
        let (Some(authority), Some(client_id), Some(tenant_id)) = (
            creds.authentication_endpoint.as_deref(),
            creds.client_id.as_deref(),
            creds.tenant_id.as_deref(),
        ) else {
            // `validate` guarantees these; keep the error honest if that ever changes.
            return Err(ErrorKind::File(FileError::MissingFields {
                fields: vec!["authentication_endpoint", "client_id", "tenant_id"],
            })
            .into());
        };
        let certificate = ClientCertificate::from_credentials(creds)?;
        Self::assemble(
            authority,
            tenant_id,
            client_id,
            certificate,
            (
                creds.not_after()?,
                creds.renew_after()?,
                creds.cannot_renew_after()?,
            ),
            options,
        )
        .map_err(file_authority)
    }

    /// Build a credential from its parts: an application (a service, often multi-tenant)
    /// with its own certificate rather than a managed identity's credential file.
    /// `authority` is the Entra host (e.g. `https://login.microsoftonline.com/`), and
    /// the certificate comes from [`ClientCertificate::from_bundle`] (PEM or PKCS#12
    /// bytes) or [`ClientCertificate::from_base64`]. Makes no network call.
    ///
    /// With [`ClientCertificateCredentialOptions::with_additionally_allowed_tenants`], the
    /// credential may also request tokens in other tenants
    /// ([`get_token_for_tenant`](Self::get_token_for_tenant)), as the MSI data plane's
    /// challenges ask.
    ///
    /// ```no_run
    /// use msi_dataplane::{
    ///     ClientCertificate, ClientCertificateCredential, ClientCertificateCredentialOptions,
    /// };
    ///
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let bundle = std::fs::read("/etc/service/app-certificate.pem")?;
    /// let credential = ClientCertificateCredential::from_parts(
    ///     "https://login.microsoftonline.com/",
    ///     "72f988bf-86f1-41af-91ab-2d7cd011db47",
    ///     "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
    ///     ClientCertificate::from_bundle(&bundle)?,
    ///     ClientCertificateCredentialOptions::default().with_additionally_allowed_tenants(["*"]),
    /// )?;
    /// # let _ = credential; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidArgument`] naming `client_id` when it is empty, or
    /// `tenant_id` when it is not usable in a URL path; [`ConfigError::InvalidAuthority`]
    /// for an unusable authority: each the caller's value, so
    /// [`ErrorCategory::Configuration`](crate::ErrorCategory::Configuration).
    #[doc(alias = "NewClientCertificateCredential")]
    pub fn from_parts(
        authority: &str,
        tenant_id: &str,
        client_id: &str,
        certificate: ClientCertificate,
        options: ClientCertificateCredentialOptions,
    ) -> Result<Self> {
        let invalid = |argument: &'static str, reason: &str| -> Error {
            ErrorKind::Config(ConfigError::InvalidArgument {
                argument,
                reason: reason.to_owned(),
            })
            .into()
        };
        if client_id.trim().is_empty() {
            return Err(invalid("client_id", "is empty"));
        }
        if !is_url_safe_tenant(tenant_id.trim()) {
            return Err(invalid(
                "tenant_id",
                "must be non-empty and hold only letters, digits, '-', '.' and '_'",
            ));
        }
        Self::assemble(
            authority,
            tenant_id,
            client_id,
            certificate,
            (None, None, None),
            options,
        )
    }

    /// The shared end of [`new`](Self::new) and [`from_parts`](Self::from_parts);
    /// `file_times` is the credential file's `not_after`, `renew_after` and
    /// `cannot_renew_after`.
    fn assemble(
        authority: &str,
        tenant_id: &str,
        client_id: &str,
        certificate: ClientCertificate,
        file_times: (
            Option<OffsetDateTime>,
            Option<OffsetDateTime>,
            Option<OffsetDateTime>,
        ),
        options: ClientCertificateCredentialOptions,
    ) -> Result<Self> {
        let token_url = endpoint::token_url(
            authority,
            tenant_id.trim(),
            options.environment.allows_http_loopback(),
        )?;
        let signer = AssertionSigner::new(&certificate, options.assertion_algorithm)?;
        telemetry::token_client(client_id.trim());
        // A loopback authority is never reached through a proxy from the environment.
        let direct = crate::http::loopback::is_loopback(&token_url);
        let http = options.environment.client(direct)?;
        let credential = ClientCertificateCredential {
            inner: Arc::new(Inner {
                client_id: client_id.trim().to_owned(),
                tenant_id: tenant_id.trim().to_owned(),
                token_url,
                certificate,
                signer,
                file_not_after: file_times.0,
                renew_after: file_times.1,
                cannot_renew_after: file_times.2,
                expiry_warning_margin: to_time(options.expiry_warning_margin),
                expiry_warned: AtomicBool::new(false),
                http,
                user_agent: options.environment.user_agent_header(),
                timeout: options.environment.request_timeout(),
                retry: options.environment.retry_policy().clone(),
                cache: TokenCache::new(
                    options.environment.clock().clone(),
                    Limits {
                        window: options.refresh_window,
                        max_entries: options.max_cached_scopes,
                        failure_memory: options.failure_memory,
                    },
                ),
                clock: options.environment.clock().clone(),
                authority: authority.trim().to_owned(),
                allow_http_loopback: options.environment.allows_http_loopback(),
                allowed_tenants: options
                    .additionally_allowed_tenants
                    .iter()
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty())
                    .collect(),
                ready_assertion: options.ready_assertion,
                spare: Mutex::new(None),
                refilling: AtomicBool::new(false),
                refilled: Notify::new(),
                writes_gauges: Mutex::new(true),
            }),
        };
        // The first ready assertion is signed in the background, not here: building
        // stays a parse and a key load. Signing it also warms the key, whose first
        // signature costs about twice a later one.
        credential.inner.refill_spare();
        Ok(credential)
    }

    /// Get an access token for `scopes` (for client credentials, one `<resource>/.default`
    /// scope, e.g. `https://management.azure.com/.default`), from the cache when it holds
    /// a usable one.
    ///
    /// - A cached token is returned at once, without locks or allocation.
    /// - Concurrent callers on a missing or expired token share one request.
    /// - Inside the refresh window (5 minutes before expiry, half-life for tokens over 2
    ///   hours, or the server's `refresh_in`) the cached token is returned at once and one
    ///   background request replaces it; if that fails, the cached token keeps being
    ///   served and the next attempt waits at least 30 s.
    /// - Failed requests are retried per [`RetryPolicy`]; an error reaches callers only
    ///   when no usable token is cached, and for
    ///   [`failure_memory`](ClientCertificateCredentialOptions::failure_memory) (5 s) after
    ///   a failed request its callers get that error again rather than a new request.
    ///
    /// The cache key is the scope list as given (same scopes, same order); at most
    /// [`max_cached_scopes`](ClientCertificateCredentialOptions::max_cached_scopes) keys
    /// (1,000) are cached, the least recently used leaving first.
    pub async fn get_token(&self, scopes: &[&str]) -> Result<AccessToken> {
        if let Some(token) = self.cached_token(scopes) {
            return Ok(token);
        }
        check_scopes(scopes)?;
        let inner = &self.inner;
        inner.cache.get(None, scopes, inner).await
    }

    /// [`get_token`](Self::get_token), but a new token request is started only if `admit`
    /// says so (`None` when it does not); a cached token, or a request in flight joined,
    /// never asks.
    pub(crate) async fn get_token_admitted(
        &self,
        scopes: &[&str],
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        if let Some(token) = self.cached_token(scopes) {
            return Ok(Some(token));
        }
        check_scopes(scopes)?;
        let inner = &self.inner;
        inner.cache.get_admitted(None, scopes, inner, admit).await
    }

    /// The cached token for `scopes` if one can be handed out now (the hit path of
    /// [`get_token`](Self::get_token), which may also start a background refresh).
    pub(crate) fn cached_token(&self, scopes: &[&str]) -> Option<AccessToken> {
        let inner = &self.inner;
        inner.cache.get_cached(None, scopes, inner)
    }

    /// Request a new token from the endpoint, bypassing the cache (and not storing the
    /// result in it): sign a fresh assertion and POST it, with retries.
    pub async fn request_token(&self, scopes: &[&str]) -> Result<AccessToken> {
        check_scopes(scopes)?;
        let inner = &self.inner;
        inner
            .fetch_with_retries(&scopes.join(" "), &inner.token_url)
            .await
    }

    /// Get an access token for `scopes` in `tenant`: [`get_token`](Self::get_token) when
    /// it is the credential's own tenant (compared case-insensitively), else a token from
    /// that tenant's token URL (same authority), cached per tenant and scope set, with
    /// the same single-flight and refresh-ahead rules.
    ///
    /// # Errors
    ///
    /// [`ConfigError::TenantNotAllowed`] when `tenant` is neither the credential's own nor
    /// in [`additionally_allowed_tenants`](ClientCertificateCredentialOptions::with_additionally_allowed_tenants)
    /// (nor is `*` there); [`ConfigError::InvalidArgument`] naming `tenant` for a tenant
    /// that cannot be used in a URL path; otherwise as [`get_token`](Self::get_token).
    pub async fn get_token_for_tenant(&self, scopes: &[&str], tenant: &str) -> Result<AccessToken> {
        let inner = &self.inner;
        let tenant = tenant.trim();
        if tenant.eq_ignore_ascii_case(&inner.tenant_id) {
            return self.get_token(scopes).await;
        }
        let key = inner.other_tenant_key(tenant)?;
        check_scopes(scopes)?;
        inner.cache.get(Some(&key), scopes, inner).await
    }

    /// A token to replace `rejected`, a token for `scopes` that a service refused: fetched
    /// from the token endpoint past the cache (as MSAL's `force_refresh` does), and cached
    /// in its place. When the cache already holds another usable token (a caller that got
    /// the same refusal replaced it first), that one; concurrent calls share one request.
    /// `tenant` is `None` for the credential's own, else as in
    /// [`get_token_for_tenant`](Self::get_token_for_tenant).
    ///
    /// For a refusal only: a token the cache hands out is fresh enough for any service
    /// that accepts it, and forcing requests on every call would meet Entra's throttling.
    ///
    /// # Errors
    ///
    /// As [`get_token_for_tenant`](Self::get_token_for_tenant).
    #[doc(alias = "force_refresh")]
    pub async fn get_token_replacing(
        &self,
        rejected: &AccessToken,
        scopes: &[&str],
        tenant: Option<&str>,
    ) -> Result<AccessToken> {
        let inner = &self.inner;
        let key = match tenant.map(str::trim) {
            Some(t) if !t.eq_ignore_ascii_case(&inner.tenant_id) => {
                Some(inner.other_tenant_key(t)?)
            }
            _ => None,
        };
        check_scopes(scopes)?;
        inner
            .cache
            .get_replacing(key.as_deref(), scopes, inner, rejected)
            .await
    }

    /// Forget every cached token: the next `get_token` for each scope makes a request.
    pub fn clear_cache(&self) {
        self.inner.cache.clear();
    }

    /// A signed client assertion for this credential's token URL, valid for
    /// [`ASSERTION_LIFETIME`](crate::limits::ASSERTION_LIFETIME) from now: for callers that
    /// make the token request themselves (with another OAuth library, say). Each call
    /// signs a new assertion with a fresh `jti`. It is a credential: keep it secret.
    pub fn client_assertion(&self) -> Result<SecretString> {
        let inner = &*self.inner;
        let now = inner.clock.now();
        inner.check_validity(now)?;
        inner.assertion(now, &inner.token_url)
    }

    /// The scope sets this credential holds an unexpired token for (its own tenant), at
    /// most `max`: what a reloading credential fetches ahead with its successor.
    pub(crate) fn live_scopes(&self, max: usize) -> Vec<Vec<String>> {
        let inner = &self.inner;
        inner.cache.live_scopes(None, max)
    }

    /// The application (client) id.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The tenant id.
    pub fn tenant_id(&self) -> &str {
        &self.inner.tenant_id
    }

    /// The URL token requests are POSTed to (also the assertion's `aud`).
    pub fn token_url(&self) -> &str {
        self.inner.token_url.as_str()
    }

    /// The decoded certificate.
    pub fn certificate(&self) -> &ClientCertificate {
        &self.inner.certificate
    }

    /// Set the credential's gauges (the `metrics` feature): for a credential that becomes
    /// the one in use for its client id.
    pub(crate) fn record_times(&self) {
        self.inner.record_times();
    }

    /// The credential is no longer the one in use (a reloading credential swapped in
    /// another): from now on it writes none of its client id's credential gauges, not
    /// even for a token request that was in flight.
    pub(crate) fn retire_gauges(&self) {
        *self
            .inner
            .writes_gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
    }

    /// The assertion algorithm in use.
    pub fn assertion_algorithm(&self) -> AssertionAlgorithm {
        self.inner.signer.algorithm()
    }

    /// A weak reference to the credential's state (its key among it): for tests that
    /// check when it is freed.
    #[cfg(test)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn downgrade(&self) -> Weak<impl Send + Sync + use<>> {
        Arc::downgrade(&self.inner)
    }
}

impl Fetch for Inner {
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
        // Every request goes to the token endpoint: a new token whatever was refused.
        _rejected: Option<AccessToken>,
    ) -> impl std::future::Future<Output = Result<AccessToken>> + Send + 'static {
        let this = self.clone();
        async move {
            let Some(tenant) = tenant else {
                return this.fetch_with_retries(&scope, &this.token_url).await;
            };
            let url = endpoint::token_url(&this.authority, &tenant, this.allow_http_loopback)?;
            this.fetch_with_retries(&scope, &url).await
        }
    }
}

impl Inner {
    /// The cache key for another tenant (its lower-case name, allocated only when it is
    /// not), once it is allowed and usable in a URL.
    fn other_tenant_key<'t>(&self, tenant: &'t str) -> Result<Cow<'t, str>> {
        if !tenant_allowed(tenant, &self.allowed_tenants) {
            return Err(ErrorKind::Config(ConfigError::TenantNotAllowed {
                tenant: tenant.to_owned(),
                credential_tenant: self.tenant_id.clone(),
            })
            .into());
        }
        if !is_url_safe_tenant(tenant) {
            return Err(ErrorKind::Config(ConfigError::InvalidArgument {
                argument: "tenant",
                reason: "must be non-empty and hold only letters, digits, '-', '.' and '_'".into(),
            })
            .into());
        }
        Ok(match tenant.bytes().any(|b| b.is_ascii_uppercase()) {
            true => Cow::Owned(tenant.to_ascii_lowercase()),
            false => Cow::Borrowed(tenant),
        })
    }

    /// The credential's end: the earlier of the leaf's `notAfter` and the file's `not_after`.
    fn end(&self) -> OffsetDateTime {
        let cert_end = self.certificate.not_after();
        match self.file_not_after {
            Some(file_end) if file_end < cert_end => file_end,
            _ => cert_end,
        }
    }

    /// Log, once per credential, that it should have been renewed or ends soon.
    fn warn_if_expiring(&self, now: OffsetDateTime) {
        if self.expiry_warned.load(Ordering::Relaxed) {
            return;
        }
        let Some(reason) = expiry_warning(
            now,
            self.renew_after,
            self.end(),
            self.expiry_warning_margin,
        ) else {
            return;
        };
        if !self.expiry_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                client_id = %self.client_id,
                not_after = %Rfc3339(self.end()),
                renew_after = ?self.renew_after.map(Rfc3339),
                thumbprint_sha256 = %self.certificate.thumbprint_sha256_hex(),
                "{reason}; the credential file should be rotated"
            );
        }
    }

    /// One token fetch: requests until one succeeds or the retry policy gives up.
    async fn fetch_with_retries(
        self: &Arc<Self>,
        scope: &str,
        token_url: &Url,
    ) -> Result<AccessToken> {
        let mut attempt = 0u32;
        retry::run(
            &self.retry,
            self.clock.as_ref(),
            || {
                attempt += 1;
                self.observed_request(scope, token_url, attempt)
            },
            |attempt, delay, error| {
                tracing::info!(
                    client_id = %self.client_id,
                    scope = %service_text(scope),
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    error = %error,
                    "token request failed; retrying"
                );
            },
        )
        .await
    }

    /// One token request in its `token_request` span, counted by outcome with its
    /// duration; a token obtained updates the credential's gauges.
    async fn observed_request(
        self: &Arc<Self>,
        scope: &str,
        token_url: &Url,
        attempt: u32,
    ) -> Result<AccessToken> {
        let tenant = token_url
            .path_segments()
            .and_then(|mut s| s.find(|s| !s.is_empty()))
            .unwrap_or_default();
        let span = tracing::info_span!(
            "token_request",
            client_id = %self.client_id,
            tenant,
            scope = %service_text(scope),
            attempt,
            outcome = tracing::field::Empty,
            error_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self
            .request_once(scope, token_url)
            .instrument(span.clone())
            .await;
        let elapsed = started.elapsed();
        let error = result.as_ref().err();
        telemetry::end_span(&span, error, elapsed);
        telemetry::token_request(&self.client_id, error, elapsed);
        if let Ok(token) = &result {
            self.record_times();
            telemetry::token_expiry(&self.client_id, token.expires_on());
        }
        result
    }

    /// Set the credential's gauges: its end, `renew_after` and `cannot_renew_after`;
    /// nothing once it is retired.
    fn record_times(&self) {
        let writes = self
            .writes_gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *writes {
            telemetry::credential_times(
                &self.client_id,
                self.end(),
                self.renew_after,
                self.cannot_renew_after,
            );
        }
    }

    /// One token request: check validity, sign, POST, parse.
    async fn request_once(self: &Arc<Self>, scope: &str, token_url: &Url) -> Result<AccessToken> {
        let now = self.clock.now();
        self.check_validity(now)?;
        self.warn_if_expiring(now);
        let own_url = self.ready_assertion && *token_url == self.token_url;
        let ready = match own_url {
            true => self.ready_spare(now).await,
            false => None,
        };
        let assertion = match ready {
            Some(ready) => ready,
            None => self.assertion(now, token_url)?,
        };
        let client_request_id = uuid::Uuid::new_v4().to_string();
        let request = TokenRequest {
            url: token_url,
            client_id: &self.client_id,
            scope,
            assertion: assertion.expose_secret(),
            client_request_id: &client_request_id,
            user_agent: &self.user_agent,
        };
        let raw = endpoint::send(&self.http, &request, self.timeout).await;
        // The next ready assertion is signed once this request is answered, so that its
        // signature never competes with the round trip.
        if own_url {
            self.refill_spare();
        }
        let raw = raw?;
        let result = endpoint::parse_response(&raw, now, &client_request_id);
        match &result {
            Ok(token) => tracing::debug!(
                client_id = %self.client_id,
                scope = %service_text(scope),
                expires_on = %Rfc3339(token.expires_on()),
                "acquired access token"
            ),
            Err(e) => tracing::debug!(
                client_id = %self.client_id,
                scope = %service_text(scope),
                error = %e,
                "token request answered with an error"
            ),
        }
        result
    }

    /// The ready assertion (for the own token URL), if it is usable at `now`; taken: it
    /// is never sent twice.
    fn take_spare(&self, now: OffsetDateTime) -> Option<SecretString> {
        let spare = self
            .spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        if spare_usable(spare.signed_at, now) {
            Some(spare.assertion)
        } else {
            tracing::debug!(
                client_id = %self.client_id,
                signed_at = %Rfc3339(spare.signed_at),
                "ready assertion too old; signing a new one"
            );
            None
        }
    }

    /// The ready assertion, if usable at `now`; if one is being signed, wait for it (one
    /// signature at most) rather than sign a second.
    async fn ready_spare(&self, now: OffsetDateTime) -> Option<SecretString> {
        if let Some(ready) = self.take_spare(now) {
            return Some(ready);
        }
        let refilled = self.refilled.notified();
        let mut refilled = std::pin::pin!(refilled);
        // Registered before the check: a refill that ends in between still wakes it.
        refilled.as_mut().enable();
        if !self.refilling.load(Ordering::Acquire) {
            return None;
        }
        refilled.await;
        self.take_spare(now)
    }

    /// Sign a new ready assertion in the background (one refill at a time), dated now:
    /// on the crate's I/O runtime's blocking threads, so whatever runtime (or none) the
    /// caller has.
    fn refill_spare(self: &Arc<Self>) {
        if !self.ready_assertion || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = self.clock.now();
        let refill = Refill(Arc::downgrade(self));
        // If it cannot run, dropping `refill` ends the refill.
        exchange::spawn_blocking(move || {
            if let Some(this) = refill.0.upgrade() {
                this.sign_spare(now);
            }
        });
    }

    /// Sign a ready assertion dated `now` and keep it (replacing an older one). Blocking
    /// (one RSA signature). Nothing is kept for a credential outside its validity.
    fn sign_spare(&self, now: OffsetDateTime) {
        if self.check_validity(now).is_err() {
            return;
        }
        match self.assertion(now, &self.token_url) {
            Ok(assertion) => {
                *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = Some(Spare {
                    assertion,
                    signed_at: now,
                    #[cfg(test)]
                    signed_on: std::thread::current().name().map(str::to_owned),
                });
            }
            Err(e) => tracing::debug!(error = %e, "cannot sign the ready assertion"),
        }
    }

    fn assertion(&self, now: OffsetDateTime, token_url: &Url) -> Result<SecretString> {
        let jti = uuid::Uuid::new_v4().to_string();
        self.signer
            .sign(
                &self.certificate,
                token_url.as_str(),
                &self.client_id,
                now,
                &jti,
            )
            .map(SecretString::from)
    }

    /// Refuse, before any network call, a credential outside its validity: the leaf
    /// certificate's window (with [`NOT_BEFORE_SKEW`] of grace at the start) and the file's
    /// `not_after`.
    fn check_validity(&self, now: OffsetDateTime) -> Result<()> {
        let end = self.end();
        if now > end {
            return Err(ErrorKind::File(FileError::CredentialExpired {
                expired_at: end,
                now,
            })
            .into());
        }
        let start = self.certificate.not_before();
        if saturating_add(now, to_time(NOT_BEFORE_SKEW)) < start {
            return Err(ErrorKind::File(FileError::CredentialNotYetValid {
                valid_from: start,
                now,
            })
            .into());
        }
        Ok(())
    }
}

impl fmt::Debug for ClientCertificateCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificateCredential")
            .field("client_id", &self.inner.client_id)
            .field("tenant_id", &self.inner.tenant_id)
            .field("token_url", &self.inner.token_url.as_str())
            .field("algorithm", &self.inner.signer.algorithm())
            .field("certificate", &self.inner.certificate)
            .finish_non_exhaustive()
    }
}

/// Pure: why a credential deserves a warning at `now`, if it does: it ends within `margin`,
/// or it is past its `renew_after`.
pub(crate) fn expiry_warning(
    now: OffsetDateTime,
    renew_after: Option<OffsetDateTime>,
    end: OffsetDateTime,
    margin: time::Duration,
) -> Option<&'static str> {
    if now >= saturating_add(end, -margin) {
        Some("the credential expires soon")
    } else if renew_after.is_some_and(|r| now >= r) {
        Some("the credential is past its renew_after time")
    } else {
        None
    }
}

/// Pure: whether a tenant other than the credential's own may be asked for, given the
/// lower-cased `additionally_allowed_tenants` (`*` allows any).
pub(crate) fn tenant_allowed(tenant: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(tenant))
}

/// A tenant id usable as a URL path segment (the rule credential files follow).
/// The authority of a credential file is the file's `authentication_endpoint`: an
/// unusable one is the file's error, naming that key (the same check on a caller's
/// authority, in [`ClientCertificateCredential::from_parts`], stays the caller's).
fn file_authority(e: Error) -> Error {
    match e.kind() {
        ErrorKind::Config(ConfigError::InvalidAuthority { authority, reason }) => {
            ErrorKind::File(FileError::InvalidField {
                field: "authentication_endpoint",
                reason: format!("`{authority}` is not usable: {reason}"),
            })
            .into()
        }
        _ => e,
    }
}

fn is_url_safe_tenant(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// Refuse no scopes, or empty ones, or ones with whitespace (they are space-joined).
fn check_scopes(scopes: &[&str]) -> Result<()> {
    if scopes.is_empty() {
        return Err(ErrorKind::Config(ConfigError::InvalidScopes {
            reason: "no scope given".into(),
        })
        .into());
    }
    if scopes
        .iter()
        .any(|s| s.trim().is_empty() || s.contains(char::is_whitespace))
    {
        return Err(ErrorKind::Config(ConfigError::InvalidScopes {
            reason: "a scope is empty or contains whitespace".into(),
        })
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn spare_ages_out_at_half_its_lifetime() {
        let t = datetime!(2026-03-01 00:00 UTC);
        assert!(spare_usable(t, t));
        assert!(spare_usable(t, t + time::Duration::seconds(300)));
        assert!(!spare_usable(t, t + time::Duration::seconds(301)));
        assert!(!spare_usable(t, t - time::Duration::seconds(1)));
    }

    #[test]
    fn tenant_allow_list() {
        let allowed = vec!["contoso.onmicrosoft.com".to_owned()];
        assert!(tenant_allowed("Contoso.onmicrosoft.com", &allowed));
        assert!(!tenant_allowed("fabrikam.onmicrosoft.com", &allowed));
        assert!(!tenant_allowed("anything", &[]));
        assert!(tenant_allowed("anything", &["*".to_owned()]));
        assert!(is_url_safe_tenant("72f988bf-86f1-41af-91ab-2d7cd011db47"));
        assert!(!is_url_safe_tenant("a/b"));
        assert!(!is_url_safe_tenant(""));
    }

    #[test]
    fn expiry_warning_rules() {
        let end = datetime!(2026-03-01 00:00 UTC);
        let renew = Some(datetime!(2026-02-01 00:00 UTC));
        let week = time::Duration::days(7);
        assert_eq!(
            expiry_warning(datetime!(2026-01-15 00:00 UTC), renew, end, week),
            None
        );
        assert!(
            expiry_warning(datetime!(2026-02-02 00:00 UTC), renew, end, week)
                .unwrap()
                .contains("renew_after")
        );
        assert!(
            expiry_warning(datetime!(2026-02-23 00:00 UTC), None, end, week)
                .unwrap()
                .contains("expires soon")
        );
        assert_eq!(
            expiry_warning(datetime!(2026-02-20 00:00 UTC), None, end, week),
            None
        );
    }
}

#[cfg(test)]
mod background_signing_tests {
    use super::*;
    // The kit's copy of this crate (unit tests link a second one): its format.
    use msi_dataplane_testing::msi_dataplane::BundleFormat;
    use msi_dataplane_testing::{TestCertificate, TestIdentity};

    #[test]
    fn building_signs_nothing_on_the_callers_thread() {
        let identity = TestIdentity::new();
        let certificate = TestCertificate::self_signed();
        let file = identity.credentials(
            &certificate,
            "https://login.microsoftonline.com/",
            BundleFormat::Pem,
        );
        let file: crate::UserAssignedIdentityCredentials =
            serde_json::from_value(serde_json::to_value(&file).unwrap()).unwrap();
        // Built on a named thread with no runtime, as a plain `main` would.
        let credential = std::thread::Builder::new()
            .name("caller".into())
            .spawn(move || ClientCertificateCredential::new(&file, Default::default()))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        let inner = &credential.inner;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while inner.refilling.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let spare = inner.spare.lock().unwrap();
        let spare = spare
            .as_ref()
            .expect("a ready assertion, signed in the background");
        assert_eq!(spare.signed_on.as_deref(), Some("msi-dataplane-io"));
    }
}
