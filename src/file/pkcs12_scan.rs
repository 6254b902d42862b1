//! A pre-scan of a PKCS#12 archive's DER that bounds the work of opening it, before the
//! decoder (`p12-keystore`) derives any key.
//!
//! Opening an archive costs one key derivation for the MAC, one per encrypted container
//! and one per shrouded key bag, each of as many iterations as the archive asks for. The
//! scan walks the PFX, its MAC data, the authenticated safe's containers and their bags,
//! and refuses an archive that asks for more than [`MAX_PKCS12_ITERATIONS`] iterations
//! anywhere, has more than [`MAX_PKCS12_CONTAINERS`] containers or more than
//! [`MAX_PKCS12_BAGS`] bags in all, uses a key derivation other than PBKDF2 or the PKCS#12
//! KDF (scrypt is refused), or holds secret bags (which the decoder would try to decrypt).
//! Counts and parameters are checked before any derivation. Then the MAC is verified
//! (empty password; SHA-1 and SHA-256 MACs) and each encrypted container is opened (one
//! derivation each; into a zeroized buffer) so that its bags are counted and checked too.
//! The decoder then reads the archive as the scan opened it (containers decrypted, MAC
//! removed), so no key is derived twice. A container that does not decrypt, or a MAC of
//! another digest, is left to the decoder with the original archive; it fails on such a
//! container the same way before it looks at any bag. So an archive within the bounds
//! costs at most `1 + 2 × MAX_PKCS12_CONTAINERS + MAX_PKCS12_BAGS` derivations of at most
//! `MAX_PKCS12_ITERATIONS` iterations each, and one outside them costs none.
//!
//! Azure, OpenSSL and .NET write 2,048 (or 2,000) iterations; Java's keytool 10,000.

use zeroize::Zeroizing;

use crate::error::Error;

/// The scan's refusals, made the crate's [`Error`] where the scan returns.
#[derive(Debug)]
pub(crate) enum ErrorKind {
    File(FileError),
}

/// What the scan refuses: an archive it cannot read, or one over a bound.
#[derive(Debug)]
pub(crate) enum FileError {
    Pkcs12 {
        reason: String,
    },
    Pkcs12Limit {
        what: String,
        value: u64,
        limit: u64,
    },
}

impl From<ErrorKind> for Error {
    fn from(ErrorKind::File(e): ErrorKind) -> Self {
        match e {
            FileError::Pkcs12 { reason } => {
                let message = format!("PKCS#12 archive cannot be read: {reason}");
                Error::file("pkcs12", Some("client_secret"), message)
            }
            FileError::Pkcs12Limit { what, value, limit } => {
                let message = format!(
                    "PKCS#12 archive refused before decryption: {what} is {value}, at most {limit} are accepted"
                );
                Error::file("pkcs12_limit", Some("client_secret"), message)
            }
        }
    }
}

/// Largest iteration count accepted for the MAC or any encryption of a PKCS#12 archive.
pub const MAX_PKCS12_ITERATIONS: u64 = 10_000;
/// Most bags accepted in the unencrypted containers of a PKCS#12 archive
/// ([`MAX_CERTIFICATES`](crate::limits::MAX_CERTIFICATES) plus the key and a few spare).
pub const MAX_PKCS12_BAGS: usize = crate::file::bundle::MAX_CERTIFICATES + 4;
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
/// 1.3.14.3.2.26 and 2.16.840.1.101.3.4.2.1: SHA-1 and SHA-256 (MAC digests).
const OID_SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
const OID_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
/// 1.2.840.113549.1.5.12: PBKDF2.
const OID_PBKDF2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0c];

/// What the scan found: how many bags, and, when it could open the whole archive itself
/// (its MAC verified with SHA-1 or SHA-256, every encrypted container decrypted), the same
/// archive with each encrypted container replaced by its contents and the MAC removed, so
/// that the decoder does not derive the same keys again.
pub(crate) struct Scanned {
    /// Bags in the archive, nested ones included.
    pub bags: usize,
    /// The archive opened, if it could be (zeroized on drop).
    pub opened: Option<Zeroizing<Vec<u8>>>,
}

/// Check an archive's structure against the bounds (module docs). Errors say which bound
/// and where (a byte offset), never bytes of the input.
pub(crate) fn scan(archive: &[u8]) -> Result<Scanned, ErrorKind> {
    let mut scan = Scan::default();
    let (pfx, _) = Tlv::read(archive, 0, SEQUENCE)?;
    let (version, rest) = pfx.contents().next(INTEGER)?;
    let (auth_safe, rest) = rest.next(SEQUENCE)?;
    let (oid, content) = auth_safe.contents().next(OID)?;
    if oid.bytes != OID_DATA {
        return Err(malformed(
            oid.offset,
            "the archive's content is not of type data",
        ));
    }
    let (explicit, _) = content.next(CONTEXT_0)?;
    let (octets, _) = explicit.contents().next(OCTET_STRING)?;
    let mut mac = None;
    if !rest.is_empty() {
        let (mac_data, _) = rest.next(SEQUENCE)?;
        let (digest_info, after) = mac_data.contents().next(SEQUENCE)?;
        let (salt, after) = after.next(OCTET_STRING)?;
        let mut iterations = 1;
        if !after.is_empty() {
            let (count, _) = after.next(INTEGER)?;
            check_iterations(&count, "the MAC")?;
            iterations = integer_value(&count).unwrap_or(u64::MAX);
        }
        let (algorithm, after) = digest_info.contents().next(SEQUENCE)?;
        let (digest_oid, _) = algorithm.contents().next(OID)?;
        let (digest, _) = after.next(OCTET_STRING)?;
        mac = Some((digest_oid.bytes, digest.bytes, salt.bytes, iterations));
    }
    let (safes, _) = Tlv::read(octets.bytes, octets.offset, SEQUENCE)?;
    let containers = count(safes.contents())?;
    if containers > MAX_PKCS12_CONTAINERS {
        return Err(limit(
            "containers",
            containers as u64,
            MAX_PKCS12_CONTAINERS as u64,
        ));
    }
    // First the checks that derive nothing: every container's bags (unencrypted) or
    // encryption parameters.
    enum Container<'a> {
        Data(&'a [u8]),
        Encrypted {
            offset: usize,
            algorithm: Tlv<'a>,
            ciphertext: Option<&'a [u8]>,
        },
        Other,
    }
    let mut found = Vec::with_capacity(containers);
    let mut items = safes.contents();
    while !items.is_empty() {
        let (info, rest) = items.next(SEQUENCE)?;
        items = rest;
        let (oid, content) = info.contents().next(OID)?;
        let (explicit, _) = content.next(CONTEXT_0)?;
        if oid.bytes == OID_DATA {
            let (octets, _) = explicit.contents().next(OCTET_STRING)?;
            let (bags, _) = Tlv::read(octets.bytes, octets.offset, SEQUENCE)?;
            scan.bags(bags, 0)?;
            found.push(Container::Data(info.raw));
        } else if oid.bytes == OID_ENCRYPTED_DATA {
            let (encrypted_data, _) = explicit.contents().next(SEQUENCE)?;
            let (_version, after) = encrypted_data.contents().next(INTEGER)?;
            let (content_info, _) = after.next(SEQUENCE)?;
            let (_type, after) = content_info.contents().next(OID)?;
            let (algorithm, after) = after.next(SEQUENCE)?;
            check_encryption(&algorithm, "an encrypted container")?;
            let ciphertext = match after.is_empty() {
                true => None,
                false => Some(after.next(CONTEXT_0)?.0.bytes),
            };
            found.push(Container::Encrypted {
                offset: info.offset,
                algorithm,
                ciphertext,
            });
        } else {
            // Other content types: the decoder refuses them without deriving a key.
            found.push(Container::Other);
        }
    }
    // Then the MAC, as the decoder does before decrypting: a password-protected archive
    // is reported as such, not as containers that do not decrypt.
    let mut can_open = match mac {
        None => true,
        Some((digest_oid, digest, salt, iterations)) => {
            match verify_mac(digest_oid, digest, salt, iterations, octets.bytes) {
                Some(true) => true,
                Some(false) => {
                    return Err(ErrorKind::File(FileError::Pkcs12 {
                        reason: crate::parser_errors::PKCS12_MAC_MISMATCH.to_owned(),
                    }));
                }
                None => false,
            }
        }
    };
    // Then each encrypted container, opened (one derivation, within the bound checked)
    // so that its bags are counted and checked too. One that does not decrypt with the
    // empty password is left to the decoder, which fails on it the same way before it
    // looks at any bag.
    let mut opened: Vec<Zeroizing<Vec<u8>>> = Vec::with_capacity(found.len());
    for container in found {
        match container {
            Container::Data(raw) => opened.push(Zeroizing::new(raw.to_vec())),
            Container::Encrypted {
                offset,
                algorithm,
                ciphertext,
            } => match ciphertext.and_then(|c| decrypt(&algorithm, c)) {
                Some(plain) => {
                    let (bags, _) = Tlv::read(&plain, 0, SEQUENCE).map_err(|_| {
                        malformed(offset, "a decrypted container that is not a SEQUENCE")
                    })?;
                    scan.bags(bags, 0).map_err(|e| inside(e, offset))?;
                    let data = der(OCTET_STRING, &[&plain]).and_then(|octets| {
                        let explicit = der(CONTEXT_0, &[&octets])?;
                        der(SEQUENCE, &[&der(OID, &[OID_DATA])?, &explicit])
                    });
                    match data {
                        Some(data) => opened.push(data),
                        None => can_open = false,
                    }
                }
                None => can_open = false,
            },
            Container::Other => can_open = false,
        }
    }
    let opened = if can_open {
        let parts: Vec<&[u8]> = opened.iter().map(|c| c.as_slice()).collect();
        der(SEQUENCE, &parts).and_then(|safes| {
            let octets = der(OCTET_STRING, &[&safes])?;
            let explicit = der(CONTEXT_0, &[&octets])?;
            let auth_safe = der(SEQUENCE, &[&der(OID, &[OID_DATA])?, &explicit])?;
            der(SEQUENCE, &[version.raw, &auth_safe])
        })
    } else {
        None
    };
    Ok(Scanned {
        bags: scan.bags,
        opened,
    })
}

/// Verify the archive's MAC with the empty password: `Some(verified)` for SHA-1 and
/// SHA-256 MACs (what writers use), `None` for a digest the scan does not handle.
fn verify_mac(
    digest_oid: &[u8],
    expected: &[u8],
    salt: &[u8],
    iterations: u64,
    data: &[u8],
) -> Option<bool> {
    use aws_lc_rs::hmac;
    use pkcs12::kdf::{Pkcs12KeyType, derive_key_utf8};
    let iterations = i32::try_from(iterations).ok()?;
    let (key, algorithm) = if digest_oid == OID_SHA1 {
        let key = derive_key_utf8::<sha1_kdf::Sha1>("", salt, Pkcs12KeyType::Mac, iterations, 20);
        (key.ok()?, hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY)
    } else if digest_oid == OID_SHA256 {
        let key = derive_key_utf8::<sha2_kdf::Sha256>("", salt, Pkcs12KeyType::Mac, iterations, 32);
        (key.ok()?, hmac::HMAC_SHA256)
    } else {
        return None;
    };
    let key = hmac::Key::new(algorithm, &key);
    Some(hmac::verify(&key, data, expected).is_ok())
}

/// A DER element of `parts`, in a zeroized buffer of exactly its size.
fn der(tag: u8, parts: &[&[u8]]) -> Option<Zeroizing<Vec<u8>>> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len_bytes = u32::try_from(len).ok()?.to_be_bytes();
    let skip = len_bytes.iter().take_while(|b| **b == 0).count();
    let mut out = Zeroizing::new(Vec::with_capacity(len + 6));
    out.push(tag);
    if len < 0x80 {
        out.push(len_bytes[3]);
    } else {
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&len_bytes[skip..]);
    }
    for part in parts {
        out.extend_from_slice(part);
    }
    Some(out)
}

#[derive(Default)]
struct Scan {
    bags: usize,
}

impl Scan {
    fn bags(&mut self, safe_contents: Tlv<'_>, depth: usize) -> Result<(), ErrorKind> {
        if depth > 2 {
            return Err(malformed(safe_contents.offset, "bags nested too deeply"));
        }
        // Count first: the bound holds before any bag is looked into.
        self.bags += count(safe_contents.contents())?;
        if self.bags > MAX_PKCS12_BAGS {
            return Err(limit("bags", self.bags as u64, MAX_PKCS12_BAGS as u64));
        }
        let mut bags = safe_contents.contents();
        while !bags.is_empty() {
            let (bag, rest) = bags.next(SEQUENCE)?;
            bags = rest;
            let (bag_id, after) = bag.contents().next(OID)?;
            let kind = bag_id
                .bytes
                .strip_prefix(OID_BAG_PREFIX)
                .and_then(|tail| match tail {
                    [n] => Some(*n),
                    _ => None,
                });
            let (value, _) = after.next(CONTEXT_0)?;
            match kind {
                Some(BAG_SHROUDED_KEY) => {
                    let (info, _) = value.contents().next(SEQUENCE)?;
                    let (algorithm, _) = info.contents().next(SEQUENCE)?;
                    check_encryption(&algorithm, "a shrouded key bag")?;
                }
                Some(BAG_SECRET) => {
                    return Err(ErrorKind::File(FileError::Pkcs12 {
                        reason: format!(
                            "the secret bag at byte {} is not supported (only certificate and \
                             key bags are)",
                            bag.offset
                        ),
                    }));
                }
                Some(BAG_SAFE_CONTENTS) => {
                    let (nested, _) = value.contents().next(SEQUENCE)?;
                    self.bags(nested, depth + 1)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The iteration count of an encryption `AlgorithmIdentifier`, checked; unknown schemes
/// and key derivations other than PBKDF2 are refused here.
fn check_encryption(algorithm: &Tlv<'_>, what: &str) -> Result<(), ErrorKind> {
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
            return Err(ErrorKind::File(FileError::Pkcs12 {
                reason: format!(
                    "{what} at byte {} uses a key derivation other than PBKDF2 (scrypt is not \
                     supported)",
                    algorithm.offset
                ),
            }));
        }
        // PBKDF2-params ::= SEQUENCE { salt CHOICE { OCTET STRING, AlgorithmIdentifier },
        //                              iterationCount INTEGER, ... }
        let (pbkdf2, _) = kdf_params.next(SEQUENCE)?;
        let (_salt, after) = pbkdf2.contents().next_any()?;
        let (iterations, _) = after.next(INTEGER)?;
        return check_iterations(&iterations, what);
    }
    Err(ErrorKind::File(FileError::Pkcs12 {
        reason: format!(
            "{what} at byte {} uses an unsupported encryption scheme",
            algorithm.offset
        ),
    }))
}

/// Decrypt an encrypted container with the empty password, into a zeroized buffer;
/// `None` for a scheme this scan does not open or a decryption that fails.
fn decrypt(algorithm: &Tlv<'_>, ciphertext: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    use cbc::cipher::block_padding::Pkcs7;
    use cbc::cipher::{BlockModeDecrypt, KeyIvInit};
    use pkcs5::der::Decode;

    let (oid, params) = algorithm.contents().next(OID).ok()?;
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    let len = if oid.bytes == OID_PBES2 {
        let params = pkcs5::pbes2::Parameters::from_der(params.bytes).ok()?;
        params.decrypt_in_place(b"", &mut buffer).ok()?.len()
    } else {
        let scheme = oid.bytes.strip_prefix(OID_PKCS12_PBE_PREFIX)?;
        let (pbe, _) = params.next(SEQUENCE).ok()?;
        let (salt, after) = pbe.contents().next(OCTET_STRING).ok()?;
        let (iterations, _) = after.next(INTEGER).ok()?;
        let iterations = i32::try_from(integer_value(&iterations)?).ok()?;
        let derive = |kind, len| {
            pkcs12::kdf::derive_key_utf8::<sha1_kdf::Sha1>("", salt.bytes, kind, iterations, len)
                .ok()
                .map(Zeroizing::new)
        };
        let (key_len, is_3des) = match scheme {
            [3] => (24, true),
            [6] => (5, false),
            _ => return None,
        };
        let key = derive(pkcs12::kdf::Pkcs12KeyType::EncryptionKey, key_len)?;
        let iv = derive(pkcs12::kdf::Pkcs12KeyType::Iv, 8)?;
        if is_3des {
            cbc::Decryptor::<des::TdesEde3>::new_from_slices(&key, &iv)
                .ok()?
                .decrypt_padded::<Pkcs7>(&mut buffer)
                .ok()?
                .len()
        } else {
            cbc::Decryptor::<rc2::Rc2>::new_from_slices(&key, &iv)
                .ok()?
                .decrypt_padded::<Pkcs7>(&mut buffer)
                .ok()?
                .len()
        }
    };
    buffer.truncate(len);
    Some(buffer)
}

/// Say that an error found in a decrypted container is about that container (its offsets
/// are within the plaintext).
fn inside(e: ErrorKind, container: usize) -> ErrorKind {
    match e {
        ErrorKind::File(FileError::Pkcs12Limit { what, value, limit }) if what != "bags" => {
            ErrorKind::File(FileError::Pkcs12Limit {
                what: format!("{what} in the encrypted container at byte {container}"),
                value,
                limit,
            })
        }
        ErrorKind::File(FileError::Pkcs12 { reason }) => ErrorKind::File(FileError::Pkcs12 {
            reason: format!("in the encrypted container at byte {container}: {reason}"),
        }),
        other => other,
    }
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

fn check_iterations(integer: &Tlv<'_>, what: &str) -> Result<(), ErrorKind> {
    let value = integer_value(integer)
        .filter(|v| *v > 0)
        .ok_or_else(|| malformed(integer.offset, "an iteration count that is not positive"))?;
    if value > MAX_PKCS12_ITERATIONS {
        return Err(ErrorKind::File(FileError::Pkcs12Limit {
            what: format!("iterations of {what} (byte {})", integer.offset),
            value,
            limit: MAX_PKCS12_ITERATIONS,
        }));
    }
    Ok(())
}

/// How many elements `items` holds (for the message of a limit).
fn count(mut items: Items<'_>) -> Result<usize, ErrorKind> {
    let mut n = 0;
    while !items.is_empty() {
        items = items.next_any()?.1;
        n += 1;
    }
    Ok(n)
}

fn limit(what: &str, value: u64, limit: u64) -> ErrorKind {
    ErrorKind::File(FileError::Pkcs12Limit {
        what: what.to_owned(),
        value,
        limit,
    })
}

fn malformed(offset: usize, what: &str) -> ErrorKind {
    ErrorKind::File(FileError::Pkcs12 {
        reason: format!("malformed DER at byte {offset}: {what}"),
    })
}

/// One DER element: its tag, its contents and where they start in the archive.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    /// The whole element: header and contents.
    raw: &'a [u8],
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
    fn read(input: &'a [u8], offset: usize, tag: u8) -> Result<(Tlv<'a>, Items<'a>), ErrorKind> {
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

    fn next(self, tag: u8) -> Result<(Tlv<'a>, Items<'a>), ErrorKind> {
        let (tlv, rest) = self.next_any()?;
        // An encrypted container's content is [0] IMPLICIT OCTET STRING: primitive or not.
        if tlv.tag != tag && !(tag == CONTEXT_0 && tlv.tag == CONTEXT_0_PRIMITIVE) {
            return Err(malformed(self.offset, "unexpected tag"));
        }
        Ok((tlv, rest))
    }

    fn next_any(self) -> Result<(Tlv<'a>, Items<'a>), ErrorKind> {
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
            raw: &self.bytes[..end],
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
pub(crate) mod tests {
    use super::*;

    /// A DER element.
    pub(crate) fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
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
    pub(crate) fn pbe(iterations: u32) -> Vec<u8> {
        let mut oid = OID_PKCS12_PBE_PREFIX.to_vec();
        oid.push(3);
        seq(&[
            der(OID, &oid),
            seq(&[der(OCTET_STRING, &[7; 8]), int(iterations)]),
        ])
    }

    /// PBES2 with PBKDF2 of `iterations` (and AES-256-CBC).
    pub(crate) fn pbes2(iterations: u32) -> Vec<u8> {
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
    pub(crate) fn shrouded_bag(algorithm: &[u8]) -> Vec<u8> {
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
    pub(crate) fn data_container(bags: &[Vec<u8>]) -> Vec<u8> {
        seq(&[
            der(OID, OID_DATA),
            der(CONTEXT_0, &der(OCTET_STRING, &seq(bags))),
        ])
    }

    /// An encrypted container with `algorithm` (its ciphertext is junk).
    pub(crate) fn encrypted_container(algorithm: &[u8]) -> Vec<u8> {
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
    pub(crate) fn pfx(containers: &[Vec<u8>], mac_iterations: Option<u32>) -> Vec<u8> {
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

    fn limit_of(archive: &[u8]) -> (String, u64, u64) {
        match scan(archive).map(|s| s.bags) {
            Err(ErrorKind::File(FileError::Pkcs12Limit { what, value, limit })) => {
                (what, value, limit)
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
        // The junk container does not decrypt: within bounds, left to the decoder.
        let scanned = scan(&pfx(&containers, None)).unwrap();
        assert_eq!(scanned.bags, 1);
        assert!(scanned.opened.is_none());
        let scanned = scan(&pfx(&[data_container(&[])], None)).unwrap();
        assert!(scanned.opened.is_some());
        // A MAC that does not verify with the empty password is refused as the decoder
        // would refuse it.
        match scan(&pfx(&containers, Some(2048))).map(|s| s.bags) {
            Err(ErrorKind::File(FileError::Pkcs12 { reason })) => {
                assert!(reason.contains("password"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bound_is_enforced() {
        let many: Vec<Vec<u8>> = (0..715).map(|_| shrouded_bag(&pbe(2048))).collect();
        let (what, value, _) = limit_of(&pfx(&[data_container(&many)], Some(2048)));
        assert_eq!((what.as_str(), value), ("bags", 715));

        let (what, value, _) = limit_of(&pfx(&[data_container(&[])], Some(1_000_000)));
        assert!(what.contains("the MAC"), "{what}");
        assert_eq!(value, 1_000_000);

        let bag = shrouded_bag(&pbe(10_001));
        let (what, ..) = limit_of(&pfx(&[data_container(&[bag])], None));
        assert!(what.contains("shrouded key bag"), "{what}");

        let (what, ..) = limit_of(&pfx(&[encrypted_container(&pbes2(u32::MAX))], None));
        assert!(what.contains("encrypted container"), "{what}");

        let containers: Vec<Vec<u8>> = (0..20).map(|_| data_container(&[])).collect();
        let (what, value, _) = limit_of(&pfx(&containers, None));
        assert_eq!((what.as_str(), value), ("containers", 20));
    }

    /// A container encrypted with PBES2 (PBKDF2-SHA256, AES-256-CBC), empty password.
    fn aes_container(bags: &[Vec<u8>]) -> Vec<u8> {
        use pkcs5::der::Encode;
        let params =
            pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(2048, &[9; 16], [3; 16])
                .unwrap();
        let ciphertext = params.encrypt(b"", &seq(bags)).unwrap();
        let algorithm = seq(&[der(OID, OID_PBES2), params.to_der().unwrap()]);
        seq(&[
            der(OID, OID_ENCRYPTED_DATA),
            der(
                CONTEXT_0,
                &seq(&[
                    int(0),
                    seq(&[
                        der(OID, OID_DATA),
                        algorithm,
                        der(CONTEXT_0_PRIMITIVE, &ciphertext),
                    ]),
                ]),
            ),
        ])
    }

    #[test]
    fn bags_inside_encrypted_containers_are_counted_and_checked() {
        let bag = shrouded_bag(&pbe(2048));
        assert_eq!(
            scan(&pfx(&[aes_container(&[bag.clone(), bag])], None))
                .map(|s| s.bags)
                .ok(),
            Some(2)
        );
        let many: Vec<Vec<u8>> = (0..40).map(|_| shrouded_bag(&pbe(2048))).collect();
        let (what, value, _) = limit_of(&pfx(&[aes_container(&many)], None));
        assert_eq!((what.as_str(), value), ("bags", 40));
        let costly = shrouded_bag(&pbes2(1_000_000));
        let (what, ..) = limit_of(&pfx(&[aes_container(&[costly])], None));
        assert!(
            what.contains("shrouded key bag") && what.contains("in the encrypted container"),
            "{what}"
        );
    }

    #[test]
    fn fixture_archives_are_opened_whole() {
        // Every writer's layout: the certificates in an encrypted container (RC2-40, 3DES
        // or AES-256), the key in a shrouded bag; the scan sees every bag the decoder does.
        for name in ["pfx-legacy", "pfx-3des", "pfx-aes"] {
            let path = format!(
                "{}/fixtures/credentials/{name}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let creds =
                crate::file::model::UserAssignedIdentityCredentials::from_path(&path).unwrap();
            let secret = creds.client_secret.unwrap();
            let archive = crate::file::bundle::decode_base64(secret.expose_secret()).unwrap();
            let opened = p12_keystore::Pkcs12Archive::from_pkcs12(&archive, "").unwrap();
            let expected = opened.certs.len() + opened.keys.len();
            let scanned = scan(&archive).unwrap();
            assert_eq!(scanned.bags, expected, "{name}");
            // Opened by the scan: the decoder reads the same bags from it, deriving no key
            // for the containers or the MAC again.
            let again =
                p12_keystore::Pkcs12Archive::from_pkcs12(&scanned.opened.unwrap(), "").unwrap();
            let der = |a: &p12_keystore::Pkcs12Archive| {
                let certs: Vec<Vec<u8>> =
                    a.certs.iter().map(|c| c.cert.as_der().to_vec()).collect();
                let keys: Vec<Vec<u8>> = a.keys.iter().map(|k| k.key.as_der().to_vec()).collect();
                (certs, keys)
            };
            assert_eq!(der(&again), der(&opened), "{name}");
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
