//! The token endpoint's error answer.

use std::fmt;
use std::time::Duration;

use crate::untrusted_text::service_text;

/// An error answer from the token endpoint, with every Entra error field it carried.
///
/// Every field but `status` is optional: endpoints and proxies answer with bodies of any
/// shape, and none of these fields is guaranteed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenEndpointError {
    /// HTTP status code.
    pub status: u16,
    /// The OAuth `error` code, e.g. `invalid_client`.
    pub error: Option<String>,
    /// Entra's `error_description` (starts with `AADSTSnnnnnn:`), as one line: the
    /// lines Entra appends that repeat `trace_id`, `correlation_id` and `timestamp`
    /// (`Trace ID: …`) are left out when those fields are set.
    pub error_description: Option<String>,
    /// Entra's `error_codes`, e.g. `[700027]`.
    pub error_codes: Vec<i64>,
    /// Entra's `trace_id`.
    pub trace_id: Option<String>,
    /// Entra's `correlation_id` (the request's `client-request-id`).
    pub correlation_id: Option<String>,
    /// Entra's `timestamp`.
    pub timestamp: Option<String>,
    /// The `Retry-After` the server asked for, if any.
    pub retry_after: Option<Duration>,
    /// The `client-request-id` this crate sent with the request.
    pub client_request_id: Option<String>,
}

impl TokenEndpointError {
    /// Pure: Entra's raw `error_description` as one line for this error: the lines that
    /// repeat a field this error has (`Trace ID:`, `Correlation ID:`, `Timestamp:`)
    /// dropped, the others joined with a space, then bounded and escaped as a service's
    /// text is.
    pub(crate) fn description_line(&self, raw: &str) -> String {
        let repeats = |line: &str| {
            let has = |label: &str, field: &Option<String>| {
                field.is_some() && line.trim_start().starts_with(label)
            };
            has("Trace ID:", &self.trace_id)
                || has("Correlation ID:", &self.correlation_id)
                || has("Timestamp:", &self.timestamp)
        };
        let kept: Vec<&str> = raw
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !repeats(line))
            .collect();
        service_text(&kept.join(" "))
    }

    /// The first `AADSTS` code, from `error_codes` or else parsed from the description.
    pub fn aadsts_code(&self) -> Option<i64> {
        if let Some(code) = self.error_codes.first() {
            return Some(*code);
        }
        let rest = self.error_description.as_deref()?.strip_prefix("AADSTS")?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..digits].parse().ok()
    }
}

impl fmt::Display for TokenEndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the token endpoint answered HTTP {}", self.status)?;
        if let Some(error) = &self.error {
            write!(f, " {error}")?;
        }
        if let Some(description) = &self.error_description {
            write!(f, ": {description}")?;
        }
        match (&self.trace_id, &self.correlation_id) {
            (Some(trace), Some(corr)) => write!(f, " (trace id {trace}, correlation id {corr})"),
            (Some(trace), None) => write!(f, " (trace id {trace})"),
            (None, Some(corr)) => write!(f, " (correlation id {corr})"),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Entra sends it: the message, then the ids on lines of their own.
    const ENTRA: &str = "AADSTS700027: Client assertion failed signature validation.\r\n\
                         Trace ID: t-1\r\nCorrelation ID: c-1\r\nTimestamp: 2026-01-01 00:00:00Z";

    fn refusal() -> TokenEndpointError {
        TokenEndpointError {
            status: 401,
            error: Some("invalid_client".into()),
            trace_id: Some("t-1".into()),
            correlation_id: Some("c-1".into()),
            timestamp: Some("2026-01-01 00:00:00Z".into()),
            ..TokenEndpointError::default()
        }
    }

    #[test]
    fn an_entra_refusal_reads_as_one_line_with_each_id_once() {
        let mut e = refusal();
        e.error_description = Some(e.description_line(ENTRA));
        assert_eq!(
            e.to_string(),
            "the token endpoint answered HTTP 401 invalid_client: AADSTS700027: Client \
             assertion failed signature validation. (trace id t-1, correlation id c-1)"
        );
    }

    #[test]
    fn lines_whose_field_is_missing_stay_and_other_lines_join() {
        let e = TokenEndpointError {
            trace_id: None,
            ..refusal()
        };
        assert_eq!(
            e.description_line(ENTRA),
            "AADSTS700027: Client assertion failed signature validation. Trace ID: t-1"
        );
        // Text Entra did not format as a trailer: joined, never split, escaped.
        assert_eq!(
            refusal().description_line("first\nsecond\u{1b}[2J"),
            "first second\\u{1b}[2J"
        );
    }
}
