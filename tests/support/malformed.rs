//! Malformed credential bundles made from a fixture (cut, damaged, mislabelled PEM and
//! PKCS#12), and the runs of secret text that must not appear when they are refused: for
//! the library's secret tests and the command line's.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::fixtures::load;
use super::secrets::Runs;

/// The blocks of a fixture's PEM bundle, as text: (BEGIN line, body lines, END line).
pub fn blocks(name: &str) -> Vec<(String, Vec<String>, String)> {
    let text = String::from_utf8(super::fixtures::bundle(name)).unwrap();
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("-----BEGIN ") {
            current = Some((line.to_owned(), Vec::new()));
        } else if line.starts_with("-----END ") {
            let (begin, body) = current.take().unwrap();
            out.push((begin, body, line.to_owned()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push(line.to_owned());
        }
    }
    out
}

pub fn block(begin: &str, body: &[String], end: &str) -> String {
    format!("{begin}\n{}\n{end}\n", body.join("\n"))
}

pub fn wrap(b64: &str) -> Vec<String> {
    b64.as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect()
}

/// Malformed bundles built from fixture keys, each with what it exercises. Covers every
/// error kind of the `pem` crate (mismatched tags, malformed framing, missing BEGIN,
/// missing END, missing data, invalid base64, invalid header, not UTF-8) and the DER,
/// PKCS#1/#8, x509 and PKCS#12 errors behind them.
pub fn malformed_bundles() -> Vec<(&'static str, Vec<u8>)> {
    let pkcs8 = blocks("pem-pkcs8");
    let (cert_begin, cert_body, cert_end) = pkcs8[0].clone();
    let (key_begin, key_body, key_end) = pkcs8[1].clone();
    assert!(key_begin.contains("PRIVATE KEY") && cert_begin.contains("CERTIFICATE"));
    let cert = block(&cert_begin, &cert_body, &cert_end);
    let key_b64: String = key_body.concat();
    let der = STANDARD.decode(&key_b64).unwrap();
    let body_with = |f: &dyn Fn(&mut Vec<String>)| {
        let mut body = key_body.clone();
        f(&mut body);
        body
    };
    let mut cases: Vec<(&'static str, String)> =
        vec![
            (
                "BEGIN one dash short, then a certificate",
                format!(
                    "{}\n{}\n{key_end}\n{cert}",
                    &key_begin[..key_begin.len() - 1],
                    key_body.join("\n")
                ),
            ),
            (
                "END with another label",
                format!("{cert}{}", block(&key_begin, &key_body, &cert_end)),
            ),
            (
                "no END line",
                format!("{cert}{key_begin}\n{}\n", key_body.join("\n")),
            ),
            (
                "no BEGIN line",
                format!("{cert}{}\n{key_end}\n", key_body.join("\n")),
            ),
            (
                "END one dash short",
                format!(
                    "{cert}{}",
                    block(&key_begin, &key_body, &key_end[..key_end.len() - 1])
                ),
            ),
            (
                "BEGIN inside a block",
                format!("{}{cert}", block(&key_begin, &key_body, "").trim_end()),
            ),
            (
                "empty label",
                format!(
                    "{cert}-----BEGIN -----\n{}\n-----END -----\n",
                    key_body.join("\n")
                ),
            ),
            (
                "a character outside base64",
                format!(
                    "{cert}{}",
                    block(&key_begin, &body_with(&|b| b[3].insert(20, '$')), &key_end)
                ),
            ),
            (
                "a character dropped (base64 length)",
                format!(
                    "{cert}{}",
                    block(
                        &key_begin,
                        &body_with(&|b| {
                            b[3].remove(20);
                        }),
                        &key_end
                    )
                ),
            ),
            (
                "padding in the middle",
                format!(
                    "{cert}{}",
                    block(&key_begin, &body_with(&|b| b[3].insert(20, '=')), &key_end)
                ),
            ),
            (
                "a colon in the first body line (a 'header')",
                format!(
                    "{cert}{}",
                    block(&key_begin, &body_with(&|b| b[0].insert(30, ':')), &key_end)
                ),
            ),
            (
                "one base64 line, a blank line, then a header-looking line",
                format!("{cert}{key_begin}\n{key_b64}\n\nX: y\n{key_end}\n"),
            ),
            (
                "truncated key DER",
                format!(
                    "{cert}{}",
                    block(
                        &key_begin,
                        &wrap(&STANDARD.encode(&der[..der.len() / 2])),
                        &key_end
                    )
                ),
            ),
            (
                "key DER with a corrupt length",
                format!(
                    "{cert}{}",
                    block(
                        &key_begin,
                        &wrap(&STANDARD.encode(
                            [&der[..1], &[0x84, 0x7f, 0xff, 0xff, 0xff], &der[4..]].concat()
                        )),
                        &key_end
                    )
                ),
            ),
            (
                "key DER with a corrupt modulus",
                format!(
                    "{cert}{}",
                    block(
                        &key_begin,
                        &wrap(&STANDARD.encode({
                            let mut d = der.clone();
                            for b in &mut d[200..260] {
                                *b ^= 0x5a;
                            }
                            d
                        })),
                        &key_end
                    )
                ),
            ),
            (
                "key DER in a CERTIFICATE block",
                format!(
                    "{}{}",
                    block(&cert_begin, &key_body, &cert_end),
                    block(&key_begin, &key_body, &key_end)
                ),
            ),
            (
                "key DER in an RSA PRIVATE KEY block, trailing data",
                format!(
                    "{cert}{}",
                    block(
                        "-----BEGIN RSA PRIVATE KEY-----",
                        &wrap(&STANDARD.encode([der.as_slice(), &der[..80]].concat())),
                        "-----END RSA PRIVATE KEY-----"
                    )
                ),
            ),
        ];
    // A header block whose body is the key.
    cases.push((
        "legacy encrypted header over the key",
        format!(
            "{cert}-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{}\n\n{}\n-----END RSA PRIVATE KEY-----\n",
            &key_b64[..32],
            key_body.join("\n")
        ),
    ));
    let mut out: Vec<(&'static str, Vec<u8>)> = cases
        .into_iter()
        .map(|(n, t)| (n, t.into_bytes()))
        .collect();
    // Not UTF-8 inside the key body.
    let mut bytes = format!("{cert}{}", block(&key_begin, &key_body, &key_end)).into_bytes();
    let at = bytes.len() - key_end.len() - 100;
    bytes.splice(at..at, [0xff, 0xfe]);
    out.push(("bytes that are not UTF-8 in the key body", bytes));
    // A PKCS#12 archive with its middle damaged (DER errors, MAC failure).
    let pfx = super::fixtures::bundle("pfx-legacy");
    for (what, at) in [
        ("damaged PKCS#12 (early)", 40),
        ("damaged PKCS#12 (late)", pfx.len() - 60),
    ] {
        let mut damaged = pfx.clone();
        for b in &mut damaged[at..at + 8] {
            *b ^= 0xff;
        }
        out.push((what, damaged));
    }
    out
}

/// The runs that must not appear for a malformed bundle: the fixture's, the bundle's own
/// base64, and the PKCS#12 fixture's.
pub fn runs_for(bundle: &[u8]) -> Runs {
    let mut runs = Runs::of("pem-pkcs8");
    runs.add(
        "malformed client_secret",
        STANDARD.encode(bundle).as_bytes(),
    );
    runs.add(
        "pfx client_secret",
        super::fixtures::secret("pfx-legacy").as_bytes(),
    );
    runs
}

/// The fixture credential file with `bundle` as its `client_secret`.
pub fn credential_json(bundle: &[u8], authority: Option<&str>) -> String {
    let mut creds = load("pem-pkcs8");
    creds.client_secret = Some(STANDARD.encode(bundle).into());
    if let Some(authority) = authority {
        creds.authentication_endpoint = Some(authority.to_owned());
    }
    creds.to_json().unwrap()
}
