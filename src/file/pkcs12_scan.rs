//! A pre-scan of a PKCS#12 archive's DER that bounds the work of opening it, before the
//! decoder (`p12-keystore`) derives any key. It decrypts nothing.
//!
//! Opening an archive costs one key derivation for the MAC, one per encrypted container
//! and one per shrouded key bag. The scan reads what the archive shows in the clear: it
//! refuses an archive whose MAC, encrypted containers or unencrypted shrouded key bags ask
//! for more than [`MAX_PKCS12_ITERATIONS`] iterations or for a key derivation other than
//! PBKDF2 or the PKCS#12 KDF (scrypt is refused), that has more than
//! [`MAX_PKCS12_CONTAINERS`] containers or more than [`MAX_PKCS12_BAGS`] unencrypted bags,
//! or that holds secret bags. Bags inside an encrypted container are seen only by the
//! decoder, which bounds each derivation itself (10^6 iterations; scrypt within 1 GiB);
//! their number is bounded by the file's size (`SECURITY.md` gives the measured worst case).
//!
//! The DER is read with the `der` crate (through `pkcs8`), as strictly as the decoder
//! reads it.
//!
//! Azure, OpenSSL and .NET write 2,048 (or 2,000) iterations; Java's keytool 10,000, and
//! they put only certificates in encrypted containers.

use pkcs8::der::asn1::AnyRef;
use pkcs8::der::{Decode, Reader, SliceReader, Tag, TagNumber, Tagged};

use crate::error::Error;

/// Largest iteration count accepted for the MAC or any visible encryption of a PKCS#12
/// archive.
pub const MAX_PKCS12_ITERATIONS: u64 = 10_000;
/// Most bags accepted in the unencrypted containers of a PKCS#12 archive (the
/// [`MAX_CERTIFICATES`](crate::limits::MAX_CERTIFICATES) certificates, the key and a few
/// spare).
pub const MAX_PKCS12_BAGS: usize = 36;
/// Most containers (`ContentInfo`s of the authenticated safe) accepted in a PKCS#12
/// archive. Writers use two: one for the certificates, one for the key.
pub const MAX_PKCS12_CONTAINERS: usize = 8;

/// `[0]`, constructed (explicit) or primitive: either is accepted where it is expected.
const CONTEXT_0: Tag = Tag::ContextSpecific {
    constructed: true,
    number: TagNumber(0),
};

// DER contents of the object identifiers the scan recognises.
const OID_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01];
const OID_ENCRYPTED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x06];
/// 1.2.840.113549.1.12.10.1.{n}: the PKCS#12 bag types.
const OID_BAG_PREFIX: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x0a, 0x01];
const BAG_SHROUDED_KEY: u8 = 2;
const BAG_SECRET: u8 = 5;
const BAG_SAFE_CONTENTS: u8 = 6;
/// 1.2.840.113549.1.12.1.{1..6}: PKCS#12 password-based encryption (SHA-1 KDF).
const OID_PKCS12_PBE_PREFIX: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x01];
/// 1.2.840.113549.1.5.13: PBES2.
const OID_PBES2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];
/// 1.2.840.113549.1.5.12: PBKDF2.
const OID_PBKDF2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0c];

/// Whether `bytes` is one DER SEQUENCE spanning the whole input, as a PKCS#12 archive is.
pub(crate) fn is_der_sequence(bytes: &[u8]) -> bool {
    AnyRef::from_der(bytes).is_ok_and(|any| any.tag() == Tag::Sequence)
}

/// Check an archive's structure against the bounds (module docs); returns how many
/// unencrypted bags it has. Errors say which bound, never bytes of the input.
pub(crate) fn scan(archive: &[u8]) -> Result<usize, Error> {
    let mut pfx = items(first(archive, Tag::Sequence)?)?;
    next(&mut pfx, Tag::Integer)?; // the version
    let mut auth_safe = items(next(&mut pfx, Tag::Sequence)?)?;
    if next(&mut auth_safe, Tag::ObjectIdentifier)? != OID_DATA {
        return Err(malformed("the archive's content is not of type data"));
    }
    if !pfx.is_finished() {
        // MacData ::= SEQUENCE { mac DigestInfo, macSalt OCTET STRING, iterations INTEGER }
        let mut mac_data = items(next(&mut pfx, Tag::Sequence)?)?;
        next(&mut mac_data, Tag::Sequence)?;
        next(&mut mac_data, Tag::OctetString)?;
        if !mac_data.is_finished() {
            check_iterations(next(&mut mac_data, Tag::Integer)?, "the MAC")?;
        }
    }
    let octets = first(next(&mut auth_safe, CONTEXT_0)?, Tag::OctetString)?;
    let safes = first(octets, Tag::Sequence)?;
    let containers = count(safes)?;
    if containers > MAX_PKCS12_CONTAINERS {
        let (found, most) = (containers as u64, MAX_PKCS12_CONTAINERS as u64);
        return Err(limit("containers", found, most));
    }
    let mut bags = 0;
    let mut safes = items(safes)?;
    while !safes.is_finished() {
        // ContentInfo ::= SEQUENCE { contentType OID, content [0] EXPLICIT ANY }
        let mut info = items(next(&mut safes, Tag::Sequence)?)?;
        let oid = next(&mut info, Tag::ObjectIdentifier)?;
        let explicit = next(&mut info, CONTEXT_0)?;
        if oid == OID_DATA {
            let octets = first(explicit, Tag::OctetString)?;
            scan_bags(first(octets, Tag::Sequence)?, 0, &mut bags)?;
        } else if oid == OID_ENCRYPTED_DATA {
            // EncryptedData ::= SEQUENCE { version, EncryptedContentInfo ::= SEQUENCE {
            //   contentType, contentEncryptionAlgorithm, [0] encryptedContent } }
            let mut encrypted = items(first(explicit, Tag::Sequence)?)?;
            next(&mut encrypted, Tag::Integer)?;
            let mut content_info = items(next(&mut encrypted, Tag::Sequence)?)?;
            next(&mut content_info, Tag::ObjectIdentifier)?;
            let algorithm = next(&mut content_info, Tag::Sequence)?;
            check_encryption(algorithm, "an encrypted container")?;
        }
    }
    Ok(bags)
}

/// Count and check the bags of one `SafeContents` (the contents of its SEQUENCE),
/// following nested `SafeContents` bags at most two levels down.
fn scan_bags(safe_contents: &[u8], depth: usize, seen: &mut usize) -> Result<(), Error> {
    if depth > 2 {
        return Err(malformed("bags nested too deeply"));
    }
    *seen += count(safe_contents)?;
    if *seen > MAX_PKCS12_BAGS {
        return Err(limit("bags", *seen as u64, MAX_PKCS12_BAGS as u64));
    }
    let mut bags = items(safe_contents)?;
    while !bags.is_finished() {
        // SafeBag ::= SEQUENCE { bagId OID, bagValue [0] EXPLICIT ANY, attributes SET OPTIONAL }
        let mut bag = items(next(&mut bags, Tag::Sequence)?)?;
        let bag_id = next(&mut bag, Tag::ObjectIdentifier)?;
        let value = next(&mut bag, CONTEXT_0)?;
        match bag_id.strip_prefix(OID_BAG_PREFIX) {
            Some([BAG_SHROUDED_KEY]) => {
                // EncryptedPrivateKeyInfo ::= SEQUENCE { encryptionAlgorithm, encryptedData }
                let mut info = items(first(value, Tag::Sequence)?)?;
                check_encryption(next(&mut info, Tag::Sequence)?, "a shrouded key bag")?;
            }
            Some([BAG_SECRET]) => {
                let reason = "a secret bag is not supported (only certificate and key bags are)";
                return Err(unreadable(reason.to_owned()));
            }
            Some([BAG_SAFE_CONTENTS]) => {
                scan_bags(first(value, Tag::Sequence)?, depth + 1, seen)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Check an `AlgorithmIdentifier` (the contents of its SEQUENCE) of a password-based
/// encryption: the PKCS#12 KDF or PBES2 with PBKDF2, within the iteration bound.
fn check_encryption(algorithm: &[u8], what: &str) -> Result<(), Error> {
    let mut algorithm = items(algorithm)?;
    let oid = next(&mut algorithm, Tag::ObjectIdentifier)?;
    if oid.starts_with(OID_PKCS12_PBE_PREFIX) {
        // pkcs-12PbeParams ::= SEQUENCE { salt OCTET STRING, iterations INTEGER }
        let mut pbe = items(next(&mut algorithm, Tag::Sequence)?)?;
        next(&mut pbe, Tag::OctetString)?;
        return check_iterations(next(&mut pbe, Tag::Integer)?, what);
    }
    if oid == OID_PBES2 {
        // PBES2-params ::= SEQUENCE { keyDerivationFunc, encryptionScheme }
        let mut pbes2 = items(next(&mut algorithm, Tag::Sequence)?)?;
        let mut kdf = items(next(&mut pbes2, Tag::Sequence)?)?;
        if next(&mut kdf, Tag::ObjectIdentifier)? != OID_PBKDF2 {
            let reason =
                format!("{what} uses a key derivation other than PBKDF2 (scrypt is not supported)");
            return Err(unreadable(reason));
        }
        // PBKDF2-params ::= SEQUENCE { salt CHOICE, iterationCount INTEGER, ... }
        let mut pbkdf2 = items(next(&mut kdf, Tag::Sequence)?)?;
        AnyRef::decode(&mut pbkdf2).map_err(der_error)?;
        return check_iterations(next(&mut pbkdf2, Tag::Integer)?, what);
    }
    Err(unreadable(format!(
        "{what} uses an unsupported encryption scheme"
    )))
}

/// A non-negative INTEGER's value (saturating at `u64::MAX`); `None` for a negative or
/// empty one.
fn integer_value(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes[0] & 0x80 != 0 {
        return None;
    }
    let significant = &bytes[bytes.iter().take_while(|b| **b == 0).count()..];
    Some(if significant.len() > 8 {
        u64::MAX
    } else {
        significant
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
    })
}

fn check_iterations(integer: &[u8], what: &str) -> Result<(), Error> {
    let value = integer_value(integer)
        .filter(|v| *v > 0)
        .ok_or_else(|| malformed("an iteration count that is not positive"))?;
    if value > MAX_PKCS12_ITERATIONS {
        return Err(limit(
            &format!("iterations of {what}"),
            value,
            MAX_PKCS12_ITERATIONS,
        ));
    }
    Ok(())
}

/// A reader over the elements of `contents`.
fn items(contents: &[u8]) -> Result<SliceReader<'_>, Error> {
    SliceReader::new(contents).map_err(der_error)
}

/// The contents of the next element of `items`, which must have `tag` (`[0]` in either
/// form where [`CONTEXT_0`] is expected).
fn next<'a>(items: &mut SliceReader<'a>, tag: Tag) -> Result<&'a [u8], Error> {
    let element = AnyRef::decode(items).map_err(der_error)?;
    let either_zero = |t: Tag| {
        matches!(
            t,
            Tag::ContextSpecific {
                number: TagNumber(0),
                ..
            }
        )
    };
    if element.tag() != tag && !(either_zero(tag) && either_zero(element.tag())) {
        return Err(malformed(&format!(
            "{} where {tag} was expected",
            element.tag()
        )));
    }
    Ok(element.value())
}

/// The contents of the first element of `bytes`, which must have `tag`.
fn first(bytes: &[u8], tag: Tag) -> Result<&[u8], Error> {
    next(&mut items(bytes)?, tag)
}

/// How many elements `contents` holds.
fn count(contents: &[u8]) -> Result<usize, Error> {
    let mut items = items(contents)?;
    let mut n = 0;
    while !items.is_finished() {
        AnyRef::decode(&mut items).map_err(der_error)?;
        n += 1;
    }
    Ok(n)
}

fn limit(what: &str, value: u64, limit: u64) -> Error {
    let message = format!(
        "PKCS#12 archive refused before decryption: {what} is {value}, at most {limit} are accepted"
    );
    Error::file("pkcs12_limit", Some("client_secret"), message)
}

pub(crate) fn unreadable(reason: String) -> Error {
    let message = format!("PKCS#12 archive cannot be read: {reason}");
    Error::file("pkcs12", Some("client_secret"), message)
}

fn malformed(what: &str) -> Error {
    unreadable(format!("malformed DER: {what}"))
}

/// The decoder's error, by its kind (its position is within one nested element, so it
/// is left out).
fn der_error(error: pkcs8::der::Error) -> Error {
    malformed(&error.kind().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const OCTET_STRING: u8 = 0x04;
    const OID: u8 = 0x06;
    const CONTEXT_0: u8 = 0xa0;
    const CONTEXT_0_PRIMITIVE: u8 = 0x80;

    /// A DER element.
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = contents.len();
        if len < 0x80 {
            out.push(len as u8);
        } else {
            let bytes = (len as u32).to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (4 - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
        out.extend_from_slice(contents);
        out
    }

    fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        der(SEQUENCE, &parts.concat())
    }

    fn int(v: u32) -> Vec<u8> {
        let mut bytes = v.to_be_bytes().to_vec();
        while bytes.len() > 1 && bytes[0] == 0 && bytes[1] & 0x80 == 0 {
            bytes.remove(0);
        }
        if bytes[0] & 0x80 != 0 {
            bytes.insert(0, 0);
        }
        der(INTEGER, &bytes)
    }

    /// pbeWithSHAAnd3-KeyTripleDES-CBC with `iterations`.
    fn pbe(iterations: u32) -> Vec<u8> {
        let mut oid = OID_PKCS12_PBE_PREFIX.to_vec();
        oid.push(3);
        seq(&[
            der(OID, &oid),
            seq(&[der(OCTET_STRING, &[7; 8]), int(iterations)]),
        ])
    }

    /// PBES2 with PBKDF2 of `iterations` (and AES-256-CBC).
    fn pbes2(iterations: u32) -> Vec<u8> {
        let aes256 = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x01, 0x2a];
        seq(&[
            der(OID, OID_PBES2),
            seq(&[
                seq(&[
                    der(OID, OID_PBKDF2),
                    seq(&[der(OCTET_STRING, &[7; 8]), int(iterations)]),
                ]),
                seq(&[der(OID, &aes256), der(OCTET_STRING, &[0; 16])]),
            ]),
        ])
    }

    /// A shrouded key bag encrypted with `algorithm`.
    fn shrouded_bag(algorithm: &[u8]) -> Vec<u8> {
        let mut oid = OID_BAG_PREFIX.to_vec();
        oid.push(BAG_SHROUDED_KEY);
        seq(&[
            der(OID, &oid),
            der(
                CONTEXT_0,
                &seq(&[algorithm.to_vec(), der(OCTET_STRING, &[0x55; 64])]),
            ),
        ])
    }

    /// An unencrypted container of `bags`.
    fn data_container(bags: &[Vec<u8>]) -> Vec<u8> {
        seq(&[
            der(OID, OID_DATA),
            der(CONTEXT_0, &der(OCTET_STRING, &seq(bags))),
        ])
    }

    /// An encrypted container with `algorithm` (its ciphertext is junk).
    fn encrypted_container(algorithm: &[u8]) -> Vec<u8> {
        seq(&[
            der(OID, OID_ENCRYPTED_DATA),
            der(
                CONTEXT_0,
                &seq(&[
                    int(0),
                    seq(&[
                        der(OID, OID_DATA),
                        algorithm.to_vec(),
                        der(CONTEXT_0_PRIMITIVE, &[0x55; 64]),
                    ]),
                ]),
            ),
        ])
    }

    /// A PFX of `containers`, with a SHA-1 MAC of `mac_iterations` if given.
    fn pfx(containers: &[Vec<u8>], mac_iterations: Option<u32>) -> Vec<u8> {
        let sha1 = [0x2b, 0x0e, 0x03, 0x02, 0x1a];
        let auth_safe = seq(&[
            der(OID, OID_DATA),
            der(CONTEXT_0, &der(OCTET_STRING, &seq(containers))),
        ]);
        let mut parts = vec![int(3), auth_safe];
        if let Some(iterations) = mac_iterations {
            parts.push(seq(&[
                seq(&[seq(&[der(OID, &sha1)]), der(OCTET_STRING, &[0; 20])]),
                der(OCTET_STRING, &[1; 8]),
                int(iterations),
            ]));
        }
        seq(&parts)
    }

    /// The message of the limit `archive` is refused by.
    fn limit_of(archive: &[u8]) -> String {
        match scan(archive) {
            Err(e)
                if matches!(
                    e.kind(),
                    crate::ErrorKind::File {
                        code: "pkcs12_limit",
                        ..
                    }
                ) =>
            {
                e.to_string()
            }
            other => panic!("expected a limit, got {other:?}"),
        }
    }

    #[test]
    fn within_bounds_passes() {
        let containers = [
            encrypted_container(&pbes2(2048)),
            data_container(&[shrouded_bag(&pbe(2048))]),
        ];
        assert_eq!(scan(&pfx(&containers, Some(2048))).ok(), Some(1));
        assert!(is_der_sequence(&pfx(&containers, None)));
        assert!(!is_der_sequence(&[0x30, 0x05, 0x00]));
        assert!(!is_der_sequence(b"hello"));
    }

    #[test]
    fn each_bound_is_enforced() {
        let many: Vec<Vec<u8>> = (0..715).map(|_| shrouded_bag(&pbe(2048))).collect();
        let what = limit_of(&pfx(&[data_container(&many)], Some(2048)));
        assert!(what.contains(": bags is 715, at most 36"), "{what}");

        let what = limit_of(&pfx(&[data_container(&[])], Some(1_000_000)));
        assert!(what.contains("the MAC"), "{what}");
        assert!(what.contains(" is 1000000, at most 10000 "), "{what}");

        let bag = shrouded_bag(&pbe(10_001));
        let what = limit_of(&pfx(&[data_container(&[bag])], None));
        assert!(what.contains("shrouded key bag"), "{what}");

        let what = limit_of(&pfx(&[encrypted_container(&pbes2(u32::MAX))], None));
        assert!(what.contains("encrypted container"), "{what}");

        let containers: Vec<Vec<u8>> = (0..20).map(|_| data_container(&[])).collect();
        let what = limit_of(&pfx(&containers, None));
        assert!(what.contains(": containers is 20, at most 8"), "{what}");
    }

    #[test]
    fn fixture_archives_pass() {
        // Every writer's layout: the certificates in an encrypted container (RC2-40, 3DES
        // or AES-256), the key in a shrouded bag outside it.
        for name in ["pfx-legacy", "pfx-3des", "pfx-aes"] {
            let path = format!(
                "{}/fixtures/credentials/{name}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let creds =
                crate::file::model::UserAssignedIdentityCredentials::from_path(&path).unwrap();
            let secret = creds.client_secret.unwrap();
            use base64::Engine;
            let archive = base64::engine::general_purpose::STANDARD
                .decode(secret.expose_secret().trim())
                .unwrap();
            assert_eq!(scan(&archive).ok(), Some(1), "{name}");
        }
    }

    #[test]
    fn truncation_is_an_error_not_a_panic() {
        let archive = pfx(&[data_container(&[shrouded_bag(&pbe(2048))])], Some(2048));
        for cut in 0..archive.len() {
            let _ = scan(&archive[..cut]);
        }
    }
}
