//! The one accept loop the kit's servers share: bind 127.0.0.1 on an ephemeral port,
//! accept connections, wrap them in the kit's TLS (or not), serve HTTP/1.1 with
//! keep-alive, and stop when the last handle is dropped (or at `shutdown`).
//!
//! Every server runs on the kit's own runtime (two worker threads named
//! `msi-dataplane-test-server`, started on first use and kept for the process), not on the
//! runtime of the test that starts it: a server serves clients on any runtime and keeps
//! serving after the runtime that started it ends, so one server in a `static` can serve
//! many `#[tokio::test]`s.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// A socket bound on 127.0.0.1, not yet serving: its address is known before the server's
/// state is built (the state often names its own URL).
pub(crate) struct Bound {
    listener: std::net::TcpListener,
    addr: SocketAddr,
}

/// The runtime every kit server runs on (see the module docs).
///
/// # Panics
///
/// When it cannot be started (no threads left): the tests cannot run.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("msi-dataplane-test-server")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("testing kit: cannot start the servers' runtime: {e}"))
    })
}

/// A serving server's stop switch. Clones share it; the server stops when the last clone
/// is dropped, or at [`Listening::shutdown`].
#[derive(Clone)]
pub(crate) struct Listening {
    stop: Arc<StopOnDrop>,
    connections: Arc<AtomicU64>,
}

struct StopOnDrop(watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

impl Listening {
    /// Stop accepting connections; open connections (and requests in flight) are dropped.
    pub(crate) fn shutdown(&self) {
        self.stop.0.send_replace(true);
    }

    /// How many connections were accepted so far (over HTTPS: TLS handshakes completed).
    pub(crate) fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// Returned by a server's handler to make hyper drop the connection without answering
/// (a scripted failure).
#[derive(Debug)]
pub(crate) struct DropConnection;

impl fmt::Display for DropConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("scripted: connection dropped without an answer")
    }
}

impl std::error::Error for DropConnection {}

/// An answer a kit server has decided on: status, headers, body (sent by
/// [`Answer::into_response`] or, after a scripted delay, by [`send_after`]).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    /// `body` with this content type.
    pub(crate) fn with_content_type(status: u16, content_type: &str, body: String) -> Answer {
        Answer {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body,
        }
    }

    /// `body` as JSON, with this content type.
    pub(crate) fn json(status: u16, content_type: &str, body: &serde_json::Value) -> Answer {
        Answer::with_content_type(status, content_type, body.to_string())
    }

    /// An Azure error answer: `{"error": {"code", "message"}}`, with this content type.
    pub(crate) fn azure_error(
        status: u16,
        content_type: &str,
        code: &str,
        message: &str,
    ) -> Answer {
        let body = serde_json::json!({"error": {"code": code, "message": message}});
        Answer::json(status, content_type, &body)
    }

    /// The HTTP response. A scripted header that HTTP refuses gives a 500 that says so
    /// (the test sees why), never a panic on the server's task.
    pub(crate) fn into_response(self) -> Response<Full<Bytes>> {
        let mut builder = Response::builder().status(self.status);
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
            .body(Full::new(Bytes::from(self.body)))
            .unwrap_or_else(|e| {
                let mut r = Response::new(Full::new(Bytes::from(format!(
                    "testing kit: bad scripted response: {e}"
                ))));
                *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                r
            })
    }
}

/// Send `answer` after `delay`, or drop the connection without answering when `close`
/// (the scripted failures every kit server offers).
pub(crate) async fn send_after(
    answer: Answer,
    delay: Duration,
    close: bool,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if close {
        return Err(DropConnection);
    }
    Ok(answer.into_response())
}

/// A request body of at most `limit` bytes, as (lossy) UTF-8; empty when larger or cut.
pub(crate) async fn read_body(body: Incoming, limit: usize) -> String {
    use http_body_util::{BodyExt, Limited};
    match Limited::new(body, limit).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => String::new(),
    }
}

/// The most characters of a request's `User-Agent` a kit server records.
pub(crate) const MAX_USER_AGENT_CHARS: usize = 512;

/// The request's `User-Agent` as recorded: (lossy) UTF-8, at most
/// [`MAX_USER_AGENT_CHARS`] characters, controls and bidirectional marks escaped (it is
/// the client's text: a test printing it forges no line). `None` when not sent.
pub(crate) fn user_agent(headers: &hyper::HeaderMap) -> Option<String> {
    headers.get(hyper::header::USER_AGENT).map(|v| {
        msi_dataplane::unstable::bounded(
            &String::from_utf8_lossy(v.as_bytes()),
            MAX_USER_AGENT_CHARS,
        )
    })
}

/// The query string's pairs, percent-decoded, in order.
pub(crate) fn query_pairs(uri: &hyper::Uri) -> Vec<(String, String)> {
    url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Bind `127.0.0.1:0` (loopback only, never another interface).
///
/// # Panics
///
/// When the socket cannot be bound; the message names `server`.
pub(crate) fn bind(server: &str) -> Bound {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .unwrap_or_else(|e| panic!("{server}: bind 127.0.0.1:0: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("{server}: local_addr: {e}"));
    Bound { listener, addr }
}

impl Bound {
    /// The bound address (always 127.0.0.1).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve every connection with `handler` (HTTPS with the kit's TLS when `tls`, plain
    /// HTTP otherwise) on the kit's runtime, until the returned handle's last clone is
    /// dropped.
    pub(crate) fn serve<F, Fut>(self, tls: bool, handler: F) -> Listening
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<Full<Bytes>>, DropConnection>> + Send + 'static,
    {
        let acceptor = tls.then(|| TlsAcceptor::from(super::tls::server_tls_config()));
        let (stop, stopped) = watch::channel(false);
        let connections = Arc::new(AtomicU64::new(0));
        let (listener, counted) = (self.listener, connections.clone());
        runtime().spawn(async move {
            // Registered with the kit runtime's reactor, which polls it.
            match TcpListener::from_std(listener) {
                Ok(listener) => accept_loop(listener, acceptor, handler, stopped, counted).await,
                Err(e) => tracing::error!(error = %e, "testing kit: cannot serve the socket"),
            }
        });
        Listening {
            stop: Arc::new(StopOnDrop(stop)),
            connections,
        }
    }
}

async fn wait_shutdown(mut rx: watch::Receiver<bool>) {
    // An error means every sender is gone: stop too.
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn accept_loop<F, Fut>(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    handler: F,
    shutdown: watch::Receiver<bool>,
    connections: Arc<AtomicU64>,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, DropConnection>> + Send + 'static,
{
    let stop = wait_shutdown(shutdown.clone());
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            stream,
            acceptor.clone(),
            handler.clone(),
            shutdown.clone(),
            connections.clone(),
        ));
    }
}

async fn serve_connection<F, Fut>(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    handler: F,
    shutdown: watch::Receiver<bool>,
    connections: Arc<AtomicU64>,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, DropConnection>> + Send + 'static,
{
    let serve = async move {
        match acceptor {
            Some(acceptor) => {
                if let Ok(tls) = acceptor.accept(stream).await {
                    connections.fetch_add(1, Ordering::Relaxed);
                    serve_http(TokioIo::new(tls), handler).await;
                }
            }
            None => {
                connections.fetch_add(1, Ordering::Relaxed);
                serve_http(TokioIo::new(stream), handler).await;
            }
        }
    };
    tokio::select! {
        _ = wait_shutdown(shutdown) => {}
        _ = serve => {}
    }
}

async fn serve_http<I, F, Fut>(io: TokioIo<I>, handler: F)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, DropConnection>> + Send + 'static,
{
    // Errors (including a deliberately dropped connection) just end the connection.
    let _ = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service_fn(handler))
        .await;
}
