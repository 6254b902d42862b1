//! Azure's error answer body, as the MSI data plane and Key Vault send it:
//! `{"error": {"code", "message"}}`, or a bare `{"code", "message"}`.

use serde::Deserialize;

use crate::untrusted_text::service_text_opt;

#[derive(Deserialize, Default)]
struct Body {
    #[serde(default)]
    error: Option<Detail>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize, Default)]
struct Detail {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// Pure: the code and message of an error body, from `{"error": {...}}` or a bare object;
/// `(None, None)` for anything else.
pub(crate) fn parse_error_body(body: &[u8]) -> (Option<String>, Option<String>) {
    let parsed: Body = serde_json::from_slice(body).unwrap_or_default();
    let (code, message) = match parsed.error {
        Some(detail) => (detail.code, detail.message),
        None => (parsed.code, parsed.message),
    };
    // Bounded and escaped here, so no error or log line ever holds the raw text.
    (service_text_opt(code), service_text_opt(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_bare_and_garbage_bodies() {
        assert_eq!(
            parse_error_body(br#"{"error":{"code":"NotFound","message":"no such identity"}}"#),
            (Some("NotFound".into()), Some("no such identity".into()))
        );
        assert_eq!(
            parse_error_body(br#"{"code":"BadRequest"}"#),
            (Some("BadRequest".into()), None)
        );
        assert_eq!(parse_error_body(b""), (None, None));
        assert_eq!(parse_error_body(b"<html>502</html>"), (None, None));
        assert_eq!(parse_error_body(br#"{"error":"x"}"#), (None, None));
    }

    #[test]
    fn codes_and_messages_come_back_bounded_and_escaped() {
        let body = format!(
            r#"{{"error":{{"code":"Bad\nCode\u001b[2J","message":"{}"}}}}"#,
            "m".repeat(200_000)
        );
        let (code, message) = parse_error_body(body.as_bytes());
        assert_eq!(code.as_deref(), Some("Bad\\nCode\\u{1b}[2J"));
        let message = message.unwrap();
        assert!(message.len() < 600, "{}", message.len());
        assert!(message.ends_with("more bytes)"));
    }
}
