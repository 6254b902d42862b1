//! The token server's answers, as the clients of the protocol read them: the token
//! (`expires_on` a string of Unix seconds, `resource` and `token_type` always there), the
//! error body MSAL reads (`statusCode`, `message`, `correlationId`, and `error`,
//! `error_description` for the others, with Entra's `error_codes`, `timestamp`,
//! `trace_id` and `correlation_id` when it sent them), the health report; and which status
//! a failed token request becomes. Pure functions.

use serde::Serialize;
use time::OffsetDateTime;

use msi_dataplane::unstable::bounded;
use msi_dataplane::{Error, ErrorKind, TokenEndpointError};

/// How long clients are asked to wait after a transient failure (seconds) when neither the
/// token endpoint's `Retry-After` nor the credential's failure memory says how long.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 5;

/// A request the server does not answer with a token: its status and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// HTTP status.
    pub(crate) status: u16,
    /// A short snake_case code (`error` in the body).
    pub(crate) error: String,
    /// What went wrong, for a person (`message` and `error_description`).
    pub(crate) message: String,
    /// Send `Allow: GET` (a 405).
    pub(crate) allow_get: bool,
    /// Send `Retry-After` (429 and 503 only: a client retries any status that has it).
    pub(crate) retry_after: Option<u64>,
    /// What Entra's answer carried, for the clients that print it (MSAL).
    pub(crate) upstream: Option<Box<Upstream>>,
}

/// The fields of Entra's error answer that MSAL-based clients print ("Not Available"
/// when they are missing); each already bounded and escaped by the library.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Upstream {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    error_codes: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<String>,
}

impl Upstream {
    /// What `answer` carried, if anything.
    fn of(answer: &TokenEndpointError) -> Option<Box<Upstream>> {
        let upstream = Upstream {
            error_codes: answer.error_codes.clone(),
            timestamp: answer.timestamp.clone(),
            trace_id: answer.trace_id.clone(),
            correlation_id: answer.correlation_id.clone(),
        };
        (upstream != Upstream::default()).then(|| Box::new(upstream))
    }
}

impl Refusal {
    pub(crate) fn new(status: u16, error: &str, message: String) -> Self {
        Refusal {
            status,
            error: error.to_owned(),
            message,
            allow_get: false,
            retry_after: None,
            upstream: None,
        }
    }

    pub(crate) fn allow_get(mut self) -> Self {
        self.allow_get = true;
        self
    }

    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

#[derive(Serialize)]
struct TokenBody<'a> {
    access_token: &'a str,
    expires_on: String,
    resource: &'a str,
    token_type: &'static str,
    client_id: &'a str,
}

/// Pure: the 200 answer's body.
pub(crate) fn token_body(
    access_token: &str,
    expires_on_unix: i64,
    resource: &str,
    client_id: &str,
) -> Vec<u8> {
    let body = TokenBody {
        access_token,
        expires_on: expires_on_unix.to_string(),
        resource,
        token_type: "Bearer",
        client_id,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "statusCode")]
    status_code: u16,
    message: &'a str,
    #[serde(rename = "correlationId")]
    correlation_id: &'a str,
    error: &'a str,
    error_description: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    upstream: Option<&'a Upstream>,
}

/// Pure: an error answer's body.
pub(crate) fn error_body(refusal: &Refusal, correlation_id: &str) -> Vec<u8> {
    let body = ErrorBody {
        status_code: refusal.status,
        message: &refusal.message,
        correlation_id,
        error: &refusal.error,
        error_description: &refusal.message,
        upstream: refusal.upstream.as_deref(),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Pure: the correlation id to answer with: the client's `x-ms-client-request-id` when it
/// is a plain id (at most 64 of `0-9a-zA-Z-`), else `fresh`.
pub(crate) fn correlation_id(
    client_request_id: Option<&[u8]>,
    fresh: impl FnOnce() -> String,
) -> String {
    match client_request_id {
        Some(id)
            if !id.is_empty()
                && id.len() <= 64
                && id.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') =>
        {
            String::from_utf8_lossy(id).into_owned()
        }
        _ => fresh(),
    }
}

/// Pure: the answer at `now` for a token request that failed, for the identity
/// `client_id` and `resource`. Statuses are chosen so that the clients retry only what a
/// retry can mend:
///
/// - a transient failure (the token endpoint unreachable, or answering 408, 429, 500,
///   502, 503 or 504, after this server's own retries): 503 with a `Retry-After` the
///   clients can act on ([`retry_after_secs`]), which they retry;
/// - anything else (Entra refusing the identity with an `AADSTS` error, a credential
///   outside its validity, an unusable answer): 403, which no client retries, with the
///   `AADSTS` code as `error` and the crate's message (never secret) as `message`.
///
/// Either way the body carries Entra's `error_codes`, `timestamp`, `trace_id` and
/// `correlation_id` when its answer had them.
pub(crate) fn token_failure(
    error: &Error,
    client_id: &str,
    resource: &str,
    now: OffsetDateTime,
) -> Refusal {
    let message = bounded(
        &format!("identity {client_id} could not get a token for {resource}: {error}"),
        2048,
    );
    let answer = match error.kind() {
        ErrorKind::TokenEndpoint(e) => Some(&**e),
        _ => None,
    };
    let mut refusal = if error.is_transient() {
        let secs = retry_after_secs(error, now);
        Refusal::new(503, "temporarily_unavailable", message).retry_after(secs)
    } else {
        let code = match error.service_code() {
            Some(code) => bounded(&code, 64),
            None => error.kind().code().to_owned(),
        };
        Refusal::new(403, &code, message)
    };
    refusal.upstream = answer.and_then(Upstream::of);
    refusal
}

/// Pure: the `Retry-After` (seconds) for a transient failure answered at `now`: never
/// shorter than the time the credential will keep answering the same failure from its
/// memory ([`Error::retry_at`], rounded up), nor than the token endpoint's own
/// `Retry-After`; [`DEFAULT_RETRY_AFTER_SECS`] when neither says (no `Retry-After` from
/// the endpoint, and a memory that is off or has ended); within 1..=60 s (Go's
/// SDK gives up at once on more than 60). A client that waits this long gets a fresh
/// attempt.
pub(crate) fn retry_after_secs(error: &Error, now: OffsetDateTime) -> u64 {
    let memory = error.retry_at().map(|at| {
        let left = (at - now).max(time::Duration::ZERO);
        let secs = u64::try_from(left.whole_seconds()).unwrap_or(0);
        secs + u64::from(left.subsec_nanoseconds() > 0)
    });
    // A memory that has already ended (or is off) says nothing.
    let memory = memory.filter(|secs| *secs > 0);
    let endpoint = match error.kind() {
        ErrorKind::TokenEndpoint(e) => e.retry_after.map(|d| d.as_secs()),
        _ => None,
    };
    let secs = match (memory, endpoint) {
        (None, None) => DEFAULT_RETRY_AFTER_SECS,
        (memory, endpoint) => memory.unwrap_or(0).max(endpoint.unwrap_or(0)),
    };
    secs.clamp(1, 60)
}

/// One served identity in the health report.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct IdentityHealth {
    pub(crate) client_id: String,
    pub(crate) ready: bool,
    /// RFC 3339.
    pub(crate) not_after: String,
    pub(crate) thumbprint_sha256: String,
    pub(crate) reloads: u64,
    /// Why it is not ready (`credential_expired`, `credential_not_yet_valid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) problem: Option<&'static str>,
}

#[derive(Serialize)]
struct HealthBody<'a> {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    identities: Option<&'a [IdentityHealth]>,
}

/// Pure: the health answer: 200 when every identity is ready, else 503. The identities'
/// details (client ids, thumbprints, times) only for a caller that presented the secret:
/// without it, the status alone.
pub(crate) fn health(identities: &[IdentityHealth], details: bool) -> (u16, Vec<u8>) {
    let ready = identities.iter().all(|i| i.ready);
    let body = HealthBody {
        status: if ready { "ready" } else { "not_ready" },
        identities: details.then_some(identities),
    };
    let status = if ready { 200 } else { 503 };
    (status, serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use msi_dataplane::TokenEndpointError;
    use std::time::Duration;

    #[test]
    fn the_token_body_has_what_both_clients_require() {
        let body = token_body("tok", 1_900_000_000, "https://r/", "cid");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["expires_on"], "1900000000");
        assert_eq!(json["resource"], "https://r/");
        assert_eq!(json["token_type"], "Bearer");
        assert_eq!(json["access_token"], "tok");
        assert_eq!(json["client_id"], "cid");
    }

    #[test]
    fn the_error_body_is_what_msal_reads() {
        let refusal = Refusal::new(400, "invalid_request", "no \"x\"".into());
        let json: serde_json::Value = serde_json::from_slice(&error_body(&refusal, "c-1")).unwrap();
        assert_eq!(json["statusCode"], 400);
        assert_eq!(json["message"], "no \"x\"");
        assert_eq!(json["correlationId"], "c-1");
        assert_eq!(json["error"], "invalid_request");
        assert_eq!(json["error_description"], "no \"x\"");
    }

    #[test]
    fn correlation_ids() {
        let fresh = || "fresh".to_owned();
        assert_eq!(correlation_id(Some(b"abc-123"), fresh), "abc-123");
        assert_eq!(correlation_id(Some(b"a b"), fresh), "fresh");
        assert_eq!(correlation_id(Some(&[b'a'; 65]), fresh), "fresh");
        assert_eq!(correlation_id(None, fresh), "fresh");
    }

    #[test]
    fn failures_become_statuses_the_clients_retry_only_when_a_retry_can_help() {
        let now = OffsetDateTime::now_utc();
        let endpoint = |status, retry_after| {
            let mut refusal = TokenEndpointError::default();
            refusal.status = status;
            refusal.error = Some("invalid_client".into());
            refusal.error_description = Some("AADSTS700027: Client assertion failed".into());
            refusal.error_codes = vec![700027];
            refusal.retry_after = retry_after;
            Error::from(ErrorKind::TokenEndpoint(Box::new(refusal)))
        };
        let refused = token_failure(&endpoint(401, None), "cid", "https://r/", now);
        assert_eq!((refused.status, refused.retry_after), (403, None));
        assert_eq!(refused.error, "AADSTS700027");
        assert!(
            refused
                .message
                .contains("AADSTS700027: Client assertion failed")
        );
        assert!(refused.message.contains("cid") && refused.message.contains("https://r/"));
        let busy = token_failure(&endpoint(429, Some(Duration::from_secs(7))), "c", "r", now);
        assert_eq!((busy.status, busy.retry_after), (503, Some(7)));
        let down = token_failure(
            &endpoint(503, Some(Duration::from_secs(900))),
            "c",
            "r",
            now,
        );
        assert_eq!(down.retry_after, Some(60));
        let down = token_failure(&endpoint(500, None), "c", "r", now);
        assert_eq!(down.retry_after, Some(DEFAULT_RETRY_AFTER_SECS));
        let expired = Error::from(ErrorKind::File {
            code: "no_private_key",
            field: None,
            message: "the certificate bundle holds no private key".into(),
        });
        let refused = token_failure(&expired, "c", "r", now);
        assert_eq!(
            (refused.status, refused.error.as_str()),
            (403, "no_private_key")
        );
        assert_eq!(
            refused.upstream, None,
            "no answer from Entra, nothing of it"
        );
    }

    #[test]
    fn the_error_body_carries_what_entra_said_for_msal_to_print() {
        let mut answer = TokenEndpointError::default();
        answer.status = 400;
        answer.error = Some("invalid_scope".into());
        answer.error_codes = vec![70011];
        answer.trace_id = Some("trace-1".into());
        answer.correlation_id = Some("corr-1".into());
        answer.timestamp = Some("2026-11-27 10:00:00Z".into());
        let error = Error::from(ErrorKind::TokenEndpoint(Box::new(answer)));
        let refusal = token_failure(&error, "c", "r", OffsetDateTime::now_utc());
        let json: serde_json::Value =
            serde_json::from_slice(&error_body(&refusal, "client-req-1")).unwrap();
        assert_eq!(json["error_codes"], serde_json::json!([70011]));
        assert_eq!(json["trace_id"], "trace-1");
        assert_eq!(json["correlation_id"], "corr-1");
        assert_eq!(json["timestamp"], "2026-11-27 10:00:00Z");
        assert_eq!(
            json["correlationId"], "client-req-1",
            "the client's own id too"
        );
        assert_eq!(json["statusCode"], 403);
        // A refusal of the server's own carries none of them.
        let own = Refusal::new(400, "invalid_request", "no".into());
        let json: serde_json::Value = serde_json::from_slice(&error_body(&own, "c")).unwrap();
        for field in ["error_codes", "trace_id", "correlation_id", "timestamp"] {
            assert!(json.get(field).is_none(), "{field}: {json}");
        }
    }

    #[test]
    fn health_is_ready_only_when_every_identity_is() {
        let one = |ready| IdentityHealth {
            client_id: "c".into(),
            ready,
            not_after: "2030-01-01T00:00:00Z".into(),
            thumbprint_sha256: "ab".into(),
            reloads: 0,
            problem: (!ready).then_some("credential_expired"),
        };
        assert_eq!(health(&[one(true), one(true)], true).0, 200);
        let (status, body) = health(&[one(true), one(false)], true);
        assert_eq!(status, 503);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["status"], "not_ready");
        assert_eq!(json["identities"][1]["problem"], "credential_expired");
        // Without the secret: the status only.
        let (status, body) = health(&[one(true), one(false)], false);
        assert_eq!(status, 503);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json, serde_json::json!({"status": "not_ready"}));
    }
}
