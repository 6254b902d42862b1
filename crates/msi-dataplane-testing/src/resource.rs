//! A protected resource for tests: the API a component calls with its token (ARM,
//! Microsoft Graph, a service of your own), validating bearer tokens as an Azure resource
//! does: the linked [`EntraServer`]'s signature, issuer, audience, tenant and lifetime.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

use super::entra::{EntraServer, IssuedToken};
use super::jwt::{TokenClaims, TokenRejection};
use super::serve::{self, Answer, DropConnection, Listening};

/// The most characters of a rejection's message put in `WWW-Authenticate`.
const MAX_CHALLENGE_DESCRIPTION_CHARS: usize = 1024;

/// One request the resource server answered.
///
/// Its `Debug` hides the bearer token.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// The bearer token of the `Authorization` header, when it had one (look at it on
    /// purpose only: e.g. to check that a client reused its token).
    pub bearer_token: Option<String>,
    /// What produced the token, when the linked [`EntraServer`] issued it: client id,
    /// tenant, scope and the certificate that signed the assertion.
    pub issued: Option<IssuedToken>,
    /// The token's claims, when it was accepted.
    pub claims: Option<TokenClaims>,
    /// Why the token was refused (`None` when it was accepted or there was none).
    pub rejection: Option<TokenRejection>,
    /// The status answered: 200 when the token was accepted, else 401.
    pub status: u16,
}

impl fmt::Debug for ResourceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "** redacted **"),
            )
            .field("issued", &self.issued)
            .field("claims", &self.claims)
            .field("rejection", &self.rejection)
            .field("status", &self.status)
            .finish()
    }
}

/// A protected resource on 127.0.0.1 (HTTPS with the kit's test CA): the service your
/// component calls with its token, standing in for ARM or any API behind Entra ID.
///
/// It validates a bearer token as an Azure resource does, by the token alone (no lookup
/// in the Entra server's log): the RS256 signature by a key of the linked
/// [`EntraServer`]'s JWKS, `iss` (that server's issuer for the token's `tid`), `aud` (the
/// scope without `/.default`, with or without a trailing `/`, and any audience added by
/// [`accept_audience`](Self::accept_audience)), the tenant (any, unless restricted by
/// [`allow_tenants`](Self::allow_tenants)), and `nbf`/`exp` by the Entra server's clock
/// ([`EntraServer::use_clock`]) with [`TOKEN_CLOCK_SKEW_SECS`](super::TOKEN_CLOCK_SKEW_SECS)
/// of skew.
///
/// A valid token gets `200` and an empty list in Azure's shape (`{"value":[]}`), whatever
/// the method and path. Any other request gets `401` with an Azure error body whose
/// `code` is ARM's (`InvalidAuthenticationTokenAudience`, `ExpiredAuthenticationToken`,
/// ...; `AuthenticationFailed` without a token) and whose `message` says what was wrong
/// (`The audience 'https://vault.azure.net' is invalid: this resource accepts ...`), and
/// `WWW-Authenticate: Bearer authorization_uri="...", error="invalid_token",
/// error_description="..."` (no `error` when no token was sent, as RFC 6750 asks).
/// Every request is logged ([`ResourceServer::requests`]) with the token's claims or
/// [`TokenRejection`], and the [`IssuedToken`] that tells which certificate signed the
/// assertion behind the token.
///
/// Cheap to clone; clones control the same server, which stops when the last clone is
/// dropped (or at [`ResourceServer::shutdown`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use msi_dataplane_testing::{EntraServer, ResourceServer, TestCertificate, TestIdentity};
/// use msi_dataplane::{
///     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
/// };
///
/// let entra = EntraServer::start().await;
/// let arm = ResourceServer::start(&entra, ResourceServer::ARM_SCOPE).await;
/// let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
/// entra.register(&identity, &cert);
/// let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
/// let http = Environment::default().with_http_client(entra.client());
/// let options = ClientCertificateCredentialOptions::default().with_environment(http);
/// let credential = ClientCertificateCredential::new(&creds, options).unwrap();
///
/// // What a component does: a token, then the call.
/// let token = credential.get_token(&[ResourceServer::ARM_SCOPE]).await.unwrap();
/// let url = format!("{}subscriptions", arm.url());
/// let answer = entra.client().get(&url).bearer_auth(token.token()).send().await.unwrap();
/// assert_eq!(answer.status(), 200);
///
/// let seen = arm.requests().pop().unwrap();
/// assert_eq!(seen.path, "/subscriptions");
/// assert_eq!(seen.claims.unwrap().aud, "https://management.azure.com");
/// assert_eq!(seen.issued.unwrap().cert_sha256_hex, cert.sha256_hex());
///
/// // A token for another resource is refused, saying why.
/// let vault = credential.get_token(&["https://vault.azure.net/.default"]).await.unwrap();
/// let answer = entra.client().get(&url).bearer_auth(vault.token()).send().await.unwrap();
/// assert_eq!(answer.status(), 401);
/// let body = answer.text().await.unwrap();
/// assert!(body.contains("The audience 'https://vault.azure.net' is invalid"), "{body}");
/// # }
/// ```
#[derive(Clone)]
pub struct ResourceServer {
    state: Arc<State>,
    listening: Listening,
}

struct State {
    addr: SocketAddr,
    entra: EntraServer,
    scope: String,
    accepting: Mutex<Accepting>,
    requests: Mutex<Vec<ResourceRequest>>,
}

/// What the server accepts.
struct Accepting {
    audiences: Vec<String>,
    /// `None`: any tenant.
    tenants: Option<Vec<String>>,
}

impl State {
    fn requests(&self) -> MutexGuard<'_, Vec<ResourceRequest>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn accepting(&self) -> MutexGuard<'_, Accepting> {
        self.accepting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The audiences a resource for `scope` accepts: the scope without `/.default`, and for a
/// URI the same with the trailing `/` added or removed (ARM accepts both).
fn audiences_of_scope(scope: &str) -> Vec<String> {
    let audience = super::jwt::audience_of_scope(scope);
    let mut audiences = vec![audience.to_owned()];
    if audience.contains("://") {
        let other = match audience.strip_suffix('/') {
            Some(bare) => bare.to_owned(),
            None => format!("{audience}/"),
        };
        audiences.push(other);
    }
    audiences
}

impl ResourceServer {
    /// Azure Resource Manager's scope (`https://management.azure.com/.default`).
    pub const ARM_SCOPE: &'static str = "https://management.azure.com/.default";

    /// Start on 127.0.0.1 (HTTPS with the kit's test CA), accepting tokens that `entra`
    /// signed for `scope`'s resource (e.g. [`ARM_SCOPE`](Self::ARM_SCOPE): audience
    /// `https://management.azure.com`), in any tenant.
    pub async fn start(entra: &EntraServer, scope: &str) -> ResourceServer {
        Self::start_blocking(entra, scope)
    }

    /// As [`start`](Self::start), from code without a runtime (a server in a `static`;
    /// see [`EntraServer::start_blocking`]).
    pub fn start_blocking(entra: &EntraServer, scope: &str) -> ResourceServer {
        let bound = serve::bind("ResourceServer");
        let state = Arc::new(State {
            addr: bound.addr(),
            entra: entra.linked(),
            scope: scope.to_owned(),
            accepting: Mutex::new(Accepting {
                audiences: audiences_of_scope(scope),
                tenants: None,
            }),
            requests: Mutex::new(Vec::new()),
        });
        let handler_state = state.clone();
        let listening = bound.serve(true, move |req| {
            let state = handler_state.clone();
            async move { handle(&state, &req) }
        });
        ResourceServer { state, listening }
    }

    /// `https://127.0.0.1:<port>/`: the base URL to configure the component with.
    pub fn url(&self) -> String {
        format!("https://{}/", self.state.addr)
    }

    /// The bound address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The scope a token must be issued for.
    pub fn scope(&self) -> &str {
        &self.state.scope
    }

    /// The audiences (`aud`) accepted: the scope without `/.default` (with and without a
    /// trailing `/` for a URI), and those added by
    /// [`accept_audience`](Self::accept_audience).
    pub fn audiences(&self) -> Vec<String> {
        self.state.accepting().audiences.clone()
    }

    /// Accept tokens for `audience` too: e.g. the resource application's client id, the
    /// `aud` of the v2.0 tokens Entra issues for an application of your own.
    pub fn accept_audience(&self, audience: &str) {
        let mut accepting = self.state.accepting();
        if !accepting.audiences.iter().any(|a| a == audience) {
            accepting.audiences.push(audience.to_owned());
        }
    }

    /// Accept tokens from these tenants only (`tid`, compared case-insensitively), as a
    /// single-tenant service does; any other gets `401` with
    /// `InvalidAuthenticationTokenTenant`. An empty list refuses every token.
    pub fn allow_tenants<I, S>(&self, tenants: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.state.accepting().tenants = Some(tenants.into_iter().map(Into::into).collect());
    }

    /// Accept tokens from any tenant again (the default).
    pub fn allow_any_tenant(&self) {
        self.state.accepting().tenants = None;
    }

    /// Every request answered, in order of arrival.
    pub fn requests(&self) -> Vec<ResourceRequest> {
        self.state.requests().clone()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        self.state.requests().clear();
    }

    /// Stop accepting connections; open connections (and requests in flight) are dropped.
    pub fn shutdown(&self) {
        self.listening.shutdown();
    }
}

impl fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceServer")
            .field("url", &self.url())
            .field("scope", &self.state.scope)
            .finish_non_exhaustive()
    }
}

/// Why a request was refused before any token was validated.
enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header that is not `Bearer <token>`.
    NotBearer,
    /// A token, refused.
    Token(TokenRejection),
}

impl Refusal {
    fn code(&self) -> &'static str {
        match self {
            Refusal::Missing | Refusal::NotBearer => "AuthenticationFailed",
            Refusal::Token(rejection) => rejection.code(),
        }
    }

    fn message(&self) -> String {
        match self {
            Refusal::Missing => {
                "Authentication failed. The 'Authorization' header is missing.".to_owned()
            }
            Refusal::NotBearer => "Authentication failed. The 'Authorization' header is provided in an invalid format: expected 'Bearer <token>'.".to_owned(),
            Refusal::Token(rejection) => rejection.to_string(),
        }
    }
}

/// `text` as the inside of a quoted string of an HTTP header: printable ASCII only
/// (`"` and `\` replaced, anything else `?`), bounded.
fn header_quoted(text: &str) -> String {
    text.chars()
        .take(MAX_CHALLENGE_DESCRIPTION_CHARS)
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

fn handle(state: &State, req: &Request<Incoming>) -> Result<Response<Full<Bytes>>, DropConnection> {
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The scheme is case-insensitive (RFC 9110).
    let bearer_token = authorization.as_deref().and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("Bearer") && !token.is_empty()).then(|| token.to_owned())
    });
    let issued = bearer_token
        .as_deref()
        .and_then(|token| state.entra.issued(token));
    let (authorization_uri, verdict) = {
        let accepting = state.accepting();
        let tenant = accepting
            .tenants
            .as_ref()
            .and_then(|t| t.first())
            .map_or("common", String::as_str);
        let authorization_uri = format!("{}{tenant}", state.entra.base_url());
        let verdict = match (&authorization, &bearer_token) {
            (None, _) => Err(Refusal::Missing),
            (Some(_), None) => Err(Refusal::NotBearer),
            (Some(_), Some(token)) => state
                .entra
                .validate_with(token, &accepting.audiences, accepting.tenants.as_deref())
                .map_err(Refusal::Token),
        };
        (authorization_uri, verdict)
    };
    let answer = match &verdict {
        Ok(_) => Answer::json(200, "application/json", &serde_json::json!({"value": []})),
        Err(refusal) => {
            let message = refusal.message();
            let mut answer = Answer::azure_error(401, "application/json", refusal.code(), &message);
            let mut challenge = format!("Bearer authorization_uri=\"{authorization_uri}\"");
            if !matches!(refusal, Refusal::Missing) {
                challenge.push_str(&format!(
                    ", error=\"invalid_token\", error_description=\"{}\"",
                    header_quoted(&message)
                ));
            }
            answer
                .headers
                .push(("www-authenticate".to_owned(), challenge));
            answer
        }
    };
    let (claims, rejection) = match verdict {
        Ok(claims) => (Some(claims), None),
        Err(Refusal::Token(rejection)) => (None, Some(rejection)),
        Err(_) => (None, None),
    };
    state.requests().push(ResourceRequest {
        method: req.method().as_str().to_owned(),
        path: req.uri().path().to_owned(),
        bearer_token,
        issued,
        claims,
        rejection,
        status: answer.status,
    });
    Ok(answer.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_s_audiences_are_its_resource_with_and_without_the_slash() {
        assert_eq!(
            audiences_of_scope("https://management.azure.com/.default"),
            [
                "https://management.azure.com",
                "https://management.azure.com/"
            ]
        );
        assert_eq!(
            audiences_of_scope("https://management.azure.com//.default"),
            [
                "https://management.azure.com/",
                "https://management.azure.com"
            ]
        );
        assert_eq!(audiences_of_scope("my-app-id/.default"), ["my-app-id"]);
    }

    #[test]
    fn challenge_descriptions_are_printable_ascii_without_quotes() {
        let text = header_quoted("The audience 'a\"b\\c\u{202e}\n\u{e9}' is invalid");
        assert_eq!(text, "The audience 'a'b/c???' is invalid");
        assert!(hyper::header::HeaderValue::from_str(&text).is_ok());
        assert_eq!(
            header_quoted(&"x".repeat(5000)).len(),
            MAX_CHALLENGE_DESCRIPTION_CHARS
        );
    }
}
