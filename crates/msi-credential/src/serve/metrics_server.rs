//! The metrics listener: a rendering of the process's metrics (Prometheus's text format,
//! from whatever recorder the application installed) on `GET /metrics`, on the same
//! bounded listener as the token server but with limits of its own, so that a flood of
//! scrapes or connections from another pod cannot reach the token server's connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::serve::error::{Result, ServeError};
use crate::serve::limit::{RATE_LIMITED_RETRY_AFTER, RateLimiter};
use crate::serve::listener::{self, ConnectionLimits};
use crate::serve::server::{check_connection_limits, invalid};

/// The one path the metrics listener answers.
pub const METRICS_PATH: &str = "/metrics";

/// The `Content-Type` of a scrape: Prometheus's text exposition format 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Options of the [`MetricsServer`].
///
/// Where to bind it: Prometheus scrapes it from outside the pod, so it listens on the
/// pod's IP (from the downward API's `status.podIP`) with a NetworkPolicy that admits
/// only the monitoring namespace, or on loopback with a scraping sidecar. Binding
/// `0.0.0.0` exposes it on every interface of the pod.
///
/// ```
/// use msi_credential::serve::MetricsServerOptions;
///
/// let options = MetricsServerOptions::new("127.0.0.1:9464".parse().unwrap());
/// assert_eq!(options.max_connections, 16);
/// assert_eq!(options.max_scrapes_per_second, Some(10));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MetricsServerOptions {
    /// Where to listen (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Most connections open at once; when full, a new one closes the one idle longest.
    /// Default 16 (a Prometheus server keeps one per target).
    pub max_connections: usize,
    /// Time a new connection has to send its first byte. Default 2 s.
    pub first_byte_timeout: Duration,
    /// Time a request head has to arrive, from the connection's first byte or the
    /// previous answer (the longest a keep-alive connection stays idle). Default 60 s.
    pub idle_timeout: Duration,
    /// Most scrapes rendered a second, on average (bursts of twice that); more are
    /// answered 429. `None`: no limit. Default 10 (Prometheus scrapes a target every 15
    /// to 60 s).
    pub max_scrapes_per_second: Option<u32>,
}

impl MetricsServerOptions {
    /// Listen on `listen`, with the default limits.
    pub fn new(listen: SocketAddr) -> Self {
        MetricsServerOptions {
            listen,
            max_connections: 16,
            first_byte_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            max_scrapes_per_second: Some(10),
        }
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

    /// Render at most this many scrapes a second (`None`: no limit).
    pub fn with_max_scrapes_per_second(mut self, max: Option<u32>) -> Self {
        self.max_scrapes_per_second = max;
        self
    }

    /// Check the options as [`MetricsServer::start`] does.
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidOption`] naming the option.
    pub fn validate(&self) -> Result<()> {
        check_connection_limits(
            self.max_connections,
            self.first_byte_timeout,
            self.idle_timeout,
        )?;
        if self.max_scrapes_per_second == Some(0) {
            return invalid("max_scrapes_per_second", "must be at least 1 (or no limit)");
        }
        Ok(())
    }
}

/// A running metrics listener: `GET /metrics` answered with `render()` (404 for any other
/// path, 405 with `Allow: GET` for any other method). Stops when
/// [`shutdown`](Self::shutdown) is called or the last handle is dropped.
///
/// ```no_run
/// use msi_credential::serve::{MetricsServer, MetricsServerOptions};
///
/// # async fn run() -> msi_credential::serve::Result<()> {
/// // With metrics-exporter-prometheus: `let handle = PrometheusBuilder::new().install_recorder()?;`
/// // and `move || handle.render()` as the rendering.
/// let options = MetricsServerOptions::new("127.0.0.1:9464".parse().unwrap());
/// let server = MetricsServer::start(options, || "# no metrics yet\n".to_owned()).await?;
/// println!("scrape {}", server.url());
/// # Ok(()) }
/// ```
pub struct MetricsServer {
    addr: SocketAddr,
    stop: CancellationToken,
    _guard: tokio_util::sync::DropGuard,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What every scrape reads.
struct Scrapes<R> {
    render: R,
    limiter: Option<RateLimiter>,
}

impl MetricsServer {
    /// Check the options, bind, and serve on the current Tokio runtime (which needs I/O
    /// and time enabled).
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidOption`], [`ServeError::Bind`].
    pub async fn start<R>(options: MetricsServerOptions, render: R) -> Result<MetricsServer>
    where
        R: Fn() -> String + Send + Sync + 'static,
    {
        options.validate()?;
        let bind_error = |e: std::io::Error| ServeError::Bind {
            addr: options.listen,
            source: Arc::new(e),
        };
        let tcp = TcpListener::bind(options.listen)
            .await
            .map_err(bind_error)?;
        let addr = tcp.local_addr().map_err(bind_error)?;
        let stop = CancellationToken::new();
        let scrapes = Arc::new(Scrapes {
            render,
            limiter: options
                .max_scrapes_per_second
                .map(|rate| RateLimiter::new(rate, Instant::now())),
        });
        let handler = move |req: Request<Incoming>| {
            let scrapes = scrapes.clone();
            async move { answer(&scrapes, &req) }
        };
        let limits = ConnectionLimits {
            max_connections: options.max_connections,
            first_byte_timeout: options.first_byte_timeout,
            idle_timeout: options.idle_timeout,
        };
        tracing::info!(%addr, "metrics listener listening");
        tokio::spawn(listener::serve(
            tcp,
            limits,
            stop.clone(),
            "metrics listener",
            handler,
        ));
        Ok(MetricsServer {
            addr,
            _guard: stop.clone().drop_guard(),
            stop,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The scrape URL, e.g. `http://127.0.0.1:9464/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}{METRICS_PATH}", self.addr)
    }

    /// Stop accepting connections; open ones finish the answer in flight and close.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

/// One answer: the rendering for `GET /metrics`, a short refusal for anything else.
fn answer<R: Fn() -> String>(
    scrapes: &Scrapes<R>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() != METRICS_PATH {
        return text(
            404,
            format!("nothing is served here; metrics are at {METRICS_PATH}\n"),
        );
    }
    if req.method() != Method::GET {
        let mut response = text(405, "only GET is answered\n".to_owned());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    if let Some(limiter) = &scrapes.limiter
        && !limiter.admit(Instant::now())
    {
        let mut response = text(429, "too many scrapes\n".to_owned());
        response.headers_mut().insert(
            RETRY_AFTER,
            HeaderValue::from(RATE_LIMITED_RETRY_AFTER.as_secs()),
        );
        return response;
    }
    let mut response = text(200, (scrapes.render)());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    response
}

fn text(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
