//! The root certificates the crate-built HTTP client trusts beside the system's.
//!
//! With the `webpki-roots` feature, Mozilla's root program (the `webpki-root-certs` set,
//! compiled in) is added, so that a distroless image without a CA bundle still verifies
//! `login.microsoftonline.com` and the other Azure endpoints. Without it, the system's
//! roots (and `SSL_CERT_FILE` / `SSL_CERT_DIR`) are all there is.

/// Roots compiled into the crate (empty without the `webpki-roots` feature).
pub(crate) fn bundled() -> Vec<reqwest::Certificate> {
    #[cfg(feature = "webpki-roots")]
    {
        webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .filter_map(|der| reqwest::Certificate::from_der(der.as_ref()).ok())
            .collect()
    }
    #[cfg(not(feature = "webpki-roots"))]
    {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "webpki-roots")]
    #[test]
    fn every_mozilla_root_is_bundled() {
        let count = webpki_root_certs::TLS_SERVER_ROOT_CERTS.len();
        assert!(
            count > 100,
            "the Mozilla set has well over 100 roots: {count}"
        );
        assert_eq!(super::bundled().len(), count, "each root converts");
    }

    #[cfg(not(feature = "webpki-roots"))]
    #[test]
    fn none_without_the_feature() {
        assert!(super::bundled().is_empty());
    }
}
