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

use crate::error::{Error, Result};
use crate::file::model::is_guid;
use crate::http::is_tchar;

/// One challenge: a scheme with either a token68 or parameters.
#[derive(Debug)]
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
        let (len, rest) = (value.len(), value.as_str());
        let mut p = Cursor { field, len, rest };
        let mut current: Option<Challenge> = None;
        loop {
            p.rest = p.rest.trim_start_matches([' ', '\t', ',']);
            if p.rest.is_empty() {
                break;
            }
            match current.as_mut() {
                Some(c) if !c.token68 && p.starts_param() => p.param(c)?,
                _ => {
                    let scheme = p.token("expected an auth-scheme")?;
                    let spaced = p.ows() && !p.at_list_end();
                    let token68 = spaced && p.token68();
                    challenges.extend(current.take());
                    let c = current.insert(Challenge {
                        scheme,
                        token68,
                        params: Vec::new(),
                    });
                    if spaced && !token68 {
                        p.param(c)?;
                    }
                }
            }
            p.ows();
            if !p.at_list_end() {
                return Err(p.error("expected `,` between list elements"));
            }
        }
        challenges.extend(current);
    }
    Ok(challenges)
}

/// A DNS name with at least two labels: letters, digits and inner hyphens, each label 1 to
/// 63 characters, at most 253 in all, the last label not all digits.
fn is_domain(s: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let top = s.rsplit('.').next().unwrap_or_default();
    s.len() <= 253
        && s.contains('.')
        && s.split('.').all(label)
        && !top.bytes().all(|b| b.is_ascii_digit())
}

/// The reason may quote the service's header (schemes, a tenant): bounded and escaped.
fn invalid(reason: String) -> Error {
    let reason = crate::untrusted_text::service_text(&reason);
    let message = format!("cannot use the data plane's authentication challenge: {reason}");
    Error::answer("invalid_challenge", message)
}

/// What is left of a field value being parsed.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    /// The field's index, and its length (errors name the byte offset).
    field: usize,
    len: usize,
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn error(&self, what: &str) -> Error {
        let (field, at) = (self.field + 1, self.len - self.rest.len());
        invalid(format!(
            "WWW-Authenticate field #{field} at byte {at}: {what}"
        ))
    }

    /// The (ASCII) bytes from here that `accept`, consumed.
    fn take(&mut self, accept: impl Fn(u8) -> bool) -> &'a str {
        let (taken, rest) =
            (self.rest).split_at(self.rest.bytes().take_while(|b| accept(*b)).count());
        self.rest = rest;
        taken
    }

    /// Skip spaces and tabs; whether there were any.
    fn ows(&mut self) -> bool {
        !self.take(|b| b == b' ' || b == b'\t').is_empty()
    }

    fn at_list_end(&self) -> bool {
        self.rest.is_empty() || self.rest.starts_with(',')
    }

    fn token(&mut self, missing: &str) -> Result<String> {
        match self.take(is_tchar) {
            "" => Err(self.error(missing)),
            token => Ok(token.to_owned()),
        }
    }

    /// At a `"`: the unescaped content.
    fn quoted_string(&mut self) -> Result<String> {
        let mut out = String::new();
        let mut chars = self.rest[1..].chars();
        loop {
            let c = match chars.next() {
                Some('"') => break,
                Some('\\') => chars.next(),
                c => c,
            };
            self.rest = chars.as_str();
            match c {
                None => return Err(self.error("unterminated quoted string")),
                Some(c) if c != '\t' && c.is_ascii_control() => {
                    return Err(self.error("control character in quoted string"));
                }
                Some(c) => out.push(c),
            }
        }
        self.rest = chars.as_str();
        Ok(out)
    }

    /// Whether a token68 (RFC 9110: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
    /// "/" ) *"="`) starts here and ends the challenge (followed by OWS and `,` or the
    /// end); if so, consume it.
    fn token68(&mut self) -> bool {
        let mut look = *self;
        let chars = look.take(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
        look.take(|b| b == b'=');
        look.ows();
        let found = !chars.is_empty() && look.at_list_end();
        if found {
            *self = look;
        }
        found
    }

    /// Whether a `token BWS "="` (an auth-param) starts here.
    fn starts_param(&self) -> bool {
        let mut look = *self;
        let name = look.take(is_tchar);
        look.ows();
        !name.is_empty() && look.rest.starts_with('=')
    }

    fn param(&mut self, challenge: &mut Challenge) -> Result<()> {
        let name = self.token("expected a parameter name")?;
        self.ows();
        let Some(rest) = self.rest.strip_prefix('=') else {
            return Err(self.error("expected `=` after a parameter name"));
        };
        self.rest = rest;
        self.ows();
        let value = match self.rest.starts_with('"') {
            true => self.quoted_string()?,
            false => self.token("expected a token or a quoted string")?,
        };
        challenge.params.push((name.to_ascii_lowercase(), value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
    fn guid_and_domain_rules() {
        assert!(is_guid("72f988bf-86f1-41af-91ab-2d7cd011db47"));
        assert!(!is_guid("72f988bf-86f1-41af-91ab-2d7cd011db4"));
        assert!(is_domain("contoso.onmicrosoft.com"));
        assert!(!is_domain("common"));
        assert!(!is_domain("-a.com"));
        assert!(!is_domain("1.2.3.4"));
    }
}
