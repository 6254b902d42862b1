//! An MSI data plane compatible server for tests (API version 2024-01-01).
//!
//! Independent of the rest of the crate, like the Entra server whose tokens it checks. It
//! answers a request without a bearer token with a 401 and `WWW-Authenticate: Bearer
//! authorization="https://login.microsoftonline.com/<tenant>"`; with one, it checks that
//! the linked [`EntraServer`] issued it for `<audience>/.default` in the identity's tenant,
//! then checks `api-version=2024-01-01` (once) and every query parameter of the identity
//! URL, then serves the four operations, unless a scripted answer comes first.
//!
//! Identities are made at run time by default ([`DataPlaneServer::create_user_assigned`],
//! [`DataPlaneServer::create_system_assigned`]): a fresh key and 90-day certificate,
//! registered with the linked Entra server so their tokens work, and rotated on demand
//! ([`DataPlaneServer::rotate`]). Credentials given as JSON are served as given.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use super::answer::Scripted;
use super::credentials::{TestCertificate, TestIdentity, credentials_json};
use super::entra::EntraServer;
use super::script::{Facts, Match, ScriptBuilder, Scripts, VerifyOnDrop, script_methods};
use super::serve::{self, Answer, DropConnection, Listening};
use msi_dataplane::BundleFormat;

const MAX_BODY: usize = 1 << 20;
const API_VERSION: &str = DataPlaneServer::API_VERSION;
const IDENTITY_PATH: &str = DataPlaneServer::IDENTITY_PATH;
/// How long the certificates the server makes are valid, as the MSI service's.
const VALIDITY_DAYS: i64 = 90;

/// One request the data plane received.
///
/// Its `Debug` hides the `Authorization` header's value (a bearer token).
#[derive(Clone)]
#[non_exhaustive]
pub struct DataPlaneRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Query parameters in order, decoded.
    pub query: Vec<(String, String)>,
    /// Request headers, lowercase names, in order (the bearer token included: look at it
    /// on purpose only).
    pub headers: Vec<(String, String)>,
    /// The `User-Agent` sent, if any: at most 512 characters, control characters
    /// escaped.
    pub user_agent: Option<String>,
    /// The request body (identity ids; the data plane's requests carry no secret).
    pub body: String,
    /// The tenant the request is for: its `tid` query parameter (the server's tenant
    /// when it has none).
    pub tenant: String,
    /// The tenant of the bearer token it carried, when the linked Entra server issued it.
    pub token_tenant: Option<String>,
    /// Whether it carried a token the server accepted.
    pub authorized: bool,
    /// The status answered.
    pub status: u16,
}

impl DataPlaneRequest {
    /// The value of a request header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for DataPlaneRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| {
                if n == "authorization" {
                    (n.as_str(), "** redacted **")
                } else {
                    (n.as_str(), v.as_str())
                }
            })
            .collect();
        f.debug_struct("DataPlaneRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("headers", &headers)
            .field("user_agent", &self.user_agent)
            .field("body", &self.body)
            .field("tenant", &self.tenant)
            .field("token_tenant", &self.token_tenant)
            .field("authorized", &self.authorized)
            .field("status", &self.status)
            .finish()
    }
}

/// What one successful request handed out for one identity: the data plane's issue log
/// ([`DataPlaneServer::issued`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssuedIdentity {
    /// The user-assigned identity's resource id as requested; `None` for the
    /// system-assigned identity.
    pub resource_id: Option<String>,
    /// The credentials' `client_id`.
    pub client_id: Option<String>,
    /// Lowercase hex SHA-256 of the certificate handed out (the thumbprint
    /// [`TestCertificate::sha256_hex`] and the Entra server report); `None` when the
    /// credentials were given as JSON with a bundle that is not PEM.
    pub cert_sha256_hex: Option<String>,
    /// The credentials' `not_before` (RFC 3339), as handed out.
    pub not_before: Option<String>,
}

/// The test data plane. Cheap to clone; clones control the same server, which stops when
/// the last clone is dropped (or at [`DataPlaneServer::shutdown`]).
///
/// ```no_run
/// # async fn demo() {
/// use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
/// use msi_dataplane_testing::{DataPlaneServer, EntraServer};
///
/// let entra = EntraServer::start().await;
/// let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// let dp = DataPlaneServer::start(&entra, tenant, DataPlaneServer::AUDIENCE).await;
/// let resource_id = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cpo";
/// let (identity, certificate) = dp.create_user_assigned(resource_id);
/// // ... a ClientFactory (over a credential registered with `entra`) asks for it:
/// // factory.client(&dp.identity_url())?.get_user_assigned_identities_credentials(...)
/// let first = dp.certificate(resource_id).unwrap();
/// assert_eq!(first.sha256_hex(), certificate.sha256_hex());
/// dp.rotate(resource_id); // the next request hands out a new key and certificate
/// assert!(dp.certificate(resource_id).unwrap().not_before() > first.not_before());
/// assert_eq!(identity.tenant_id, tenant);
/// # }
/// ```
#[derive(Clone)]
pub struct DataPlaneServer {
    state: Arc<State>,
    listening: Listening,
    /// Checks the scripts' expectations when the last handle goes.
    _verify: Arc<VerifyOnDrop>,
}

struct State {
    addr: SocketAddr,
    entra: EntraServer,
    inner: Mutex<Inner>,
    scripts: Arc<Scripts>,
}

/// What the server hands out for one identity.
#[derive(Clone)]
enum Served {
    /// Credentials given as JSON (snake_case), served as given.
    Json(Value),
    /// An identity made at run time with its current certificate.
    Generated {
        identity: TestIdentity,
        cert: TestCertificate,
    },
}

struct Inner {
    tenant: String,
    /// Further tenants with identities behind this host (lower-cased).
    other_tenants: Vec<String>,
    /// Refuse this many more otherwise valid tokens.
    refuse_tokens: usize,
    scope: String,
    /// The identity URL's query parameters.
    identity_query: Vec<(String, String)>,
    system_assigned: Option<Served>,
    /// resource id (lower-cased) -> credentials
    user_assigned: HashMap<String, Served>,
    delete_status: u16,
    /// Replaces the default challenge header values when set.
    challenge: Option<Vec<String>>,
    requests: Vec<DataPlaneRequest>,
    issued: Vec<IssuedIdentity>,
}

impl DataPlaneServer {
    /// The API version the server requires.
    pub const API_VERSION: &'static str = "2024-01-01";
    /// The identity URL's path.
    pub const IDENTITY_PATH: &'static str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-1/credentials/v2/identities";
    /// An audience for tests (the data plane's token audience).
    pub const AUDIENCE: &'static str = "https://dataplane.msi-test.example/";

    /// Start on 127.0.0.1 (HTTPS with the kit's test CA) for identities in `tenant`,
    /// accepting tokens that `entra` issued for `<audience>/.default` in that tenant.
    pub async fn start(entra: &EntraServer, tenant: &str, audience: &str) -> DataPlaneServer {
        Self::start_blocking(entra, tenant, audience)
    }

    /// As [`start`](Self::start), from code without a runtime (a server in a `static`;
    /// see [`EntraServer::start_blocking`]).
    pub fn start_blocking(entra: &EntraServer, tenant: &str, audience: &str) -> DataPlaneServer {
        let bound = serve::bind("DataPlaneServer");
        let state = Arc::new(State {
            scripts: Scripts::new("DataPlaneServer"),
            addr: bound.addr(),
            entra: entra.linked(),
            inner: Mutex::new(Inner {
                tenant: tenant.to_owned(),
                other_tenants: Vec::new(),
                refuse_tokens: 0,
                scope: format!("{}/.default", audience.trim_end_matches('/')),
                identity_query: vec![
                    ("arpid".into(), "/subscriptions/1d3e5f7a/resourcegroups/msi-test/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-1".into()),
                    ("keyid".into(), "b3f1c2d4-0000-4000-8000-000000000001".into()),
                    ("sig".into(), "c2lnbmF0dXJlLW5vdC1mb3ItbG9ncw==".into()),
                    ("sigver".into(), "1.0".into()),
                    ("tid".into(), tenant.to_owned()),
                ],
                system_assigned: None,
                user_assigned: HashMap::new(),
                delete_status: 204,
                challenge: None,
                requests: Vec::new(),
                issued: Vec::new(),
            }),
        });
        let handler_state = state.clone();
        let listening = bound.serve(true, move |req| handle(handler_state.clone(), req));
        let _verify = Arc::new(VerifyOnDrop(state.scripts.clone()));
        DataPlaneServer {
            state,
            listening,
            _verify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The identity URL, as ARM's `x-ms-identity-url` would hold it.
    pub fn identity_url(&self) -> String {
        let inner = self.lock();
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(inner.identity_query.iter())
            .finish();
        format!("https://{}{}?{query}", self.state.addr, Self::IDENTITY_PATH)
    }

    /// The identity URL of an identity in `tenant` behind this same host: the server's
    /// identity URL with `tid` = `tenant`. The server then challenges such requests for
    /// `tenant` and accepts only tokens issued in it, as the data plane does for each
    /// customer's identities behind one regional endpoint.
    pub fn identity_url_in(&self, tenant: &str) -> String {
        let mut inner = self.lock();
        let lower = tenant.to_ascii_lowercase();
        if !inner.tenant.eq_ignore_ascii_case(tenant) && !inner.other_tenants.contains(&lower) {
            inner.other_tenants.push(lower);
        }
        let query = inner.identity_query.iter().map(|(k, v)| match k.as_str() {
            "tid" => (k.as_str(), tenant),
            _ => (k.as_str(), v.as_str()),
        });
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        format!("https://{}{}?{query}", self.state.addr, Self::IDENTITY_PATH)
    }

    /// Make the user-assigned identity `resource_id` in `tenant` (as
    /// [`create_user_assigned`](Self::create_user_assigned)), reached through
    /// [`identity_url_in`](Self::identity_url_in).
    pub fn create_user_assigned_in(
        &self,
        tenant: &str,
        resource_id: &str,
    ) -> (TestIdentity, TestCertificate) {
        let identity = TestIdentity {
            resource_id: resource_id.to_owned(),
            tenant_id: tenant.to_owned(),
            ..TestIdentity::new()
        };
        self.serve_generated(identity)
    }

    /// Refuse the next `count` requests whose token would be accepted: a 401 with an
    /// `invalid_token` challenge, as the data plane answers a revoked token.
    pub fn refuse_next_tokens(&self, count: usize) {
        self.lock().refuse_tokens = count;
    }

    /// The identity URL's query parameters.
    pub fn identity_query(&self) -> Vec<(String, String)> {
        self.lock().identity_query.clone()
    }

    /// The bound address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The tenant the server's identities live in.
    pub fn tenant(&self) -> String {
        self.lock().tenant.clone()
    }

    // -- Identities made at run time (the default) --------------------------------------

    /// Make the user-assigned identity `resource_id` in the server's tenant: fresh ids, a
    /// fresh RSA key and a certificate valid from an hour ago for 90 days, registered with
    /// the linked Entra server. `POST` requests naming it get its credentials (a PEM
    /// bundle, `authentication_endpoint` = the Entra server). Replaces what was served for
    /// it before. Returns the identity and its certificate (the one handed out until
    /// [`rotate`](Self::rotate)).
    pub fn create_user_assigned(&self, resource_id: &str) -> (TestIdentity, TestCertificate) {
        let identity = TestIdentity {
            resource_id: resource_id.to_owned(),
            tenant_id: self.tenant(),
            ..TestIdentity::new()
        };
        self.serve_generated(identity)
    }

    /// Serve a user-assigned identity made at run time, registered with Entra.
    fn serve_generated(&self, identity: TestIdentity) -> (TestIdentity, TestCertificate) {
        let cert = new_certificate(self.state.entra.now(), None);
        self.state.entra.register(&identity, &cert);
        self.lock().user_assigned.insert(
            identity.resource_id.to_ascii_lowercase(),
            Served::Generated {
                identity: identity.clone(),
                cert: cert.clone(),
            },
        );
        (identity, cert)
    }

    /// Make the system-assigned identity (as [`create_user_assigned`](Self::create_user_assigned)),
    /// served on `GET`.
    pub fn create_system_assigned(&self) -> (TestIdentity, TestCertificate) {
        let identity = TestIdentity {
            tenant_id: self.tenant(),
            ..TestIdentity::new()
        };
        let cert = new_certificate(self.state.entra.now(), None);
        self.state.entra.register(&identity, &cert);
        self.lock().system_assigned = Some(Served::Generated {
            identity: identity.clone(),
            cert: cert.clone(),
        });
        (identity, cert)
    }

    /// Rotate the user-assigned identity `resource_id`: a new key and certificate whose
    /// `not_before` is later than the current one's, registered with the linked Entra
    /// server (the old certificate stays registered, as it stays valid). The next request
    /// hands out the new one. Returns the new certificate.
    ///
    /// # Panics
    ///
    /// When `resource_id` was not made with [`create_user_assigned`](Self::create_user_assigned)
    /// (credentials given as JSON are replaced with [`add_user_assigned`](Self::add_user_assigned)).
    pub fn rotate(&self, resource_id: &str) -> TestCertificate {
        let key = resource_id.to_ascii_lowercase();
        let current = self.lock().user_assigned.get(&key).cloned();
        let Some(Served::Generated { identity, cert }) = current else {
            panic!("DataPlaneServer::rotate: {resource_id} was not made with create_user_assigned");
        };
        let renewed = new_certificate(self.state.entra.now(), Some(&cert));
        self.state.entra.register(&identity, &renewed);
        self.lock().user_assigned.insert(
            key,
            Served::Generated {
                identity,
                cert: renewed.clone(),
            },
        );
        renewed
    }

    /// Rotate the system-assigned identity (as [`rotate`](Self::rotate)).
    ///
    /// # Panics
    ///
    /// When it was not made with [`create_system_assigned`](Self::create_system_assigned).
    pub fn rotate_system_assigned(&self) -> TestCertificate {
        let current = self.lock().system_assigned.clone();
        let Some(Served::Generated { identity, cert }) = current else {
            panic!("DataPlaneServer::rotate_system_assigned: not made with create_system_assigned");
        };
        let renewed = new_certificate(self.state.entra.now(), Some(&cert));
        self.state.entra.register(&identity, &renewed);
        self.lock().system_assigned = Some(Served::Generated {
            identity,
            cert: renewed.clone(),
        });
        renewed
    }

    /// Rotate every identity made at run time (system- and user-assigned); those given as
    /// JSON are left as they are. Returns how many were rotated.
    pub fn rotate_all(&self) -> usize {
        let (system, users): (bool, Vec<String>) = {
            let inner = self.lock();
            (
                matches!(inner.system_assigned, Some(Served::Generated { .. })),
                inner
                    .user_assigned
                    .iter()
                    .filter(|(_, s)| matches!(s, Served::Generated { .. }))
                    .map(|(k, _)| k.clone())
                    .collect(),
            )
        };
        if system {
            self.rotate_system_assigned();
        }
        for resource_id in &users {
            self.rotate(resource_id);
        }
        users.len() + usize::from(system)
    }

    /// The certificate currently handed out for the user-assigned identity `resource_id`
    /// (`None` when unknown or given as JSON).
    pub fn certificate(&self, resource_id: &str) -> Option<TestCertificate> {
        match self
            .lock()
            .user_assigned
            .get(&resource_id.to_ascii_lowercase())
        {
            Some(Served::Generated { cert, .. }) => Some(cert.clone()),
            _ => None,
        }
    }

    /// The certificate currently handed out for the system-assigned identity.
    pub fn system_assigned_certificate(&self) -> Option<TestCertificate> {
        match &self.lock().system_assigned {
            Some(Served::Generated { cert, .. }) => Some(cert.clone()),
            _ => None,
        }
    }

    // -- Credentials given as JSON ------------------------------------------------------

    /// Serve these credentials (snake_case JSON) on `GET`, as given.
    pub fn set_system_assigned(&self, credentials: Value) {
        self.lock().system_assigned = Some(Served::Json(credentials));
    }

    /// Serve these credentials (snake_case JSON) for the user-assigned identity
    /// `resource_id` on `POST`, as given (with `resource_id` set to the requested one).
    pub fn add_user_assigned(&self, resource_id: &str, credentials: Value) {
        self.lock()
            .user_assigned
            .insert(resource_id.to_ascii_lowercase(), Served::Json(credentials));
    }

    // -- Scripting and inspection -------------------------------------------------------

    /// The status `DELETE` answers (200 or 204; 204 by default).
    pub fn set_delete_status(&self, status: u16) {
        self.lock().delete_status = status;
    }

    /// Answer unauthenticated requests with these `WWW-Authenticate` values instead.
    pub fn set_challenge(&self, values: &[&str]) {
        self.lock().challenge = Some(values.iter().map(|v| (*v).to_owned()).collect());
    }

    /// Script the answers to the data plane requests `matcher` matches (by the token's client
    /// id, tenant and scope, or by path and method), and expect a number of them: see
    /// [`ScriptBuilder`]. Scripts are consulted, in the order they were mounted, after the
    /// token and the `api-version` are accepted; a request no script answers gets the
    /// server's normal answer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
    /// use msi_dataplane_testing::{DataPlaneServer, IdentityFixture, Match, Scripted};
    ///
    /// let app = IdentityFixture::start().await; // the managing service's own identity
    /// let dp = DataPlaneServer::start(&app.entra, &app.identity.tenant_id, DataPlaneServer::AUDIENCE).await;
    /// let id = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cpo";
    /// dp.create_user_assigned(id);
    /// // The first POST gets a 503 (the client retries it at once, as `Retry-After` says);
    /// // exactly two POSTs arrive, checked when `dp` is dropped.
    /// dp.on(Match::any().method("POST"))
    ///     .respond(Scripted::status(503).retry_after("0"))
    ///     .expect(2)
    ///     .mount();
    /// let options = app.environment();
    /// let factory = ClientFactory::new(app.credential.clone(), DataPlaneServer::AUDIENCE, options).unwrap();
    /// let client = factory.client(&dp.identity_url()).unwrap();
    /// let issued = client
    ///     .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([id]))
    ///     .await
    ///     .unwrap();
    /// assert!(issued.user_assigned_identity(id).is_some());
    /// # }
    /// ```
    pub fn on(&self, matcher: Match) -> ScriptBuilder {
        ScriptBuilder::new(self.state.scripts.clone(), matcher)
    }

    script_methods!("data plane");

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<DataPlaneRequest> {
        self.lock().requests.clone()
    }

    /// What each successful `GET`/`POST` handed out, in order, one entry per identity.
    pub fn issued(&self) -> Vec<IssuedIdentity> {
        self.lock().issued.clone()
    }

    /// How many 401 challenges were answered.
    pub fn challenges_sent(&self) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.status == 401)
            .count()
    }

    /// Forget the recorded requests (the issue log is kept).
    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// Stop accepting connections; open connections (and requests in flight) are dropped.
    pub fn shutdown(&self) {
        self.listening.shutdown();
    }
}

impl fmt::Debug for DataPlaneServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataPlaneServer")
            .field("addr", &self.state.addr)
            .finish_non_exhaustive()
    }
}

/// A certificate for an identity: 90 days from an hour before `now` (the linked Entra
/// server's clock), in whole seconds (as X.509 holds them); when renewing `previous`,
/// starting at least one second after it.
fn new_certificate(now: OffsetDateTime, previous: Option<&TestCertificate>) -> TestCertificate {
    let now = now.replace_nanosecond(0).unwrap_or(now);
    let mut not_before = now - time::Duration::hours(1);
    if let Some(previous) = previous {
        not_before = not_before.max(previous.not_before() + time::Duration::seconds(1));
    }
    TestCertificate::builder()
        .common_name("msi-dataplane test identity")
        .validity(not_before, not_before + time::Duration::days(VALIDITY_DAYS))
        .self_signed()
}

impl Served {
    /// The credentials JSON to hand out.
    fn credentials(&self, entra: &EntraServer) -> Value {
        match self {
            Served::Json(value) => value.clone(),
            Served::Generated { identity, cert } => {
                let creds = identity.credentials(cert, &entra.base_url(), BundleFormat::Pem);
                let json = credentials_json(&creds);
                serde_json::from_slice(&json).unwrap_or_else(|e| {
                    panic!("DataPlaneServer: credentials JSON does not parse: {e}")
                })
            }
        }
    }
}

/// The issue log's entry for credentials handed out.
fn issued_entry(resource_id: Option<&str>, credentials: &Value) -> IssuedIdentity {
    let text = |k: &str| {
        credentials
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let cert_sha256_hex = credentials
        .get("client_secret")
        .and_then(Value::as_str)
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bundle| {
            CertificateDer::pem_slice_iter(&bundle)
                .next()
                .and_then(Result::ok)
        })
        .map(|der| {
            Sha256::digest(der.as_ref())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        });
    IssuedIdentity {
        resource_id: resource_id.map(str::to_owned),
        client_id: text("client_id"),
        cert_sha256_hex,
        not_before: text("not_before"),
    }
}

fn error_answer(status: u16, code: &str, message: &str) -> Answer {
    Answer::azure_error(status, "application/json", code, message)
}

fn json_answer(status: u16, body: Value) -> Answer {
    Answer::json(status, "application/json", &body)
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let (parts, body) = req.into_parts();
    let body = serve::read_body(body, MAX_BODY).await;
    let mut record = DataPlaneRequest {
        user_agent: serve::user_agent(&parts.headers),
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: serve::query_pairs(&parts.uri),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        tenant: String::new(),
        token_tenant: None,
        authorized: false,
        status: 0,
    };
    let (mut answer, delay, close) = {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (answer, delay, close) = route(&state, &mut inner, &mut record);
        record.status = answer.status;
        inner.requests.push(record);
        (answer, delay, close)
    };
    answer.headers.insert(
        0,
        (
            "x-ms-request-id".to_owned(),
            uuid::Uuid::new_v4().to_string(),
        ),
    );
    serve::send_after(answer, delay, close).await
}

/// Authenticate, check the query, then a scripted answer or the operation.
fn route(
    state: &State,
    inner: &mut Inner,
    record: &mut DataPlaneRequest,
) -> (Answer, Duration, bool) {
    // The request's tenant: its `tid` when the server serves it, else the server's own.
    let tid = record
        .query
        .iter()
        .find(|(k, _)| k == "tid")
        .map(|(_, v)| v.clone());
    record.tenant = match tid {
        Some(t) if inner.other_tenants.contains(&t.to_ascii_lowercase()) => t,
        _ => inner.tenant.clone(),
    };
    let tenant = record.tenant.clone();
    let challenge = |inner: &Inner, error: Option<&str>| -> Answer {
        let values = inner.challenge.clone().unwrap_or_else(|| {
            let mut value =
                format!("Bearer authorization=\"https://login.microsoftonline.com/{tenant}\"");
            if let Some(error) = error {
                value.push_str(&format!(
                    ", error=\"invalid_token\", error_description=\"{error}\""
                ));
            }
            vec![value]
        });
        let mut answer = error_answer(401, "Unauthorized", "a bearer token is required");
        for v in values {
            answer.headers.push(("www-authenticate".into(), v));
        }
        answer
    };
    // 1. The token.
    let bearer = record
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Some(token) = bearer else {
        return (challenge(inner, None), Duration::ZERO, false);
    };
    let Some(issued) = state.entra.issued(&token) else {
        return (
            challenge(inner, Some("unknown token")),
            Duration::ZERO,
            false,
        );
    };
    record.token_tenant = Some(issued.tenant.clone());
    if !issued.tenant.eq_ignore_ascii_case(&record.tenant) {
        return (
            challenge(inner, Some("token for another tenant")),
            Duration::ZERO,
            false,
        );
    }
    if issued.scope != inner.scope {
        return (
            challenge(inner, Some("token for another audience")),
            Duration::ZERO,
            false,
        );
    }
    if inner.refuse_tokens > 0 {
        inner.refuse_tokens -= 1;
        return (
            challenge(inner, Some("token refused")),
            Duration::ZERO,
            false,
        );
    }
    record.authorized = true;
    // 2. The query: every identity URL parameter, and the API version.
    let api_versions: Vec<&str> = record
        .query
        .iter()
        .filter(|(k, _)| k == "api-version")
        .map(|(_, v)| v.as_str())
        .collect();
    if api_versions != [API_VERSION] {
        return (
            error_answer(
                400,
                "InvalidApiVersion",
                "api-version must be 2024-01-01, once",
            ),
            Duration::ZERO,
            false,
        );
    }
    for (k, v) in &inner.identity_query {
        let v = if k == "tid" { &record.tenant } else { v };
        if !record.query.iter().any(|(qk, qv)| qk == k && qv == v) {
            return (
                error_answer(
                    400,
                    "InvalidQuery",
                    &format!("query parameter `{k}` is missing or altered"),
                ),
                Duration::ZERO,
                false,
            );
        }
    }
    // 3. A scripted answer.
    let scripted = state.scripts.answer(&Facts {
        method: &record.method,
        path: &record.path,
        client_id: Some(&issued.client_id),
        tenant: Some(&record.tenant),
        scope: Some(&issued.scope),
    });
    if let Some(s) = scripted {
        return (
            Answer {
                status: s.status,
                headers: s.headers,
                body: s.body,
            },
            s.delay,
            s.close_connection,
        );
    }
    // 4. The operation.
    let answer = operation(&state.entra, inner, record);
    (answer, Duration::ZERO, false)
}

fn operation(entra: &EntraServer, inner: &mut Inner, record: &DataPlaneRequest) -> Answer {
    let is_json = record
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"));
    let move_path = format!("{IDENTITY_PATH}/proxy/move");
    match (record.method.as_str(), record.path.as_str()) {
        ("GET", IDENTITY_PATH) => match inner.system_assigned.clone() {
            Some(served) => {
                let creds = served.credentials(entra);
                inner.issued.push(issued_entry(None, &creds));
                json_answer(200, creds)
            }
            None => error_answer(404, "NotFound", "no system-assigned identity"),
        },
        ("DELETE", IDENTITY_PATH) => {
            inner.system_assigned = None;
            Answer {
                status: inner.delete_status,
                headers: Vec::new(),
                body: String::new(),
            }
        }
        ("POST", IDENTITY_PATH) => {
            let Ok(body) = serde_json::from_str::<Value>(&record.body) else {
                return error_answer(400, "BadRequest", "the body is not JSON");
            };
            if !is_json {
                return error_answer(415, "UnsupportedMediaType", "application/json expected");
            }
            let Some(ids) = body.get("identityIds").and_then(Value::as_array) else {
                return error_answer(400, "BadRequest", "`identityIds` (camelCase) is required");
            };
            let mut explicit = Vec::new();
            let mut issued = Vec::new();
            for id in ids {
                let Some(id) = id.as_str() else {
                    return error_answer(400, "BadRequest", "`identityIds` holds strings");
                };
                match inner.user_assigned.get(&id.to_ascii_lowercase()) {
                    Some(served) => {
                        let mut creds = served.credentials(entra);
                        creds["resource_id"] = json!(id);
                        issued.push(issued_entry(Some(id), &creds));
                        explicit.push(creds);
                    }
                    None => {
                        return error_answer(404, "NotFound", &format!("identity {id} not found"));
                    }
                }
            }
            inner.issued.extend(issued);
            json_answer(200, json!({ "explicit_identities": explicit }))
        }
        ("POST", path) if path == move_path => {
            let target = serde_json::from_str::<Value>(&record.body)
                .ok()
                .and_then(|b| {
                    b.get("targetResourceId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
            match target {
                Some(target) if is_json => json_answer(
                    200,
                    json!({ "identityUrl": format!("https://moved.identity.example{target}/credentials/v2/identities?sig=new") }),
                ),
                _ => error_answer(
                    400,
                    "BadRequest",
                    "`targetResourceId` (camelCase) is required",
                ),
            }
        }
        (_, IDENTITY_PATH) => error_answer(405, "MethodNotAllowed", "method not allowed"),
        _ => error_answer(404, "NotFound", "no such route"),
    }
}
