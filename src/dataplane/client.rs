//! The client factory, the per-identity client and its four operations, with the data
//! plane's challenge authentication. URL building is pure; [`Client::send`] is the I/O.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::challenge::challenged_tenant;
use super::source::TokenSource;
use super::types::{
    ManagedIdentityCredentials, MoveIdentityRequest, MoveIdentityResponse,
    UserAssignedIdentitiesRequest,
};
use crate::cloud::default_scope;
use crate::environment::Environment;
use crate::error::{
    DATA_PLANE, Error, ErrorKind, Result, ServiceError, TransportError, cause_chain,
};
use crate::http::azure_error_body::parse_error_body;
use crate::http::base_url::base_url;
use crate::http::{body, exchange, loopback, retry};
use crate::telemetry::{self, Service};
use crate::token::access_token::AccessToken;
use crate::untrusted_text::{redact_quoted, service_text};

/// The data plane API version every request carries.
pub const API_VERSION: &str = "2024-01-01";

/// Builds [`Client`]s for identity URLs; built once per token source and audience (Go:
/// `dataplane.NewClientFactory`). Cheap to clone; clones and the clients they build share
/// the HTTP client and the challenge cache.
///
/// **Authentication**: the first request to a data plane host goes without a token; its
/// 401 names the tenant (`WWW-Authenticate: Bearer authorization="https://login.../<tenant>"`),
/// the source is asked for `<audience>/.default` in that tenant, and the request is sent
/// again. The tenant is then kept per host; the tokens stay in the source's own cache
/// (for this crate's credentials, the one cache every consumer of the credential reads:
/// no second copy here). Later requests to that host carry the source's cached token at
/// once (no 401 round trip); inside its refresh window one background request replaces
/// it while the cached token is still sent, concurrent requests share one token request,
/// and a failed request is not repeated for every call (the credential's backoff and
/// [`failure_memory`](crate::ClientCertificateCredentialOptions::with_failure_memory)).
///
/// ```no_run
/// use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
/// use msi_dataplane::{ClientCertificate, ClientCertificateCredential, ClientCertificateCredentialOptions};
///
/// # async fn run(identity_url: &str) -> Result<(), Box<dyn std::error::Error>> {
/// let app = ClientCertificateCredential::from_parts(
///     "https://login.microsoftonline.com/",
///     "72f988bf-86f1-41af-91ab-2d7cd011db47",
///     "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d",
///     ClientCertificate::from_bundle(&std::fs::read("/etc/service/app.pem")?)?,
///     ClientCertificateCredentialOptions::default().with_additionally_allowed_tenants(["*"]),
/// )?;
/// let factory = ClientFactory::new(app, "https://identity.azure.net/", Default::default())?;
/// // `identity_url` is ARM's `x-ms-identity-url` header for the resource.
/// let client = factory.client(identity_url)?;
/// let creds = client
///     .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([
///         "/subscriptions/.../userAssignedIdentities/my-identity",
///     ]))
///     .await?;
/// for identity in creds.user_assigned_identities() {
///     println!("{:?} valid until {:?}", identity.resource_id, identity.not_after);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[doc(alias = "NewClientFactory")]
pub struct ClientFactory {
    inner: Arc<FactoryInner>,
}

struct FactoryInner {
    source: Arc<dyn TokenSource>,
    scope: String,
    environment: Environment,
    http: reqwest::Client,
    /// For loopback hosts: the same client without environment proxies (the caller's own
    /// client when it gave one).
    http_direct: reqwest::Client,
    /// Per data plane host (`host:port`) and identity URL tenant (`tid`): the tenant
    /// tokens are requested in, learned from the first challenge.
    hosts: Mutex<HashMap<HostTenant, Arc<str>>>,
}

impl FactoryInner {
    /// The tenants learned, per host (a poisoned lock is still a usable map).
    fn hosts(&self) -> MutexGuard<'_, HashMap<HostTenant, Arc<str>>> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A data plane host (`host:port`) and the tenant its identity URL names (`tid`,
/// lower-cased), if any.
type HostTenant = (String, Option<Arc<str>>);

impl ClientFactory {
    /// A factory whose clients get tokens from `source` for `audience` (the data plane's
    /// audience, e.g. `https://identity.azure.net/`; the scope asked for is its
    /// [`default_scope`](crate::default_scope), `<audience>/.default`).
    ///
    /// # Errors
    ///
    /// `invalid_argument` naming `audience` when it is empty; `http_client` when
    /// the HTTP client cannot be built; `conflicting_options` when both an
    /// HTTP client and extra roots are set.
    #[doc(alias = "NewClientFactory")]
    pub fn new(
        source: impl TokenSource + 'static,
        audience: &str,
        environment: Environment,
    ) -> Result<Self> {
        if audience.trim().trim_end_matches('/').is_empty() {
            return Err(Error::invalid_argument("audience", "is empty"));
        }
        Ok(ClientFactory {
            inner: Arc::new(FactoryInner {
                source: Arc::new(source),
                scope: default_scope(audience),
                // Hosts vary per identity URL: the crate-built client comes in two, the
                // second without environment proxies for loopback hosts.
                http: environment.client(false)?,
                http_direct: environment.client(true)?,
                environment,
                hosts: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A client for one identity URL (ARM's `x-ms-identity-url`; Go:
    /// `ClientFactory.NewClient`). Its query parameters are sent with every request.
    ///
    /// # Errors
    ///
    /// `invalid_identity_url`: not a URL, not `https` (plain `http` only on a
    /// loopback host with [`Environment::allow_http_loopback`] in the factory's environment), no host, or user
    /// information in it. Nothing is sent.
    #[doc(alias = "NewClient")]
    pub fn client(&self, identity_url: &str) -> Result<Client> {
        let allow_http = self.inner.environment.allows_http_loopback();
        let (base, query) = parse_identity_url(identity_url, allow_http)?;
        let tid = query
            .iter()
            .find(|(k, v)| k == "tid" && !v.trim().is_empty())
            .map(|(_, v)| Arc::from(v.trim().to_ascii_lowercase()));
        let host = format!(
            "{}:{}",
            base.host_str().unwrap_or_default().to_ascii_lowercase(),
            base.port_or_known_default().unwrap_or_default()
        );
        Ok(Client {
            factory: self.inner.clone(),
            base,
            query,
            host: (host, tid),
        })
    }

    /// The scope tokens are requested for: `<audience>/.default`.
    pub fn scope(&self) -> &str {
        &self.inner.scope
    }
}

impl fmt::Debug for ClientFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientFactory")
            .field("source", &self.inner.source)
            .field("scope", &self.inner.scope)
            .finish_non_exhaustive()
    }
}

/// A client for one identity (Go: the `Client` a `ClientFactory` makes). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    factory: Arc<FactoryInner>,
    /// Scheme, host and path of the identity URL.
    base: Url,
    /// The identity URL's query parameters, in order.
    query: Vec<(String, String)>,
    /// The host and the identity URL's tenant: the key of the tenant learned.
    host: HostTenant,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The query carries a signature: it never prints.
        f.debug_struct("Client")
            .field("identity_url", &self.base.as_str())
            .field("query_parameters", &self.query.len())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Get the system-assigned identity's credentials: `GET {identity URL}`.
    #[doc(alias = "Getcred")]
    pub async fn get_system_assigned_identity_credentials(
        &self,
    ) -> Result<ManagedIdentityCredentials> {
        self.call("get_system_assigned", Method::GET, "", None::<&()>)
            .await
    }

    /// Get user-assigned identities' credentials: `POST {identity URL}` with the request
    /// (Go: `Client.GetUserAssignedIdentitiesCredentials`). They come back in
    /// [`explicit_identities`](ManagedIdentityCredentials::explicit_identities).
    #[doc(alias = "GetUserAssignedIdentitiesCredentials", alias = "Getcreds")]
    pub async fn get_user_assigned_identities_credentials(
        &self,
        request: &UserAssignedIdentitiesRequest,
    ) -> Result<ManagedIdentityCredentials> {
        self.call("get_user_assigned", Method::POST, "", Some(request))
            .await
    }

    /// Delete the system-assigned identity: `DELETE {identity URL}` (200 or 204).
    #[doc(alias = "Deleteidentity")]
    pub async fn delete_system_assigned_identity(&self) -> Result<()> {
        let call = self.execute(Method::DELETE, "", None);
        telemetry::service_call(Service::DataPlane, "delete_system_assigned", call)
            .await
            .map(|_| ())
    }

    /// Move the identity to another resource: `POST {identity URL path}/proxy/move`.
    #[doc(alias = "Moveidentity")]
    pub async fn move_identity(
        &self,
        request: &MoveIdentityRequest,
    ) -> Result<MoveIdentityResponse> {
        self.call("move_identity", Method::POST, "/proxy/move", Some(request))
            .await
    }

    /// One operation with a JSON answer, in its `dataplane_request` span, counted by
    /// outcome with its duration. Errors never echo the body (it holds secrets).
    async fn call<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        method: Method,
        suffix: &str,
        request: Option<&impl Serialize>,
    ) -> Result<T> {
        let call = async {
            let body = request.map(serde_json::to_vec).transpose();
            let body = body.map_err(crate::parser_errors::json_error)?;
            let (status, body) = self.execute(method, suffix, body).await?;
            serde_json::from_slice(&body).map_err(|e| {
                let reason = redact_quoted(&e.to_string());
                unusable(status, format!("not the expected JSON ({reason})"))
            })
        };
        telemetry::service_call(Service::DataPlane, operation, call).await
    }

    /// One operation, with retries (the crate's retry policy) around the authenticated
    /// exchange: the status and body of its 2xx answer.
    async fn execute(
        &self,
        method: Method,
        suffix: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>)> {
        let env = &self.factory.environment;
        // The URL holds the signature: never logged.
        let url = request_url(&self.base, &self.query, suffix);
        let what = format!(
            "{method} {}{suffix}",
            self.base.path().trim_end_matches('/')
        );
        let (method, url, body, what_ref) = (&method, &url, body.as_deref(), what.as_str());
        // Only the data plane's own failures are retried here: a token source's errors
        // come after its own retries and end the call (`Ok(Err(..))` stops the loop).
        retry::run(
            env.retry_policy(),
            env.clock().as_ref(),
            || async move {
                match self.authenticated(method, url, body, what_ref).await {
                    Err(e) if is_data_plane_failure(&e) => Err(e),
                    other => Ok(other),
                }
            },
            |attempt, delay, error| {
                tracing::info!(
                    request = %what,
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    error = %error,
                    "data plane request failed; retrying"
                );
            },
        )
        .await
        .and_then(|outcome| outcome)
    }

    /// Send with the token for the host and tenant if one is known. On a 401 challenge to
    /// a request without a token, or with a token for another tenant: a token for the
    /// tenant (the identity URL's `tid`, else the challenge's) and once more. On a 401 to
    /// the token for that tenant: one token fetched past every cache, and once more. The
    /// next 401 is the error.
    async fn authenticated(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&[u8]>,
        what: &str,
    ) -> Result<(u16, Vec<u8>)> {
        let f = &*self.factory;
        let known = f.hosts().get(&self.host).cloned();
        let mut sent = match known {
            Some(tenant) => Some((tenant.clone(), f.source.token(&f.scope, &tenant).await?)),
            None => None,
        };
        let (mut asked, mut replaced) = (false, false);
        loop {
            let token = sent.as_ref().map(|(_, token)| token);
            let response = self.send(method, url, body, token, what).await?;
            if response.status != 401 {
                return finish(response, what);
            }
            let challenged = match challenged_tenant(&response.challenges) {
                Ok(tenant) => tenant,
                // A 401 to a request that carried a token and has no usable challenge: the
                // token was refused; report the 401.
                Err(_) if sent.is_some() && response.challenges.is_empty() => {
                    return finish(response, what);
                }
                Err(e) => return Err(e),
            };
            // The identity URL's `tid` when it has one (a token for another tenant is
            // never sent for it), else the challenge's.
            let tenant = match &self.host.1 {
                Some(tid) => tid.clone(),
                None => Arc::from(challenged.as_str()),
            };
            let next = match &sent {
                Some((for_tenant, refused)) if **for_tenant == *tenant => {
                    if replaced {
                        return finish(response, what);
                    }
                    replaced = true;
                    tracing::debug!(request = %what, %tenant, "data plane refused the token; fetching a new one");
                    f.source
                        .replacement_token(refused, &f.scope, &tenant)
                        .await?
                }
                _ => {
                    if asked {
                        return finish(response, what);
                    }
                    asked = true;
                    tracing::debug!(request = %what, %tenant, challenged, "data plane challenge; requesting a token");
                    f.source.token(&f.scope, &tenant).await?
                }
            };
            f.hosts().insert(self.host.clone(), tenant.clone());
            sent = Some((tenant, next));
        }
    }

    /// One HTTP exchange.
    async fn send(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&[u8]>,
        token: Option<&AccessToken>,
        what: &str,
    ) -> Result<RawAnswer> {
        let f = &*self.factory;
        let client_request_id = uuid::Uuid::new_v4().to_string();
        let shown = url.as_str().split(['?', '#']).next().unwrap_or_default();
        let transport = |e: reqwest::Error| -> Error {
            let message = cause_chain(&e).replace(url.as_str(), shown);
            // reqwest's error names the URL with its query (a signature): not kept.
            TransportError::from_reqwest(SERVICE, shown.to_owned(), message, e.without_url()).into()
        };
        // A loopback host is never reached through a proxy from the environment.
        let http = match loopback::is_loopback(url) {
            true => &f.http_direct,
            false => &f.http,
        };
        let mut request = http
            .request(method.clone(), url.clone())
            .timeout(f.environment.request_timeout())
            .header("accept", "application/json")
            // Per request, so that a caller's own client sends it too.
            .header(
                reqwest::header::USER_AGENT,
                f.environment.user_agent_header(),
            )
            .header("x-ms-client-request-id", &client_request_id);
        if let Some(token) = token {
            request = request.bearer_auth(token.token());
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_vec());
        }
        let exchange::Answer {
            status,
            headers,
            body,
        } = exchange::send(request)
            .await
            .map_err(|a| {
                let message = format!("the data plane request was abandoned: {}", a.0);
                Error::abandoned("data_plane_request_abandoned", message)
            })?
            .map_err(transport)?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let challenges = headers
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        tracing::debug!(request = %what, status, "data plane answered");
        Ok(RawAnswer {
            status,
            body,
            retry_after: header("retry-after")
                .and_then(|v| body::parse_retry_after(v, f.environment.clock().now())),
            request_id: header("x-ms-request-id").map(service_text),
            client_request_id,
            challenges,
        })
    }
}

/// An answer as received (the body `None` when over the size limit).
struct RawAnswer {
    status: u16,
    body: Option<Vec<u8>>,
    retry_after: Option<Duration>,
    request_id: Option<String>,
    client_request_id: String,
    challenges: Vec<String>,
}

/// Pure: a 2xx answer's status and body, or the typed error for anything else.
fn finish(raw: RawAnswer, what: &str) -> Result<(u16, Vec<u8>)> {
    if (200..300).contains(&raw.status) {
        return match raw.body {
            Some(body) => Ok((raw.status, body)),
            None => Err(unusable(raw.status, body::too_large_reason())),
        };
    }
    let (code, message) = raw
        .body
        .as_deref()
        .map(parse_error_body)
        .unwrap_or_default();
    Err(ErrorKind::Service(Box::new(ServiceError {
        service: DATA_PLANE,
        status: raw.status,
        code,
        message,
        request_id: raw.request_id,
        client_request_id: Some(raw.client_request_id),
        retry_after: raw.retry_after,
        request: what.to_owned(),
    }))
    .into())
}

/// The data plane answered `status` (2xx) with a body the operation cannot use.
fn unusable(status: u16, reason: impl std::fmt::Display) -> Error {
    let message = format!("the data plane answered HTTP {status} with an unusable body: {reason}");
    Error::answer("invalid_data_plane_response", message)
}

/// How transport failures name this service.
const SERVICE: &str = "data plane";

/// Whether an error is the data plane's own (an answer or a transport failure), which the
/// client's retry loop may retry; anything else (the token source's errors) is final.
fn is_data_plane_failure(error: &Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Service(e) if e.service == DATA_PLANE
    ) || matches!(error.kind(), ErrorKind::Transport(t) if t.service == SERVICE)
}

/// Pure: split and check an identity URL: the base (scheme, host, path) and its query
/// parameters in order (`api-version` dropped: every request sets its own).
pub(crate) fn parse_identity_url(
    identity_url: &str,
    allow_http_loopback: bool,
) -> Result<(Url, Vec<(String, String)>)> {
    let mut base = base_url(identity_url, allow_http_loopback, true).map_err(|reason| {
        let url = identity_url.split(['?', '#']).next().unwrap_or_default();
        let message = format!("identity URL `{url}` is not usable: {reason}");
        Error::config("invalid_identity_url", "identity_url", message)
    })?;
    let query = base
        .query_pairs()
        .filter(|(k, _)| k != "api-version")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    base.set_query(None);
    base.set_fragment(None);
    Ok((base, query))
}

/// Pure: an operation's URL: the base path (trailing `/` trimmed when a suffix follows)
/// plus `suffix`, the identity URL's query parameters in order, then `api-version`.
pub(crate) fn request_url(base: &Url, query: &[(String, String)], suffix: &str) -> Url {
    let mut url = base.clone();
    if !suffix.is_empty() {
        let path = format!("{}{suffix}", base.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    url.query_pairs_mut()
        .extend_pairs(query)
        .append_pair("api-version", API_VERSION);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID_URL: &str = "https://eastus.identity.azure.net/subscriptions/s/resourcegroups/g/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c/credentials/v2/identities?arpid=a&keyid=k&sig=SIGNATURE&sigver=1.0&tid=t";

    #[test]
    fn only_the_data_plane_s_own_transport_failures_are_retried_here() {
        let failure = |service| {
            Error::from(TransportError::new(
                service,
                "u",
                false,
                crate::error::TransportFault::Passing,
                "m".into(),
                None,
            ))
        };
        assert!(is_data_plane_failure(&failure(SERVICE)));
        // The token source's own failures were retried by the source already.
        assert!(!is_data_plane_failure(&failure("token")));
    }

    #[test]
    fn identity_url_keeps_query_and_adds_api_version() {
        let (base, query) = parse_identity_url(ID_URL, false).unwrap();
        assert_eq!(base.query(), None);
        assert_eq!(query.len(), 5);
        let url = request_url(&base, &query, "");
        assert_eq!(
            url.query(),
            Some("arpid=a&keyid=k&sig=SIGNATURE&sigver=1.0&tid=t&api-version=2024-01-01")
        );
        let url = request_url(&base, &query, "/proxy/move");
        assert!(
            url.path()
                .ends_with("/credentials/v2/identities/proxy/move")
        );
        // An api-version in the identity URL is replaced, not repeated.
        let (base, query) = parse_identity_url("https://h/p/?api-version=1999&x=1", false).unwrap();
        let url = request_url(&base, &query, "/proxy/move");
        assert_eq!(
            url.as_str(),
            "https://h/p/proxy/move?x=1&api-version=2024-01-01"
        );
    }

    #[test]
    fn identity_url_must_be_https_and_errors_hide_the_query() {
        for (bad, allow) in [
            ("http://eastus.identity.azure.net/x?sig=SECRETSIG", false),
            ("http://eastus.identity.azure.net/x?sig=SECRETSIG", true),
            ("http://127.0.0.1:1/x?sig=SECRETSIG", false),
            ("ftp://h/x?sig=SECRETSIG", true),
            ("https://user:pw@h/x?sig=SECRETSIG", false),
            ("not a url?sig=SECRETSIG", false),
        ] {
            let e = parse_identity_url(bad, allow).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::Config {
                        code: "invalid_identity_url",
                        ..
                    }
                ),
                "{bad}"
            );
            assert!(!e.to_string().contains("SECRETSIG"), "{e}");
        }
        parse_identity_url("http://127.0.0.1:1/x", true).unwrap();
    }

    #[test]
    fn errors_keep_status_code_message_and_ids() {
        let raw = RawAnswer {
            status: 429,
            body: Some(br#"{"error":{"code":"TooManyRequests","message":"slow down"}}"#.to_vec()),
            retry_after: Some(Duration::from_secs(7)),
            request_id: Some("srv-1".into()),
            client_request_id: "cli-1".into(),
            challenges: Vec::new(),
        };
        let e = finish(raw, "GET /x").err().unwrap();
        let ErrorKind::Service(d) = e.kind() else {
            panic!("{e:?}")
        };
        assert_eq!(d.status, 429);
        assert_eq!(d.code.as_deref(), Some("TooManyRequests"));
        assert_eq!(d.message.as_deref(), Some("slow down"));
        assert_eq!(d.request_id.as_deref(), Some("srv-1"));
        assert_eq!(d.client_request_id.as_deref(), Some("cli-1"));
        assert_eq!(d.retry_after, Some(Duration::from_secs(7)));
        assert!(e.is_transient());
    }
}
