//! The answer a script gives instead of a kit server's own ([`Scripted`]), shared by
//! every server, and the Entra error body it and the Entra server write.

use std::time::Duration;

use serde_json::json;

/// An answer a script gives instead of the server's own (see [`EntraServer::on`](crate::EntraServer::on) and
/// [`ScriptBuilder::respond`](crate::ScriptBuilder::respond)): a status, headers and body, a delay, or a closed
/// connection.
#[derive(Debug, Clone)]
pub struct Scripted {
    /// HTTP status (0 with `close_connection`).
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: String,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Drop the connection without answering (after `delay`).
    pub close_connection: bool,
}

impl Scripted {
    /// Answer `code` with body `{}` and `content-type: application/json; charset=utf-8`.
    pub fn status(code: u16) -> Self {
        Scripted {
            status: code,
            headers: vec![("content-type".to_owned(), JSON_CONTENT_TYPE.to_owned())],
            body: "{}".to_owned(),
            delay: Duration::ZERO,
            close_connection: false,
        }
    }

    /// Answer an Entra-shaped error body (`AADSTS{code}: {description}`). The request
    /// log keeps the code ([`RecordedRequest::aadsts_code`](crate::RecordedRequest::aadsts_code)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane_testing::{IdentityFixture, Outcome, Scripted};
    ///
    /// let fx = IdentityFixture::start().await;
    /// fx.entra.enqueue(Scripted::aadsts(400, "invalid_request", 90002, "Tenant not found."));
    /// let e = fx.credential.get_token(&["https://vault.azure.net/.default"]).await.unwrap_err();
    /// assert!(e.to_string().contains("AADSTS90002"), "{e}");
    /// let recorded = &fx.entra.requests()[0];
    /// assert_eq!((&recorded.outcome, recorded.aadsts_code), (&Outcome::Scripted(400), Some(90002)));
    /// # }
    /// ```
    pub fn aadsts(status: u16, error: &str, code: u32, description: &str) -> Self {
        let correlation = new_uuid();
        let body = entra_error_body(error, code, description, &correlation);
        Scripted::status(status).body(&body)
    }

    /// Drop the connection without answering (the request is still recorded, with
    /// `Outcome::Scripted(0)`).
    pub fn close_connection() -> Self {
        Scripted {
            close_connection: true,
            ..Scripted::status(0)
        }
    }

    /// Add a `Retry-After` header.
    pub fn retry_after(self, value: &str) -> Self {
        self.header("retry-after", value)
    }

    /// Replace the body (raw text: malformed JSON, an HTML page, ...).
    pub fn body(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }

    /// Wait this long before answering.
    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// Set a response header, replacing any header of the same name (case-insensitive).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

pub(crate) const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn entra_timestamp() -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]Z");
    time::OffsetDateTime::now_utc()
        .format(&fmt)
        .expect("format timestamp")
}

pub(crate) fn entra_error_body(
    error: &str,
    code: u32,
    description: &str,
    correlation: &str,
) -> String {
    let trace = new_uuid();
    let ts = entra_timestamp();
    json!({
        "error": error,
        "error_description": format!(
            "AADSTS{code}: {description}\r\nTrace ID: {trace}\r\nCorrelation ID: {correlation}\r\nTimestamp: {ts}"
        ),
        "error_codes": [code],
        "timestamp": ts,
        "trace_id": trace,
        "correlation_id": correlation,
        "error_uri": format!("https://login.microsoftonline.com/error?code={code}"),
    })
    .to_string()
}
