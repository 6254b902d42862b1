//! Following links a service hands back (Key Vault's `nextLink`), safely.
//!
//! A link is followed only when it leads to the service's own origin (scheme, host and
//! port equal to those of the URL the client was given), has not been followed before in
//! the same walk, and the walk has not reached its page limit. Anything else ends the walk
//! with a [`LinkFault`] before a request is sent, so a broken or hostile service can
//! neither keep a listing running forever nor have the client send its bearer token to
//! another host.

use std::collections::HashSet;

use url::{Origin, Url};

use crate::untrusted_text::service_text;

use crate::error::LinkFault;

/// Checks each link of one walk through a service's pages.
pub(crate) struct LinkGuard {
    origin: Origin,
    /// SHA-256 of each link followed: a fixed size per page, whatever a link's length.
    seen: HashSet<[u8; 32]>,
    pages: usize,
    max_pages: usize,
}

impl LinkGuard {
    /// A walk on the origin of `service_url`, of at most `max_pages` pages (the first
    /// page included).
    pub(crate) fn new(service_url: &Url, max_pages: usize) -> Self {
        LinkGuard {
            origin: service_url.origin(),
            seen: HashSet::new(),
            pages: 1,
            max_pages: max_pages.max(1),
        }
    }

    /// Whether `next` may be followed; records it when it may.
    pub(crate) fn follow(&mut self, next: &Url) -> Result<(), LinkFault> {
        let origin = next.origin();
        if origin != self.origin || !origin.is_tuple() {
            return Err(LinkFault::ForeignOrigin {
                link_origin: service_text(&origin.ascii_serialization()),
                service_origin: self.origin.ascii_serialization(),
            });
        }
        if self.pages >= self.max_pages {
            return Err(LinkFault::TooManyPages {
                limit: self.max_pages,
            });
        }
        let digest =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, next.as_str().as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        self.pages += 1;
        if !self.seen.insert(key) {
            return Err(LinkFault::Loop { page: self.pages });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn links_on_the_same_origin_are_followed_in_order() {
        let mut guard = LinkGuard::new(&url("https://v.vault.azure.net/"), 10);
        for i in 0..9 {
            guard
                .follow(&url(&format!(
                    "https://v.vault.azure.net/secrets?$skiptoken={i}"
                )))
                .unwrap();
        }
        assert_eq!(
            guard.follow(&url("https://v.vault.azure.net/secrets?$skiptoken=x")),
            Err(LinkFault::TooManyPages { limit: 10 })
        );
    }

    #[test]
    fn the_default_port_is_the_same_origin() {
        let mut guard = LinkGuard::new(&url("https://v.vault.azure.net/"), 10);
        guard
            .follow(&url("https://v.vault.azure.net:443/secrets?a=1"))
            .unwrap();
    }

    #[test]
    fn another_host_port_or_scheme_is_refused() {
        for foreign in [
            "https://localhost:18005/secrets",
            "https://v.vault.azure.net:8443/secrets",
            "http://v.vault.azure.net/secrets",
            "https://v.vault.azure.net.evil.example/secrets",
        ] {
            let mut guard = LinkGuard::new(&url("https://v.vault.azure.net/"), 10);
            let fault = guard.follow(&url(foreign)).unwrap_err();
            assert!(
                matches!(fault, LinkFault::ForeignOrigin { .. }),
                "{foreign}: {fault}"
            );
        }
    }

    #[test]
    fn a_repeated_link_is_a_loop() {
        let mut guard = LinkGuard::new(&url("https://v/"), 100);
        guard.follow(&url("https://v/secrets?t=1")).unwrap();
        guard.follow(&url("https://v/secrets?t=2")).unwrap();
        assert_eq!(
            guard.follow(&url("https://v/secrets?t=1")),
            Err(LinkFault::Loop { page: 4 })
        );
    }
}
