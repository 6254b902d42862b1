//! Certificate bundles: every fixture decodes to the right leaf, or fails with its own
//! error kind.

use crate::support;

use msi_dataplane::limits::{MAX_PKCS12_BAGS, MAX_PKCS12_ITERATIONS};
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

/// The code and message a fixture fails with.
fn refusal(name: &str) -> (&'static str, String) {
    match decode(name) {
        Ok(_) => panic!("{name}: decoded, but it must fail"),
        Err(e) => (e.kind().code(), e.to_string()),
    }
}

#[track_caller]
fn assert_refused(name: &str, code: &str, message: &str) {
    let (seen, text) = refusal(name);
    assert_eq!(seen, code, "{name}: {text}");
    assert!(text.contains(message), "{name}: {text}");
}

#[test]
fn bad_fixtures_fail_with_their_own_kind() {
    let unsupported = "unsupported_key_type";
    assert_refused(
        "ec-key",
        unsupported,
        "the private key is EC; only RSA keys",
    );
    assert_refused("ec-key-sec1", unsupported, "the private key is EC (SEC1");
    let small = "the RSA key has 1024 bits; at least 2048 are required";
    assert_refused("rsa-1024", "key_too_small", small);
    let unmatched = "matches the private key (1 certificate(s) checked)";
    assert_refused("mismatched", "no_matching_certificate", unmatched);
    assert_refused(
        "encrypted-key",
        "encrypted_private_key",
        "encrypted (PKCS#8",
    );
    assert_refused("encrypted-legacy", "encrypted_private_key", "(Proc-Type");
    let two = "holds 2 private keys; exactly one is expected";
    assert_refused("two-keys", "multiple_private_keys", two);
    assert_refused("no-key", "no_private_key", "holds no private key");
    assert_refused("pfx-password", "pkcs12", "password");
}

#[test]
fn not_base64_and_unknown_formats() {
    let err = ClientCertificate::from_base64("this is not base64!").unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "secret_not_base64",
                ..
            }
        ),
        "{err}"
    );

    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let err = ClientCertificate::from_base64(&b64.encode("just some text, no PEM")).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "unknown_bundle_format",
                ..
            }
        ),
        "{err}"
    );

    // A DER SEQUENCE that is not a PFX is a PKCS#12 error, not a panic.
    let err =
        ClientCertificate::from_base64(&b64.encode([0x30, 0x03, 0x02, 0x01, 0x03])).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "pkcs12", .. }),
        "{err}"
    );

    // PEM armour around garbage.
    let err = ClientCertificate::from_base64(
        &b64.encode("-----BEGIN CERTIFICATE-----\n@@@\n-----END CERTIFICATE-----\n"),
    )
    .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "unknown_bundle_format",
                ..
            }
        ),
        "{err}"
    );

    // A certificate block that is not a certificate.
    let err = ClientCertificate::from_base64(
        &b64.encode("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
    )
    .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "no_private_key",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn key_without_certificate_is_no_certificate() {
    let text = String::from_utf8(support::fixtures::bundle("pem-pkcs8")).unwrap();
    let key_start = text.find("-----BEGIN PRIVATE KEY-----").unwrap();
    let key_only = &text[key_start..];
    let err = ClientCertificate::from_bundle(key_only.as_bytes()).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "no_certificate",
                ..
            }
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Hostile PKCS#12 archives: refused by the pre-scan, before any key
// derivation. (The unit test in src/file/bundle.rs also checks that the decoder never ran.)
// ---------------------------------------------------------------------------------------

fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len() as u32;
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    der(0x30, &parts.concat())
}

fn int(v: u32) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&v.to_be_bytes());
    der(0x02, &bytes)
}

const DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01];
const ENCRYPTED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x06];
const SHROUDED_KEY_BAG: &[u8] = &[
    0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x0a, 0x01, 0x02,
];
const PBE_SHA1_3DES: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x01, 0x03];

/// pbeWithSHAAnd3-KeyTripleDES-CBC asking for `iterations`.
fn pbe(iterations: u32) -> Vec<u8> {
    seq(&[
        der(0x06, PBE_SHA1_3DES),
        seq(&[der(0x04, &[7; 8]), int(iterations)]),
    ])
}

/// A PFX of `containers` with a SHA-1 MAC of `mac_iterations`.
fn pfx(containers: &[Vec<u8>], mac_iterations: u32) -> Vec<u8> {
    let sha1 = [0x2b, 0x0e, 0x03, 0x02, 0x1a];
    seq(&[
        int(3),
        seq(&[der(0x06, DATA), der(0xa0, &der(0x04, &seq(containers)))]),
        seq(&[
            seq(&[seq(&[der(0x06, &sha1)]), der(0x04, &[0; 20])]),
            der(0x04, &[1; 8]),
            int(mac_iterations),
        ]),
    ])
}

fn refused(archive: &[u8]) -> (String, u64, u64) {
    let err = ClientCertificate::from_bundle(archive).unwrap_err();
    assert_eq!(err.kind().code(), "pkcs12_limit", "{err}");
    // "...refused before decryption: {what} is {value}, at most {limit} are accepted"
    let text = err.to_string();
    let rest = text.split_once("refused before decryption: ").unwrap().1;
    let (what, numbers) = rest.rsplit_once(" is ").unwrap();
    let (value, limit) = numbers.split_once(", at most ").unwrap();
    let limit = limit.strip_suffix(" are accepted").unwrap();
    (
        what.to_owned(),
        value.parse().unwrap(),
        limit.parse().unwrap(),
    )
}

#[test]
fn hostile_pkcs12_archives_are_refused_before_decryption() {
    // The reported archive: 1 MiB of 715 shrouded key bags, each asking for 10^6
    // iterations, under a MAC asking for as many.
    let bag = seq(&[
        der(0x06, SHROUDED_KEY_BAG),
        der(0xa0, &seq(&[pbe(1_000_000), der(0x04, &[0x55; 1400])])),
    ]);
    let bags: Vec<Vec<u8>> = (0..715).map(|_| bag.clone()).collect();
    let data = seq(&[der(0x06, DATA), der(0xa0, &der(0x04, &seq(&bags)))]);
    let archive = pfx(std::slice::from_ref(&data), 1_000_000);
    assert!(archive.len() > 1_000_000 && archive.len() <= 1024 * 1024);
    let (what, ..) = refused(&archive);
    assert!(what.contains("MAC"), "{what}");
    // The same with an ordinary MAC: refused on the bag count.
    let (what, value, limit) = refused(&pfx(std::slice::from_ref(&data), 2048));
    assert_eq!(
        (what.as_str(), value, limit),
        ("bags", 715, MAX_PKCS12_BAGS as u64)
    );

    // Within the bag bound, each iteration count is checked: the MAC's ...
    let small = seq(&[der(0x06, DATA), der(0xa0, &der(0x04, &seq(&bags[..1])))]);
    let (what, value, limit) = refused(&pfx(std::slice::from_ref(&small), 1_000_000));
    assert!(what.contains("MAC"), "{what}");
    assert_eq!((value, limit), (1_000_000, MAX_PKCS12_ITERATIONS));
    // ... a shrouded key bag's ...
    let (what, ..) = refused(&pfx(&[small], 2048));
    assert!(what.contains("shrouded key bag"), "{what}");
    // ... and an encrypted container's.
    let encrypted = seq(&[
        der(0x06, ENCRYPTED_DATA),
        der(
            0xa0,
            &seq(&[
                int(0),
                seq(&[der(0x06, DATA), pbe(u32::MAX), der(0x80, &[0x55; 64])]),
            ]),
        ),
    ]);
    let (what, value, _) = refused(&pfx(&[encrypted], 2048));
    assert!(what.contains("encrypted container"), "{what}");
    assert_eq!(value, u64::from(u32::MAX));
    // Too many containers.
    let empty = seq(&[der(0x06, DATA), der(0xa0, &der(0x04, &seq(&[])))]);
    let containers: Vec<Vec<u8>> = (0..100).map(|_| empty.clone()).collect();
    let (what, value, _) = refused(&pfx(&containers, 2048));
    assert_eq!((what.as_str(), value), ("containers", 100));
}
