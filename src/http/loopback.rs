//! Which hosts are loopback: the one rule behind `http://` loopback URLs, the direct (no
//! proxy) client for loopback authorities, and the token server's `Host` check.

use reqwest::Url;
use url::Host;

/// Pure: whether `host` is loopback: `localhost` (in any case), an address in
/// `127.0.0.0/8`, or `::1`.
pub fn is_loopback_host<S: AsRef<str>>(host: &Host<S>) -> bool {
    match host {
        Host::Domain(name) => name.as_ref().eq_ignore_ascii_case("localhost"),
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// Pure: whether a URL's host is loopback ([`is_loopback_host`]); `false` for a URL
/// without a host.
pub(crate) fn is_loopback(url: &Url) -> bool {
    url.host().is_some_and(|host| is_loopback_host(&host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses() {
        for url in [
            "http://127.0.0.1/",
            "http://127.1.2.3:8080/",
            "http://localhost:50342/",
            "http://LocalHost/",
            "http://[::1]:1/",
        ] {
            assert!(is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "http://10.0.0.1/",
            "http://localhost.evil.example/",
            "http://127.0.0.1.nip.io/",
            "http://[::2]/",
            "unix:/run/socket",
        ] {
            assert!(!is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
    }
}
