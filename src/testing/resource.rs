//! A protected resource for tests: the API a component calls with its token (ARM,
//! Microsoft Graph, a service of your own), answering only bearer tokens that the linked
//! [`EntraServer`] issued for the resource's scope.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

use super::entra::{EntraServer, IssuedToken};
use super::serve::{self, Answer, DropConnection, Listening};

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
    /// The status answered: 200 when `issued` is for the server's scope, else 401.
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
            .field("status", &self.status)
            .finish()
    }
}

/// A protected resource on 127.0.0.1 (HTTPS with the kit's test CA): the service your
/// component calls with its token, standing in for ARM or any API behind Entra ID.
///
/// Every request with a bearer token that the linked [`EntraServer`] issued for the
/// server's scope gets `200` and an empty list in Azure's shape (`{"value":[]}`), whatever
/// the method and path; any other request gets `401` with `WWW-Authenticate: Bearer` and
/// an Azure error body (`InvalidAuthenticationToken`) saying what was wrong. Every request
/// is logged ([`ResourceServer::requests`]), with the [`IssuedToken`] that tells which
/// certificate signed the assertion behind the token.
///
/// Cheap to clone; clones control the same server, which stops when the last clone is
/// dropped (or at [`ResourceServer::shutdown`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use msi_dataplane::testing::{EntraServer, ResourceServer, TestCertificate, TestIdentity};
/// use msi_dataplane::{
///     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, HttpOptions,
/// };
///
/// let entra = EntraServer::start().await;
/// let arm = ResourceServer::start(&entra, ResourceServer::ARM_SCOPE).await;
/// let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
/// entra.register(&identity, &cert);
/// let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
/// let http = HttpOptions::default().with_http_client(entra.client());
/// let options = ClientCertificateCredentialOptions::default().with_http_options(http);
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
/// assert_eq!(seen.issued.unwrap().cert_sha256_hex, cert.sha256_hex());
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
    requests: Mutex<Vec<ResourceRequest>>,
}

impl State {
    fn requests(&self) -> MutexGuard<'_, Vec<ResourceRequest>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ResourceServer {
    /// Azure Resource Manager's scope (`https://management.azure.com/.default`).
    pub const ARM_SCOPE: &'static str = "https://management.azure.com/.default";

    /// Start on 127.0.0.1 (HTTPS with the kit's test CA), accepting tokens that `entra`
    /// issued for `scope` (e.g. [`ARM_SCOPE`](Self::ARM_SCOPE)), in any tenant.
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

fn handle(state: &State, req: &Request<Incoming>) -> Result<Response<Full<Bytes>>, DropConnection> {
    let bearer_token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let issued = bearer_token
        .as_deref()
        .and_then(|token| state.entra.issued(token));
    let refusal = match (&bearer_token, &issued) {
        (None, _) => Some("a bearer token is required".to_owned()),
        (Some(_), None) => Some("the token was not issued by the test Entra server".to_owned()),
        (Some(_), Some(issued)) if issued.scope != state.scope => Some(format!(
            "the token was issued for `{}`, not `{}`",
            issued.scope, state.scope
        )),
        _ => None,
    };
    let answer = match &refusal {
        None => Answer::json(200, "application/json", &serde_json::json!({"value": []})),
        Some(reason) => {
            let mut answer = Answer::azure_error(
                401,
                "application/json",
                "InvalidAuthenticationToken",
                reason,
            );
            answer
                .headers
                .push(("www-authenticate".to_owned(), "Bearer".to_owned()));
            answer
        }
    };
    state.requests().push(ResourceRequest {
        method: req.method().as_str().to_owned(),
        path: req.uri().path().to_owned(),
        bearer_token,
        issued,
        status: answer.status,
    });
    Ok(answer.into_response())
}
