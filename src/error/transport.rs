//! A request that did not complete, whichever service it was for.

use std::fmt;
use std::sync::Arc;

/// A request that did not complete: connection, TLS or I/O failure, a malformed answer, or
/// a timeout. The same shape for the token endpoint, the MSI data plane and Key Vault.
///
/// [`transient`](Self::transient) says whether another attempt can help, and is what
/// [`Error::is_transient`](crate::Error::is_transient) and the retries of all three
/// clients go by: yes for a refused, reset or aborted connection, a timeout, a connection
/// closed before the answer was complete, a name that did not resolve; no for a TLS
/// failure (a certificate not trusted, a handshake refused), an answer that breaks HTTP (a
/// malformed header or status line, a body that cannot be decoded) and a request that
/// could not be built.
///
/// The `Display` spells out the HTTP client's error and each of its causes;
/// [`source`](std::error::Error::source) is that error itself, for matching
/// (`downcast_ref::<reqwest::Error>()` and its `is_connect`, `is_timeout`, ... for the
/// token endpoint and the data plane; `azure_core::Error` for Key Vault).
#[derive(Clone)]
#[non_exhaustive]
pub struct TransportError {
    /// The service: `"token"`, `"data plane"` or `"Key Vault"`.
    pub service: &'static str,
    /// The request URL, without its query (a data plane URL's query holds a signature).
    pub url: String,
    /// Whether the failure was a timeout.
    pub timeout: bool,
    /// Whether another attempt can help (a connection refused, reset or closed early, a
    /// timeout), as opposed to a TLS failure or an answer that breaks HTTP, which the same
    /// request would meet again. What [`Error::is_transient`](crate::Error::is_transient)
    /// says for this failure.
    pub transient: bool,
    /// What kind of failure, for [`Error::category`](crate::Error::category).
    pub(crate) fault: TransportFault,
    /// What went wrong: the HTTP client's error and each of its causes.
    pub message: String,
    /// The HTTP client's error (shared, so the error stays cheap to clone). Its `Display`
    /// and `Debug` name the URL, never a request body.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl TransportError {
    /// A transport failure of `service` at `url`, classified by the caller.
    pub(crate) fn new(
        service: &'static str,
        url: impl Into<String>,
        timeout: bool,
        fault: TransportFault,
        message: String,
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        TransportError {
            service,
            url: url.into(),
            timeout,
            transient: fault == TransportFault::Passing,
            fault,
            message,
            source,
        }
    }

    /// A failure of reqwest's for `service` at `url`: timeout and transience read from the
    /// error ([`classify`]), which becomes the source.
    pub(crate) fn from_reqwest(
        service: &'static str,
        url: impl Into<String>,
        message: String,
        error: reqwest::Error,
    ) -> Self {
        let timeout = error.is_timeout();
        let fault = classify(&error);
        TransportError::new(service, url, timeout, fault, message, Some(Arc::new(error)))
    }
}

/// What kind of transport failure, and so whether sending the same request again can
/// succeed: only a [`Passing`](Self::Passing) one can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportFault {
    /// The network or the peer failed this time (refused, reset, closed early, timed out):
    /// transient.
    Passing,
    /// TLS failed (a certificate not trusted, expired or for another name, a handshake
    /// refused): which roots to trust is configuration. Not transient.
    Tls,
    /// The request could not be built or sent as it is: not transient.
    Request,
    /// The answer breaks HTTP (a malformed status line or header, a body that cannot be
    /// decoded): the service's fault. Not transient.
    Protocol,
}

/// Whether sending the same request again can succeed where `error` failed: the one
/// classification of transport failures, for the token endpoint, the data plane and
/// (through the Azure SDK's retry policy, see `azure::sdk_transport`) Key Vault.
///
/// Decided from reqwest's own kind and then from the causes underneath it (hyper's,
/// rustls's, the socket's `std::io::Error`), the first that settles it winning:
///
/// - [`Request`](TransportFault::Request): a request that could not be built
///   (`is_builder`, `is_redirect`; hyper's "user" errors);
/// - [`Protocol`](TransportFault::Protocol): hyper's parse errors (a malformed status
///   line or header, a header too large), an I/O error `InvalidData` carrying no TLS error,
///   a body that cannot be decoded (`is_decode`) for a cause not listed here (reqwest
///   reports every failure to read a body as `is_decode`: a connection reset while
///   reading it is settled by its cause, as passing);
/// - [`Tls`](TransportFault::Tls): any `rustls::Error` (a certificate not trusted,
///   expired or for another name, an alert, a handshake the peer refuses): the same
///   configuration meets it again;
/// - [`Passing`](TransportFault::Passing): a timeout (`is_timeout`); a connection refused,
///   reset, aborted, a broken pipe, an unexpected end of stream, a network or host
///   unreachable; a connection closed before the answer was complete (hyper's incomplete
///   message, canceled request, closed channel);
/// - anything else (a name that did not resolve, an HTTP/2 stream reset or `GOAWAY`, a
///   cause this function does not know): [`Passing`](TransportFault::Passing), as every
///   transport failure was before: a needless retry costs at most the policy's attempts,
///   while a passing fault taken for a permanent one fails a call the next attempt would
///   have carried.
pub(crate) fn classify(error: &reqwest::Error) -> TransportFault {
    if error.is_builder() || error.is_redirect() {
        return TransportFault::Request;
    }
    if error.is_timeout() {
        return TransportFault::Passing;
    }
    match settled_by_causes(error) {
        Some(fault) => fault,
        None if error.is_decode() => TransportFault::Protocol,
        None => TransportFault::Passing,
    }
}

/// The first cause of `error` (itself excluded) that settles the classification.
fn settled_by_causes(error: &(dyn std::error::Error + 'static)) -> Option<TransportFault> {
    let mut next = error.source();
    while let Some(cause) = next {
        if let Some(fault) = settled_by(cause) {
            return Some(fault);
        }
        // An `io::Error`'s `source` skips the error it wraps (rustls's, inside a TLS
        // stream's `io::Error`): step into that one.
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => std::error::Error::source(io),
            },
            None => cause.source(),
        };
    }
    None
}

/// What one cause says, if it settles the classification.
fn settled_by(cause: &(dyn std::error::Error + 'static)) -> Option<TransportFault> {
    use std::io::ErrorKind as Io;
    if cause.is::<rustls::Error>() {
        return Some(TransportFault::Tls);
    }
    if let Some(h) = cause.downcast_ref::<hyper::Error>() {
        return if h.is_parse() || h.is_parse_status() {
            Some(TransportFault::Protocol)
        } else if h.is_user() {
            Some(TransportFault::Request)
        } else if h.is_incomplete_message() || h.is_canceled() || h.is_closed() || h.is_timeout() {
            Some(TransportFault::Passing)
        } else {
            // hyper's I/O and HTTP/2 errors: their causes tell.
            None
        };
    }
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        return match io.kind() {
            // TLS failures surface as `InvalidData` wrapping rustls's error; broken
            // framing as `InvalidData` alone.
            Io::InvalidData => Some(match io.get_ref() {
                Some(inner) if inner.is::<rustls::Error>() => TransportFault::Tls,
                _ => TransportFault::Protocol,
            }),
            Io::ConnectionRefused
            | Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::NotConnected
            | Io::BrokenPipe
            | Io::TimedOut
            | Io::UnexpectedEof
            | Io::Interrupted
            | Io::HostUnreachable
            | Io::NetworkUnreachable
            | Io::NetworkDown
            | Io::AddrNotAvailable => Some(TransportFault::Passing),
            // Another kind: what it wraps may tell.
            _ => None,
        };
    }
    None
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timeout = if self.timeout { " (timeout)" } else { "" };
        write!(
            f,
            "{} request to {} failed{timeout}: {}",
            self.service, self.url, self.message
        )
    }
}

impl fmt::Debug for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportError")
            .field("service", &self.service)
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field("transient", &self.transient)
            .field("fault", &self.fault)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`classify`]'s walk down the causes of `error` (itself excluded), for an error that is
    /// no reqwest error of a kind that settles it: the first cause that settles it, else
    /// [`Passing`](TransportFault::Passing).
    fn classify_causes(error: &(dyn std::error::Error + 'static)) -> TransportFault {
        settled_by_causes(error).unwrap_or(TransportFault::Passing)
    }

    /// An error with a cause, as reqwest and hyper_util wrap theirs.
    #[derive(Debug)]
    struct Wrapped(Box<dyn std::error::Error + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    fn wrapped(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Wrapped {
        Wrapped(Box::new(Wrapped(cause.into())))
    }

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::from(kind)
    }

    #[test]
    fn passing_network_failures_are_transient() {
        use std::io::ErrorKind as Io;
        for kind in [
            Io::ConnectionRefused,
            Io::ConnectionReset,
            Io::ConnectionAborted,
            Io::BrokenPipe,
            Io::TimedOut,
            Io::UnexpectedEof,
            Io::NetworkUnreachable,
        ] {
            assert_eq!(
                classify_causes(&wrapped(io(kind))),
                TransportFault::Passing,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_untrusted_certificate_is_tls_inside_any_io_error() {
        let untrusted =
            || rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        // As tokio-rustls reports it, and as a connector might re-wrap it.
        let as_invalid_data = std::io::Error::new(std::io::ErrorKind::InvalidData, untrusted());
        assert_eq!(
            classify_causes(&wrapped(as_invalid_data)),
            TransportFault::Tls
        );
        let as_other = std::io::Error::other(untrusted());
        assert_eq!(classify_causes(&wrapped(as_other)), TransportFault::Tls);
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert_eq!(classify_causes(&wrapped(alert)), TransportFault::Tls);
    }

    #[test]
    fn invalid_data_without_tls_is_a_protocol_failure() {
        let garbled = std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size");
        assert_eq!(classify_causes(&wrapped(garbled)), TransportFault::Protocol);
    }

    #[test]
    fn an_unknown_cause_counts_as_passing() {
        assert_eq!(
            classify_causes(&wrapped("something else")),
            TransportFault::Passing
        );
        assert_eq!(
            classify_causes(&wrapped(io(std::io::ErrorKind::Other))),
            TransportFault::Passing
        );
    }

    #[test]
    fn a_request_that_cannot_be_built_is_not_retried() {
        let e = reqwest::Client::new()
            .get("http://127.0.0.1/")
            .header("x-bad", "line\nbreak")
            .build()
            .unwrap_err();
        assert!(e.is_builder());
        assert_eq!(classify(&e), TransportFault::Request);
        let made = TransportError::from_reqwest("token", "u", "m".into(), e);
        assert!(!made.transient);
    }

    #[test]
    fn transient_follows_the_fault() {
        for (fault, transient) in [
            (TransportFault::Passing, true),
            (TransportFault::Tls, false),
            (TransportFault::Request, false),
            (TransportFault::Protocol, false),
        ] {
            let e = TransportError::new("token", "u", false, fault, "m".into(), None);
            assert_eq!(e.transient, transient, "{fault:?}");
        }
    }
}
