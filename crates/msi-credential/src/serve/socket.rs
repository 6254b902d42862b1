//! The sockets under the listeners of this module, bounded on both sides: small kernel
//! buffers each way, and a write deadline, so that a peer that never reads pins a known
//! amount of memory for a known time.
//!
//! - **Kernel buffers**: the listening socket asks for [`SOCKET_BUFFER_BYTES`] of send
//!   and receive buffer, which every accepted socket inherits (set before `listen`, so
//!   the receive window is sized from the start). Linux doubles the value asked for, for
//!   its own bookkeeping, and counts a socket's queued bytes with their overhead against
//!   it: a connection holds at most about twice that in each direction, however much its
//!   peer sends or refuses to read.
//! - **Write deadline**: an answer whose writing blocks (the peer's window and this
//!   socket's send buffer are full) must be written in full within the write timeout of
//!   the first blocked write, or the connection is closed. Progress does not restart the
//!   clock: a peer reading a byte at a time cannot hold the connection longer.
//! - **What the kernel keeps**: every accepted socket has `TCP_USER_TIMEOUT` equal to the
//!   write timeout (Linux): data the peer has not acknowledged within it (a zero window
//!   included) makes the kernel abort the connection, whether the process still holds the
//!   socket or has closed it, so an answer that fitted the kernel's buffer and is never
//!   read is freed within the write timeout too. And every close the server initiates
//!   (eviction, first-byte, idle and write timeouts, shutdown) is a reset, which frees
//!   what is queued at once: only a connection whose serving ended normally (the peer
//!   closed it, or its last answer was written) is closed gracefully, so a client never
//!   loses an answer it was given. A connection therefore holds at most about twice
//!   [`SOCKET_BUFFER_BYTES`] of send queue in the kernel, for at most the write timeout
//!   after the server stops writing to it, open or closed.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Sleep;

/// The send and receive buffer each socket of the listeners asks the kernel for (Linux
/// allows twice that, its bookkeeping included): answers and request heads are a few KiB,
/// and a metrics scrape flows through it in a few round trips.
pub const SOCKET_BUFFER_BYTES: u32 = 32 * 1024;

/// Listen on `addr` with [`SOCKET_BUFFER_BYTES`] buffers each way, inherited by every
/// accepted socket. Must run on the runtime that will accept.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // What `TcpListener::bind` does too: a restarted server binds its port at once.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(SOCKET_BUFFER_BYTES)?;
    socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Bound what the kernel keeps for an accepted socket: no Nagle delay, and unacknowledged
/// data held at most `write_timeout` (`TCP_USER_TIMEOUT`, Linux).
pub(crate) fn accepted(stream: &TcpStream, write_timeout: Duration) {
    let _ = stream.set_nodelay(true);
    #[cfg(target_os = "linux")]
    {
        let millis = u32::try_from(write_timeout.as_millis()).unwrap_or(u32::MAX);
        let _ = rustix::net::sockopt::set_tcp_user_timeout(stream, millis.max(1));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = write_timeout;
}

/// Close `stream` with a reset: the kernel frees what is queued for it at once.
pub(crate) fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
}

/// An accepted socket whose answers must be written within `timeout` of their first
/// blocked write (see the module docs). While one is blocked, `unsent` is set: the
/// listener closes such a connection first when it needs a slot. Dropped, it is closed
/// with a reset unless `graceful` was set: its serving ended normally.
pub(crate) struct Deadlined {
    stream: TcpStream,
    timeout: Duration,
    /// Running from the first blocked write of the answer being written.
    blocked: Option<Pin<Box<Sleep>>>,
    unsent: Arc<AtomicBool>,
    graceful: Arc<AtomicBool>,
}

impl Deadlined {
    pub(crate) fn new(
        stream: TcpStream,
        timeout: Duration,
        unsent: Arc<AtomicBool>,
        graceful: Arc<AtomicBool>,
    ) -> Self {
        Deadlined {
            stream,
            timeout,
            blocked: None,
            unsent,
            graceful,
        }
    }

    /// A write could not go on: pending until the peer reads, or an error once the
    /// deadline has passed.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let deadline = self
            .blocked
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        self.unsent.store(true, Ordering::Release);
        match deadline.as_mut().poll(cx) {
            // Closed with a reset when dropped (its serving did not end normally).
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not read the answer within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Deadlined {
    fn drop(&mut self) {
        if !self.graceful.load(Ordering::Acquire) {
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for Deadlined {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Deadlined {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Pending => this.blocked(cx),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.blocked(cx),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    /// hyper flushes once its buffered answer is written in full: the deadline ends.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                this.blocked = None;
                this.unsent.store(false, Ordering::Release);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => this.blocked(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
