//! A Key Vault (secrets) compatible server for tests: in-process HTTPS on 127.0.0.1 with
//! the test CA in fixtures/tls.
//!
//! Independent of the `msi_dataplane` library. It does what the service does for the
//! routes a credential store uses (DESIGN §10):
//!
//! - a request without a bearer token gets 401 with `WWW-Authenticate: Bearer
//!   authorization="https://login.microsoftonline.com/<tenant>",
//!   resource="https://vault.azure.net"`; a token must have been issued by the test Entra
//!   server for `https://vault.azure.net/.default` in the vault's tenant;
//! - every request needs `api-version` (400 `BadParameter` without);
//! - secret names are 1-127 of `[0-9A-Za-z-]` (400 `BadParameter` otherwise);
//! - `PUT /secrets/{name}` adds a version; `GET /secrets/{name}[/{version}]`;
//!   `DELETE /secrets/{name}` soft-deletes; `GET|DELETE /deletedsecrets/{name}` (purge:
//!   204); `POST /deletedsecrets/{name}/recover`; `GET /secrets?maxresults=N` in pages
//!   (`maxresults` 1..=25, and at most the server's page size) linked by `nextLink`;
//! - `PUT` to a name held by a deleted secret gets 409 `Conflict`; an unknown secret 404
//!   `SecretNotFound`; scripted answers (429 with `Retry-After`, 503) come first.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
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

/// The resource a vault's challenge names.
pub const RESOURCE: &str = "https://vault.azure.net";
/// The scope a token must be issued for.
pub const SCOPE: &str = "https://vault.azure.net/.default";
/// The largest `maxresults` Key Vault accepts.
pub const MAX_RESULTS: usize = 25;
const MAX_BODY: usize = 1 << 20;
const RECOVERABLE_DAYS: i64 = 90;

/// One request the vault received.
#[derive(Debug, Clone)]
pub struct VaultRequest {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub authorized: bool,
    pub status: u16,
    /// The request body (it holds secret values: tests only look at it on purpose).
    pub body: String,
}

#[derive(Clone, Debug)]
struct Version {
    id: String,
    value: String,
    content_type: Option<String>,
    tags: Option<Value>,
    enabled: bool,
    nbf: Option<i64>,
    exp: Option<i64>,
    created: i64,
}

#[derive(Clone, Debug)]
struct Deleted {
    versions: Vec<Version>,
    deleted_date: i64,
}

/// The test vault. Cheap to clone; clones control the same server.
#[derive(Clone)]
pub struct KeyVaultServer {
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
    /// name (lower-cased: names are case-insensitive) -> versions, oldest first
    secrets: BTreeMap<String, (String, Vec<Version>)>,
    deleted: BTreeMap<String, (String, Deleted)>,
    page_size: usize,
    script: VecDeque<Scripted>,
    requests: Vec<VaultRequest>,
    counter: u64,
    /// Record request bodies (off for benchmarks).
    record: bool,
}

impl KeyVaultServer {
    /// Start a vault for `tenant`, accepting tokens `entra` issued for the vault scope in
    /// that tenant.
    pub async fn start(entra: &EntraServer, tenant: &str) -> KeyVaultServer {
        let acceptor = TlsAcceptor::from(server_tls_config());
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("KeyVaultServer: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("KeyVaultServer: local_addr");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(State {
            addr,
            entra: entra.clone(),
            inner: Mutex::new(Inner {
                tenant: tenant.to_owned(),
                secrets: BTreeMap::new(),
                deleted: BTreeMap::new(),
                page_size: MAX_RESULTS,
                script: VecDeque::new(),
                requests: Vec::new(),
                counter: 0,
                record: true,
            }),
            shutdown,
        });
        tokio::spawn(accept_loop(listener, acceptor, state.clone(), shutdown_rx));
        KeyVaultServer { state }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `https://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("https://{}/", self.state.addr)
    }

    /// Serve at most this many items a page, whatever `maxresults` says.
    pub fn set_page_size(&self, n: usize) {
        self.lock().page_size = n.max(1);
    }

    /// Keep request records without bodies and stop recording (benchmarks).
    pub fn set_recording(&self, on: bool) {
        self.lock().record = on;
    }

    /// Queue a scripted answer for the next authorized request(s), FIFO.
    pub fn enqueue(&self, answer: Scripted) {
        self.lock().script.push_back(answer);
    }

    pub fn requests(&self) -> Vec<VaultRequest> {
        self.lock().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// How many versions `name` has (0 when absent or deleted).
    pub fn version_count(&self, name: &str) -> usize {
        self.lock()
            .secrets
            .get(&name.to_ascii_lowercase())
            .map_or(0, |(_, v)| v.len())
    }

    /// The latest value of `name`, as stored.
    pub fn latest_value(&self, name: &str) -> Option<String> {
        self.lock()
            .secrets
            .get(&name.to_ascii_lowercase())
            .and_then(|(_, v)| v.last())
            .map(|v| v.value.clone())
    }

    /// Store a secret directly (seeding large vaults for tests and benches).
    pub fn seed(&self, name: &str, value: &str, tags: Value, nbf: i64, exp: i64) {
        let mut inner = self.lock();
        let addr = self.state.addr;
        inner.counter += 1;
        let version = Version {
            id: format!("https://{addr}/secrets/{name}/{:032x}", inner.counter),
            value: value.to_owned(),
            content_type: Some("application/json".into()),
            tags: Some(tags),
            enabled: true,
            nbf: Some(nbf),
            exp: Some(exp),
            created: now(),
        };
        inner
            .secrets
            .entry(name.to_ascii_lowercase())
            .or_insert_with(|| (name.to_owned(), Vec::new()))
            .1
            .push(version);
    }

    pub fn shutdown(&self) {
        self.state.shutdown.send_replace(true);
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
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

fn error(status: u16, code: &str, message: &str) -> Answer {
    Answer {
        status,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
        body: json!({"error": {"code": code, "message": message}}).to_string(),
    }
}

fn ok(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
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
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let authorization = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (answer, delay, close) = {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut record = VaultRequest {
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query,
            authorized: false,
            status: 0,
            body,
        };
        let (answer, delay, close) = route(&state, &mut inner, &mut record, authorization);
        record.status = answer.status;
        if inner.record {
            inner.requests.push(record);
        }
        (answer, delay, close)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if close {
        return Err(std::io::Error::other("scripted: connection dropped"));
    }
    let mut builder = Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    Ok(builder
        .body(Full::new(Bytes::from(answer.body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

fn route(
    state: &State,
    inner: &mut Inner,
    record: &mut VaultRequest,
    authorization: Option<String>,
) -> (Answer, Duration, bool) {
    let none = |a: Answer| (a, Duration::ZERO, false);
    // 1. The token.
    let challenge = |inner: &Inner, why: Option<&str>| {
        let mut value = format!(
            "Bearer authorization=\"https://login.microsoftonline.com/{}\", resource=\"{RESOURCE}\"",
            inner.tenant
        );
        if let Some(why) = why {
            value.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{why}\""
            ));
        }
        let mut a = error(
            401,
            "Unauthorized",
            "AKV10000: Request is missing a Bearer or PoP token.",
        );
        a.headers.push(("www-authenticate".into(), value));
        a
    };
    let Some(token) = authorization
        .as_deref()
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return none(challenge(inner, None));
    };
    let Some(issued) = state.entra.issued(token) else {
        return none(challenge(inner, Some("unknown token")));
    };
    if !issued.tenant.eq_ignore_ascii_case(&inner.tenant) {
        return none(challenge(inner, Some("token for another tenant")));
    }
    if issued.scope != SCOPE {
        return none(challenge(inner, Some("token for another audience")));
    }
    record.authorized = true;
    // 2. api-version.
    if !record
        .query
        .iter()
        .any(|(k, v)| k == "api-version" && !v.is_empty())
    {
        return none(error(
            400,
            "BadParameter",
            "The request URI contains an invalid or missing api-version",
        ));
    }
    // 3. Scripted.
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
    none(operation(state, inner, record))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 127
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn bundle(v: &Version, name: &str, with_value: bool) -> Value {
    let mut b = json!({
        "id": v.id,
        "attributes": {
            "enabled": v.enabled,
            "created": v.created,
            "updated": v.created,
            "recoveryLevel": "Recoverable+Purgeable",
            "recoverableDays": RECOVERABLE_DAYS,
        },
    });
    if let Some(nbf) = v.nbf {
        b["attributes"]["nbf"] = json!(nbf);
    }
    if let Some(exp) = v.exp {
        b["attributes"]["exp"] = json!(exp);
    }
    if let Some(ct) = &v.content_type {
        b["contentType"] = json!(ct);
    }
    if let Some(tags) = &v.tags {
        b["tags"] = tags.clone();
    }
    if with_value {
        b["value"] = json!(v.value);
    }
    let _ = name;
    b
}

fn properties_item(addr: SocketAddr, name: &str, v: &Version) -> Value {
    let mut b = bundle(v, name, false);
    b["id"] = json!(format!("https://{addr}/secrets/{name}"));
    b
}

fn deleted_bundle(addr: SocketAddr, name: &str, d: &Deleted) -> Value {
    let latest = d.versions.last().expect("a deleted secret has a version");
    let mut b = bundle(latest, name, false);
    b["recoveryId"] = json!(format!("https://{addr}/deletedsecrets/{name}"));
    b["deletedDate"] = json!(d.deleted_date);
    b["scheduledPurgeDate"] = json!(d.deleted_date + RECOVERABLE_DAYS * 86_400);
    b
}

fn operation(state: &State, inner: &mut Inner, record: &VaultRequest) -> Answer {
    let addr = state.addr;
    let segments: Vec<&str> = record.path.trim_start_matches('/').split('/').collect();
    let method = record.method.as_str();
    // The SDK asks for the latest version as `/secrets/{name}/` (empty version).
    let segments: Vec<&str> = match segments.as_slice() {
        [a, b, ""] => vec![*a, *b],
        _ => segments,
    };
    if let [_, name, ..] = segments.as_slice()
        && !valid_name(name)
    {
        return error(
            400,
            "BadParameter",
            &format!(
                "The secret name '{name}' is invalid: 1-127 characters of 0-9, a-z, A-Z and -"
            ),
        );
    }
    match (method, segments.as_slice()) {
        ("GET", ["secrets"]) => list(addr, inner, record),
        ("PUT", ["secrets", name]) => {
            let key = name.to_ascii_lowercase();
            if inner.deleted.contains_key(&key) {
                return error(
                    409,
                    "Conflict",
                    &format!(
                        "Secret {name} is currently in a deleted but recoverable state, and its name cannot be reused; in this state, the secret can only be recovered or purged."
                    ),
                );
            }
            let Ok(body) = serde_json::from_str::<Value>(&record.body) else {
                return error(400, "BadParameter", "The request body is not JSON");
            };
            let Some(value) = body.get("value").and_then(Value::as_str) else {
                return error(400, "BadParameter", "Property 'value' is required");
            };
            let attrs = body.get("attributes").cloned().unwrap_or(json!({}));
            inner.counter += 1;
            let version = Version {
                id: format!("https://{addr}/secrets/{name}/{:032x}", inner.counter),
                value: value.to_owned(),
                content_type: body
                    .get("contentType")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                tags: body.get("tags").cloned(),
                enabled: attrs
                    .get("enabled")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                nbf: attrs.get("nbf").and_then(Value::as_i64),
                exp: attrs.get("exp").and_then(Value::as_i64),
                created: now(),
            };
            let answer = ok(200, bundle(&version, name, true));
            inner
                .secrets
                .entry(key)
                .or_insert_with(|| ((*name).to_owned(), Vec::new()))
                .1
                .push(version);
            answer
        }
        ("GET", ["secrets", name]) | ("GET", ["secrets", name, _]) => {
            let wanted = segments.get(2).copied();
            let Some((_, versions)) = inner.secrets.get(&name.to_ascii_lowercase()) else {
                return error(
                    404,
                    "SecretNotFound",
                    &format!("A secret with (name/id) {name} was not found in this key vault."),
                );
            };
            let found = match wanted {
                None => versions.last(),
                Some(v) => versions.iter().find(|x| x.id.ends_with(&format!("/{v}"))),
            };
            match found {
                Some(v) if v.enabled => ok(200, bundle(v, name, true)),
                Some(_) => error(
                    403,
                    "Forbidden",
                    "Operation get is not allowed on a disabled secret.",
                ),
                None => error(
                    404,
                    "SecretNotFound",
                    &format!(
                        "A secret with (name/id) {name}/{} was not found in this key vault.",
                        wanted.unwrap_or_default()
                    ),
                ),
            }
        }
        ("DELETE", ["secrets", name]) => {
            let Some((stored_name, versions)) = inner.secrets.remove(&name.to_ascii_lowercase())
            else {
                return error(
                    404,
                    "SecretNotFound",
                    &format!("A secret with (name/id) {name} was not found in this key vault."),
                );
            };
            let d = Deleted {
                versions,
                deleted_date: now(),
            };
            let answer = ok(200, deleted_bundle(addr, &stored_name, &d));
            inner
                .deleted
                .insert(name.to_ascii_lowercase(), (stored_name, d));
            answer
        }
        ("GET", ["deletedsecrets", name]) => match inner.deleted.get(&name.to_ascii_lowercase()) {
            Some((stored_name, d)) => ok(200, deleted_bundle(addr, stored_name, d)),
            None => error(
                404,
                "SecretNotFound",
                &format!("Deleted Secret not found: {name}"),
            ),
        },
        ("DELETE", ["deletedsecrets", name]) => {
            match inner.deleted.remove(&name.to_ascii_lowercase()) {
                Some(_) => Answer {
                    status: 204,
                    headers: Vec::new(),
                    body: String::new(),
                },
                None => error(
                    404,
                    "SecretNotFound",
                    &format!("Deleted Secret not found: {name}"),
                ),
            }
        }
        ("POST", ["deletedsecrets", name, "recover"]) => {
            match inner.deleted.remove(&name.to_ascii_lowercase()) {
                Some((stored_name, d)) => {
                    let latest = d.versions.last().cloned().expect("a version");
                    inner
                        .secrets
                        .insert(name.to_ascii_lowercase(), (stored_name.clone(), d.versions));
                    ok(200, bundle(&latest, &stored_name, false))
                }
                None => error(
                    404,
                    "SecretNotFound",
                    &format!("Deleted Secret not found: {name}"),
                ),
            }
        }
        (_, ["secrets", ..]) | (_, ["deletedsecrets", ..]) => error(
            405,
            "MethodNotAllowed",
            "The requested method is not allowed",
        ),
        _ => error(404, "NotFound", "no such route"),
    }
}

/// `GET /secrets?maxresults=N[&$skiptoken=K]`: names in order, pages of
/// `min(N, page_size)`, `nextLink` until the last page.
fn list(addr: SocketAddr, inner: &Inner, record: &VaultRequest) -> Answer {
    let q = |k: &str| {
        record
            .query
            .iter()
            .find(|(qk, _)| qk == k)
            .map(|(_, v)| v.as_str())
    };
    let max = match q("maxresults") {
        None => MAX_RESULTS,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_RESULTS).contains(&n) => n,
            _ => {
                return error(
                    400,
                    "BadParameter",
                    "maxresults must be an integer between 1 and 25",
                );
            }
        },
    };
    let page = max.min(inner.page_size);
    let skip: usize = match q("$skiptoken").map(str::parse) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return error(400, "BadParameter", "invalid $skiptoken"),
    };
    let items: Vec<Value> = inner
        .secrets
        .values()
        .skip(skip)
        .take(page)
        .filter_map(|(name, versions)| versions.last().map(|v| properties_item(addr, name, v)))
        .collect();
    let next = skip + page;
    let next_link = if next < inner.secrets.len() {
        json!(format!(
            "https://{addr}/secrets?api-version={}&$skiptoken={next}&maxresults={max}",
            q("api-version").unwrap_or_default()
        ))
    } else {
        Value::Null
    };
    ok(200, json!({"value": items, "nextLink": next_link}))
}
