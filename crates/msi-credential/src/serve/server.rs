//! The token server: loopback TCP, HTTP/1.1 with keep-alive on the module's bounded
//! listener ([`listener`](crate::serve::listener)); each request checked
//! ([`request`](crate::serve::request)), then answered from the served identity's token
//! cache ([`answer`](crate::serve::answer)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::serve::error::{Result, ServeError};
use crate::serve::handle::{self, State};
use crate::serve::identity::{Identities, ServedIdentity};
use crate::serve::limit::{REFUSALS_PER_SECOND, RateLimiter};
use crate::serve::listener::{self, ConnectionLimits, MAX_CONNECTIONS_LIMIT};
use crate::serve::request::HEALTH_PATH;
use crate::serve::secret::IdentityHeaderSecret;
use crate::serve::socket;
use msi_dataplane::Environment;
use msi_dataplane::unstable::{LOG_INTERVAL, LogBudget};

/// The port [`ServeOptions::default`] listens on (defined once, by the library).
pub use msi_dataplane::hypershift::TOKEN_SERVER_PORT as DEFAULT_PORT;

/// The path tokens are served on by default (`IDENTITY_ENDPOINT`'s path).
pub use msi_dataplane::hypershift::TOKEN_SERVER_PATH as DEFAULT_TOKEN_PATH;

/// Options of the [`TokenServer`].
///
/// ```
/// use msi_credential::serve::ServeOptions;
///
/// let options = ServeOptions::default().with_port(0).with_max_token_requests_per_second(None);
/// assert!(options.listen.ip().is_loopback());
/// assert_eq!(options.token_path, "/msi/token");
/// assert_eq!(options.max_connections, 512);
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
    /// Most connections open at once (1 to [`MAX_CONNECTIONS_LIMIT`]). When full, a new
    /// connection closes the one idle longest (a connection answering a request is never
    /// closed for another) and is served once it is gone, else reset: a hard cap on the
    /// descriptors held for clients. When every one is answering, new ones wait in the
    /// listen queue. Default 512: an idle connection costs a descriptor and a few KiB.
    pub max_connections: usize,
    /// Time a new connection has to send its first byte before it is closed. Default 2 s
    /// (clients send their request as soon as they connect).
    pub first_byte_timeout: Duration,
    /// Time a request head has to arrive in full, from a connection's first byte or from
    /// the previous answer on it; a keep-alive connection idle longer is closed. Default
    /// 30 s.
    pub idle_timeout: Duration,
    /// Time an answer has to be written in full from its first write the peer's window
    /// held back; a connection whose peer does not read its answer within it is closed.
    /// Default 5 s (answers are a few KiB: a client that reads takes them at once).
    pub write_timeout: Duration,
    /// Most token requests a second that reach the token endpoint (cache misses), on
    /// average, with bursts of twice that; more are answered 429 with `Retry-After: 1`.
    /// Cached tokens, refusals and health checks are never limited by it. `None`: no
    /// limit. Default 50.
    pub max_token_requests_per_second: Option<u32>,
    /// How often a secret read from a file is read again, to follow a rotation of it
    /// (the last good one is kept when a re-read fails). Default 10 s.
    pub secret_recheck: Duration,
    /// The environment the server runs in: the same value as its identities'
    /// credentials' (`msi_dataplane::Environment`); the server reads its clock, for the
    /// health report.
    pub environment: Environment,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            token_path: DEFAULT_TOKEN_PATH.to_owned(),
            max_connections: 512,
            first_byte_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(5),
            max_token_requests_per_second: Some(50),
            secret_recheck: Duration::from_secs(10),
            environment: Environment::default(),
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("token_path", &self.token_path)
            .field("max_connections", &self.max_connections)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("write_timeout", &self.write_timeout)
            .field(
                "max_token_requests_per_second",
                &self.max_token_requests_per_second,
            )
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

    /// Close new connections that send nothing for this long.
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// Close connections whose next request head takes longer than this.
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Close connections whose peer does not read an answer within this long of the first
    /// write it held back.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Send at most this many token requests a second to the token endpoint (`None`: no
    /// limit).
    pub fn with_max_token_requests_per_second(mut self, max: Option<u32>) -> Self {
        self.max_token_requests_per_second = max;
        self
    }

    /// Re-read a secret file this often.
    pub fn with_secret_recheck(mut self, every: Duration) -> Self {
        self.secret_recheck = every;
        self
    }

    /// Run in this environment (the one the identities' credentials share): its clock
    /// times the health report.
    pub fn with_environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }

    /// Check the options as [`TokenServer::start`] does (a loopback address, a usable
    /// path and limits), without binding: to refuse a bad setup before loading anything.
    ///
    /// ```
    /// use msi_credential::serve::ServeOptions;
    ///
    /// let err = ServeOptions::default().with_listen("0.0.0.0:50342".parse().unwrap()).validate();
    /// assert_eq!(err.unwrap_err().code(), "non_loopback_address");
    /// let err = ServeOptions::default().with_max_connections(1 << 40).validate();
    /// assert_eq!(err.unwrap_err().code(), "invalid_serve_option");
    /// ```
    pub fn validate(&self) -> Result<()> {
        if !self.listen.ip().is_loopback() {
            return Err(ServeError::NonLoopbackAddress { addr: self.listen });
        }
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
        check_connection_limits(&self.connection_limits())?;
        if self.max_token_requests_per_second == Some(0) {
            return invalid(
                "max_token_requests_per_second",
                "must be at least 1 (or no limit)",
            );
        }
        if self.secret_recheck.is_zero() || self.secret_recheck > MAX_TIMEOUT {
            return invalid("secret_recheck", "must be between 1 ms and one day");
        }
        Ok(())
    }

    fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            write_timeout: self.write_timeout,
        }
    }
}

/// The longest timeout or interval an option takes (a day): longer ones are mistakes,
/// and far longer ones overflow the runtime's timers.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// An [`ServeError::InvalidOption`].
pub(crate) fn invalid(option: &'static str, reason: &str) -> Result<()> {
    Err(ServeError::InvalidOption {
        option,
        reason: reason.to_owned(),
    })
}

/// Pure: the connection limits a listener of this module accepts.
pub(crate) fn check_connection_limits(limits: &ConnectionLimits) -> Result<()> {
    if !(1..=MAX_CONNECTIONS_LIMIT).contains(&limits.max_connections) {
        return invalid(
            "max_connections",
            &format!("must be between 1 and {MAX_CONNECTIONS_LIMIT}"),
        );
    }
    for (option, timeout) in [
        ("first_byte_timeout", limits.first_byte_timeout),
        ("idle_timeout", limits.idle_timeout),
        ("write_timeout", limits.write_timeout),
    ] {
        if timeout < Duration::from_millis(1) || timeout > MAX_TIMEOUT {
            return invalid(option, "must be between 1 ms and one day");
        }
    }
    Ok(())
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
/// use msi_credential::serve::{IdentityHeaderSecret, ServeOptions, ServedIdentity, TokenServer};
///
/// # async fn run() -> msi_credential::serve::Result<()> {
/// let identity = ServedIdentity::load(
///     "/mnt/certs/my-identity",
///     Default::default(), // the credential's options, with its `Environment`
///     Default::default(), // how it follows the file
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
        let listener = socket::bind(options.listen).map_err(|e| ServeError::Bind {
            addr: options.listen,
            source: Arc::new(e),
        })?;
        let addr = listener.local_addr().map_err(|e| ServeError::Bind {
            addr: options.listen,
            source: Arc::new(e),
        })?;
        let stop = CancellationToken::new();
        let state = Arc::new(State {
            identities,
            secret: ArcSwap::from_pointee(secret),
            probe_nonces: Default::default(),
            token_path: options.token_path.clone(),
            token_requests: options
                .max_token_requests_per_second
                .map(|rate| RateLimiter::new(rate, Instant::now())),
            refusals: RateLimiter::new(REFUSALS_PER_SECOND, Instant::now()),
            clock: options.environment.clock().clone(),
            refusal_log: LogBudget::new(),
            failure_log: LogBudget::new(),
            epoch: Instant::now(),
        });
        tokio::spawn(summarise_logs(state.clone(), stop.clone()));
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
        let handler = move |req| {
            let state = state.clone();
            async move { handle::handle(&state, req).await }
        };
        tokio::spawn(listener::serve(
            listener,
            options.connection_limits(),
            stop.clone(),
            "token server",
            handler,
        ));
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

/// Every log interval, the count of the refusals and failures the log left out.
async fn summarise_logs(state: Arc<State>, stop: CancellationToken) {
    let mut every = tokio::time::interval(LOG_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => state.summarise_logs(),
        }
    }
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
