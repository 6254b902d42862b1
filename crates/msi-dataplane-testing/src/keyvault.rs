//! A Key Vault (secrets) compatible server for tests: in-process HTTPS on 127.0.0.1 with
//! the kit's test CA.
//!
//! Independent of the rest of the crate. It does what the service does for the routes a
//! credential store uses:
//!
//! - a request without a bearer token gets 401 with `WWW-Authenticate: Bearer
//!   authorization="https://login.microsoftonline.com/<tenant>",
//!   resource="https://vault.azure.net"`; a token must have been issued by the linked
//!   [`EntraServer`] for `https://vault.azure.net/.default` in the vault's tenant;
//! - every request needs `api-version` (400 `BadParameter` without);
//! - secret names are 1-127 of `[0-9A-Za-z-]` (400 `BadParameter` otherwise);
//! - `PUT /secrets/{name}` adds a version; `GET /secrets/{name}[/{version}]`;
//!   `DELETE /secrets/{name}` soft-deletes; `GET|DELETE /deletedsecrets/{name}` (purge:
//!   204); `POST /deletedsecrets/{name}/recover`; `GET /secrets?maxresults=N` and
//!   `GET /deletedsecrets?maxresults=N` in pages (`maxresults` 1..=25, and at most the
//!   server's page size) linked by `nextLink`;
//! - `PUT` to a name held by a deleted secret gets 409 `Conflict`; an unknown secret 404
//!   `SecretNotFound`; scripted answers (429 with `Retry-After`, 503) come first.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Value, json};

use super::answer::Scripted;
use super::entra::EntraServer;
use super::script::{Facts, Match, ScriptBuilder, Scripts, VerifyOnDrop, script_methods};
use super::serve::{self, Answer, DropConnection, Listening};

const RESOURCE: &str = KeyVaultServer::RESOURCE;
const SCOPE: &str = KeyVaultServer::SCOPE;
const MAX_RESULTS: usize = KeyVaultServer::MAX_RESULTS;
const MAX_BODY: usize = 1 << 20;
const RECOVERABLE_DAYS: i64 = 90;

/// One request the vault received.
///
/// Its `Debug` hides the body (a `PUT` carries the secret's value).
#[derive(Clone)]
#[non_exhaustive]
pub struct KeyVaultRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Query parameters in order, decoded.
    pub query: Vec<(String, String)>,
    /// The `User-Agent` sent, if any: at most 512 characters, control characters
    /// escaped.
    pub user_agent: Option<String>,
    /// Whether it carried a token the server accepted.
    pub authorized: bool,
    /// The status answered.
    pub status: u16,
    /// The request body (it holds secret values: look at it on purpose only).
    pub body: String,
}

impl fmt::Debug for KeyVaultRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyVaultRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("user_agent", &self.user_agent)
            .field("authorized", &self.authorized)
            .field("status", &self.status)
            .field(
                "body",
                &format_args!("** redacted ({} bytes) **", self.body.len()),
            )
            .finish()
    }
}

/// One stored version of a secret, without its value ([`KeyVaultServer::secret_value`]
/// reads that).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VaultSecretVersion {
    /// `https://<vault>/secrets/<name>/<version>`.
    pub id: String,
    /// The version (32 hex digits).
    pub version: String,
    /// `contentType`, as put.
    pub content_type: Option<String>,
    /// `tags`, as put (a JSON object).
    pub tags: Option<Value>,
    /// `attributes.enabled`.
    pub enabled: bool,
    /// `attributes.nbf` (Unix seconds).
    pub not_before: Option<i64>,
    /// `attributes.exp` (Unix seconds).
    pub expires: Option<i64>,
    /// When it was put (Unix seconds).
    pub created: i64,
}

/// A secret in the vault: its name as first put and its versions, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VaultSecret {
    /// The name (Key Vault compares names case-insensitively).
    pub name: String,
    /// Its versions, oldest first.
    pub versions: Vec<VaultSecretVersion>,
}

/// A soft-deleted secret.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VaultDeletedSecret {
    /// The secret as it was.
    pub secret: VaultSecret,
    /// `https://<vault>/deletedsecrets/<name>`.
    pub recovery_id: String,
    /// When it was deleted (Unix seconds).
    pub deleted_date: i64,
    /// When the vault would purge it by itself (Unix seconds).
    pub scheduled_purge_date: i64,
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

impl Version {
    fn public(&self) -> VaultSecretVersion {
        VaultSecretVersion {
            id: self.id.clone(),
            version: self.id.rsplit('/').next().unwrap_or_default().to_owned(),
            content_type: self.content_type.clone(),
            tags: self.tags.clone(),
            enabled: self.enabled,
            not_before: self.nbf,
            expires: self.exp,
            created: self.created,
        }
    }
}

#[derive(Clone, Debug)]
struct Deleted {
    versions: Vec<Version>,
    deleted_date: i64,
}

/// The test vault. Cheap to clone; clones control the same server, which stops when the
/// last clone is dropped (or at [`KeyVaultServer::shutdown`]).
///
/// ```no_run
/// # async fn demo() -> msi_dataplane::Result<()> {
/// use std::sync::Arc;
/// use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
/// use msi_dataplane_testing::{EntraServer, KeyVaultServer, TestCertificate, TestIdentity};
/// use msi_dataplane::{
///     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
/// };
///
/// let entra = EntraServer::start().await;
/// let (app, cert) = (TestIdentity::new(), TestCertificate::self_signed());
/// entra.register(&app, &cert);
/// let vault = KeyVaultServer::start(&entra, &app.tenant_id).await;
/// let creds = app.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
/// let http = Environment::default().with_http_client(entra.client());
/// let options = ClientCertificateCredentialOptions::default().with_environment(http.clone());
/// let credential = Arc::new(ClientCertificateCredential::new(&creds, options)?);
/// let store = CredentialStore::new(
///     &vault.url(),
///     credential,
///     StoreOptions::default()
///         .with_environment(http)
///         .verify_challenge_resource(false),
/// )?;
/// store.put_user_assigned_identity("my-identity", &creds).await?;
/// let stored = vault.secret("uamsi-my-identity").unwrap();
/// assert_eq!(stored.versions.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyVaultServer {
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

struct Inner {
    tenant: String,
    /// name (lower-cased: names are case-insensitive) -> versions, oldest first
    secrets: BTreeMap<String, (String, Vec<Version>)>,
    deleted: BTreeMap<String, (String, Deleted)>,
    page_size: usize,
    requests: Vec<KeyVaultRequest>,
    counter: u64,
    /// Record requests (off for benchmarks).
    record: bool,
}

impl KeyVaultServer {
    /// The resource a vault's challenge names.
    pub const RESOURCE: &'static str = "https://vault.azure.net";
    /// The scope a token must be issued for.
    pub const SCOPE: &'static str = "https://vault.azure.net/.default";
    /// The largest `maxresults` Key Vault accepts.
    pub const MAX_RESULTS: usize = 25;

    /// Start a vault for `tenant` on 127.0.0.1 (HTTPS with the kit's test CA), accepting
    /// tokens `entra` issued for [`SCOPE`](Self::SCOPE) in that tenant.
    pub async fn start(entra: &EntraServer, tenant: &str) -> KeyVaultServer {
        Self::start_blocking(entra, tenant)
    }

    /// As [`start`](Self::start), from code without a runtime (a server in a `static`;
    /// see [`EntraServer::start_blocking`]).
    pub fn start_blocking(entra: &EntraServer, tenant: &str) -> KeyVaultServer {
        let bound = serve::bind("KeyVaultServer");
        let state = Arc::new(State {
            scripts: Scripts::new("KeyVaultServer"),
            addr: bound.addr(),
            entra: entra.linked(),
            inner: Mutex::new(Inner {
                tenant: tenant.to_owned(),
                secrets: BTreeMap::new(),
                deleted: BTreeMap::new(),
                page_size: MAX_RESULTS,
                requests: Vec::new(),
                counter: 0,
                record: true,
            }),
        });
        let handler_state = state.clone();
        let listening = bound.serve(true, move |req| handle(handler_state.clone(), req));
        let _verify = Arc::new(VerifyOnDrop(state.scripts.clone()));
        KeyVaultServer {
            state,
            listening,
            _verify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `https://127.0.0.1:<port>/`: the vault URL.
    pub fn url(&self) -> String {
        format!("https://{}/", self.state.addr)
    }

    /// The bound address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// Serve at most this many items a page, whatever `maxresults` says.
    pub fn set_page_size(&self, n: usize) {
        self.lock().page_size = n.max(1);
    }

    /// Record requests or not (off for benchmarks; on by default).
    pub fn set_recording(&self, on: bool) {
        self.lock().record = on;
    }

    /// Script the answers to the vault requests `matcher` matches (by the token's client
    /// id, tenant and scope, or by path and method), and expect a number of them: see
    /// [`ScriptBuilder`]. Scripts are consulted, in the order they were mounted, after the
    /// token and the `api-version` are accepted; a request no script answers gets the
    /// server's normal answer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
    /// use msi_dataplane_testing::{IdentityFixture, KeyVaultServer, Match, Scripted};
    ///
    /// let fx = IdentityFixture::start().await;
    /// let vault = KeyVaultServer::start(&fx.entra, &fx.identity.tenant_id).await;
    /// // The kit's vault is on 127.0.0.1: its challenge's resource is not the vault's host.
    /// let options = StoreOptions::default()
    ///     .with_environment(fx.environment())
    ///     .verify_challenge_resource(false);
    /// let store = CredentialStore::new(&vault.url(), Arc::new(fx.credential.clone()), options).unwrap();
    /// // Reading `cpo` is forbidden while the guard lives, and is tried exactly once.
    /// let forbidden = vault
    ///     .on(Match::any().method("GET").path_prefix("/secrets/cpo"))
    ///     .respond(Scripted::status(403).body(r#"{"error":{"code":"Forbidden","message":"denied"}}"#))
    ///     .until_cleared()
    ///     .expect(1)
    ///     .mount_scoped();
    /// assert!(store.get("cpo", None).await.is_err());
    /// drop(forbidden); // checks the expectation
    /// # }
    /// ```
    pub fn on(&self, matcher: Match) -> ScriptBuilder {
        ScriptBuilder::new(self.state.scripts.clone(), matcher)
    }

    script_methods!("vault");

    /// Every request received (while recording), in order.
    pub fn requests(&self) -> Vec<KeyVaultRequest> {
        self.lock().requests.clone()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// Every secret that is not deleted, by name, without values.
    pub fn secrets(&self) -> Vec<VaultSecret> {
        self.lock()
            .secrets
            .values()
            .map(|(name, versions)| public_secret(name, versions))
            .collect()
    }

    /// The secret `name` (not deleted), without values.
    pub fn secret(&self, name: &str) -> Option<VaultSecret> {
        self.lock()
            .secrets
            .get(&name.to_ascii_lowercase())
            .map(|(name, versions)| public_secret(name, versions))
    }

    /// Every soft-deleted secret, by name, without values.
    pub fn deleted_secrets(&self) -> Vec<VaultDeletedSecret> {
        let addr = self.state.addr;
        self.lock()
            .deleted
            .values()
            .map(|(name, d)| VaultDeletedSecret {
                secret: public_secret(name, &d.versions),
                recovery_id: format!("https://{addr}/deletedsecrets/{name}"),
                deleted_date: d.deleted_date,
                scheduled_purge_date: d.deleted_date + RECOVERABLE_DAYS * 86_400,
            })
            .collect()
    }

    /// How many versions `name` has (0 when absent or deleted).
    pub fn version_count(&self, name: &str) -> usize {
        self.lock()
            .secrets
            .get(&name.to_ascii_lowercase())
            .map_or(0, |(_, v)| v.len())
    }

    /// A stored value (secret: read it on purpose only): of `version`, or of the latest
    /// version when `None`. `None` when there is no such secret (or it is deleted) or
    /// version.
    pub fn secret_value(&self, name: &str, version: Option<&str>) -> Option<String> {
        let inner = self.lock();
        let (_, versions) = inner.secrets.get(&name.to_ascii_lowercase())?;
        let found = match version {
            None => versions.last(),
            Some(v) => versions.iter().find(|x| x.id.ends_with(&format!("/{v}"))),
        };
        found.map(|v| v.value.clone())
    }

    /// The latest value of `name`, as stored (secret: read it on purpose only).
    pub fn latest_value(&self, name: &str) -> Option<String> {
        self.secret_value(name, None)
    }

    /// Store a secret directly, without a request (seeding large vaults for tests and
    /// benchmarks): a new version with `contentType: application/json`.
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

    /// Stop accepting connections; open connections (and requests in flight) are dropped.
    pub fn shutdown(&self) {
        self.listening.shutdown();
    }
}

impl fmt::Debug for KeyVaultServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyVaultServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

fn public_secret(name: &str, versions: &[Version]) -> VaultSecret {
    VaultSecret {
        name: name.to_owned(),
        versions: versions.iter().map(Version::public).collect(),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Key Vault's content type.
const JSON: &str = "application/json; charset=utf-8";

fn error(status: u16, code: &str, message: &str) -> Answer {
    Answer::azure_error(status, JSON, code, message)
}

fn ok(status: u16, body: Value) -> Answer {
    Answer::json(status, JSON, &body)
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let (parts, body) = req.into_parts();
    let body = serve::read_body(body, MAX_BODY).await;
    let query = serve::query_pairs(&parts.uri);
    let authorization = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (answer, delay, close) = {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut record = KeyVaultRequest {
            user_agent: serve::user_agent(&parts.headers),
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
    serve::send_after(answer, delay, close).await
}

fn route(
    state: &State,
    inner: &mut Inner,
    record: &mut KeyVaultRequest,
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
    let scripted = state.scripts.answer(&Facts {
        method: &record.method,
        path: &record.path,
        client_id: Some(&issued.client_id),
        tenant: Some(&issued.tenant),
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

fn operation(state: &State, inner: &mut Inner, record: &KeyVaultRequest) -> Answer {
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
        ("GET", ["secrets"]) => list(addr, inner, record, false),
        ("GET", ["deletedsecrets"]) => list(addr, inner, record, true),
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

/// `GET /secrets?maxresults=N[&$skiptoken=K]` (and `/deletedsecrets`): names in order,
/// pages of `min(N, page_size)`, `nextLink` until the last page.
fn list(addr: SocketAddr, inner: &Inner, record: &KeyVaultRequest, deleted: bool) -> Answer {
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
    let (items, total): (Vec<Value>, usize) = if deleted {
        (
            inner
                .deleted
                .values()
                .skip(skip)
                .take(page)
                .filter(|(_, d)| !d.versions.is_empty())
                .map(|(name, d)| deleted_item(addr, name, d))
                .collect(),
            inner.deleted.len(),
        )
    } else {
        (
            inner
                .secrets
                .values()
                .skip(skip)
                .take(page)
                .filter_map(|(name, versions)| {
                    versions.last().map(|v| properties_item(addr, name, v))
                })
                .collect(),
            inner.secrets.len(),
        )
    };
    let collection = if deleted { "deletedsecrets" } else { "secrets" };
    let next = skip + page;
    let next_link = if next < total {
        json!(format!(
            "https://{addr}/{collection}?api-version={}&$skiptoken={next}&maxresults={max}",
            q("api-version").unwrap_or_default()
        ))
    } else {
        Value::Null
    };
    ok(200, json!({"value": items, "nextLink": next_link}))
}

/// A `DeletedSecretItem`: the deleted bundle's properties with the secret's id (no
/// version) and no value.
fn deleted_item(addr: SocketAddr, name: &str, d: &Deleted) -> Value {
    let mut b = deleted_bundle(addr, name, d);
    b["id"] = json!(format!("https://{addr}/secrets/{name}"));
    b
}
