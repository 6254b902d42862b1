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

#[cfg(test)]
use crate::error::ErrorKind;
use crate::error::{Error, Result};
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
/// `invalid_challenge`: a field whose syntax breaks (naming the field and
/// the byte offset), no `Bearer` challenge, none with an authorization URL, a URL that
/// does not parse, or a tenant that is neither a GUID nor a domain.
pub(crate) fn challenged_tenant(fields: &[String]) -> Result<String> {
    let challenges = parse_www_authenticate(fields)?;
    let authorization = challenges
        .iter()
        .filter(|c| c.scheme.eq_ignore_ascii_case("Bearer"))
        .find_map(|c| {
            c.param("authorization")
                .or_else(|| c.param("authorization_uri"))
        });
    let Some(authorization) = authorization else {
        let schemes: Vec<&str> = challenges.iter().map(|c| c.scheme.as_str()).collect();
        return Err(invalid(format!(
            "no Bearer challenge with an `authorization` (or `authorization_uri`) parameter \
             (schemes offered: {})",
            schemes.join(", ")
        )));
    };
    let url = Url::parse(authorization.trim())
        .map_err(|e| invalid(format!("the `authorization` parameter is not a URL ({e})")))?;
    let tenant = url
        .path_segments()
        .and_then(|mut segments| segments.find(|s| !s.is_empty()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    if !is_guid(&tenant) && !is_domain(&tenant) {
        return Err(invalid(format!(
            "the tenant `{tenant}` in the `authorization` URL is neither a GUID nor a domain name"
        )));
    }
    Ok(tenant)
}

/// Every `WWW-Authenticate` field value of a response as its challenges, in order. Each
/// list element starts a challenge (`scheme [1*SP (token68 / auth-param)]`) or adds an
/// auth-param to the current one; empty elements are skipped; a challenge ends with its
/// field.
fn parse_www_authenticate(fields: &[String]) -> Result<Vec<Challenge>> {
    let mut challenges = Vec::new();
    for (field, value) in fields.iter().enumerate() {
        let mut p = Parser {
            bytes: value.as_bytes(),
            pos: 0,
            field,
        };
        let mut current: Option<Challenge> = None;
        loop {
            while matches!(p.peek(), Some(b' ' | b'\t' | b',')) {
                p.pos += 1;
            }
            if p.peek().is_none() {
                break;
            }
            match current.as_mut() {
                Some(c) if !c.token68 && p.starts_param() => p.param(c)?,
                _ => {
                    let scheme = p
                        .token()
                        .ok_or_else(|| p.error("expected an auth-scheme"))?;
                    let mut c = Challenge {
                        scheme,
                        ..Challenge::default()
                    };
                    if p.skip_ows() && !p.at_list_end() {
                        c.token68 = p.try_token68();
                        if !c.token68 {
                            p.param(&mut c)?;
                        }
                    }
                    challenges.extend(current.replace(c));
                }
            }
            p.skip_ows();
            if !p.at_list_end() {
                return Err(p.error("expected `,` between list elements"));
            }
        }
        challenges.extend(current);
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
    let reason = crate::untrusted_text::service_text(&reason);
    let message = format!("cannot use the data plane's authentication challenge: {reason}");
    Error::answer("invalid_challenge", message)
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    field: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// The end of the run of bytes from `from` that `accept`.
    fn run(&self, from: usize, accept: impl Fn(u8) -> bool) -> usize {
        from + self.bytes[from.min(self.bytes.len())..]
            .iter()
            .take_while(|b| accept(**b))
            .count()
    }

    /// Skip spaces and tabs; whether there were any.
    fn skip_ows(&mut self) -> bool {
        let start = self.pos;
        self.pos = self.run(start, |b| b == b' ' || b == b'\t');
        self.pos > start
    }

    fn at_list_end(&self) -> bool {
        matches!(self.peek(), None | Some(b','))
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
        self.pos = self.run(start, is_tchar);
        (self.pos > start).then(|| String::from_utf8_lossy(&self.bytes[start..self.pos]).into())
    }

    /// At a `"`: the unescaped content.
    fn quoted_string(&mut self) -> Result<String> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let mut b = self
                .peek()
                .ok_or_else(|| self.error("unterminated quoted string"))?;
            self.pos += 1;
            if b == b'"' {
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            if b == b'\\' {
                b = self
                    .peek()
                    .ok_or_else(|| self.error("bad escape in quoted string"))?;
                self.pos += 1;
            }
            if b != b'\t' && (b < 0x20 || b == 0x7f) {
                return Err(self.error("control character in quoted string"));
            }
            out.push(b);
        }
    }

    /// Whether a token68 (RFC 9110: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
    /// "/" ) *"="`) starts here and ends the challenge (followed by OWS and `,` or the
    /// end); if so, consume it.
    fn try_token68(&mut self) -> bool {
        let chars = self.run(self.pos, |b| {
            b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
        });
        let end = self.run(chars, |b| b == b'=');
        let after = self.run(end, |b| b == b' ' || b == b'\t');
        let found = chars > self.pos && matches!(self.bytes.get(after), None | Some(b','));
        if found {
            self.pos = end;
        }
        found
    }

    /// Whether a `token BWS "="` (an auth-param) starts here.
    fn starts_param(&self) -> bool {
        let name = self.run(self.pos, is_tchar);
        let after = self.run(name, |b| b == b' ' || b == b'\t');
        name > self.pos && self.bytes.get(after) == Some(&b'=')
    }

    fn param(&mut self, challenge: &mut Challenge) -> Result<()> {
        let name = self
            .token()
            .ok_or_else(|| self.error("expected a parameter name"))?;
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
                    ErrorKind::InvalidAnswer {
                        code: "invalid_challenge",
                        ..
                    }
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
                    ErrorKind::InvalidAnswer {
                        code: "invalid_challenge",
                        ..
                    }
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
