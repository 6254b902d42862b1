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
//! Azure, OpenSSL and .NET write 2,048 (or 2,000) iterations; Java's keytool 10,000, and
//! they put only certificates in encrypted containers.

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

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const CONTEXT_0: u8 = 0xa0;
const CONTEXT_0_PRIMITIVE: u8 = 0x80;

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
    matches!(Tlv::read(bytes, 0, SEQUENCE), Ok((_, rest)) if rest.is_empty())
}

/// Check an archive's structure against the bounds (module docs); returns how many
/// unencrypted bags it has. Errors say which bound and where (a byte offset), never bytes
/// of the input.
pub(crate) fn scan(archive: &[u8]) -> Result<usize, Error> {
    let (pfx, _) = Tlv::read(archive, 0, SEQUENCE)?;
    let (_version, rest) = pfx.contents().next(INTEGER)?;
    let (auth_safe, rest) = rest.next(SEQUENCE)?;
    let (oid, content) = auth_safe.contents().next(OID)?;
    if oid.bytes != OID_DATA {
        return Err(malformed(
            oid.offset,
            "the archive's content is not of type data",
        ));
    }
    if !rest.is_empty() {
        // MacData ::= SEQUENCE { mac DigestInfo, macSalt OCTET STRING, iterations INTEGER }
        let (mac_data, _) = rest.next(SEQUENCE)?;
        let (_digest_info, after) = mac_data.contents().next(SEQUENCE)?;
        let (_salt, after) = after.next(OCTET_STRING)?;
        if !after.is_empty() {
            check_iterations(&after.next(INTEGER)?.0, "the MAC")?;
        }
    }
    let (explicit, _) = content.next(CONTEXT_0)?;
    let (octets, _) = explicit.contents().next(OCTET_STRING)?;
    let (safes, _) = Tlv::read(octets.bytes, octets.offset, SEQUENCE)?;
    let containers = count(safes.contents())?;
    if containers > MAX_PKCS12_CONTAINERS {
        return Err(limit(
            "containers",
            containers as u64,
            MAX_PKCS12_CONTAINERS as u64,
        ));
    }
    let mut bags = 0;
    let mut items = safes.contents();
    while !items.is_empty() {
        let (info, rest) = items.next(SEQUENCE)?;
        items = rest;
        let (oid, content) = info.contents().next(OID)?;
        let (explicit, _) = content.next(CONTEXT_0)?;
        if oid.bytes == OID_DATA {
            let (octets, _) = explicit.contents().next(OCTET_STRING)?;
            let (contents, _) = Tlv::read(octets.bytes, octets.offset, SEQUENCE)?;
            scan_bags(contents, 0, &mut bags)?;
        } else if oid.bytes == OID_ENCRYPTED_DATA {
            // EncryptedData ::= SEQUENCE { version, EncryptedContentInfo ::= SEQUENCE {
            //   contentType, contentEncryptionAlgorithm, [0] encryptedContent } }
            let (encrypted_data, _) = explicit.contents().next(SEQUENCE)?;
            let (_version, after) = encrypted_data.contents().next(INTEGER)?;
            let (content_info, _) = after.next(SEQUENCE)?;
            let (_type, after) = content_info.contents().next(OID)?;
            check_encryption(&after.next(SEQUENCE)?.0, "an encrypted container")?;
        }
        // Other content types: the decoder refuses them without deriving a key.
    }
    Ok(bags)
}

/// Check a `SafeContents`' bags, adding their number to `seen`.
fn scan_bags(safe_contents: Tlv<'_>, depth: usize, seen: &mut usize) -> Result<(), Error> {
    if depth > 2 {
        return Err(malformed(safe_contents.offset, "bags nested too deeply"));
    }
    // Count first: the bound holds before any bag is looked into.
    *seen += count(safe_contents.contents())?;
    if *seen > MAX_PKCS12_BAGS {
        return Err(limit("bags", *seen as u64, MAX_PKCS12_BAGS as u64));
    }
    let mut bags = safe_contents.contents();
    while !bags.is_empty() {
        let (bag, rest) = bags.next(SEQUENCE)?;
        bags = rest;
        let (bag_id, after) = bag.contents().next(OID)?;
        let (value, _) = after.next(CONTEXT_0)?;
        match bag_id.bytes.strip_prefix(OID_BAG_PREFIX) {
            Some([BAG_SHROUDED_KEY]) => {
                let (info, _) = value.contents().next(SEQUENCE)?;
                let (algorithm, _) = info.contents().next(SEQUENCE)?;
                check_encryption(&algorithm, "a shrouded key bag")?;
            }
            Some([BAG_SECRET]) => {
                return Err(unreadable(format!(
                    "the secret bag at byte {} is not supported (only certificate and key \
                     bags are)",
                    bag.offset
                )));
            }
            Some([BAG_SAFE_CONTENTS]) => {
                let (nested, _) = value.contents().next(SEQUENCE)?;
                scan_bags(nested, depth + 1, seen)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The iteration count of an encryption `AlgorithmIdentifier`, checked; unknown schemes
/// and key derivations other than PBKDF2 are refused here.
fn check_encryption(algorithm: &Tlv<'_>, what: &str) -> Result<(), Error> {
    let (oid, params) = algorithm.contents().next(OID)?;
    if oid.bytes.starts_with(OID_PKCS12_PBE_PREFIX) {
        // pkcs-12PbeParams ::= SEQUENCE { salt OCTET STRING, iterations INTEGER }
        let (pbe, _) = params.next(SEQUENCE)?;
        let (_salt, after) = pbe.contents().next(OCTET_STRING)?;
        let (iterations, _) = after.next(INTEGER)?;
        return check_iterations(&iterations, what);
    }
    if oid.bytes == OID_PBES2 {
        // PBES2-params ::= SEQUENCE { keyDerivationFunc AlgorithmIdentifier, encryptionScheme }
        let (pbes2, _) = params.next(SEQUENCE)?;
        let (kdf, _) = pbes2.contents().next(SEQUENCE)?;
        let (kdf_oid, kdf_params) = kdf.contents().next(OID)?;
        if kdf_oid.bytes != OID_PBKDF2 {
            return Err(unreadable(format!(
                "{what} at byte {} uses a key derivation other than PBKDF2 (scrypt is not \
                 supported)",
                algorithm.offset
            )));
        }
        // PBKDF2-params ::= SEQUENCE { salt CHOICE { OCTET STRING, AlgorithmIdentifier },
        //                              iterationCount INTEGER, ... }
        let (pbkdf2, _) = kdf_params.next(SEQUENCE)?;
        let (_salt, after) = pbkdf2.contents().next_any()?;
        let (iterations, _) = after.next(INTEGER)?;
        return check_iterations(&iterations, what);
    }
    Err(unreadable(format!(
        "{what} at byte {} uses an unsupported encryption scheme",
        algorithm.offset
    )))
}

/// A non-negative INTEGER's value (saturating at `u64::MAX`); `None` if negative.
fn integer_value(integer: &Tlv<'_>) -> Option<u64> {
    let bytes = integer.bytes;
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

fn check_iterations(integer: &Tlv<'_>, what: &str) -> Result<(), Error> {
    let value = integer_value(integer)
        .filter(|v| *v > 0)
        .ok_or_else(|| malformed(integer.offset, "an iteration count that is not positive"))?;
    if value > MAX_PKCS12_ITERATIONS {
        let what = format!("iterations of {what} (byte {})", integer.offset);
        return Err(limit(&what, value, MAX_PKCS12_ITERATIONS));
    }
    Ok(())
}

/// How many elements `items` holds (for the message of a limit).
fn count(mut items: Items<'_>) -> Result<usize, Error> {
    let mut n = 0;
    while !items.is_empty() {
        items = items.next_any()?.1;
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

/// An archive that cannot be read, for `reason` (which quotes nothing of the input).
pub(crate) fn unreadable(reason: String) -> Error {
    let message = format!("PKCS#12 archive cannot be read: {reason}");
    Error::file("pkcs12", Some("client_secret"), message)
}

fn malformed(offset: usize, what: &str) -> Error {
    unreadable(format!("malformed DER at byte {offset}: {what}"))
}

/// One DER element: its tag, its contents and where they start in the archive.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    bytes: &'a [u8],
    offset: usize,
}

/// A run of DER elements (the contents of a constructed element).
#[derive(Clone, Copy)]
struct Items<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Tlv<'a> {
    /// Read one element of tag `tag` at the start of `input` (found at `offset`).
    fn read(input: &'a [u8], offset: usize, tag: u8) -> Result<(Tlv<'a>, Items<'a>), Error> {
        let (tlv, rest) = Items {
            bytes: input,
            offset,
        }
        .next_any()?;
        if tlv.tag != tag {
            return Err(malformed(offset, "unexpected tag"));
        }
        Ok((tlv, rest))
    }

    fn contents(&self) -> Items<'a> {
        Items {
            bytes: self.bytes,
            offset: self.offset,
        }
    }
}

impl<'a> Items<'a> {
    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn next(self, tag: u8) -> Result<(Tlv<'a>, Items<'a>), Error> {
        let (tlv, rest) = self.next_any()?;
        // An encrypted container's content is [0] IMPLICIT OCTET STRING: primitive or not.
        if tlv.tag != tag && !(tag == CONTEXT_0 && tlv.tag == CONTEXT_0_PRIMITIVE) {
            return Err(malformed(self.offset, "unexpected tag"));
        }
        Ok((tlv, rest))
    }

    fn next_any(self) -> Result<(Tlv<'a>, Items<'a>), Error> {
        let truncated = || malformed(self.offset, "truncated element");
        let [tag, first, rest @ ..] = self.bytes else {
            return Err(truncated());
        };
        if tag & 0x1f == 0x1f {
            return Err(malformed(self.offset, "a high tag number"));
        }
        let (len, header) = if first & 0x80 == 0 {
            (usize::from(*first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return Err(malformed(self.offset, "an invalid length"));
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, 2 + n)
        };
        let end = header
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(truncated)?;
        let tlv = Tlv {
            tag: *tag,
            bytes: &self.bytes[header..end],
            offset: self.offset + header,
        };
        let rest = Items {
            bytes: &self.bytes[end..],
            offset: self.offset + end,
        };
        Ok((tlv, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
