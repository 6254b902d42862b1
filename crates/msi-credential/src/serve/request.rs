//! What a request to the token server asks for, or why it is refused: pure functions of
//! the request's head (method, target, headers), checked before anything else is done.
//!
//! The order is the cheapest and least revealing first: the method, the sizes, proxies
//! (`Forwarded`, `Via`, the `X-Forwarded-*` family, `X-Real-IP` and its kin), the `Host`
//! and an absolute-form target's authority, the path; the identity header's secret
//! is checked by the caller between [`route`] and [`token_query`], so that nothing about
//! the served identities is answered to a caller without it.

use hyper::HeaderMap;
use hyper::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};

use crate::serve::answer::Refusal;
use msi_dataplane::unstable::quoted_input;

/// The `api-version` every client of the protocol sends.
pub const APP_SERVICE_API_VERSION: &str = "2019-08-01";

/// The longest request target (path and query) answered; longer is refused with 414.
pub const MAX_TARGET_BYTES: usize = 4096;

/// The most header bytes (names and values) answered; more is refused with 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The most header fields answered; more is refused with 431.
pub const MAX_HEADER_COUNT: usize = 64;

/// The longest `resource` and selector value accepted (an ARM resource id fits).
pub const MAX_VALUE_CHARS: usize = 1024;

/// The health path (for Kubernetes probes): 200 when every identity is usable, else 503.
pub const HEALTH_PATH: &str = "/healthz";

/// The identity header (compared case-insensitively, as header names are).
pub const IDENTITY_HEADER_NAME: &str = "x-identity-header";

/// Where a request goes, once its head passed the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The token path: the secret is checked next, then the query.
    Token,
    /// The health path (no secret needed; it says only whether the identities are usable).
    Health,
}

/// Which served identity a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    /// `client_id`.
    Client(String),
    /// `object_id` (or its alias `principal_id`).
    Object(String),
    /// `mi_res_id`.
    Resource(String),
}

impl Selector {
    /// The query parameter as the protocol names it.
    pub(crate) fn field(&self) -> &'static str {
        match self {
            Selector::Client(_) => "client_id",
            Selector::Object(_) => "object_id",
            Selector::Resource(_) => "mi_res_id",
        }
    }

    /// The value asked for.
    pub(crate) fn value(&self) -> &str {
        match self {
            Selector::Client(v) | Selector::Object(v) | Selector::Resource(v) => v,
        }
    }
}

/// A token request's query: the resource and, when one was given, the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenQuery {
    /// `resource`, decoded, as the client sent it (echoed in the answer).
    pub(crate) resource: String,
    /// The identity asked for.
    pub(crate) selector: Option<Selector>,
}

/// The headers a proxy adds, each refused: the token server answers processes in its own
/// pod, which reach it directly. Names are compared lower-case; `x-forwarded-` is a prefix.
const PROXY_HEADERS: &[&str] = &[
    "forwarded",
    "via",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "true-client-ip",
    "x-original-forwarded-for",
];

/// Pure: whether `headers` hold a header that a proxy adds; its name if so.
fn proxy_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .keys()
        .map(|name| name.as_str())
        .find(|name| name.starts_with("x-forwarded-") || PROXY_HEADERS.contains(name))
}

/// Pure: check a request's head and say where it goes. `authority` is the target's own
/// (`Some` for an absolute-form target, `GET http://127.0.0.1:50342/msi/token?…`), which
/// is then the request's host (RFC 9112 §3.2.2) and must name loopback as `Host` must.
/// `token_path` is the path the token endpoint answers on (`IDENTITY_ENDPOINT`'s path).
pub(crate) fn route(
    method: &str,
    target: &str,
    authority: Option<(&str, &str)>,
    path: &str,
    headers: &HeaderMap,
    token_path: &str,
    health_path: &str,
) -> Result<Route, Refusal> {
    if method != "GET" {
        return Err(Refusal::new(
            405,
            "method_not_allowed",
            format!("only GET is answered here, not {}", quoted_input(method)),
        )
        .allow_get());
    }
    if target.len() > MAX_TARGET_BYTES {
        return Err(Refusal::new(
            414,
            "uri_too_long",
            format!(
                "the request target is {} bytes; at most {MAX_TARGET_BYTES} are answered",
                target.len()
            ),
        ));
    }
    let header_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers.len() > MAX_HEADER_COUNT || header_bytes > MAX_HEADER_BYTES {
        return Err(Refusal::new(
            431,
            "request_header_fields_too_large",
            format!(
                "{} header fields, {header_bytes} bytes; at most {MAX_HEADER_COUNT} fields and \
                 {MAX_HEADER_BYTES} bytes are answered",
                headers.len()
            ),
        ));
    }
    if has_body(headers) {
        return Err(Refusal::new(
            413,
            "content_too_large",
            "a GET request to the token server carries no body".to_owned(),
        ));
    }
    if let Some(name) = proxy_header(headers) {
        return Err(Refusal::new(
            403,
            "forwarded_request",
            format!(
                "a request that came through a proxy ({name}) is refused: the token server \
                 answers processes in its own pod only"
            ),
        ));
    }
    check_host(headers)?;
    if let Some((scheme, authority)) = authority {
        check_absolute_target(scheme, authority)?;
    }
    if path == token_path {
        Ok(Route::Token)
    } else if path == health_path {
        Ok(Route::Health)
    } else {
        Err(Refusal::new(
            404,
            "not_found",
            format!(
                "nothing is served at {}; tokens are at {token_path}",
                quoted_input(path)
            ),
        ))
    }
}

/// A body announced by `Content-Length` (other than 0) or `Transfer-Encoding`.
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers.get(CONTENT_LENGTH).map(|v| v.as_bytes());
    headers.contains_key(TRANSFER_ENCODING) || length.is_some_and(|l| l != b"0")
}

/// Pure: the `Host` must name a loopback address (`127.x.y.z`, `localhost`, `[::1]`),
/// with any port: a name that resolves elsewhere means the request was meant for
/// another server (DNS rebinding from a browser, a confused proxy).
fn check_host(headers: &HeaderMap) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        return Err(Refusal::new(
            400,
            "bad_host",
            "the request needs exactly one Host header".to_owned(),
        ));
    };
    let host = host.to_str().unwrap_or_default();
    if is_loopback_host(host) {
        Ok(())
    } else {
        Err(Refusal::new(
            421,
            "misdirected_request",
            format!(
                "Host {} is not a loopback name: the token server answers only requests \
                 addressed to 127.0.0.1, localhost or [::1]",
                quoted_input(host)
            ),
        ))
    }
}

/// Pure: an absolute-form target's scheme and authority: `http` to a loopback name, or the
/// request was meant for another server (421), whatever its `Host` says.
fn check_absolute_target(scheme: &str, authority: &str) -> Result<(), Refusal> {
    if scheme.eq_ignore_ascii_case("http")
        && !authority.contains('@')
        && is_loopback_host(authority)
    {
        Ok(())
    } else {
        Err(Refusal::new(
            421,
            "misdirected_request",
            format!(
                "the request target names {}://{}: the token server answers only requests \
                 addressed to http://127.0.0.1, localhost or [::1]",
                quoted_input(scheme),
                quoted_input(authority)
            ),
        ))
    }
}

/// Pure: whether a `Host` value (with or without a port) names loopback, by the
/// library's rule for URLs (`localhost`, `127.0.0.0/8`, `::1`); an IPv6 address only in
/// brackets.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inner, "")) => inner,
            Some((inner, port)) if port.strip_prefix(':').is_some_and(is_port) => inner,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let host = match name.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => url::Host::Ipv4(ip),
        Ok(std::net::IpAddr::V6(ip)) => url::Host::Ipv6(ip),
        Err(_) => url::Host::Domain(name),
    };
    msi_dataplane::unstable::is_loopback_host(&host)
}

/// One to five digits making a `u16`.
fn is_port(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u16>().is_ok()
}

/// Pure: the token request's query. Parameters are matched by name, in any order,
/// among others (the endpoint's own query, a client's extras); each of ours at most once.
pub(crate) fn token_query(query: &str) -> Result<TokenQuery, Refusal> {
    let mut api_version = None;
    let mut resource = None;
    let mut selectors: Vec<(&'static str, Selector)> = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match &*key {
            "api-version" => &mut api_version,
            "resource" => &mut resource,
            "client_id" | "object_id" | "principal_id" | "mi_res_id" => {
                let field = match &*key {
                    "client_id" => "client_id",
                    "object_id" => "object_id",
                    "principal_id" => "principal_id",
                    _ => "mi_res_id",
                };
                let value = checked_value(field, &value)?;
                let selector = match field {
                    "client_id" => Selector::Client(value),
                    "mi_res_id" => Selector::Resource(value),
                    _ => Selector::Object(value),
                };
                selectors.push((field, selector));
                continue;
            }
            _ => continue,
        };
        if slot.is_some() {
            return Err(Refusal::new(
                400,
                "invalid_request",
                format!("query parameter `{key}` is given more than once"),
            ));
        }
        *slot = Some(value.into_owned());
    }
    match api_version.as_deref() {
        Some(APP_SERVICE_API_VERSION) => {}
        Some(other) => {
            return Err(Refusal::new(
                400,
                "invalid_request",
                format!(
                    "api-version {} is not served; use {APP_SERVICE_API_VERSION}",
                    quoted_input(other)
                ),
            ));
        }
        None => {
            return Err(Refusal::new(
                400,
                "invalid_request",
                format!("query parameter `api-version` is missing (use {APP_SERVICE_API_VERSION})"),
            ));
        }
    }
    let resource = match resource {
        Some(r) if !r.trim().is_empty() => checked_value("resource", &r)?,
        _ => {
            return Err(Refusal::new(
                400,
                "invalid_request",
                "query parameter `resource` is missing or empty".to_owned(),
            ));
        }
    };
    let selector = match selectors.len() {
        0 => None,
        1 => selectors.pop().map(|(_, s)| s),
        _ => {
            let names: Vec<&str> = selectors.iter().map(|(f, _)| *f).collect();
            return Err(Refusal::new(
                400,
                "invalid_request",
                format!(
                    "the request names its identity more than once ({}); give one of \
                     client_id, object_id, mi_res_id",
                    names.join(", ")
                ),
            ));
        }
    };
    Ok(TokenQuery { resource, selector })
}

/// A value of ours: not empty, bounded, no control characters.
fn checked_value(field: &str, value: &str) -> Result<String, Refusal> {
    let value = value.trim();
    let problem = if value.is_empty() {
        Some("is empty".to_owned())
    } else if value.chars().count() > MAX_VALUE_CHARS {
        Some(format!("is longer than {MAX_VALUE_CHARS} characters"))
    } else if value.chars().any(char::is_control) {
        Some("holds control characters".to_owned())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Refusal::new(
            400,
            "invalid_request",
            format!("query parameter `{field}` {problem}"),
        )),
        None => Ok(value.to_owned()),
    }
}

/// Pure: the scope to ask Entra for, for a `resource` as the clients send it. Every
/// client strips exactly a trailing `/.default` from its scope, so it is added back;
/// a resource that still ends with `/.default` is already a scope and is used as is.
pub(crate) fn scope_for(resource: &str) -> String {
    if resource.ends_with("/.default") {
        resource.to_owned()
    } else {
        format!("{resource}/.default")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn routed(method: &str, target: &str, pairs: &[(&'static str, &str)]) -> Result<Route, u16> {
        let path = target.split('?').next().unwrap();
        route(
            method,
            target,
            None,
            path,
            &headers(pairs),
            "/msi/token",
            "/healthz",
        )
        .map_err(|r| r.status)
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:1",
            "localhost",
            "LOCALHOST:50342",
            "[::1]",
            "[::1]:50342",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "10.0.0.1:80",
            "evil.example:80",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[::2]:1",
            "[::1]x",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "",
            "::1",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn heads_are_routed_or_refused_with_their_own_status() {
        let host = ("host", "127.0.0.1:50342");
        assert_eq!(routed("GET", "/msi/token?x", &[host]), Ok(Route::Token));
        assert_eq!(routed("GET", "/healthz", &[host]), Ok(Route::Health));
        assert_eq!(routed("POST", "/msi/token", &[host]), Err(405));
        let long = format!("/msi/token?{}", "a".repeat(MAX_TARGET_BYTES));
        assert_eq!(routed("GET", &long, &[host]), Err(414));
        let big = "b".repeat(MAX_HEADER_BYTES);
        assert_eq!(
            routed("GET", "/msi/token", &[host, ("x-big", &big)]),
            Err(431)
        );
        let body = ("content-length", "5");
        assert_eq!(routed("GET", "/msi/token", &[host, body]), Err(413));
        let empty = ("content-length", "0");
        assert_eq!(
            routed("GET", "/msi/token", &[host, empty]),
            Ok(Route::Token)
        );
        let xff = ("x-forwarded-for", "10.1.1.1");
        assert_eq!(routed("GET", "/msi/token", &[host, xff]), Err(403));
        let fwd = ("forwarded", "for=10.1.1.1");
        assert_eq!(routed("GET", "/msi/token", &[host, fwd]), Err(403));
        for proxied in [
            ("via", "1.1 proxy"),
            ("x-real-ip", "10.1.1.1"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
            ("true-client-ip", "10.1.1.1"),
        ] {
            assert_eq!(
                routed("GET", "/msi/token", &[host, proxied]),
                Err(403),
                "{proxied:?}"
            );
        }
        let foreign = ("host", "attacker.example:50342");
        assert_eq!(routed("GET", "/msi/token", &[foreign]), Err(421));
        assert_eq!(routed("GET", "/msi/token", &[]), Err(400));
        assert_eq!(routed("GET", "/msi/token", &[host, host]), Err(400));
        assert_eq!(routed("GET", "/other", &[host]), Err(404));
    }

    #[test]
    fn absolute_form_targets_are_judged_by_their_authority() {
        let host = ("host", "127.0.0.1:50342");
        let absolute = |scheme, authority| {
            route(
                "GET",
                "/msi/token",
                Some((scheme, authority)),
                "/msi/token",
                &headers(&[host]),
                "/msi/token",
                "/healthz",
            )
            .map_err(|r| r.status)
        };
        assert_eq!(absolute("http", "127.0.0.1:50342"), Ok(Route::Token));
        assert_eq!(absolute("http", "localhost"), Ok(Route::Token));
        assert_eq!(absolute("http", "evil.example"), Err(421));
        assert_eq!(absolute("http", "evil.example:50342"), Err(421));
        assert_eq!(absolute("https", "127.0.0.1:50342"), Err(421));
        assert_eq!(absolute("http", "user@127.0.0.1"), Err(421));
    }

    #[test]
    fn queries() {
        let q = token_query(
            "api-version=2019-08-01&resource=https%3A%2F%2Fmanagement.azure.com%2F&client_id=abc",
        )
        .unwrap();
        assert_eq!(q.resource, "https://management.azure.com/");
        assert_eq!(q.selector, Some(Selector::Client("abc".into())));
        // Unencoded, any order, among others; principal_id is object_id.
        let q =
            token_query("x=1&principal_id=P&resource=api://app&api-version=2019-08-01").unwrap();
        assert_eq!(q.resource, "api://app");
        assert_eq!(q.selector, Some(Selector::Object("P".into())));
        let q = token_query("api-version=2019-08-01&resource=r&mi_res_id=%2Fsubscriptions%2Fs")
            .unwrap();
        assert_eq!(
            q.selector,
            Some(Selector::Resource("/subscriptions/s".into()))
        );
        assert_eq!(
            token_query("api-version=2019-08-01&resource=r")
                .unwrap()
                .selector,
            None
        );
        for bad in [
            "resource=r",
            "api-version=2017-09-01&resource=r",
            "api-version=2019-08-01",
            "api-version=2019-08-01&resource=",
            "api-version=2019-08-01&resource=r&resource=s",
            "api-version=2019-08-01&resource=r&client_id=a&object_id=b",
            "api-version=2019-08-01&resource=r&object_id=a&principal_id=a",
            "api-version=2019-08-01&resource=r&client_id=a&client_id=a",
            "api-version=2019-08-01&resource=r&client_id=",
            "api-version=2019-08-01&resource=r%0Ax",
        ] {
            let refusal = token_query(bad).unwrap_err();
            assert_eq!(refusal.status, 400, "{bad}");
        }
        let two = token_query("api-version=2019-08-01&resource=r&client_id=a&mi_res_id=b");
        assert!(two.unwrap_err().message.contains("client_id, mi_res_id"));
    }

    #[test]
    fn scopes_from_resources() {
        assert_eq!(
            scope_for("https://management.core.windows.net/"),
            "https://management.core.windows.net//.default"
        );
        assert_eq!(scope_for("api://guid"), "api://guid/.default");
        assert_eq!(scope_for("api://guid/.default"), "api://guid/.default");
    }
}
