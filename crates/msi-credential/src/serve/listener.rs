//! The HTTP/1.1 listener under both servers of this module (the token server and the
//! metrics listener): what a connection may cost, whoever opens it.
//!
//! - At most `max_connections` open at once. When full, a new connection closes an
//!   **idle** one (no request being answered: waiting for its first byte, between
//!   keep-alive requests, or dribbling a head) instead of waiting behind it: one that
//!   never carried a request the server trusts (for the token server: one with the
//!   secret) first, then the one idle longest, and is served once that one is gone (at
//!   once, or within [`EVICTION_GRACE`] when it had just started answering), else reset:
//!   a hard cap on descriptors. When every open connection is answering a request, a new
//!   one waits in the listen queue. So a flood without the secret closes its own
//!   connections, not those of the clients that have it.
//! - A new connection must send its first byte within `first_byte_timeout`.
//! - A request head must arrive in full within `idle_timeout` of the connection's first
//!   byte or of the previous answer (hyper's header timer, which also bounds a
//!   keep-alive connection's idle time).
//! - Heads bigger than [`HEAD_LIMIT_BYTES`] are answered by hyper (431 or 414, an empty
//!   body) and the connection closed: the servers' own limits are lower, so anything up to
//!   twice their limits gets their JSON refusal. hyper's buffers are sized to it, so a
//!   connection holds at most that much in each direction in the process.
//! - Each socket has small kernel buffers and a write deadline ([`socket`]): an answer not
//!   written in full within `write_timeout` of its first blocked write closes the
//!   connection, so a peer that never reads holds its slot and its memory for that long at
//!   most, in the process and in the kernel (`TCP_USER_TIMEOUT`, and a reset for every
//!   close the server initiates). A connection with output the peer has not taken is the
//!   first closed for a new one.
//! - A handler may hold an answer back ([`HoldBack`]: an answer past its budget); the
//!   connection counts as idle meanwhile, so holding it costs a slot nobody waits for.
//! - A connection being closed no longer counts as one that could be closed for a new one:
//!   the cap counts every open descriptor.
//! - Accept errors (out of descriptors, say) are retried with a backoff from 5 ms to 1 s,
//!   close the oldest idle connection when descriptors ran out, and are logged at most
//!   once a minute with the number seen.
//!
//! Each connection is a task on the caller's runtime that ends when its socket closes or
//! the server stops.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::serve::socket::{self, Deadlined};

/// The largest request head (request line and headers) hyper reads, and the size of its
/// read and write buffers; a bigger head is answered 431 (or 414 for a long target) with
/// an empty body, and the connection closed. Twice the token server's own header limit
/// ([`MAX_HEADER_BYTES`](crate::serve::MAX_HEADER_BYTES)), so that the server answers
/// anything near its limits with its JSON error.
pub const HEAD_LIMIT_BYTES: usize = 32 * 1024;

/// The most header fields hyper parses (above the token server's own limit of
/// [`MAX_HEADER_COUNT`](crate::serve::MAX_HEADER_COUNT), which it answers with JSON).
pub(crate) const HEAD_LIMIT_FIELDS: usize = 256;

/// The most connections any listener of this module accepts (one file descriptor each).
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;

/// How long a stopping server gives each open connection to finish its answer.
const DRAIN: Duration = Duration::from_secs(5);

/// Set on a response (in its extensions) by a handler that trusts the request: its
/// connection is then closed for a new one only after every untrusted idle connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trusted;

/// Set on a response by a handler that wants it held back this long before it is written
/// (a refusal past its budget): the connection counts as idle meanwhile, so it is the
/// first closed for a new one, and a flood on it waits instead of costing the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldBack(pub(crate) Duration);

/// How long a closed connection that is answering a request is given to finish.
const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// What a connection may cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    pub(crate) max_connections: usize,
    pub(crate) first_byte_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) write_timeout: Duration,
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests being answered (0: idle).
    busy: AtomicUsize,
    /// It carried a request the handler trusted ([`Trusted`]).
    trusted: AtomicBool,
    /// An answer is waiting for the peer to read ([`Deadlined`]).
    unsent: Arc<AtomicBool>,
    /// When it last did something (accepted, or an answer finished): milliseconds since
    /// the registry's epoch.
    last_active: AtomicU64,
    /// Cancelled to close it.
    close: CancellationToken,
}

/// The open connections of one listener.
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Signalled when a connection closes or goes idle (a full listener may accept again).
    changed: Notify,
    epoch: Instant,
}

impl Registry {
    fn new() -> Self {
        Registry {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            changed: Notify::new(),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self) -> (u64, Arc<Conn>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            trusted: AtomicBool::new(false),
            unsent: Arc::new(AtomicBool::new(false)),
            last_active: AtomicU64::new(self.now_ms()),
            close: CancellationToken::new(),
        });
        self.lock().insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
        self.changed.notify_one();
    }

    /// Whether another connection may be accepted now: below the cap (every open
    /// descriptor counts, those being closed too), or one open connection is idle and not
    /// already being closed (it will be closed for the new one).
    fn may_accept(&self, max: usize) -> bool {
        let conns = self.lock();
        conns.len() < max
            || conns
                .values()
                .any(|c| c.busy.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
    }

    /// Close an idle connection ([`to_close`]'s choice), if there is one; whether one was
    /// closed.
    fn close_one_idle(&self) -> bool {
        let conns = self.lock();
        let candidates = conns
            .iter()
            .filter(|(_, c)| !c.close.is_cancelled())
            .map(|(id, c)| Candidate {
                id: *id,
                busy: c.busy.load(Ordering::Acquire),
                trusted: c.trusted.load(Ordering::Acquire),
                unsent: c.unsent.load(Ordering::Acquire),
                last_active: c.last_active.load(Ordering::Acquire),
            });
        match to_close(candidates).and_then(|id| conns.get(&id)) {
            Some(conn) => {
                conn.close.cancel();
                true
            }
            None => false,
        }
    }

    fn open(&self) -> usize {
        self.lock().len()
    }

    /// Wait (at most [`EVICTION_GRACE`]) until fewer than `max` connections are open;
    /// whether they are.
    async fn below(&self, max: usize) -> bool {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.open() < max {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(EVICTION_GRACE, wait).await.is_ok()
    }
}

/// An open connection as [`to_close`] weighs it.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: u64,
    /// Requests being answered.
    busy: usize,
    trusted: bool,
    /// An answer is waiting for the peer to read it.
    unsent: bool,
    /// Milliseconds since the registry's epoch.
    last_active: u64,
}

/// Pure: the connection to close for a new one: an idle one (answering nothing), untrusted
/// before trusted, then one whose peer has not taken its last answer, then the one idle
/// longest (the lowest id among equals); `None` when every one is answering a request.
fn to_close(conns: impl Iterator<Item = Candidate>) -> Option<u64> {
    conns
        .filter(|c| c.busy == 0)
        .min_by_key(|c| (c.trusted, !c.unsent, c.last_active, c.id))
        .map(|c| c.id)
}

/// The accept loop's backoff and log decisions after errors: pure functions of the time.
#[derive(Debug, Default)]
struct AcceptBackoff {
    delay: Option<Duration>,
    unlogged: u64,
    last_log: Option<Instant>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(60);

    /// An accept failed at `now`: how long to wait, and how many failures to log now
    /// (`None`: say nothing yet).
    fn failed(&mut self, now: Instant) -> (Duration, Option<u64>) {
        let delay = self.delay.map_or(Self::FIRST, |d| (d * 2).min(Self::MAX));
        self.delay = Some(delay);
        self.unlogged += 1;
        let due = self
            .last_log
            .is_none_or(|at| now.saturating_duration_since(at) >= Self::LOG_EVERY);
        if due {
            self.last_log = Some(now);
            let count = std::mem::take(&mut self.unlogged);
            (delay, Some(count))
        } else {
            (delay, None)
        }
    }

    /// An accept succeeded: the next failure starts from the first delay again.
    fn succeeded(&mut self) {
        self.delay = None;
    }
}

/// Whether an accept error means the process (or system) ran out of descriptors or
/// memory for sockets.
fn out_of_descriptors(error: &io::Error) -> bool {
    // EMFILE 24, ENFILE 23, ENOBUFS 105, ENOMEM 12 on Linux.
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12))
}

/// Accept and serve connections on `listener` until `stop` is cancelled, answering each
/// request with `handler`. `name` says which server in log lines.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    limits: ConnectionLimits,
    stop: CancellationToken,
    name: &'static str,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let registry = Arc::new(Registry::new());
    let mut backoff = AcceptBackoff::default();
    loop {
        // Wait while every slot answers a request: nothing could be closed for a new one.
        loop {
            let changed = registry.changed.notified();
            if registry.may_accept(limits.max_connections) {
                break;
            }
            tokio::select! {
                _ = stop.cancelled() => return drained(&registry, name).await,
                _ = changed => {}
            }
        }
        let accepted = tokio::select! {
            _ = stop.cancelled() => return drained(&registry, name).await,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => {
                backoff.succeeded();
                stream
            }
            Err(error) => {
                if out_of_descriptors(&error) {
                    registry.close_one_idle();
                }
                let (delay, log) = backoff.failed(Instant::now());
                if let Some(count) = log {
                    tracing::warn!(
                        server = name,
                        error = %error,
                        failures = count,
                        "accepting connections fails; retrying with a backoff (logged at most once a minute)"
                    );
                }
                tokio::select! {
                    _ = stop.cancelled() => return drained(&registry, name).await,
                    _ = tokio::time::sleep(delay) => {}
                }
                continue;
            }
        };
        // A hard cap: the new connection waits for an idle one to close for it (at once,
        // or within its grace when it has just started answering), else it is reset.
        if registry.open() >= limits.max_connections
            && !(registry.close_one_idle() && registry.below(limits.max_connections).await)
        {
            socket::reset(stream);
            continue;
        }
        socket::accepted(&stream, limits.write_timeout);
        let (id, conn) = registry.insert();
        tokio::spawn(connection(
            stream,
            registry.clone(),
            id,
            conn,
            limits,
            stop.clone(),
            handler.clone(),
        ));
    }
}

/// After a stop: wait (a bounded time) for the open connections to finish.
async fn drained(registry: &Registry, name: &'static str) {
    let deadline = tokio::time::Instant::now() + DRAIN;
    loop {
        let changed = registry.changed.notified();
        if registry.open() == 0 {
            break;
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            break;
        }
    }
    tracing::info!(server = name, "stopped");
}

/// Serve one connection, then take it out of the registry.
async fn connection<H, F>(
    stream: TcpStream,
    registry: Arc<Registry>,
    id: u64,
    conn: Arc<Conn>,
    limits: ConnectionLimits,
    stop: CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    // The first byte, or the connection is closed (nothing has been read: peek).
    let mut byte = [0u8; 1];
    let first = tokio::select! {
        _ = conn.close.cancelled() => None,
        _ = stop.cancelled() => None,
        first = tokio::time::timeout(limits.first_byte_timeout, stream.peek(&mut byte)) => {
            match first { Ok(Ok(n)) if n > 0 => Some(()), _ => None }
        }
    };
    match first {
        Some(()) => serve_connection(stream, &registry, &conn, limits, &stop, handler).await,
        None => socket::reset(stream),
    }
    registry.remove(id);
}

async fn serve_connection<H, F>(
    stream: TcpStream,
    registry: &Arc<Registry>,
    conn: &Arc<Conn>,
    limits: ConnectionLimits,
    stop: &CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let service = {
        let (registry, conn) = (registry.clone(), conn.clone());
        service_fn(move |req| {
            conn.busy.fetch_add(1, Ordering::AcqRel);
            let answer = handler(req);
            let (registry, conn) = (registry.clone(), conn.clone());
            async move {
                let response = answer.await;
                if response.extensions().get::<Trusted>().is_some() {
                    conn.trusted.store(true, Ordering::Release);
                }
                conn.last_active.store(registry.now_ms(), Ordering::Release);
                if conn.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
                    registry.changed.notify_one();
                }
                if let Some(HoldBack(delay)) = response.extensions().get::<HoldBack>().copied() {
                    tokio::time::sleep(delay).await;
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let graceful = Arc::new(AtomicBool::new(false));
    let io = Deadlined::new(
        stream,
        limits.write_timeout,
        conn.unsent.clone(),
        graceful.clone(),
    );
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .max_headers(HEAD_LIMIT_FIELDS)
        .max_header_size(HEAD_LIMIT_BYTES)
        .max_buf_size(HEAD_LIMIT_BYTES)
        .serve_connection(TokioIo::new(io), service);
    let mut served = std::pin::pin!(served);
    // Only a connection whose serving ended normally (the peer closed it, or its last
    // answer was written) closes gracefully; every other close is a reset.
    let ended =
        |result: Result<(), hyper::Error>| graceful.store(result.is_ok(), Ordering::Release);
    let grace = tokio::select! {
        result = served.as_mut() => return ended(result),
        // Closed for a new connection: an idle one goes at once (an answer held back
        // with it), one answering a request finishes that answer first.
        _ = conn.close.cancelled() => {
            if conn.busy.load(Ordering::Acquire) == 0 {
                return;
            }
            EVICTION_GRACE
        }
        _ = stop.cancelled() => DRAIN,
    };
    served.as_mut().graceful_shutdown();
    if let Ok(result) = tokio::time::timeout(grace, served.as_mut()).await {
        ended(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(list: &[(u64, usize, bool, u64)]) -> impl Iterator<Item = Candidate> + '_ {
        list.iter()
            .map(|&(id, busy, trusted, last_active)| Candidate {
                id,
                busy,
                trusted,
                unsent: false,
                last_active,
            })
    }

    #[test]
    fn an_untrusted_idle_connection_goes_first_then_the_oldest() {
        let conns = [
            (1, 0, false, 50),
            (2, 1, false, 10),
            (3, 0, false, 20),
            (4, 0, false, 20),
        ];
        assert_eq!(to_close(candidates(&conns)), Some(3));
        let conns = [(1, 0, true, 5), (2, 0, false, 90), (3, 1, false, 1)];
        assert_eq!(
            to_close(candidates(&conns)),
            Some(2),
            "untrusted before trusted"
        );
        let conns = [(1, 0, true, 50), (2, 0, true, 10), (3, 1, false, 1)];
        assert_eq!(
            to_close(candidates(&conns)),
            Some(2),
            "then the one idle longest"
        );
        assert_eq!(
            to_close(candidates(&[(7, 2, false, 0), (8, 1, true, 0)])),
            None
        );
        assert_eq!(to_close(std::iter::empty()), None);
    }

    #[test]
    fn a_connection_whose_peer_does_not_read_goes_before_other_idle_ones() {
        let conn = |id, trusted, unsent, last_active| Candidate {
            id,
            busy: 0,
            trusted,
            unsent,
            last_active,
        };
        let conns = [
            conn(1, false, false, 10),
            conn(2, false, true, 90),
            conn(3, true, true, 5),
        ];
        assert_eq!(
            to_close(conns.into_iter()),
            Some(2),
            "unsent before idle longest"
        );
        let trusted = [conn(1, true, false, 10), conn(2, true, true, 90)];
        assert_eq!(to_close(trusted.into_iter()), Some(2));
        let busy = Candidate {
            busy: 1,
            ..conn(4, false, true, 0)
        };
        assert_eq!(
            to_close([busy].into_iter()),
            None,
            "never one being answered"
        );
    }

    #[test]
    fn accept_errors_back_off_and_are_logged_once_a_minute() {
        let t0 = Instant::now();
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.failed(t0), (Duration::from_millis(5), Some(1)));
        let mut delays = Vec::new();
        for i in 1..10 {
            let (delay, log) = backoff.failed(t0 + Duration::from_secs(i));
            assert_eq!(log, None, "within the minute");
            delays.push(delay.as_millis());
        }
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        let (_, log) = backoff.failed(t0 + Duration::from_secs(61));
        assert_eq!(log, Some(10), "the failures since the last line");
        backoff.succeeded();
        assert_eq!(
            backoff.failed(t0 + Duration::from_secs(62)).0,
            Duration::from_millis(5)
        );
    }

    #[test]
    fn descriptor_exhaustion_is_recognised() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(24)));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(103)));
    }
}
