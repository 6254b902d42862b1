//! `ClientCertificateCredential`: a parsed credential file, or an application's own
//! certificate, turned into access tokens through the cache (its requests:
//! [`request`](super::request)).

use std::fmt;
use std::sync::Arc;

use reqwest::Url;

use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::file::certificate::ClientCertificate;
use crate::file::model::{CredentialFile, FileTimes, UserAssignedIdentityCredentials};
use crate::file::validity::{ExpiryWarning, Window};
use crate::http::base_url::base_url;
use crate::secret::SecretString;
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::assertion::{AssertionAlgorithm, AssertionSigner};
use crate::token::cache::TokenCache;
use crate::token::endpoint;
use crate::token::options::ClientCertificateCredentialOptions;
use crate::token::tenant::Tenants;

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

/// What a credential and its clones share (its requests: [`request`](super::request)).
pub(crate) struct Inner {
    pub(crate) client_id: String,
    pub(crate) token_url: Url,
    pub(crate) certificate: ClientCertificate,
    pub(crate) signer: AssertionSigner,
    /// When it may be used (computed once, from the file's times and the leaf).
    pub(crate) window: Window,
    /// The file's times: `renew_after` warns, and the gauges show them.
    pub(crate) times: FileTimes,
    /// The warning as the end nears, given once.
    pub(crate) expiry: ExpiryWarning,
    pub(crate) http: reqwest::Client,
    /// The request timeout, the `User-Agent`, the clock and the retry policy.
    pub(crate) environment: Environment,
    /// Tokens in the own tenant and in others, keyed by tenant and scopes.
    pub(crate) cache: Arc<TokenCache>,
    /// The checked authority: other tenants' token URLs start with it.
    pub(crate) authority: Url,
    pub(crate) tenants: Tenants,
    /// Its gauges, written while it is the one in use for its client id.
    pub(crate) gauges: telemetry::CredentialGauges,
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
        Self::from_file(&CredentialFile::parse(creds)?, options)
    }

    /// Build the credential from a parsed file: decode its bundle, check its authority.
    pub(crate) fn from_file(
        file: &CredentialFile<'_>,
        options: ClientCertificateCredentialOptions,
    ) -> Result<Self> {
        let certificate = ClientCertificate::from_base64(file.client_secret)?;
        // The file's `authentication_endpoint`: the file is what to fix.
        let loopback = options.environment.allows_http_loopback();
        let authority = base_url(file.authority, loopback, false).map_err(|reason| {
            let reason = format!("`{}` is not usable: {reason}", file.authority);
            Error::invalid_field("authentication_endpoint", reason)
        })?;
        let (tenant, client) = (file.tenant_id, file.client_id);
        Self::build(authority, tenant, client, certificate, file.times, options)
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
    /// `invalid_argument` naming `client_id` when it is empty, or
    /// `tenant_id` when it is not usable in a URL path; `invalid_authority`
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
        let authority = endpoint::authority(authority, options.environment.allows_http_loopback())?;
        let times = FileTimes::default();
        Self::build(authority, tenant_id, client_id, certificate, times, options)
    }

    /// [`new`](Self::new) and [`from_parts`](Self::from_parts), with the credential
    /// file's times (none for `from_parts`).
    fn build(
        authority: Url,
        tenant_id: &str,
        client_id: &str,
        certificate: ClientCertificate,
        times: FileTimes,
        options: ClientCertificateCredentialOptions,
    ) -> Result<Self> {
        let client_id = client_id.trim();
        if client_id.is_empty() {
            return Err(Error::invalid_argument("client_id", "is empty"));
        }
        let tenants = Tenants::new(tenant_id, &options.additionally_allowed_tenants)?;
        let environment = &options.environment;
        let token_url = endpoint::token_url(&authority, tenants.own());
        let signer = AssertionSigner::new(&certificate, options.assertion_algorithm)?;
        telemetry::token_client(client_id);
        // A loopback authority is never reached through a proxy from the environment.
        let http = environment.client(crate::http::loopback::is_loopback(&token_url))?;
        let window = Window::new(&times, certificate.not_before(), certificate.not_after());
        let (renew, cannot) = (times.renew_after, times.cannot_renew_after);
        let gauges = telemetry::CredentialGauges::new(client_id, window.end, renew, cannot);
        let inner = Inner {
            client_id: client_id.to_owned(),
            token_url,
            window,
            certificate,
            signer,
            times,
            expiry: ExpiryWarning::new(options.expiry_warning_margin),
            http,
            cache: TokenCache::new(client_id, environment.clock().clone(), &options),
            environment: environment.clone(),
            authority,
            tenants,
            gauges,
        };
        Ok(ClientCertificateCredential {
            inner: Arc::new(inner),
        })
    }

    /// Get an access token for `scopes` (for client credentials one `<resource>/.default`
    /// scope, e.g. `https://management.azure.com/.default`): a usable cached token at once
    /// (a read lock, no allocation), else one request shared by every concurrent caller;
    /// refreshed ahead, retried per [`RetryPolicy`](crate::RetryPolicy), an error
    /// remembered for the failure memory, keyed by the scope list as given. The rules
    /// and their numbers: [`guide::token_cache`](crate::guide::token_cache).
    pub async fn get_token(&self, scopes: &[&str]) -> Result<AccessToken> {
        // The hit before any nested future, which would cost it 1.3x (BENCHMARKS.md).
        if let Some(token) = self.cached_token(scopes) {
            return Ok(token);
        }
        admitted(self.token(None, scopes, None, || true).await?)
    }

    /// As [`get_token`](Self::get_token), but a new token request starts only if
    /// `admit()` returns `true` (`Ok(None)` when it does not, nothing started): a cached
    /// token, a request in flight (joined) or a remembered failure never calls it.
    pub(crate) async fn get_token_admitted(
        &self,
        scopes: &[&str],
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        self.token(None, scopes, None, admit).await
    }

    /// The one path of the token methods: the cached token for `scopes` in `tenant` (a
    /// cache key: `None` for the own) unless it is `rejected`, else, the scopes checked,
    /// the cache's answer ([`TokenCache::get`]).
    async fn token(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        rejected: Option<&AccessToken>,
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        let (inner, cache) = (&self.inner, &self.inner.cache);
        if rejected.is_none()
            && let Some(token) = cache.get_cached(tenant, scopes, inner)
        {
            return Ok(Some(token));
        }
        check_scopes(scopes)?;
        cache.get(tenant, scopes, inner, rejected, admit).await
    }

    /// The cached token for `scopes` if one can be handed out now (the hit path of
    /// [`get_token`](Self::get_token), which may also start a background refresh).
    pub(crate) fn cached_token(&self, scopes: &[&str]) -> Option<AccessToken> {
        self.inner.cache.get_cached(None, scopes, &self.inner)
    }

    /// Request a new token from the endpoint, bypassing the cache (and not storing the
    /// result in it): sign a fresh assertion and POST it, with retries.
    pub async fn request_token(&self, scopes: &[&str]) -> Result<AccessToken> {
        check_scopes(scopes)?;
        self.inner.fetch_with_retries(&scopes.join(" "), None).await
    }

    /// Get an access token for `scopes` in `tenant`: [`get_token`](Self::get_token) when
    /// it is the credential's own tenant (compared case-insensitively), else a token from
    /// that tenant's token URL (same authority), cached per tenant and scope set, with
    /// the same single-flight and refresh-ahead rules.
    ///
    /// # Errors
    ///
    /// `tenant_not_allowed` when `tenant` is neither the credential's own nor
    /// in [`additionally_allowed_tenants`](ClientCertificateCredentialOptions::with_additionally_allowed_tenants)
    /// (nor is `*` there); `invalid_argument` naming `tenant` for a tenant
    /// that cannot be used in a URL path; otherwise as [`get_token`](Self::get_token).
    pub async fn get_token_for_tenant(&self, scopes: &[&str], tenant: &str) -> Result<AccessToken> {
        let key = self.inner.tenants.key(tenant)?;
        admitted(self.token(key.as_deref(), scopes, None, || true).await?)
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
        let key = match tenant {
            Some(tenant) => self.inner.tenants.key(tenant)?,
            None => None,
        };
        let replace = || self.token(key.as_deref(), scopes, Some(rejected), || true);
        let token = admitted(replace().await?)?;
        // A request joined may have started before the refusal and brought it again.
        match token.token() == rejected.token() {
            true => admitted(replace().await?),
            false => Ok(token),
        }
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
        let now = inner.environment.clock().now();
        inner.window.check(now)?;
        inner.assertion(now, &inner.token_url)
    }

    /// The scope sets this credential holds an unexpired token for (its own tenant), at
    /// most `max`: what a reloading credential fetches ahead with its successor.
    pub(crate) fn live_scopes(&self, max: usize) -> Vec<Vec<String>> {
        self.inner.cache.live_scopes(max)
    }

    /// The application (client) id.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The tenant id.
    pub fn tenant_id(&self) -> &str {
        self.inner.tenants.own()
    }

    /// The URL token requests are POSTed to (also the assertion's `aud`).
    pub fn token_url(&self) -> &str {
        self.inner.token_url.as_str()
    }

    /// The decoded certificate.
    pub fn certificate(&self) -> &ClientCertificate {
        &self.inner.certificate
    }

    /// When it may be used: its file's `not_before` (else the leaf's) and its end.
    pub(crate) fn window(&self) -> Window {
        self.inner.window
    }

    /// Its credential gauges (the `metrics` feature): set for a credential that becomes
    /// the one in use for its client id, retired for one swapped out.
    pub(crate) fn gauges(&self) -> &telemetry::CredentialGauges {
        &self.inner.gauges
    }

    /// The assertion algorithm in use.
    pub fn assertion_algorithm(&self) -> AssertionAlgorithm {
        self.inner.signer.algorithm()
    }

    /// A weak reference to the credential's state (its key among it): for tests that
    /// check when it is freed.
    #[cfg(test)]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<impl Send + Sync + use<>> {
        Arc::downgrade(&self.inner)
    }
}

impl fmt::Debug for ClientCertificateCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificateCredential")
            .field("client_id", &self.inner.client_id)
            .field("tenant_id", &self.tenant_id())
            .field("token_url", &self.inner.token_url.as_str())
            .field("algorithm", &self.inner.signer.algorithm())
            .field("certificate", &self.inner.certificate)
            .finish_non_exhaustive()
    }
}

/// The token of a request that `|| true` admitted.
fn admitted(token: Option<AccessToken>) -> Result<AccessToken> {
    let message = "the token request was abandoned: not admitted";
    token.ok_or_else(|| Error::abandoned("request_abandoned", message))
}

/// Refuse no scopes, or empty ones, or ones with whitespace (they are space-joined).
fn check_scopes(scopes: &[&str]) -> Result<()> {
    let reason = match scopes {
        [] => "no scope given",
        _ if scopes
            .iter()
            .any(|s| s.is_empty() || s.contains(char::is_whitespace)) =>
        {
            "a scope is empty or contains whitespace"
        }
        _ => return Ok(()),
    };
    Err(Error::config(
        "invalid_scopes",
        "scopes",
        format!("invalid scopes: {reason}"),
    ))
}
