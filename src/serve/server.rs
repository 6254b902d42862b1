//! The listener: loopback TCP, HTTP/1.1 with keep-alive (hyper), bounded connections and
//! request rate; each request checked ([`request`](crate::serve::request)), then
//! answered from the served identity's token cache ([`answer`](crate::serve::answer)).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::error::{ConfigError, ErrorKind, Result, ServeError};
use crate::serve::answer::{self, Refusal};
use crate::serve::identity::{Identities, ServedIdentity};
use crate::serve::limit::{RATE_LIMITED_RETRY_AFTER, RateLimiter};
use crate::serve::request::{self, IDENTITY_HEADER_NAME, Route};
use crate::serve::secret::IdentityHeaderSecret;
use crate::telemetry;

/// The port [`ServeOptions::default`] listens on.
pub const DEFAULT_PORT: u16 = 50342;

/// The path tokens are served on by default (`IDENTITY_ENDPOINT`'s path).
pub const DEFAULT_TOKEN_PATH: &str = "/msi/token";

/// The health path (for Kubernetes probes): 200 when every identity is usable, else 503.
pub const HEALTH_PATH: &str = "/healthz";

/// Options of the [`TokenServer`].
///
/// ```
/// use msi_dataplane::serve::ServeOptions;
///
/// let options = ServeOptions::default().with_port(0).with_max_requests_per_second(None);
/// assert!(options.listen.ip().is_loopback());
/// assert_eq!(options.token_path, "/msi/token");
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Where to listen: a loopback address only (anything else is refused with
    /// [`ServeError::NonLoopbackAddress`]). Default `127.0.0.1:50342`; port 0 picks a
    /// free one ([`TokenServer::local_addr`] says which).
    pub listen: SocketAddr,
    /// The path tokens are served on (`IDENTITY_ENDPOINT`'s path). Default `/msi/token`.
    pub token_path: String,
    /// Most connections open at once; more wait in the listen queue. Default 128.
    pub max_connections: usize,
    /// Most requests a second, on average (bursts of twice that); more are answered 429.
    /// `None`: no limit. Default 500: far above what SDK clients, which cache tokens,
    /// ask for.
    pub max_requests_per_second: Option<u32>,
    /// Time allowed for a request's head to arrive; a connection that sends none in that
    /// time is closed. Default 10 s.
    pub header_read_timeout: Duration,
    /// How often a secret read from a file is read again, to follow a rotation of it
    /// (the last good one is kept when a re-read fails). Default 10 s.
    pub secret_recheck: Duration,
    /// The clock the health report reads.
    pub clock: Arc<dyn Clock>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            token_path: DEFAULT_TOKEN_PATH.to_owned(),
            max_connections: 128,
            max_requests_per_second: Some(500),
            header_read_timeout: Duration::from_secs(10),
            secret_recheck: Duration::from_secs(10),
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("token_path", &self.token_path)
            .field("max_connections", &self.max_connections)
            .field("max_requests_per_second", &self.max_requests_per_second)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("secret_recheck", &self.secret_recheck)
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Listen on this address (loopback only).
    pub fn with_listen(mut self, listen: SocketAddr) -> Self {
        self.listen = listen;
        self
    }

    /// Listen on this port of the current listen address (0: any free port).
    pub fn with_port(mut self, port: u16) -> Self {
        self.listen.set_port(port);
        self
    }

    /// Serve tokens on this path (starting with `/`).
    pub fn with_token_path(mut self, path: impl Into<String>) -> Self {
        self.token_path = path.into();
        self
    }

    /// Allow at most this many connections at once.
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Answer at most this many requests a second (`None`: no limit).
    pub fn with_max_requests_per_second(mut self, max: Option<u32>) -> Self {
        self.max_requests_per_second = max;
        self
    }

    /// Close connections whose request head takes longer than this.
    pub fn with_header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Re-read a secret file this often.
    pub fn with_secret_recheck(mut self, every: Duration) -> Self {
        self.secret_recheck = every;
        self
    }

    /// Use this clock for the health report.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Check the options as [`TokenServer::start`] does (a loopback address, a usable
    /// path and limits), without binding: to refuse a bad setup before loading anything.
    ///
    /// ```
    /// use msi_dataplane::serve::ServeOptions;
    ///
    /// let err = ServeOptions::default().with_listen("0.0.0.0:50342".parse().unwrap()).validate();
    /// assert_eq!(err.unwrap_err().kind().code(), "non_loopback_address");
    /// ```
    pub fn validate(&self) -> Result<()> {
        if !self.listen.ip().is_loopback() {
            return Err(
                ErrorKind::Serve(ServeError::NonLoopbackAddress { addr: self.listen }).into(),
            );
        }
        let invalid = |option, reason: &str| {
            Err(ErrorKind::Serve(ServeError::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
            .into())
        };
        let path = &self.token_path;
        if !path.starts_with('/') || path.len() > 256 || path.contains(['?', '#']) {
            return invalid(
                "token_path",
                "a path starting with `/`, at most 256 bytes, without `?` or `#`",
            );
        }
        if path == HEALTH_PATH {
            return invalid("token_path", "it is the health path");
        }
        if self.max_connections == 0 {
            return invalid("max_connections", "must be at least 1");
        }
        if self.max_requests_per_second == Some(0) {
            return invalid(
                "max_requests_per_second",
                "must be at least 1 (or no limit)",
            );
        }
        if self.secret_recheck.is_zero() {
            return invalid("secret_recheck", "must be longer than zero");
        }
        Ok(())
    }
}

/// What every request reads.
struct State {
    identities: Identities,
    secret: ArcSwap<IdentityHeaderSecret>,
    token_path: String,
    limiter: Option<RateLimiter>,
    clock: Arc<dyn Clock>,
}

/// A running token server: the App Service managed identity protocol on loopback TCP,
/// answered from the served identities' token caches.
///
/// Applications in the pod set `IDENTITY_ENDPOINT` to [`endpoint`](Self::endpoint) and
/// `IDENTITY_HEADER` to the secret, and every Azure SDK's managed identity credential
/// gets its tokens here. Stops when [`shutdown`](Self::shutdown) is called or the last
/// handle is dropped (open connections finish their request in flight).
///
/// ```no_run
/// use msi_dataplane::serve::{IdentityHeaderSecret, ServeOptions, ServedIdentity, TokenServer};
///
/// # async fn run() -> Result<(), msi_dataplane::Error> {
/// let identity = ServedIdentity::load(
///     "/mnt/certs/my-identity",
///     Default::default(),
/// )
/// .await?;
/// let secret = IdentityHeaderSecret::from_file("/var/run/identity-header/secret")?;
/// let server = TokenServer::start(vec![identity], secret, ServeOptions::default()).await?;
/// println!("IDENTITY_ENDPOINT={}", server.endpoint());
/// server.stopped().await;
/// # Ok(()) }
/// ```
pub struct TokenServer {
    addr: SocketAddr,
    token_path: String,
    stop: CancellationToken,
    _guard: tokio_util::sync::DropGuard,
}

impl std::fmt::Debug for TokenServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenServer")
            .field("addr", &self.addr)
            .field("token_path", &self.token_path)
            .finish_non_exhaustive()
    }
}

impl TokenServer {
    /// Check the options and identities, bind, and start serving on the current Tokio
    /// runtime (which needs I/O and time enabled).
    ///
    /// # Errors
    ///
    /// [`ServeError`]: a non-loopback address, an address that cannot be bound, no
    /// identity or two sharing an id, an unusable option.
    pub async fn start(
        identities: Vec<ServedIdentity>,
        secret: IdentityHeaderSecret,
        options: ServeOptions,
    ) -> Result<TokenServer> {
        options.validate()?;
        let identities = Identities::new(identities)?;
        let listener = TcpListener::bind(options.listen).await.map_err(|e| {
            crate::error::Error::from(ErrorKind::Serve(ServeError::Bind {
                addr: options.listen,
                source: Arc::new(e),
            }))
        })?;
        let addr = listener.local_addr().map_err(|e| {
            crate::error::Error::from(ErrorKind::Serve(ServeError::Bind {
                addr: options.listen,
                source: Arc::new(e),
            }))
        })?;
        let stop = CancellationToken::new();
        let state = Arc::new(State {
            identities,
            secret: ArcSwap::from_pointee(secret),
            token_path: options.token_path.clone(),
            limiter: options
                .max_requests_per_second
                .map(|rate| RateLimiter::new(rate, Instant::now())),
            clock: options.clock.clone(),
        });
        if state.secret.load().path().is_some() {
            tokio::spawn(follow_secret(
                state.clone(),
                options.secret_recheck,
                stop.clone(),
            ));
        }
        tracing::info!(
            %addr,
            path = %options.token_path,
            identities = state.identities.all().len(),
            "token server listening"
        );
        let token_path = options.token_path.clone();
        tokio::spawn(accept_loop(listener, state, options, stop.clone()));
        Ok(TokenServer {
            addr,
            token_path,
            _guard: stop.clone().drop_guard(),
            stop,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL for `IDENTITY_ENDPOINT`, e.g. `http://127.0.0.1:50342/msi/token`.
    pub fn endpoint(&self) -> String {
        format!("http://{}{}", self.addr, self.token_path)
    }

    /// The health URL, e.g. `http://127.0.0.1:50342/healthz`.
    pub fn health_url(&self) -> String {
        format!("http://{}{HEALTH_PATH}", self.addr)
    }

    /// Stop accepting connections; open ones finish the request in flight and close.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Wait until the server is told to stop: [`shutdown`](Self::shutdown), or the
    /// [`stop_token`](Self::stop_token) cancelled (by a signal handler, say).
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// A token that stops the server when cancelled (for signal handlers).
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    options: ServeOptions,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(options.max_connections));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "token server: accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let stop = stop.clone();
        let timeout = options.header_read_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    tracing::info!("token server stopped");
}

/// Re-read the secret file every `every`; keep the last good secret when it fails.
async fn follow_secret(state: Arc<State>, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let current = state.secret.load_full();
        let Some(path) = current.path().map(ToOwned::to_owned) else {
            return;
        };
        let read = tokio::task::spawn_blocking(move || current.reread()).await;
        let read = match read {
            Ok(Some(read)) => Ok(read),
            _ => Err(()),
        };
        match read {
            Ok(Ok(next)) => {
                if !next.same_secrets(&state.secret.load()) {
                    tracing::info!(
                        path = %path.display(),
                        with_previous = next.has_previous(),
                        "identity header secret changed; the new one is accepted"
                    );
                    state.secret.store(Arc::new(next));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot re-read the identity header secret; keeping the last one");
            }
            Err(_) => return,
        }
    }
}

/// Answer one request, counted by status (the `metrics` feature).
async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let response = answer_request(state, req).await;
    telemetry::served(response.status().as_u16());
    response
}

/// [`handle`]'s work.
async fn answer_request(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, _body) = req.into_parts();
    let headers = &parts.headers;
    let request_id = headers
        .get("x-ms-client-request-id")
        .map(HeaderValue::as_bytes);
    let correlation = || answer::correlation_id(request_id, || uuid::Uuid::new_v4().to_string());
    if let Some(limiter) = &state.limiter
        && !limiter.admit(Instant::now())
    {
        let refusal = Refusal::new(
            429,
            "too_many_requests",
            "the token server's request rate limit is reached".to_owned(),
        )
        .retry_after(RATE_LIMITED_RETRY_AFTER.as_secs());
        return refused(&refusal, &correlation());
    }
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let route = request::route(
        parts.method.as_str(),
        target,
        parts.uri.path(),
        headers,
        &state.token_path,
        HEALTH_PATH,
    );
    let route = match route {
        Ok(route) => route,
        Err(refusal) => {
            tracing::debug!(status = refusal.status, error = %refusal.error, "token server refused a request");
            return refused(&refusal, &correlation());
        }
    };
    if route == Route::Health {
        let now = state.clock.now();
        let report: Vec<_> = state
            .identities
            .all()
            .iter()
            .map(|i| i.health(now))
            .collect();
        let (status, body) = answer::health(&report);
        return json(status, body);
    }
    // The secret before anything about the identities is answered.
    let presented = headers.get(IDENTITY_HEADER_NAME).map(HeaderValue::as_bytes);
    let secret_ok = presented.is_some_and(|p| state.secret.load().matches(p));
    if !secret_ok {
        let message = match presented {
            None => "the X-IDENTITY-HEADER header is missing",
            Some(_) => "the X-IDENTITY-HEADER header does not match the secret",
        };
        let refusal = Refusal::new(401, "unauthorized", message.to_owned());
        tracing::debug!(
            status = 401,
            error = message,
            "token server refused a request"
        );
        return refused(&refusal, &correlation());
    }
    let query = match request::token_query(parts.uri.query().unwrap_or("")) {
        Ok(query) => query,
        Err(refusal) => return refused(&refusal, &correlation()),
    };
    let identity = match state.identities.select(query.selector.as_ref()) {
        Ok(identity) => identity,
        Err(refusal) => return refused(&refusal, &correlation()),
    };
    let scope = request::scope_for(&query.resource);
    match identity.credential().get_token(&[&scope]).await {
        Ok(token) => {
            let body = answer::token_body(
                token.token(),
                token.expires_on().unix_timestamp(),
                &query.resource,
                identity.client_id(),
            );
            let mut response = json(200, body);
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(error) => {
            let refusal = match error.kind() {
                ErrorKind::Config(ConfigError::InvalidScopes { .. }) => Refusal::new(
                    400,
                    "invalid_resource",
                    format!("the resource cannot be asked for: {error}"),
                ),
                _ => answer::token_failure(&error, identity.client_id(), &query.resource),
            };
            tracing::warn!(
                client_id = %identity.client_id(),
                status = refusal.status,
                error = %error,
                "token server could not get a token"
            );
            refused(&refusal, &correlation())
        }
    }
}

fn refused(refusal: &Refusal, correlation_id: &str) -> Response<Full<Bytes>> {
    let mut response = json(refusal.status, answer::error_body(refusal, correlation_id));
    let headers = response.headers_mut();
    if refusal.allow_get {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    if let Some(secs) = refusal.retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

fn json(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}
