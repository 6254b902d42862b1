//! Hot paths of the core: parse+validate a credential file, and build+sign an assertion,
//! each beside the unavoidable parts it is made of, measured in the same run.
//!
//! `cargo bench --bench core` (BENCHMARKS.md records the results and the OpenSSL baseline).

#[path = "../tests/support/by_hand.rs"]
#[allow(dead_code)]
mod by_hand;

use std::hint::black_box;
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RSA_PSS_SHA256, RsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use criterion::{Criterion, criterion_group, criterion_main};
use msi_dataplane::{
    AssertionAlgorithm, ClientCertificate, ClientCertificateCredential,
    ClientCertificateCredentialOptions, UserAssignedIdentityCredentials,
};
use x509_parser::prelude::{FromDer, X509Certificate};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/fixtures/credentials/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The whole job: bytes -> validated model -> decoded bundle, key loaded, leaf matched.
fn parse_full(bytes: &[u8]) -> ClientCertificate {
    let creds = UserAssignedIdentityCredentials::from_slice(bytes).unwrap();
    ClientCertificate::from_credentials(&creds).unwrap()
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.measurement_time(Duration::from_secs(4));

    // PEM fixture and its unavoidable parts.
    let pem_json = fixture("pem-pkcs8");
    g.bench_function("pem/full", |b| b.iter(|| parse_full(black_box(&pem_json))));
    // What a caller waits for when building a credential from the file's bytes: the parse
    // above plus the signer, the token URL and the client choice.
    g.bench_function("pem/credential", |b| {
        b.iter(|| {
            let creds = UserAssignedIdentityCredentials::from_slice(black_box(&pem_json)).unwrap();
            ClientCertificateCredential::new(&creds, ClientCertificateCredentialOptions::default())
                .unwrap()
        })
    });

    let creds = UserAssignedIdentityCredentials::from_slice(&pem_json).unwrap();
    let secret = creds
        .client_secret
        .as_ref()
        .unwrap()
        .expose_secret()
        .to_owned();
    let bundle = STANDARD.decode(&secret).unwrap();
    let blocks = pem::parse_many(&bundle).unwrap();
    let cert_der = blocks
        .iter()
        .find(|p| p.tag() == "CERTIFICATE")
        .unwrap()
        .contents()
        .to_vec();
    let key_der = blocks
        .iter()
        .find(|p| p.tag() == "PRIVATE KEY")
        .unwrap()
        .contents()
        .to_vec();
    g.bench_function("pem/part/json", |b| {
        b.iter(|| {
            serde_json::from_slice::<UserAssignedIdentityCredentials>(black_box(&pem_json)).unwrap()
        })
    });
    g.bench_function("pem/part/base64", |b| {
        b.iter(|| STANDARD.decode(black_box(&secret)).unwrap())
    });
    g.bench_function("pem/part/pem", |b| {
        b.iter(|| pem::parse_many(black_box(&bundle)).unwrap())
    });
    g.bench_function("pem/part/x509", |b| {
        b.iter(|| {
            X509Certificate::from_der(black_box(&cert_der))
                .map(|(_, c)| c.validity().not_after.timestamp())
                .unwrap()
        })
    });
    g.bench_function("pem/part/key_load", |b| {
        b.iter(|| RsaKeyPair::from_pkcs8(black_box(&key_der)).unwrap())
    });
    // The backend choice for the key load (BENCHMARKS.md): the pure-Rust `rsa` crate
    // parsing and checking the same key.
    g.bench_function("keyload/rsa-crate", |b| {
        use rsa::pkcs8::DecodePrivateKey;
        b.iter(|| rsa::RsaPrivateKey::from_pkcs8_der(black_box(&key_der)).unwrap())
    });

    // PKCS#12 fixtures, and the key derivations each must do, done with AWS-LC digests.
    let aes_json = fixture("pfx-aes");
    g.bench_function("pfx-aes/full", |b| {
        b.iter(|| parse_full(black_box(&aes_json)))
    });
    g.bench_function("pfx-aes/part/kdf", |b| b.iter(kdf_aes_archive));
    let legacy_json = fixture("pfx-legacy");
    g.bench_function("pfx-legacy/full", |b| {
        b.iter(|| parse_full(black_box(&legacy_json)))
    });
    g.bench_function("pfx-legacy/part/kdf", |b| b.iter(kdf_legacy_archive));
    g.finish();
}

/// OpenSSL 3's default archive: a SHA-256 MAC keyed by the PKCS#12 KDF, and two
/// PBES2 bags (certificates, key), each PBKDF2-HMAC-SHA256; 2048 iterations everywhere.
fn kdf_aes_archive() -> [u8; 32] {
    let salt = [7u8; 8];
    let mut out = [0u8; 32];
    pkcs12_kdf(Hash::Sha256, 3, &salt, 2048, &mut out);
    let iterations = std::num::NonZeroU32::new(2048).unwrap();
    for _ in 0..2 {
        let mut key = [0u8; 32];
        aws_lc_rs::pbkdf2::derive(
            aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
            iterations,
            &salt,
            b"",
            &mut key,
        );
        out[0] ^= key[0];
    }
    black_box(out)
}

/// `-legacy`: SHA-1 MAC key, RC2-40 key and IV for the certificate bag, 3DES key (24
/// bytes: two SHA-1 blocks) and IV for the key bag; PKCS#12 KDF, 2048 iterations each.
fn kdf_legacy_archive() -> [u8; 24] {
    let salt = [7u8; 8];
    let mut mac = [0u8; 20];
    pkcs12_kdf(Hash::Sha1, 3, &salt, 2048, &mut mac);
    let mut rc2_key = [0u8; 5];
    pkcs12_kdf(Hash::Sha1, 1, &salt, 2048, &mut rc2_key);
    let mut rc2_iv = [0u8; 8];
    pkcs12_kdf(Hash::Sha1, 2, &salt, 2048, &mut rc2_iv);
    let mut des_key = [0u8; 24];
    pkcs12_kdf(Hash::Sha1, 1, &salt, 2048, &mut des_key);
    let mut des_iv = [0u8; 8];
    pkcs12_kdf(Hash::Sha1, 2, &salt, 2048, &mut des_iv);
    des_key[0] ^= mac[0] ^ rc2_key[0] ^ rc2_iv[0] ^ des_iv[0];
    black_box(des_key)
}

#[derive(Clone, Copy)]
enum Hash {
    Sha1,
    Sha256,
}

/// RFC 7292 appendix B.2, empty password (BMPString terminator only).
fn pkcs12_kdf(hash: Hash, id: u8, salt: &[u8], iterations: u32, out: &mut [u8]) {
    let (alg, u) = match hash {
        Hash::Sha1 => (&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, 20),
        Hash::Sha256 => (&aws_lc_rs::digest::SHA256, 32),
    };
    let v = 64;
    let d = vec![id; v];
    let fill = |src: &[u8]| -> Vec<u8> {
        if src.is_empty() {
            return Vec::new();
        }
        let len = v * src.len().div_ceil(v);
        src.iter().cycle().take(len).copied().collect()
    };
    let mut i = fill(salt);
    i.extend(fill(&[0, 0]));
    for chunk in out.chunks_mut(u) {
        let mut ctx = aws_lc_rs::digest::Context::new(alg);
        ctx.update(&d);
        ctx.update(&i);
        let mut a = ctx.finish();
        for _ in 1..iterations {
            a = aws_lc_rs::digest::digest(alg, a.as_ref());
        }
        chunk.copy_from_slice(&a.as_ref()[..chunk.len()]);
        // I_j = (I_j + B + 1) mod 2^(v*8), with B = A repeated to v bytes.
        let b: Vec<u8> = a.as_ref().iter().cycle().take(v).copied().collect();
        for block in i.chunks_mut(v) {
            let mut carry = 1u16;
            for k in (0..v).rev() {
                let sum = u16::from(block[k]) + u16::from(b[k]) + carry;
                block[k] = sum as u8;
                carry = sum >> 8;
            }
        }
    }
}

fn bench_sign(c: &mut Criterion) {
    let mut g = c.benchmark_group("sign");
    g.measurement_time(Duration::from_secs(4));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let creds = UserAssignedIdentityCredentials::from_slice(&fixture("pem-pkcs8")).unwrap();
    for (name, alg) in [
        ("assertion/ps256", AssertionAlgorithm::Ps256),
        ("assertion/rs256", AssertionAlgorithm::Rs256),
    ] {
        let cred = ClientCertificateCredential::new(
            &creds,
            ClientCertificateCredentialOptions::default().with_assertion_algorithm(alg),
        )
        .unwrap();
        g.bench_function(name, |b| b.iter(|| cred.client_assertion().unwrap()));
    }

    // Baselines: the raw RSA-2048 signature over an assertion-sized message.
    let bundle = STANDARD
        .decode(creds.client_secret.as_ref().unwrap().expose_secret())
        .unwrap();
    let key_der = pem::parse_many(&bundle)
        .unwrap()
        .into_iter()
        .find(|p| p.tag() == "PRIVATE KEY")
        .unwrap()
        .into_contents();
    let key = RsaKeyPair::from_pkcs8(&key_der).unwrap();
    let message = vec![b'a'; 1900];
    let rng = SystemRandom::new();
    let mut sig = vec![0u8; key.public_modulus_len()];
    g.bench_function("raw/aws-lc-rs/pss", |b| {
        b.iter(|| key.sign(&RSA_PSS_SHA256, &rng, black_box(&message), &mut sig))
    });
    g.bench_function("raw/aws-lc-rs/pkcs1", |b| {
        b.iter(|| key.sign(&RSA_PKCS1_SHA256, &rng, black_box(&message), &mut sig))
    });
    // The pure-Rust `rsa` crate, for the backend choice (BENCHMARKS.md).
    {
        use rsa::pkcs8::DecodePrivateKey;
        use rsa::signature::Signer;
        let rsa_key = rsa::RsaPrivateKey::from_pkcs8_der(&key_der).unwrap();
        let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(rsa_key);
        g.bench_function("raw/rsa-crate/pkcs1", |b| {
            b.iter(|| signer.sign(black_box(&message)))
        });
    }
    bench_jsonwebtoken(&mut g, &creds, &key_der);
    g.finish();
}

/// The same assertion (same header fields, same claims, same key) through `jsonwebtoken`
/// with its AWS-LC backend: `sign/jsonwebtoken/{ps256,rs256}` beside
/// `sign/assertion/{ps256,rs256}`. Built as a user of jsonwebtoken would: one
/// `EncodingKey` and one `Header` made up front, `encode` per assertion (with a fresh
/// `jti` and time, as the crate does).
fn bench_jsonwebtoken(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    creds: &UserAssignedIdentityCredentials,
    key_der: &[u8],
) {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use sha2::Digest;

    let cert = ClientCertificate::from_credentials(creds).unwrap();
    let key_pem = pem::encode(&pem::Pem::new("PRIVATE KEY", key_der.to_vec()));
    let key = EncodingKey::from_rsa_pem(key_pem.as_bytes()).unwrap();
    let x5c: Vec<String> = cert
        .chain()
        .iter()
        .map(|der| STANDARD.encode(der))
        .collect();
    let url_b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let client_id = creds.client_id.clone().unwrap();
    let aud = format!(
        "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
        creds.tenant_id.as_deref().unwrap()
    );
    for (name, alg) in [
        ("jsonwebtoken/ps256", Algorithm::PS256),
        ("jsonwebtoken/rs256", Algorithm::RS256),
    ] {
        let mut header = Header::new(alg);
        header.x5c = Some(x5c.clone());
        match alg {
            Algorithm::PS256 => {
                header.x5t_s256 = Some(url_b64.encode(sha2::Sha256::digest(cert.leaf_der())))
            }
            _ => header.x5t = Some(url_b64.encode(sha1::Sha1::digest(cert.leaf_der()))),
        }
        g.bench_function(name, |b| {
            b.iter(|| {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                let jti = uuid::Uuid::new_v4().to_string();
                let claims = by_hand::Claims::new(&aud, &client_id, &jti, now);
                encode(&header, &claims, &key).unwrap()
            })
        });
    }
}

criterion_group!(benches, bench_parse, bench_sign);
criterion_main!(benches);
