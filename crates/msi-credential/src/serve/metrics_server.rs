//! The metrics listener: a rendering of the process's metrics (Prometheus's text format,
//! from whatever recorder the application installed) on `GET /metrics`, on the same
//! bounded listener as the token server but with limits of its own, on a thread of its
//! own at a lower scheduling priority, so that neither a flood of scrapes or connections
//! from another pod nor its own rendering takes the token server's connections or CPU.
//!
//! - One rendering serves every scrape within [`render_interval`](MetricsServerOptions::render_interval):
//!   however many scrapers ask, the metrics are rendered at most once per interval, and
//!   no scrape is refused for another scraper's rate.
//! - Answers other than a scrape (404 for another path, 405 for another method) have a
//!   budget like the token server's refusals: past it, each is held back a second and its
//!   connection closed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::serve::error::{Result, ServeError};
use crate::serve::limit::{REFUSALS_PER_SECOND, RateLimiter, budgeted};
use crate::serve::listener::{self, ConnectionLimits};
use crate::serve::server::{check_connection_limits, invalid};
use crate::serve::socket;

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
/// use std::time::Duration;
/// use msi_credential::serve::MetricsServerOptions;
///
/// let options = MetricsServerOptions::new("127.0.0.1:9464".parse().unwrap());
/// assert_eq!(options.max_connections, 16);
/// assert_eq!(options.render_interval, Duration::from_secs(1));
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
    /// Time an answer has to be written in full from its first write the peer's window
    /// held back; a scraper that does not read within it is disconnected. Default 5 s.
    pub write_timeout: Duration,
    /// The metrics are rendered at most once per this interval; every scrape within it
    /// gets that rendering. Default 1 s (Prometheus scrapes a target every 15 to 60 s, so
    /// a scrape sees values at most this old).
    pub render_interval: Duration,
}

impl MetricsServerOptions {
    /// Listen on `listen`, with the default limits.
    pub fn new(listen: SocketAddr) -> Self {
        MetricsServerOptions {
            listen,
            max_connections: 16,
            first_byte_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(5),
            render_interval: Duration::from_secs(1),
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

    /// Close connections whose peer does not read an answer within this long of the first
    /// write it held back.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Render the metrics at most once per this interval.
    pub fn with_render_interval(mut self, interval: Duration) -> Self {
        self.render_interval = interval;
        self
    }

    /// Check the options as [`MetricsServer::start`] does.
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidOption`] naming the option.
    pub fn validate(&self) -> Result<()> {
        check_connection_limits(&self.connection_limits())?;
        if self.render_interval > Duration::from_secs(3600) {
            return invalid("render_interval", "must be at most an hour");
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

/// A running metrics listener: `GET /metrics` answered with `render()` (404 for any other
/// path, 405 with `Allow: GET` for any other method), on a thread of its own
/// (`msi-credential-metrics`, at a lower scheduling priority on Linux) that renders too.
/// Stops when [`shutdown`](Self::shutdown) is called or the last handle is dropped.
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

/// The nice value of the metrics thread (Linux): under contention the token server's
/// threads (at 0) get about ten times its share of a CPU.
const METRICS_THREAD_NICE: i32 = 10;

/// What every scrape reads.
struct Scrapes<R> {
    render: R,
    interval: Duration,
    /// The last rendering and when it was made.
    last: Mutex<Option<(Instant, Bytes)>>,
    /// Answers other than a scrape.
    refusals: RateLimiter,
}

impl<R: Fn() -> String> Scrapes<R> {
    /// The rendering for a scrape at `now`: the last one if it is recent enough, else a
    /// new one. Rendering under the lock: concurrent scrapes wait for one rendering
    /// rather than each making one.
    fn rendering(&self, now: Instant) -> Bytes {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match &*last {
            Some((at, body)) if now.saturating_duration_since(*at) < self.interval => body.clone(),
            _ => {
                let body = Bytes::from((self.render)());
                *last = Some((now, body.clone()));
                body
            }
        }
    }
}

impl MetricsServer {
    /// Check the options, bind, and serve on a thread of its own (the caller's runtime is
    /// not used beyond this call).
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidOption`], [`ServeError::Bind`] (also when the thread or its
    /// runtime cannot be started).
    pub async fn start<R>(options: MetricsServerOptions, render: R) -> Result<MetricsServer>
    where
        R: Fn() -> String + Send + Sync + 'static,
    {
        options.validate()?;
        let listen = options.listen;
        let bind_error = move |e: std::io::Error| ServeError::Bind {
            addr: listen,
            source: Arc::new(e),
        };
        let stop = CancellationToken::new();
        let (bound_tx, bound) = oneshot::channel();
        let serving = stop.clone();
        std::thread::Builder::new()
            .name("msi-credential-metrics".into())
            .spawn(move || metrics_thread(options, render, serving, bound_tx))
            .map_err(bind_error)?;
        let addr = match bound.await {
            Ok(bound) => bound.map_err(bind_error)?,
            Err(_) => {
                let gone = std::io::Error::other("the metrics thread ended before binding");
                return Err(bind_error(gone));
            }
        };
        tracing::info!(%addr, "metrics listener listening");
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

/// The metrics thread: lower its priority, bind, say where (or why not), serve until
/// `stop`.
fn metrics_thread<R>(
    options: MetricsServerOptions,
    render: R,
    stop: CancellationToken,
    bound: oneshot::Sender<std::io::Result<SocketAddr>>,
) where
    R: Fn() -> String + Send + Sync + 'static,
{
    lower_priority();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = bound.send(Err(e));
            return;
        }
    };
    runtime.block_on(async move {
        let tcp = match socket::bind(options.listen) {
            Ok(tcp) => tcp,
            Err(e) => {
                let _ = bound.send(Err(e));
                return;
            }
        };
        let _ = bound.send(tcp.local_addr());
        let scrapes = Arc::new(Scrapes {
            render,
            interval: options.render_interval,
            last: Mutex::new(None),
            refusals: RateLimiter::new(REFUSALS_PER_SECOND, Instant::now()),
        });
        let handler = move |req: Request<Incoming>| {
            let scrapes = scrapes.clone();
            async move { answer(&scrapes, &req) }
        };
        listener::serve(
            tcp,
            options.connection_limits(),
            stop,
            "metrics listener",
            handler,
        )
        .await;
    });
}

/// Linux: lower the calling thread's scheduling priority (its nice value is its own).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let thread = rustix::thread::gettid();
        if let Err(e) = rustix::process::setpriority_process(Some(thread), METRICS_THREAD_NICE) {
            tracing::debug!(error = %e, "cannot lower the metrics thread's priority");
        }
    }
}

/// One answer: the rendering for `GET /metrics`, a budgeted refusal for anything else.
fn answer<R: Fn() -> String>(
    scrapes: &Scrapes<R>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() != METRICS_PATH {
        let body = format!("nothing is served here; metrics are at {METRICS_PATH}\n");
        return budgeted(&scrapes.refusals, text(404, Bytes::from(body)));
    }
    if req.method() != Method::GET {
        let mut response = text(405, Bytes::from_static(b"only GET is answered\n"));
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return budgeted(&scrapes.refusals, response);
    }
    let mut response = text(200, scrapes.rendering(Instant::now()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    response
}

fn text(status: u16, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_rendering_serves_every_scrape_within_the_interval() {
        let renders = Arc::new(AtomicUsize::new(0));
        let counted = renders.clone();
        let scrapes = Scrapes {
            render: move || format!("renders {}\n", counted.fetch_add(1, Ordering::SeqCst) + 1),
            interval: Duration::from_secs(1),
            last: Mutex::new(None),
            refusals: RateLimiter::new(1, Instant::now()),
        };
        let t0 = Instant::now();
        let bodies: Vec<Bytes> = (0..40)
            .map(|i| scrapes.rendering(t0 + Duration::from_millis(i * 20)))
            .collect();
        assert!(bodies.iter().all(|b| b == "renders 1\n"), "{bodies:?}");
        assert_eq!(
            scrapes.rendering(t0 + Duration::from_millis(1000)),
            "renders 2\n"
        );
        assert_eq!(renders.load(Ordering::SeqCst), 2);
    }
}
