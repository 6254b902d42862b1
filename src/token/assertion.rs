//! The client assertion (RFC 7523): a JWT signed with the certificate's key.
//!
//! The header depends only on the certificate and the algorithm, so it is serialized and
//! base64url-encoded once ([`AssertionSigner::new`]); each assertion serializes the claims,
//! signs, and joins. Header and claims are `serde` structs, never formatted strings.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RSA_PSS_SHA256, RsaEncoding};
use base64::Engine;
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Serialize;
use time::OffsetDateTime;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::file::certificate::ClientCertificate;

/// How long an assertion is valid: `exp = now + 600 s`.
pub const ASSERTION_LIFETIME: Duration = Duration::from_secs(600);

/// The client-assertion signature algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AssertionAlgorithm {
    /// RSASSA-PSS with SHA-256, with an `x5t#S256` (SHA-256) thumbprint. What current
    /// MSAL libraries send; the default.
    #[default]
    Ps256,
    /// RSASSA-PKCS1-v1_5 with SHA-256, with an `x5t` (SHA-1) thumbprint. What the Go stack
    /// pinned by msi-dataplane sends.
    Rs256,
}

impl AssertionAlgorithm {
    /// The JOSE `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            AssertionAlgorithm::Ps256 => "PS256",
            AssertionAlgorithm::Rs256 => "RS256",
        }
    }

    fn encoding(self) -> &'static dyn RsaEncoding {
        match self {
            AssertionAlgorithm::Ps256 => &RSA_PSS_SHA256,
            AssertionAlgorithm::Rs256 => &RSA_PKCS1_SHA256,
        }
    }
}

/// JOSE header (RFC 7515 §4.1).
#[derive(Serialize)]
struct Header<'a> {
    alg: &'static str,
    typ: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    x5t: Option<String>,
    #[serde(rename = "x5t#S256", skip_serializing_if = "Option::is_none")]
    x5t_s256: Option<String>,
    x5c: &'a [String],
}

/// JWT claims (RFC 7523 §3).
#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    iss: &'a str,
    sub: &'a str,
    jti: &'a str,
    nbf: i64,
    iat: i64,
    exp: i64,
}

/// Signs client assertions for one certificate and algorithm.
pub(crate) struct AssertionSigner {
    algorithm: AssertionAlgorithm,
    /// base64url(header JSON) followed by '.'.
    header_prefix: String,
    rng: SystemRandom,
}

impl AssertionSigner {
    pub(crate) fn new(cert: &ClientCertificate, algorithm: AssertionAlgorithm) -> Result<Self> {
        let x5c: Vec<String> = cert
            .chain()
            .iter()
            .map(|der| STANDARD.encode(der))
            .collect();
        let (x5t, x5t_s256) = match algorithm {
            AssertionAlgorithm::Ps256 => (None, Some(cert.thumbprint_sha256().as_slice())),
            AssertionAlgorithm::Rs256 => (Some(cert.thumbprint_sha1().as_slice()), None),
        };
        let header = Header {
            alg: algorithm.name(),
            typ: "JWT",
            x5t: x5t.map(|t| URL_SAFE_NO_PAD.encode(t)),
            x5t_s256: x5t_s256.map(|t| URL_SAFE_NO_PAD.encode(t)),
            x5c: &x5c,
        };
        let json = serde_json::to_vec(&header).map_err(|_| signing())?;
        let mut header_prefix = URL_SAFE_NO_PAD.encode(json);
        header_prefix.push('.');
        Ok(AssertionSigner {
            algorithm,
            header_prefix,
            rng: SystemRandom::new(),
        })
    }

    pub(crate) fn algorithm(&self) -> AssertionAlgorithm {
        self.algorithm
    }

    /// Build and sign one assertion. Pure but for the signature's randomness (PSS salt):
    /// every input, the time included, is a parameter.
    pub(crate) fn sign(
        &self,
        cert: &ClientCertificate,
        aud: &str,
        client_id: &str,
        now: OffsetDateTime,
        jti: &str,
    ) -> Result<String> {
        let now = now.unix_timestamp();
        let claims = Claims {
            aud,
            iss: client_id,
            sub: client_id,
            jti,
            nbf: now,
            iat: now,
            exp: now + ASSERTION_LIFETIME.as_secs() as i64,
        };
        // The claims and the signature are parts of the assertion: zeroized when dropped,
        // and sized up front (JSON escapes a byte into at most 6) so that no reallocation
        // frees a copy.
        let mut claims_json = Zeroizing::new(Vec::with_capacity(
            6 * (aud.len() + 2 * client_id.len() + jti.len()) + 128,
        ));
        serde_json::to_writer(&mut *claims_json, &claims).map_err(|_| signing())?;
        let key = cert.key_pair();
        let sig_len = key.public_modulus_len();
        // header '.' claims '.' signature, each base64url without padding.
        let mut jwt = String::with_capacity(
            self.header_prefix.len() + (claims_json.len() + sig_len) * 4 / 3 + 8,
        );
        jwt.push_str(&self.header_prefix);
        URL_SAFE_NO_PAD.encode_string(claims_json.as_slice(), &mut jwt);
        let mut signature = Zeroizing::new(vec![0u8; sig_len]);
        key.sign(
            self.algorithm.encoding(),
            &self.rng,
            jwt.as_bytes(),
            &mut signature,
        )
        .map_err(|_| signing())?;
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(signature.as_slice(), &mut jwt);
        Ok(jwt)
    }
}

/// The key in the credential file cannot sign (code `signing`).
fn signing() -> Error {
    Error::file(
        "signing",
        Some("client_secret"),
        "cannot sign the client assertion",
    )
}
