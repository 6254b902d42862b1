//! Reading Key Vault's answers to "Set Secret" and "Get Secret" from their raw bytes, so
//! that the secret value is copied once, into a buffer that is zeroized, or not at all.
//!
//! The SDK's `Secret` model would unescape the value in `serde_json`'s scratch buffer and
//! copy it into a `String`, both freed unzeroized. Here a put's or a recover's answer
//! skips the value (Key Vault echoes it), and a get's answer borrows the value's escaped text from the
//! answer and unescapes it once into a [`SecretString`].

use std::collections::HashMap;

use azure_security_keyvault_secrets::models::SecretAttributes;
use serde::Deserialize;
use serde_json::value::RawValue;
use zeroize::{Zeroize, Zeroizing};

use crate::error::Result;
use crate::keyvault::format::invalid_stored_secret;
use crate::secret::SecretString;

/// An answer read for its properties ("Set Secret", "Recover Deleted Secret"): the value,
/// if Key Vault echoes it, is skipped by `serde_json` without a copy.
#[derive(Deserialize)]
pub(crate) struct PropertiesAnswer {
    pub(crate) id: Option<String>,
    pub(crate) attributes: Option<SecretAttributes>,
    pub(crate) tags: Option<HashMap<String, String>>,
}

/// The answer to "Get Secret": the value as the answer's escaped JSON text, borrowed.
#[derive(Deserialize)]
pub(crate) struct GetSecretAnswer<'a> {
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    pub(crate) id: Option<String>,
    pub(crate) attributes: Option<SecretAttributes>,
    pub(crate) tags: Option<HashMap<String, String>>,
}

impl GetSecretAnswer<'_> {
    /// The value, unescaped into a zeroized buffer. Errors name the secret, never the
    /// value.
    pub(crate) fn value(&self, name: &str) -> Result<SecretString> {
        let invalid = |reason: &str| invalid_stored_secret(name, reason);
        let raw = self
            .value
            .ok_or_else(|| invalid("Key Vault returned no value"))?;
        unescape_json_string(raw.get())
            .map(SecretString::from)
            .ok_or_else(|| invalid("the value in Key Vault's answer is not a JSON string"))
    }
}

/// Parse one of Key Vault's answers; an unreadable one is `invalid_stored_secret`
/// naming the secret, with `serde_json`'s position but none of the answer's text.
pub(crate) fn parse<'a, T: Deserialize<'a>>(name: &str, answer: &'a [u8]) -> Result<T> {
    serde_json::from_slice(answer).map_err(|e| {
        let reason = crate::parser_errors::json(&e);
        invalid_stored_secret(name, format!("Key Vault's answer cannot be read: {reason}"))
    })
}

/// A JSON string literal (quotes included, as `serde_json` has already checked it)
/// unescaped into a buffer that is zeroized if dropped unused. `None` when it is not a
/// string or an escape is invalid. The unescaped text is never longer than the literal,
/// so the buffer never grows.
fn unescape_json_string(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?.as_bytes();
    let mut out = Zeroizing::new(Vec::with_capacity(inner.len()));
    let mut rest = inner;
    while let Some(at) = rest.iter().position(|&b| b == b'\\') {
        out.extend_from_slice(&rest[..at]);
        let (escape, after) = rest.get(at + 1..).and_then(|r| r.split_first())?;
        rest = after;
        let byte = match escape {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (c, after) = unicode_escape(rest)?;
                rest = after;
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                continue;
            }
            _ => return None,
        };
        out.push(byte);
    }
    out.extend_from_slice(rest);
    // The bytes move into the String without a copy (valid UTF-8: the input was a `str`
    // cut only at ASCII backslashes, and each escape writes a whole character).
    match String::from_utf8(std::mem::take(&mut *out)) {
        Ok(text) => Some(text),
        Err(e) => {
            e.into_bytes().zeroize();
            None
        }
    }
}

/// The character of a `\u` escape (the four hex digits after `\u`, and a low surrogate's
/// `\uXXXX` after a high one), and what follows it.
fn unicode_escape(rest: &[u8]) -> Option<(char, &[u8])> {
    let hex = |digits: &[u8]| -> Option<u32> {
        let text = std::str::from_utf8(digits.get(..4)?).ok()?;
        u32::from_str_radix(text, 16).ok()
    };
    let first = hex(rest)?;
    let rest = &rest[4..];
    if !(0xD800..0xDC00).contains(&first) {
        return char::from_u32(first).map(|c| (c, rest));
    }
    let low = hex(rest.strip_prefix(b"\\u")?)?;
    if !(0xDC00..0xE000).contains(&low) {
        return None;
    }
    let c = char::from_u32(0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00))?;
    Some((c, &rest[6..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn unescaping_matches_serde_json() {
        let cases = [
            String::new(),
            "plain base64 TUlJQ+/=".to_owned(),
            r#"{"client_secret":"TUlJQ","not_before":"2026-11-01T00:00:00Z"}"#.to_owned(),
            "tab\tnew\nline\rback\\slash \"quote\" \u{8}\u{c} \u{1}\u{1f}".to_owned(),
            "é ü 中文 🔑 \u{7f} \u{ffff}".to_owned(),
        ];
        for case in &cases {
            assert_eq!(
                unescape_json_string(&literal(case)).as_deref(),
                Some(case.as_str())
            );
        }
        // Escapes serde_json does not write but JSON allows.
        let written = r#""\/ \u00e9 \uD83D\uDD11 \u0041""#;
        let expected: String = serde_json::from_str(written).unwrap();
        assert_eq!(unescape_json_string(written), Some(expected));
        // Every byte value, and many random strings, round-trip.
        let all: String = (0u32..0x800).filter_map(char::from_u32).collect();
        assert_eq!(unescape_json_string(&literal(&all)), Some(all));
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..500 {
            let s: String = (0..(seed % 64))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    char::from_u32((seed % 0x11_0000) as u32).unwrap_or('\u{fffd}')
                })
                .collect();
            assert_eq!(unescape_json_string(&literal(&s)), Some(s));
        }
    }

    #[test]
    fn what_is_not_a_string_or_not_a_valid_escape_is_refused() {
        for bad in [
            "42",
            "null",
            "{}",
            r#""unterminated"#,
            r#""bad \x escape""#,
            r#""trailing backslash \""#,
            r#""short \u12""#,
            r#""not hex \u12G4""#,
            r#""lone high \uD83D""#,
            r#""high then not low \uD83D\u0041""#,
            r#""lone low \uDD11""#,
        ] {
            assert_eq!(unescape_json_string(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_get_answer_borrows_its_value_and_names_the_secret_in_errors() {
        let answer = br#"{"value":"{\"client_secret\":\"TUlJQ\"}","id":"https://v/secrets/n/1","attributes":{"enabled":true},"tags":{"renew_after":"x"}}"#;
        let parsed: GetSecretAnswer<'_> = parse("n", answer).unwrap();
        assert_eq!(
            parsed.value("n").unwrap().expose_secret(),
            r#"{"client_secret":"TUlJQ"}"#
        );
        assert_eq!(parsed.id.as_deref(), Some("https://v/secrets/n/1"));
        assert_eq!(parsed.tags.unwrap()["renew_after"], "x");

        let no_value: GetSecretAnswer<'_> = parse("n", br#"{"id":"i"}"#).unwrap();
        let err = no_value.value("n").unwrap_err();
        assert!(err.to_string().contains("no value"), "{err}");
        let number: GetSecretAnswer<'_> = parse("n", br#"{"value":42}"#).unwrap();
        let err = number.value("n").unwrap_err();
        assert!(err.to_string().contains("not a JSON string"), "{err}");

        let err = parse::<GetSecretAnswer<'_>>("n", br#"{"value":"TUlJQsecret"#)
            .err()
            .unwrap();
        assert!(
            err.kind().code() == "invalid_stored_secret" && err.to_string().contains("secret `n`"),
            "{err:?}"
        );
        assert!(!format!("{err} {err:?}").contains("TUlJQ"), "{err:?}");
    }
}
