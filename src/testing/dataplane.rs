//! An MSI data plane compatible server for tests (API version 2024-01-01).
//!
//! Independent of the `msi_dataplane` library, like the Entra server beside it (whose
//! tokens it checks). It answers a request without a bearer token with a 401 and
//! `WWW-Authenticate: Bearer authorization="https://login.microsoftonline.com/<tenant>"`;
//! with one, it checks that the test Entra server issued it for `<audience>/.default` in
//! the identity's tenant, then checks `api-version=2024-01-01` and every query parameter
//! of the identity URL, then serves the four operations from the credentials it was given
//! (made from fixtures/credentials/*.json), unless a scripted answer comes first.
//!
//! Usable from tests (`support::dataplane`) and from examples with
//! `#[path = "../tests/support/entra.rs"] mod entra;` and
//! `#[path = "../tests/support/dataplane.rs"] mod dataplane;` side by side.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::entra::{EntraServer, Scripted, server_tls_config};

/// The API version the server requires.
pub const API_VERSION: &str = "2024-01-01";
/// The identity URL's path.
pub const IDENTITY_PATH: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-1/credentials/v2/identities";
/// A default audience for tests.
pub const AUDIENCE: &str = "https://dataplane.msi-test.example/";
const MAX_BODY: usize = 1 << 20;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct DataPlaneRequest {
    pub method: String,
    pub path: String,
    /// Query parameters in order, decoded.
    pub query: Vec<(String, String)>,
    /// Lowercase names, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Whether it carried a token the server accepted.
    pub authorized: bool,
    /// The status answered.
    pub status: u16,
}

impl DataPlaneRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The test data plane. Cheap to clone; clones control the same server.
#[derive(Clone)]
pub struct DataPlaneServer {
    state: Arc<State>,
}

struct State {
    addr: SocketAddr,
    entra: EntraServer,
    inner: Mutex<Inner>,
    shutdown: watch::Sender<bool>,
}

struct Inner {
    tenant: String,
    scope: String,
    /// The identity URL's query parameters.
    identity_query: Vec<(String, String)>,
    system_assigned: Option<Value>,
    /// resource id (lower-cased) -> credentials
    user_assigned: HashMap<String, Value>,
    delete_status: u16,
    /// Replaces the default challenge header values when set.
    challenge: Option<Vec<String>>,
    script: VecDeque<Scripted>,
    requests: Vec<DataPlaneRequest>,
}

impl DataPlaneServer {
    /// Start on 127.0.0.1 (HTTPS, fixtures/tls) for identities in `tenant`, accepting
    /// tokens that `entra` issued for `<audience>/.default` in that tenant.
    pub async fn start(entra: &EntraServer, tenant: &str, audience: &str) -> DataPlaneServer {
        let acceptor = TlsAcceptor::from(server_tls_config());
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("DataPlaneServer: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("DataPlaneServer: local_addr");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(State {
            addr,
            entra: entra.clone(),
            inner: Mutex::new(Inner {
                tenant: tenant.to_owned(),
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
                script: VecDeque::new(),
                requests: Vec::new(),
            }),
            shutdown,
        });
        tokio::spawn(accept_loop(listener, acceptor, state.clone(), shutdown_rx));
        DataPlaneServer { state }
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
        format!("https://{}{IDENTITY_PATH}?{query}", self.state.addr)
    }

    /// The identity URL's query parameters.
    pub fn identity_query(&self) -> Vec<(String, String)> {
        self.lock().identity_query.clone()
    }

    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// Serve these credentials (snake_case JSON) on `GET`.
    pub fn set_system_assigned(&self, credentials: Value) {
        self.lock().system_assigned = Some(credentials);
    }

    /// Serve these credentials for the user-assigned identity `resource_id` on `POST`.
    pub fn add_user_assigned(&self, resource_id: &str, credentials: Value) {
        self.lock()
            .user_assigned
            .insert(resource_id.to_ascii_lowercase(), credentials);
    }

    /// The status `DELETE` answers (200 or 204; 204 by default).
    pub fn set_delete_status(&self, status: u16) {
        self.lock().delete_status = status;
    }

    /// Answer unauthenticated requests with these `WWW-Authenticate` values instead.
    pub fn set_challenge(&self, values: &[&str]) {
        self.lock().challenge = Some(values.iter().map(|v| (*v).to_owned()).collect());
    }

    /// Queue a scripted answer for the next authenticated request(s), FIFO.
    pub fn enqueue(&self, answer: Scripted) {
        self.lock().script.push_back(answer);
    }

    pub fn requests(&self) -> Vec<DataPlaneRequest> {
        self.lock().requests.clone()
    }

    /// How many 401 challenges were answered.
    pub fn challenges_sent(&self) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.status == 401)
            .count()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    pub fn shutdown(&self) {
        self.state.shutdown.send_replace(true);
    }
}

/// Credentials JSON from `fixtures/credentials/<name>.json` with `authentication_endpoint`
/// set to `authority` (the test Entra server), as the data plane would hand them out.
pub fn fixture_credentials(name: &str, authority: &str) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/credentials/{name}.json"));
    let text = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("DataPlaneServer: cannot read {}: {e}", path.display()));
    let mut value: Value = serde_json::from_slice(&text).expect("fixture JSON");
    value["authentication_endpoint"] = json!(authority);
    value
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let state = state.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let serve = async {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            };
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                _ = serve => {}
            }
        });
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

fn error_answer(status: u16, code: &str, message: &str) -> Answer {
    Answer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: json!({"error": {"code": code, "message": message}}).to_string(),
    }
}

fn json_answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string(),
    }
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    let mut record = DataPlaneRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
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
        authorized: false,
        status: 0,
    };
    let (answer, delay, close) = {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (answer, delay, close) = route(&state, &mut inner, &mut record);
        record.status = answer.status;
        inner.requests.push(record);
        (answer, delay, close)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if close {
        return Err(std::io::Error::other("scripted: connection dropped"));
    }
    let mut builder = Response::builder().status(answer.status);
    builder = builder.header("x-ms-request-id", uuid::Uuid::new_v4().to_string());
    for (name, value) in &answer.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    Ok(builder
        .body(Full::new(Bytes::from(answer.body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

/// Authenticate, check the query, then a scripted answer or the operation.
fn route(
    state: &State,
    inner: &mut Inner,
    record: &mut DataPlaneRequest,
) -> (Answer, Duration, bool) {
    let challenge = |inner: &Inner, error: Option<&str>| -> Answer {
        let values = inner.challenge.clone().unwrap_or_else(|| {
            let mut value = format!(
                "Bearer authorization=\"https://login.microsoftonline.com/{}\"",
                inner.tenant
            );
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
    if !issued.tenant.eq_ignore_ascii_case(&inner.tenant) {
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
    if let Some(s) = inner.script.pop_front() {
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
    let answer = operation(inner, record);
    (answer, Duration::ZERO, false)
}

fn operation(inner: &mut Inner, record: &DataPlaneRequest) -> Answer {
    let is_json = record
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"));
    let move_path = format!("{IDENTITY_PATH}/proxy/move");
    match (record.method.as_str(), record.path.as_str()) {
        ("GET", IDENTITY_PATH) => match &inner.system_assigned {
            Some(creds) => json_answer(200, creds.clone()),
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
            for id in ids {
                let Some(id) = id.as_str() else {
                    return error_answer(400, "BadRequest", "`identityIds` holds strings");
                };
                match inner.user_assigned.get(&id.to_ascii_lowercase()) {
                    Some(creds) => {
                        let mut creds = creds.clone();
                        creds["resource_id"] = json!(id);
                        explicit.push(creds);
                    }
                    None => {
                        return error_answer(404, "NotFound", &format!("identity {id} not found"));
                    }
                }
            }
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
