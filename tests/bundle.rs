//! Certificate bundles: every fixture decodes to the right leaf, or fails with its own
//! error kind.

mod support;

use msi_dataplane::{BundleFormat, ClientCertificate, ErrorKind};
use support::fixtures::{GOOD, identity_pem_path, leaf_pem_path, load, pem_file_der};

fn decode(name: &str) -> Result<ClientCertificate, msi_dataplane::Error> {
    ClientCertificate::from_credentials(&load(name))
}

#[test]
fn good_fixtures_pick_the_leaf_that_matches_the_key() {
    for name in GOOD {
        let cert = decode(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected_leaf = pem_file_der(&leaf_pem_path(name));
        assert_eq!(
            cert.leaf_der(),
            expected_leaf.as_slice(),
            "{name}: wrong leaf"
        );
        let sha256: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&expected_leaf).into();
        let sha1: [u8; 20] = <sha1::Sha1 as sha1::Digest>::digest(&expected_leaf).into();
        assert_eq!(cert.thumbprint_sha256(), &sha256, "{name}");
        assert_eq!(cert.thumbprint_sha1(), &sha1, "{name}");
        assert!(cert.key_bits() >= 2048, "{name}");
        assert!(cert.not_before() < cert.not_after(), "{name}");
    }
}

#[test]
fn formats_are_reported() {
    assert_eq!(decode("pem-pkcs8").unwrap().format(), BundleFormat::Pem);
    assert_eq!(decode("pfx-legacy").unwrap().format(), BundleFormat::Pkcs12);
    assert_eq!(decode("pfx-aes").unwrap().format(), BundleFormat::Pkcs12);
    assert_eq!(decode("pem-rsa4096").unwrap().key_bits(), 4096);
}

#[test]
fn chain_keeps_input_order_after_the_leaf() {
    // pem-chain's bundle is: intermediate, key, leaf, root.
    let cert = decode("pem-chain").unwrap();
    let chain = cert.chain();
    assert_eq!(chain.len(), 3);
    let intermediate = pem_file_der(&identity_pem_path("intermediate"));
    let root = pem_file_der(&identity_pem_path("root-ca"));
    assert_eq!(chain[1], intermediate);
    assert_eq!(chain[2], root);
    assert!(
        cert.subject()
            .unwrap()
            .contains("msi-dataplane-test-pem-chain")
    );
    assert!(cert.issuer().unwrap().contains("intermediate"));

    // pfx-legacy carries leaf + intermediate.
    let cert = decode("pfx-legacy").unwrap();
    assert_eq!(cert.chain().len(), 2);
    assert_eq!(cert.chain()[1], intermediate);
}

fn kind(name: &str) -> ErrorKind {
    match decode(name) {
        Ok(_) => panic!("{name}: decoded, but it must fail"),
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty());
            e.kind().clone()
        }
    }
}

#[test]
fn bad_fixtures_fail_with_their_own_kind() {
    assert!(
        matches!(kind("ec-key"), ErrorKind::UnsupportedKeyType { algorithm } if algorithm == "EC")
    );
    assert!(
        matches!(kind("ec-key-sec1"), ErrorKind::UnsupportedKeyType { algorithm } if algorithm.starts_with("EC"))
    );
    assert!(matches!(
        kind("rsa-1024"),
        ErrorKind::KeyTooSmall {
            bits: 1024,
            min_bits: 2048
        }
    ));
    assert!(matches!(
        kind("mismatched"),
        ErrorKind::NoMatchingCertificate { certificates: 1 }
    ));
    assert!(
        matches!(kind("encrypted-key"), ErrorKind::EncryptedPrivateKey { format } if format.contains("PKCS#8"))
    );
    assert!(
        matches!(kind("encrypted-legacy"), ErrorKind::EncryptedPrivateKey { format } if format.contains("Proc-Type"))
    );
    assert!(matches!(
        kind("two-keys"),
        ErrorKind::MultiplePrivateKeys { count: 2 }
    ));
    assert!(matches!(kind("no-key"), ErrorKind::NoPrivateKey));
    match kind("pfx-password") {
        ErrorKind::Pkcs12 { reason } => assert!(reason.contains("password"), "{reason}"),
        other => panic!("pfx-password: {other:?}"),
    }
}

#[test]
fn not_base64_and_unknown_formats() {
    let err = ClientCertificate::from_base64("this is not base64!").unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::SecretNotBase64 { .. }),
        "{err}"
    );

    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let err = ClientCertificate::from_base64(&b64.encode("just some text, no PEM")).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UnknownBundleFormat { .. }),
        "{err}"
    );

    // A DER SEQUENCE that is not a PFX is a PKCS#12 error, not a panic.
    let err =
        ClientCertificate::from_base64(&b64.encode([0x30, 0x03, 0x02, 0x01, 0x03])).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Pkcs12 { .. }), "{err}");

    // PEM armour around garbage.
    let err = ClientCertificate::from_base64(
        &b64.encode("-----BEGIN CERTIFICATE-----\n@@@\n-----END CERTIFICATE-----\n"),
    )
    .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UnknownBundleFormat { .. }),
        "{err}"
    );

    // A certificate block that is not a certificate.
    let err = ClientCertificate::from_base64(
        &b64.encode("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
    )
    .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NoPrivateKey), "{err}");
}

#[test]
fn key_without_certificate_is_no_certificate() {
    let text = String::from_utf8(support::fixtures::bundle("pem-pkcs8")).unwrap();
    let key_start = text.find("-----BEGIN PRIVATE KEY-----").unwrap();
    let key_only = &text[key_start..];
    let err = ClientCertificate::from_bundle(key_only.as_bytes()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NoCertificate), "{err}");
}
