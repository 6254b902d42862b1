//! `ClientCertificate::from_bundle` and `from_base64` on arbitrary bytes.
//!
//! The same input is tried both as raw bundle bytes (PEM or PKCS#12) and, decoded as
//! (lossy) UTF-8, as the base64 text a credential's `client_secret` holds. Must never
//! panic; when a bundle is accepted, every accessor must work and agree with the others.
#![no_main]

use libfuzzer_sys::fuzz_target;
use msi_dataplane::ClientCertificate;
use msi_dataplane::limits::{MAX_CERTIFICATES, MAX_RSA_BITS, MIN_RSA_BITS};

fuzz_target!(|data: &[u8]| {
    if let Ok(cert) = ClientCertificate::from_bundle(data) {
        exercise(&cert);
    }
    if let Ok(cert) = ClientCertificate::from_base64(&String::from_utf8_lossy(data)) {
        exercise(&cert);
    }
});

fn exercise(cert: &ClientCertificate) {
    // The leaf was parsed when the bundle was accepted: parsing it again must work.
    let subject = cert
        .subject()
        .expect("subject() failed on an accepted bundle");
    let issuer = cert
        .issuer()
        .expect("issuer() failed on an accepted bundle");
    std::hint::black_box((subject, issuer));

    let chain = cert.chain();
    assert!(!chain.is_empty(), "an accepted bundle has an empty chain");
    assert!(
        chain.len() <= MAX_CERTIFICATES,
        "chain longer than MAX_CERTIFICATES"
    );
    assert_eq!(
        cert.leaf_der(),
        chain[0].as_slice(),
        "leaf_der() is not chain()[0]"
    );

    assert_eq!(cert.thumbprint_sha1().len(), 20);
    assert_eq!(cert.thumbprint_sha256().len(), 32);
    assert_eq!(cert.thumbprint_sha1_hex().len(), 40);
    assert_eq!(cert.thumbprint_sha256_hex().len(), 64);

    assert!(
        (MIN_RSA_BITS..=MAX_RSA_BITS).contains(&cert.key_bits()),
        "key_bits() {} outside the accepted range",
        cert.key_bits()
    );
    std::hint::black_box((cert.not_before(), cert.not_after(), cert.format()));
    std::hint::black_box(format!("{cert:?}"));
}
