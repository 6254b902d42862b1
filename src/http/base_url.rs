//! The one rule for a service's base URL that a caller configures: an Entra authority
//! (the token layer) and a data plane identity URL (the data plane client).

use reqwest::Url;

use crate::http::loopback::is_loopback;

/// Pure: `text` as a service's base URL, or why it cannot be one: `https` (plain `http`
/// only for a loopback host, and only when `allow_http_loopback` is set), a host, no
/// user information, and no query or fragment unless `allow_query`.
pub(crate) fn base_url(
    text: &str,
    allow_http_loopback: bool,
    allow_query: bool,
) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("not a URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http_loopback && is_loopback(&url) => {}
        "http" if allow_http_loopback => {
            return Err("plain http is allowed only for a loopback host".into());
        }
        "http" => {
            return Err(
                "plain http is refused (allow it for loopback test servers with \
                 `allow_http_loopback`)"
                    .into(),
            );
        }
        other => return Err(format!("scheme `{other}` is not https")),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !allow_query && (url.query().is_some() || url.fragment().is_some()) {
        return Err("no query or fragment is allowed".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("no user information is allowed".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_or_loopback_http_with_a_host_and_no_user_information() {
        for (url, allow) in [
            ("http://login.microsoftonline.com/", false),
            ("http://login.microsoftonline.com/", true),
            ("http://127.0.0.1:8080/", false),
            ("ftp://host/", true),
            ("https://host/?q=1", false),
            ("https://user:pw@host/", false),
            ("not a url", false),
        ] {
            assert!(base_url(url, allow, false).is_err(), "{url}");
        }
        for url in [
            "http://127.0.0.1:8080/",
            "http://[::1]:80/",
            "http://localhost:1/",
        ] {
            base_url(url, true, false).unwrap();
        }
        // An identity URL keeps its query (its signature); user information never.
        base_url("https://h/x?sig=s#f", false, true).unwrap();
        assert!(base_url("https://user:pw@h/x?sig=s", false, true).is_err());
    }
}
