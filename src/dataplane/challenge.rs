//! `WWW-Authenticate` (RFC 9110 §11.6.1) parsing and the data plane's Bearer challenge:
//! pure functions, no I/O.
//!
//! ```text
//! WWW-Authenticate = #challenge
//! challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
//! auth-param       = token BWS "=" BWS ( token / quoted-string )
//! token68          = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
//! ```
//!
//! Scheme and parameter names are case-insensitive; empty list elements (`a, , b`) are
//! allowed; quoted strings may hold commas and `\`-escapes. Several header fields are one
//! list.

use url::Url;

use crate::error::{DataPlaneError, Error, ErrorKind, Result};
use crate::file::model::is_guid;
use crate::http::is_tchar;

/// One challenge: a scheme with either a token68 or parameters.
#[derive(Debug, Default)]
struct Challenge {
    /// The scheme as sent (compare with `eq_ignore_ascii_case`).
    scheme: String,
    /// Whether the challenge carries a token68 instead of parameters.
    token68: bool,
    /// Parameters in order: names lower-cased, values unquoted and unescaped.
    params: Vec<(String, String)>,
}

impl Challenge {
    /// The value of parameter `name` (lower-case), the first if repeated.
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The tenant a response's `WWW-Authenticate` fields ask a token in: the first `Bearer`
/// challenge (scheme compared case-insensitively) with an `authorization` or
/// `authorization_uri` parameter, whose URL's first path segment must be a GUID or a
/// domain name (returned lower-cased).
///
/// # Errors
///
/// [`DataPlaneError::InvalidChallenge`]: a field whose syntax breaks (naming the field and
/// the byte offset), no `Bearer` challenge, none with an authorization URL, a URL that
/// does not parse, or a tenant that is neither a GUID nor a domain.
pub(crate) fn challenged_tenant(fields: &[String]) -> Result<String> {
    let challenges = parse_www_authenticate(fields)?;
    let mut bearers = challenges
        .iter()
        .filter(|c| c.scheme.eq_ignore_ascii_case("Bearer"))
        .peekable();
    if bearers.peek().is_none() {
        let schemes: Vec<&str> = challenges.iter().map(|c| c.scheme.as_str()).collect();
        return Err(invalid(format!(
            "no Bearer challenge (schemes offered: {})",
            if schemes.is_empty() {
                "none".to_owned()
            } else {
                schemes.join(", ")
            }
        )));
    }
    let Some(authorization) = bearers.find_map(|c| {
        c.param("authorization")
            .or_else(|| c.param("authorization_uri"))
    }) else {
        return Err(invalid(
            "the Bearer challenge has no `authorization` (or `authorization_uri`) parameter".into(),
        ));
    };
    let url = Url::parse(authorization.trim())
        .map_err(|e| invalid(format!("the `authorization` parameter is not a URL ({e})")))?;
    let tenant = url
        .path_segments()
        .and_then(|mut segments| segments.find(|s| !s.is_empty()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    if tenant.is_empty() {
        return Err(invalid(
            "the `authorization` URL has no tenant in its path".into(),
        ));
    }
    if !is_guid(&tenant) && !is_domain(&tenant) {
        return Err(invalid(format!(
            "the tenant `{tenant}` in the `authorization` URL is neither a GUID nor a domain name"
        )));
    }
    Ok(tenant)
}

/// Every `WWW-Authenticate` field value of a response as its challenges, in order.
fn parse_www_authenticate(fields: &[String]) -> Result<Vec<Challenge>> {
    let mut challenges = Vec::new();
    for (index, value) in fields.iter().enumerate() {
        Parser {
            bytes: value.as_bytes(),
            pos: 0,
            field: index,
        }
        .challenges(&mut challenges)?;
    }
    Ok(challenges)
}

/// The token scope for a data plane audience: `<audience>/.default`, with one `/` however
/// the audience ends.
pub(crate) fn scope_for_audience(audience: &str) -> String {
    format!("{}/.default", audience.trim().trim_end_matches('/'))
}

/// A DNS name with at least two labels: letters, digits and inner hyphens, each label 1 to
/// 63 characters, at most 253 in all, the last label not all digits.
fn is_domain(s: &str) -> bool {
    let labels: Vec<&str> = s.split('.').collect();
    s.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && labels
            .last()
            .is_some_and(|l| !l.bytes().all(|b| b.is_ascii_digit()))
}

/// The reason may quote the service's header (schemes, a tenant): bounded and escaped.
fn invalid(reason: String) -> Error {
    ErrorKind::DataPlane(DataPlaneError::InvalidChallenge {
        reason: crate::untrusted_text::service_text(&reason),
    })
    .into()
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    field: usize,
}

/// RFC 9110 `token68` characters (before the trailing `=`s).
fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn error(&self, what: &str) -> Error {
        invalid(format!(
            "WWW-Authenticate field #{} at byte {}: {what}",
            self.field + 1,
            self.pos
        ))
    }

    fn token(&mut self) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(is_tchar) {
            self.pos += 1;
        }
        (self.pos > start).then(|| String::from_utf8_lossy(&self.bytes[start..self.pos]).into())
    }

    /// At a `"`: the unescaped content.
    fn quoted_string(&mut self) -> Result<String> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated quoted string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b) if b == b'\t' || b >= 0x20 && b != 0x7f => {
                            out.push(b);
                            self.pos += 1;
                        }
                        _ => return Err(self.error("bad escape in quoted string")),
                    }
                }
                Some(b) if b == b'\t' || b >= 0x20 && b != 0x7f => {
                    out.push(b);
                    self.pos += 1;
                }
                Some(_) => return Err(self.error("control character in quoted string")),
            }
        }
    }

    /// Whether a token68 starts here and ends the challenge (followed by OWS and `,` or
    /// the end); if so, consume it.
    fn try_token68(&mut self) -> bool {
        let start = self.pos;
        let mut end = start;
        while self.bytes.get(end).copied().is_some_and(is_token68_char) {
            end += 1;
        }
        if end == start {
            return false;
        }
        while self.bytes.get(end) == Some(&b'=') {
            end += 1;
        }
        let mut after = end;
        while matches!(self.bytes.get(after), Some(b' ' | b'\t')) {
            after += 1;
        }
        if !matches!(self.bytes.get(after), None | Some(b',')) {
            return false;
        }
        self.pos = end;
        true
    }

    /// Skip list separators (`,` and OWS); whether any comma was seen.
    fn skip_commas(&mut self) -> bool {
        let mut comma = false;
        loop {
            self.skip_ows();
            if self.peek() == Some(b',') {
                comma = true;
                self.pos += 1;
            } else {
                return comma;
            }
        }
    }

    fn challenges(&mut self, out: &mut Vec<Challenge>) -> Result<()> {
        self.skip_commas();
        if self.peek().is_none() {
            return Ok(());
        }
        loop {
            // A challenge starts with its scheme.
            let Some(scheme) = self.token() else {
                return Err(self.error("expected an auth-scheme"));
            };
            let mut challenge = Challenge {
                scheme,
                ..Challenge::default()
            };
            let had_space = matches!(self.peek(), Some(b' ' | b'\t'));
            self.skip_ows();
            if had_space && !matches!(self.peek(), None | Some(b',')) {
                if self.try_token68() {
                    challenge.token68 = true;
                } else {
                    self.param(&mut challenge)?;
                }
            } else if !matches!(self.peek(), None | Some(b',')) {
                return Err(self.error("expected a space after the auth-scheme"));
            }
            // Further list elements: more parameters of this challenge, or a new one.
            loop {
                let comma = self.skip_commas();
                if self.peek().is_none() {
                    out.push(challenge);
                    return Ok(());
                }
                if !comma {
                    return Err(self.error("expected `,` between list elements"));
                }
                if !challenge.token68 && self.starts_param() {
                    self.param(&mut challenge)?;
                } else {
                    out.push(challenge);
                    break;
                }
            }
        }
    }

    /// Whether a `token BWS "="` (an auth-param) starts here.
    fn starts_param(&self) -> bool {
        let mut i = self.pos;
        while self.bytes.get(i).copied().is_some_and(is_tchar) {
            i += 1;
        }
        if i == self.pos {
            return false;
        }
        while matches!(self.bytes.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        self.bytes.get(i) == Some(&b'=')
    }

    fn param(&mut self, challenge: &mut Challenge) -> Result<()> {
        let Some(name) = self.token() else {
            return Err(self.error("expected a parameter name"));
        };
        self.skip_ows();
        if self.peek() != Some(b'=') {
            return Err(self.error("expected `=` after a parameter name"));
        }
        self.pos += 1;
        self.skip_ows();
        let value = match self.peek() {
            Some(b'"') => self.quoted_string()?,
            _ => self
                .token()
                .ok_or_else(|| self.error("expected a token or a quoted string"))?,
        };
        challenge.params.push((name.to_ascii_lowercase(), value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(value: &str) -> Vec<Challenge> {
        parse_www_authenticate(&[value.to_owned()]).unwrap_or_else(|e| panic!("{value}: {e}"))
    }

    fn tenant(fields: &[&str]) -> Result<String> {
        challenged_tenant(&fields.iter().map(|f| f.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn single_bearer_with_params() {
        let field = r#"Bearer authorization="https://login.microsoftonline.com/72F988BF-86F1-41AF-91AB-2D7CD011DB47", resource="https://x""#;
        let c = one(field);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "Bearer");
        assert_eq!(c[0].params.len(), 2);
        assert_eq!(
            tenant(&[field]).unwrap(),
            "72f988bf-86f1-41af-91ab-2d7cd011db47"
        );
    }

    #[test]
    fn several_challenges_in_one_field_and_across_fields() {
        let c =
            one(r#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].scheme, "Newauth");
        assert_eq!(c[0].param("title"), Some(r#"Login to "apps""#));
        assert_eq!(c[0].param("type"), Some("1"));
        assert_eq!(c[1].scheme, "Basic");
        let fields = [
            r#"Basic realm="x""#,
            r#"bearer authorization="https://login.example/contoso.onmicrosoft.com/""#,
        ];
        assert_eq!(tenant(&fields).unwrap(), "contoso.onmicrosoft.com");
    }

    #[test]
    fn quoted_commas_escapes_and_bws() {
        let c = one(r#"Bearer realm = "a, b", error_description="x \\ y \"z\", w",,  , scope=s"#);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].param("realm"), Some("a, b"));
        assert_eq!(c[0].param("error_description"), Some(r#"x \ y "z", w"#));
        assert_eq!(c[0].param("scope"), Some("s"));
    }

    #[test]
    fn token68_and_bare_schemes() {
        let c = one(
            "Negotiate abc+/=, Bearer authorization=\"https://h/72f988bf-86f1-41af-91ab-2d7cd011db47\", Foo",
        );
        assert_eq!(c.len(), 3);
        assert!(c[0].token68);
        assert!(c[0].params.is_empty());
        assert_eq!(c[2].scheme, "Foo");
        // `a=b` is a parameter, not a token68.
        let c = one("X a=b");
        assert!(!c[0].token68);
        assert_eq!(c[0].param("a"), Some("b"));
        // `realm=` alone is a token68 (RFC 9110's grammar), not an empty parameter.
        let c = one("Bearer realm=");
        assert!(c[0].token68 && c[0].params.is_empty());
        // token68 ends its challenge: `,` inside is a new list element.
        let c = one("X abc==, Y");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn garbage_is_a_typed_error() {
        for bad in [
            r#"Bearer realm="unterminated"#,
            "Bearer a=b, c=",
            "=oops",
            "Bearer a=b c=d",
            "Bearer\u{1}",
            r#"Bearer realm="bad \"#,
        ] {
            let e = tenant(&[bad]).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::DataPlane(DataPlaneError::InvalidChallenge { .. })
                ),
                "{bad}: {e}"
            );
        }
        assert!(one("").is_empty());
        assert!(one(" , ,").is_empty());
    }

    #[test]
    fn bearer_selection_and_tenant_checks() {
        let e = tenant(&[r#"Basic realm="x""#]).unwrap_err();
        assert!(e.to_string().contains("no Bearer challenge"), "{e}");
        let e = tenant(&[r#"Bearer realm="x""#]).unwrap_err();
        assert!(e.to_string().contains("authorization"), "{e}");
        for bad in [
            r#"Bearer authorization="https://login.example/common""#,
            r#"Bearer authorization="https://login.example/""#,
            r#"Bearer authorization="https://login.example/a_b.c""#,
            r#"Bearer authorization="not a url""#,
        ] {
            let e = tenant(&[bad]).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::DataPlane(DataPlaneError::InvalidChallenge { .. })
                ),
                "{bad}"
            );
        }
        let field = r#"BEARER authorization_uri="https://login.example/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/authorize""#;
        assert_eq!(
            tenant(&[field]).unwrap(),
            "72f988bf-86f1-41af-91ab-2d7cd011db47"
        );
    }

    #[test]
    fn scope_has_one_slash() {
        assert_eq!(
            scope_for_audience("https://x.net/"),
            "https://x.net/.default"
        );
        assert_eq!(
            scope_for_audience("https://x.net"),
            "https://x.net/.default"
        );
        assert_eq!(scope_for_audience("api://app//"), "api://app/.default");
    }

    #[test]
    fn guid_and_domain_rules() {
        assert!(is_guid("72f988bf-86f1-41af-91ab-2d7cd011db47"));
        assert!(!is_guid("72f988bf-86f1-41af-91ab-2d7cd011db4"));
        assert!(is_domain("contoso.onmicrosoft.com"));
        assert!(!is_domain("common"));
        assert!(!is_domain("-a.com"));
        assert!(!is_domain("1.2.3.4"));
    }
}
