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
//!   the first blocked write, or the connection is closed with a reset (what the kernel
//!   queued for it is freed at once, not kept for a peer that does not read). Progress
//!   does not restart the clock: a peer reading a byte at a time cannot hold the
//!   connection longer. Writes that never block start no timer.

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

/// An accepted socket whose answers must be written within `timeout` of their first
/// blocked write (see the module docs). While one is blocked, `unsent` is set: the
/// listener closes such a connection first when it needs a slot.
pub(crate) struct Deadlined {
    stream: TcpStream,
    timeout: Duration,
    /// Running from the first blocked write of the answer being written.
    blocked: Option<Pin<Box<Sleep>>>,
    unsent: Arc<AtomicBool>,
}

impl Deadlined {
    pub(crate) fn new(stream: TcpStream, timeout: Duration, unsent: Arc<AtomicBool>) -> Self {
        Deadlined {
            stream,
            timeout,
            blocked: None,
            unsent,
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
            Poll::Ready(()) => {
                // Closed with a reset: the kernel frees what is queued at once instead of
                // keeping it for a peer that does not read.
                let _ = self.stream.set_zero_linger();
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer did not read the answer within the write timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
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
