//! The kit's token issuer: one RSA signing key per Entra server (made on first use, with a
//! self-signed certificate, published in a JWKS as Entra publishes its keys), access
//! tokens as RS256 JWTs with the claims Entra puts in an app-only token, and their
//! validation as an Azure resource validates them.
//!
//! Signing goes through AWS-LC (rcgen's key pair); validation verifies with the `rsa`
//! crate, independently of the signer. Every check is a pure function of the token, the
//! keys, the rules and `now`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_RSA_SHA256, PublicKeyData as _,
    RsaKeySize, SigningKey as _,
};
use rsa::RsaPublicKey;
use rsa::pkcs8::DecodePublicKey as _;
use rsa::signature::Verifier as _;
use rsa::traits::PublicKeyParts as _;
use serde_json::{Map, Value, json};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

/// Clock skew allowed when a token's `nbf` and `exp` are checked (seconds): five
/// minutes, as Azure services allow.
pub const TOKEN_CLOCK_SKEW_SECS: i64 = 300;

/// The longest bearer token validated (bytes); a longer one is refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The most characters of a token's own text (an audience, an issuer, a `kid`) quoted in
/// a rejection.
const MAX_QUOTED_CHARS: usize = 200;

/// The claims of an access token the kit issued, as a resource reads them: the common
/// claims typed, every other claim (extra claims set on the server, `appidacr`, ...) in
/// `extra`.
///
/// From [`EntraServer::validate`](super::EntraServer::validate),
/// [`EntraServer::claims`](super::EntraServer::claims) and
/// [`ResourceRequest::claims`](super::ResourceRequest::claims).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenClaims {
    /// `aud`: the resource the token is for (`https://management.azure.com` for the scope
    /// `https://management.azure.com/.default`).
    pub aud: String,
    /// `iss`: `{base_url}{tenant}/v2.0` ([`EntraServer::issuer`](super::EntraServer::issuer)).
    pub iss: String,
    /// `tid`: the tenant the token was issued in.
    pub tid: String,
    /// `oid`: the service principal's object id.
    pub oid: Option<String>,
    /// `sub`: the subject; the object id, for an app-only token.
    pub sub: Option<String>,
    /// `appid`: the client id (the v1 name of `azp`).
    pub appid: Option<String>,
    /// `azp`: the client id.
    pub azp: Option<String>,
    /// `idtyp`: `app` for an app-only token.
    pub idtyp: Option<String>,
    /// `ver`: the token version (`2.0`).
    pub ver: Option<String>,
    /// `uti`: the token's unique id.
    pub uti: Option<String>,
    /// `roles`: the application roles granted (empty when the token has none).
    pub roles: Vec<String>,
    /// `iat` (Unix seconds).
    pub iat: Option<i64>,
    /// `nbf` (Unix seconds).
    pub nbf: Option<i64>,
    /// `exp` (Unix seconds).
    pub exp: i64,
    /// The `kid` of the JWS header: which of the issuer's keys signed the token.
    pub kid: String,
    /// Every other claim, as issued.
    pub extra: Map<String, Value>,
}

impl TokenClaims {
    /// `exp` as a time.
    pub fn expires_at(&self) -> time::OffsetDateTime {
        unix_time(self.exp)
    }

    /// A claim by name, typed or not, as JSON (`None` when the token does not have it).
    pub fn get(&self, name: &str) -> Option<Value> {
        let text = |v: &Option<String>| v.as_ref().map(|s| json!(s));
        match name {
            "aud" => Some(json!(self.aud)),
            "iss" => Some(json!(self.iss)),
            "tid" => Some(json!(self.tid)),
            "oid" => text(&self.oid),
            "sub" => text(&self.sub),
            "appid" => text(&self.appid),
            "azp" => text(&self.azp),
            "idtyp" => text(&self.idtyp),
            "ver" => text(&self.ver),
            "uti" => text(&self.uti),
            "roles" => (!self.roles.is_empty()).then(|| json!(self.roles)),
            "iat" => self.iat.map(|t| json!(t)),
            "nbf" => self.nbf.map(|t| json!(t)),
            "exp" => Some(json!(self.exp)),
            other => self.extra.get(other).cloned(),
        }
    }
}

/// Why a bearer token was refused: what an Azure resource answers in its 401
/// (`Display` is the message, [`code`](Self::code) the Azure error code).
///
/// Text taken from the token (an audience, an issuer, a `kid`) is bounded and escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRejection {
    /// Not a compact JWS with a JSON header and claims, or a claim of the wrong type.
    #[error("The token is malformed: {reason}.")]
    Malformed {
        /// What is wrong, naming the part or claim.
        reason: String,
    },
    /// The header's `alg` is not `RS256` (the only algorithm the issuer signs with).
    #[error(
        "Signature validation failed: the token's algorithm '{alg}' is not accepted (the issuer signs with RS256)."
    )]
    Algorithm {
        /// The header's `alg`.
        alg: String,
    },
    /// No key of the issuer's JWKS has the header's `kid`.
    #[error("Signature validation failed: no key with kid '{kid}' in the issuer's JWKS.")]
    UnknownKey {
        /// The header's `kid`.
        kid: String,
    },
    /// The signature does not verify with the key the header names.
    #[error(
        "Signature validation failed: the token's signature does not verify with the issuer's key '{kid}'."
    )]
    Signature {
        /// The key the header names.
        kid: String,
    },
    /// The `iss` claim is not the kit's issuer for the token's tenant.
    #[error("The issuer '{actual}' is invalid: expected '{expected}'.")]
    Issuer {
        /// The token's `iss`.
        actual: String,
        /// The issuer for the token's `tid`.
        expected: String,
    },
    /// `exp` (plus the allowed skew) is past.
    #[error(
        "The token is expired: it expired at {} ({exp}), the time is now {} ({now}), with {TOKEN_CLOCK_SKEW_SECS} s of clock skew allowed.",
        rfc3339(*.exp), rfc3339(*.now)
    )]
    Expired {
        /// The token's `exp` (Unix seconds).
        exp: i64,
        /// The validator's time (Unix seconds).
        now: i64,
    },
    /// `nbf` (minus the allowed skew) is still ahead.
    #[error(
        "The token is not yet valid: it is valid from {} ({nbf}), the time is now {} ({now}), with {TOKEN_CLOCK_SKEW_SECS} s of clock skew allowed.",
        rfc3339(*.nbf), rfc3339(*.now)
    )]
    NotYetValid {
        /// The token's `nbf` (Unix seconds).
        nbf: i64,
        /// The validator's time (Unix seconds).
        now: i64,
    },
    /// The `aud` claim is not one the resource accepts.
    #[error("The audience '{actual}' is invalid: this resource accepts {}.", quoted_list(.expected))]
    Audience {
        /// The token's `aud`.
        actual: String,
        /// The audiences accepted.
        expected: Vec<String>,
    },
    /// The token's tenant is not one the resource accepts.
    #[error("The tenant '{actual}' is not allowed: this resource accepts tokens from {}.", quoted_list(.allowed))]
    Tenant {
        /// The token's `tid`.
        actual: String,
        /// The tenants accepted.
        allowed: Vec<String>,
    },
}

impl TokenRejection {
    /// The error code Azure Resource Manager answers for this rejection
    /// (`InvalidAuthenticationToken`, `ExpiredAuthenticationToken`,
    /// `InvalidAuthenticationTokenAudience`, `InvalidAuthenticationTokenTenant`).
    pub fn code(&self) -> &'static str {
        match self {
            TokenRejection::Expired { .. } => "ExpiredAuthenticationToken",
            TokenRejection::Audience { .. } => "InvalidAuthenticationTokenAudience",
            TokenRejection::Issuer { .. } | TokenRejection::Tenant { .. } => {
                "InvalidAuthenticationTokenTenant"
            }
            _ => "InvalidAuthenticationToken",
        }
    }
}

fn unix_time(t: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

fn rfc3339(t: i64) -> String {
    msi_dataplane::rfc3339(unix_time(t)).to_string()
}

fn quoted_list(items: &[String]) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "'{item}'");
    }
    if out.is_empty() {
        out.push_str("none");
    }
    out
}

/// Text from a token, ready for a rejection.
fn quoted(raw: &str) -> String {
    msi_dataplane::unstable::bounded(raw, MAX_QUOTED_CHARS)
}

fn malformed(reason: impl Into<String>) -> TokenRejection {
    TokenRejection::Malformed {
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------

/// One signing key: an RSA-2048 key pair and its self-signed certificate (published in
/// the JWKS's `x5c`, as Entra publishes its keys).
pub(crate) struct IssuerKey {
    key: KeyPair,
    public: RsaPublicKey,
    certificate_der: Vec<u8>,
    /// base64url SHA-1 of the certificate: Entra's `kid` (and `x5t`).
    kid: String,
}

impl IssuerKey {
    /// # Panics
    ///
    /// When AWS-LC cannot make or use an RSA key (the kit cannot work at all then).
    fn generate() -> IssuerKey {
        let key = KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, RsaKeySize::_2048)
            .unwrap_or_else(|e| panic!("testing: token signing key generation failed: {e}"));
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "msi-dataplane testing token issuer");
        params.distinguished_name = name;
        let certificate_der = params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("testing: token signing certificate failed: {e}"))
            .der()
            .to_vec();
        let public = RsaPublicKey::from_public_key_der(&key.subject_public_key_info())
            .unwrap_or_else(|e| panic!("testing: token signing key is not RSA: {e}"));
        let kid = URL_SAFE_NO_PAD.encode(Sha1::digest(&certificate_der));
        IssuerKey {
            key,
            public,
            certificate_der,
            kid,
        }
    }

    pub(crate) fn kid(&self) -> &str {
        &self.kid
    }

    pub(crate) fn certificate_der(&self) -> &[u8] {
        &self.certificate_der
    }

    /// The public key, DER SubjectPublicKeyInfo.
    pub(crate) fn public_key_der(&self) -> Vec<u8> {
        self.key.subject_public_key_info()
    }

    /// The key as a JWK, as Entra's `discovery/v2.0/keys` lists it.
    fn jwk(&self, issuer: &str) -> Value {
        json!({
            "kty": "RSA",
            "use": "sig",
            "kid": self.kid,
            "x5t": self.kid,
            "n": URL_SAFE_NO_PAD.encode(self.public.n().to_bytes_be()),
            "e": URL_SAFE_NO_PAD.encode(self.public.e().to_bytes_be()),
            "x5c": [STANDARD.encode(&self.certificate_der)],
            "issuer": issuer,
        })
    }

    fn signature_b64_len(&self) -> usize {
        b64_len(self.public.size())
    }

    /// # Panics
    ///
    /// When AWS-LC fails to sign (it cannot, with a key it made).
    fn sign(&self, signing_input: &str) -> String {
        let signature = self
            .key
            .sign(signing_input.as_bytes())
            .unwrap_or_else(|e| panic!("testing: signing an access token failed: {e}"));
        URL_SAFE_NO_PAD.encode(signature)
    }
}

/// Length of unpadded base64 of `n` bytes.
fn b64_len(n: usize) -> usize {
    (4 * n).div_ceil(3)
}

// ---------------------------------------------------------------------------------------
// The issuer
// ---------------------------------------------------------------------------------------

/// What a token is issued for: one successful client-credentials request.
pub(crate) struct Grant<'a> {
    /// The `iss` to put (the server's issuer for `tenant`).
    pub(crate) issuer: &'a str,
    pub(crate) tenant: &'a str,
    pub(crate) client_id: &'a str,
    /// The request's `scope` (one or more `<resource>/.default`).
    pub(crate) scope: &'a str,
    /// Unix seconds, by the server's clock.
    pub(crate) now: i64,
    pub(crate) expires_in: i64,
}

/// How a token is validated.
pub(crate) struct Rules<'a> {
    /// The server's base URL (ending in `/`): the issuer is `{base}{tid}/v2.0`.
    pub(crate) base_url: &'a str,
    /// The audiences accepted; `None` for any.
    pub(crate) audiences: Option<&'a [String]>,
    /// The tenants accepted; `None` for any.
    pub(crate) tenants: Option<&'a [String]>,
    /// Check `nbf` and `exp` against `now`.
    pub(crate) lifetime: bool,
}

/// The issuer of one Entra server: its keys (the last one signs), the extra claims and
/// the object ids of the clients.
pub(crate) struct Issuer {
    inner: Mutex<IssuerState>,
}

#[derive(Default)]
struct IssuerState {
    /// Oldest first; the last signs. Empty until first used.
    keys: Vec<Arc<IssuerKey>>,
    extra_for_all: Map<String, Value>,
    extra_by_client: HashMap<String, Map<String, Value>>,
    /// (tenant, client id) -> object id, for registered identities.
    object_ids: HashMap<(String, String), String>,
}

impl IssuerState {
    fn keys(&mut self) -> &[Arc<IssuerKey>] {
        if self.keys.is_empty() {
            self.keys.push(Arc::new(IssuerKey::generate()));
        }
        &self.keys
    }
}

/// The issuer URL for a tenant: `{base_url}{tenant}/v2.0`.
pub(crate) fn issuer_url(base_url: &str, tenant: &str) -> String {
    format!("{base_url}{tenant}/v2.0")
}

/// The resource a token for `scope` is for: the first scope without `/.default`.
pub(crate) fn audience_of_scope(scope: &str) -> &str {
    let first = scope.split(' ').next().unwrap_or(scope);
    first.strip_suffix("/.default").unwrap_or(first)
}

/// A stable object id for a client with none registered: a UUID made from the tenant and
/// client id (the same for every server and run).
fn derived_object_id(tenant: &str, client_id: &str) -> String {
    let digest = Sha256::digest(format!("msi-dataplane testing oid\0{tenant}\0{client_id}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

impl Issuer {
    pub(crate) fn new() -> Issuer {
        Issuer {
            inner: Mutex::new(IssuerState::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, IssuerState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key that signs new tokens (made on first use).
    pub(crate) fn active_key(&self) -> Arc<IssuerKey> {
        let mut state = self.lock();
        let keys = state.keys();
        keys[keys.len() - 1].clone()
    }

    /// A new signing key; the previous ones stay published (and valid).
    pub(crate) fn rotate(&self) -> Arc<IssuerKey> {
        let key = Arc::new(IssuerKey::generate());
        let mut state = self.lock();
        state.keys();
        state.keys.push(key.clone());
        key
    }

    /// Stop publishing (and validating with) the key `kid`; `false` when there is none.
    pub(crate) fn retire(&self, kid: &str) -> bool {
        let mut state = self.lock();
        let before = state.keys.len();
        state.keys.retain(|k| k.kid() != kid);
        state.keys.len() != before
    }

    /// The JWKS: every key, newest first (as Entra lists its current key first).
    pub(crate) fn jwks(&self, issuer: &str) -> Value {
        let mut state = self.lock();
        let keys: Vec<Value> = state.keys().iter().rev().map(|k| k.jwk(issuer)).collect();
        json!({ "keys": keys })
    }

    /// Extra claims for every token (`client_id` `None`) or a client's tokens; an empty
    /// map removes them.
    pub(crate) fn set_extra_claims(&self, client_id: Option<&str>, claims: Map<String, Value>) {
        let mut state = self.lock();
        match client_id {
            None => state.extra_for_all = claims,
            Some(client) if claims.is_empty() => {
                state.extra_by_client.remove(client);
            }
            Some(client) => {
                state.extra_by_client.insert(client.to_owned(), claims);
            }
        }
    }

    pub(crate) fn set_object_id(&self, tenant: &str, client_id: &str, object_id: &str) {
        self.lock().object_ids.insert(
            (tenant.to_owned(), client_id.to_owned()),
            object_id.to_owned(),
        );
    }

    pub(crate) fn object_id(&self, tenant: &str, client_id: &str) -> String {
        self.lock()
            .object_ids
            .get(&(tenant.to_owned(), client_id.to_owned()))
            .cloned()
            .unwrap_or_else(|| derived_object_id(tenant, client_id))
    }

    /// A signed access token for `grant`, padded to `pad_to` bytes when that is longer
    /// than the token is.
    pub(crate) fn mint(&self, grant: &Grant<'_>, pad_to: usize) -> String {
        let object_id = self.object_id(grant.tenant, grant.client_id);
        let (key, claims) = {
            let mut state = self.lock();
            let key = {
                let keys = state.keys();
                keys[keys.len() - 1].clone()
            };
            let extra = state.extra_by_client.get(grant.client_id);
            let claims = access_token_claims(grant, &object_id, &state.extra_for_all, extra);
            (key, claims)
        };
        sign_padded(&key, claims, pad_to)
    }

    /// Validate `token` by `rules` at `now` (Unix seconds).
    pub(crate) fn validate(
        &self,
        token: &str,
        rules: &Rules<'_>,
        now: i64,
    ) -> Result<TokenClaims, TokenRejection> {
        let keys = self.lock().keys().to_vec();
        validate(token, &keys, rules, now)
    }
}

/// The claims of an app-only access token for `grant`, as Entra issues them for the
/// client-credentials grant: extra claims (for every client, then for this one) last,
/// replacing standard ones of the same name.
fn access_token_claims(
    grant: &Grant<'_>,
    object_id: &str,
    extra_for_all: &Map<String, Value>,
    extra_for_client: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let uti = URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes());
    let mut claims = Map::new();
    for (name, value) in [
        ("aud", json!(audience_of_scope(grant.scope))),
        ("iss", json!(grant.issuer)),
        ("iat", json!(grant.now)),
        ("nbf", json!(grant.now)),
        ("exp", json!(grant.now.saturating_add(grant.expires_in))),
        (
            "aio",
            json!(URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())),
        ),
        ("appid", json!(grant.client_id)),
        ("appidacr", json!("2")),
        ("azp", json!(grant.client_id)),
        ("azpacr", json!("2")),
        ("idp", json!(grant.issuer)),
        ("idtyp", json!("app")),
        ("oid", json!(object_id)),
        ("sub", json!(object_id)),
        ("tid", json!(grant.tenant)),
        ("uti", json!(uti)),
        ("ver", json!("2.0")),
    ] {
        claims.insert(name.to_owned(), value);
    }
    for extra in std::iter::once(extra_for_all).chain(extra_for_client) {
        for (name, value) in extra {
            claims.insert(name.clone(), value.clone());
        }
    }
    claims
}

/// `header.claims.signature`; when shorter than `pad_to` bytes, padded to that length
/// with JSON whitespace after the claims' opening brace (and, when base64's lengths need
/// it, after the header's): the claims stay the same. Base64 grows in steps, so a token
/// 1 to 3 bytes short may come out up to 2 bytes longer than `pad_to`; from 4 bytes
/// short on, the length is exact.
fn sign_padded(key: &IssuerKey, claims: Map<String, Value>, pad_to: usize) -> String {
    let mut header =
        json!({"typ": "JWT", "alg": "RS256", "x5t": key.kid, "kid": key.kid}).to_string();
    let mut claims = Value::Object(claims).to_string();
    let signature_len = key.signature_b64_len();
    let length = |header_len: usize, claims_len: usize| {
        b64_len(header_len) + 1 + b64_len(claims_len) + 1 + signature_len
    };
    if length(header.len(), claims.len()) < pad_to {
        // Unpadded base64 never has a length of 4k + 1: one or two spaces in the header
        // move the residue the claims cannot reach. The shortest length from `pad_to` on.
        let fits = (0..3).map(|header_spaces| {
            let header_len = header.len() + header_spaces;
            let mut claims_spaces = 0;
            while length(header_len, claims.len() + claims_spaces) < pad_to {
                claims_spaces += 1;
            }
            let total = length(header_len, claims.len() + claims_spaces);
            (total, header_spaces, claims_spaces)
        });
        if let Some((_, header_spaces, claims_spaces)) = fits.min() {
            header.insert_str(1, &" ".repeat(header_spaces));
            claims.insert_str(1, &" ".repeat(claims_spaces));
        }
    }
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let signature = key.sign(&signing_input);
    format!("{signing_input}.{signature}")
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

fn decode_part(part: &str, what: &str) -> Result<Map<String, Value>, TokenRejection> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| malformed(format!("the {what} is not unpadded base64url")))?;
    serde_json::from_slice::<Map<String, Value>>(&bytes)
        .map_err(|_| malformed(format!("the {what} is not a JSON object")))
}

/// Pure: `token` checked against `keys` and `rules` at `now` (Unix seconds), in the
/// order Azure resources check: structure, signature, issuer, lifetime, audience, tenant.
pub(crate) fn validate(
    token: &str,
    keys: &[Arc<IssuerKey>],
    rules: &Rules<'_>,
    now: i64,
) -> Result<TokenClaims, TokenRejection> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(malformed(format!(
            "it is {} bytes, more than the {MAX_TOKEN_BYTES} accepted",
            token.len()
        )));
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
        return Err(malformed(format!(
            "a JWT is three non-empty base64url parts separated by '.', this has {} part(s)",
            parts.len()
        )));
    }
    let header = decode_part(parts[0], "header")?;
    match header.get("alg") {
        Some(Value::String(alg)) if alg == "RS256" => {}
        Some(Value::String(alg)) => return Err(TokenRejection::Algorithm { alg: quoted(alg) }),
        _ => return Err(malformed("the header has no 'alg'")),
    }
    let Some(kid) = header.get("kid").and_then(Value::as_str) else {
        return Err(malformed("the header has no 'kid'"));
    };
    let Some(key) = keys.iter().find(|k| k.kid == kid) else {
        return Err(TokenRejection::UnknownKey { kid: quoted(kid) });
    };
    let signing_input_len = parts[0].len() + 1 + parts[1].len();
    let verified = URL_SAFE_NO_PAD
        .decode(parts[2])
        .ok()
        .and_then(|bytes| rsa::pkcs1v15::Signature::try_from(bytes.as_slice()).ok())
        .is_some_and(|signature| {
            rsa::pkcs1v15::VerifyingKey::<Sha256>::new(key.public.clone())
                .verify(&token.as_bytes()[..signing_input_len], &signature)
                .is_ok()
        });
    if !verified {
        return Err(TokenRejection::Signature { kid: quoted(kid) });
    }
    let claims = typed_claims(decode_part(parts[1], "claims part")?, kid)?;

    let expected_issuer = issuer_url(rules.base_url, &claims.tid);
    if claims.iss != expected_issuer {
        return Err(TokenRejection::Issuer {
            actual: quoted(&claims.iss),
            expected: quoted(&expected_issuer),
        });
    }
    if rules.lifetime {
        if claims.exp.saturating_add(TOKEN_CLOCK_SKEW_SECS) <= now {
            return Err(TokenRejection::Expired {
                exp: claims.exp,
                now,
            });
        }
        if let Some(nbf) = claims.nbf
            && nbf.saturating_sub(TOKEN_CLOCK_SKEW_SECS) > now
        {
            return Err(TokenRejection::NotYetValid { nbf, now });
        }
    }
    if let Some(audiences) = rules.audiences
        && !audiences.contains(&claims.aud)
    {
        return Err(TokenRejection::Audience {
            actual: quoted(&claims.aud),
            expected: audiences.to_vec(),
        });
    }
    if let Some(tenants) = rules.tenants
        && !tenants.iter().any(|t| t.eq_ignore_ascii_case(&claims.tid))
    {
        return Err(TokenRejection::Tenant {
            actual: quoted(&claims.tid),
            allowed: tenants.to_vec(),
        });
    }
    Ok(claims)
}

/// The claims object as [`TokenClaims`]: `aud`, `iss`, `tid` and `exp` required, each
/// typed claim of its type.
fn typed_claims(mut map: Map<String, Value>, kid: &str) -> Result<TokenClaims, TokenRejection> {
    let mut text = |name: &str| -> Result<Option<String>, TokenRejection> {
        match map.remove(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(malformed(format!("the '{name}' claim is not a string"))),
        }
    };
    let required = |value: Option<String>, name: &str| {
        value.ok_or_else(|| malformed(format!("the '{name}' claim is missing")))
    };
    let aud = required(text("aud")?, "aud")?;
    let iss = required(text("iss")?, "iss")?;
    let tid = required(text("tid")?, "tid")?;
    let (oid, sub, appid, azp) = (text("oid")?, text("sub")?, text("appid")?, text("azp")?);
    let (idtyp, ver, uti) = (text("idtyp")?, text("ver")?, text("uti")?);
    let mut time = |name: &str| -> Result<Option<i64>, TokenRejection> {
        match map.remove(name) {
            None => Ok(None),
            Some(value) => value.as_i64().map(Some).ok_or_else(|| {
                malformed(format!("the '{name}' claim is not an integer NumericDate"))
            }),
        }
    };
    let iat = time("iat")?;
    let nbf = time("nbf")?;
    let exp = time("exp")?.ok_or_else(|| malformed("the 'exp' claim is missing"))?;
    let roles = match map.remove("roles") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(role) => Ok(role),
                _ => Err(malformed("the 'roles' claim is not an array of strings")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("the 'roles' claim is not an array of strings")),
    };
    Ok(TokenClaims {
        aud,
        iss,
        tid,
        oid,
        sub,
        appid,
        azp,
        idtyp,
        ver,
        uti,
        roles,
        iat,
        nbf,
        exp,
        kid: kid.to_owned(),
        extra: map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(now: i64) -> Grant<'static> {
        Grant {
            issuer: "https://127.0.0.1:1/tenant-a/v2.0",
            tenant: "tenant-a",
            client_id: "client-a",
            scope: "https://management.azure.com/.default",
            now,
            expires_in: 3599,
        }
    }

    fn rules(audiences: &[String]) -> Rules<'_> {
        Rules {
            base_url: "https://127.0.0.1:1/",
            audiences: Some(audiences),
            tenants: None,
            lifetime: true,
        }
    }

    #[test]
    fn padded_tokens_have_exactly_the_length_asked_and_still_verify() {
        let issuer = Issuer::new();
        let plain = issuer.mint(&grant(1_000), 0);
        let natural = plain.len();
        let arm = ["https://management.azure.com".to_owned()];
        let mut expected = issuer.validate(&plain, &rules(&arm), 1_000).unwrap();
        for pad_to in (natural + 1..natural + 40).chain([2048, 4096]) {
            let token = issuer.mint(&grant(1_000), pad_to);
            if pad_to >= natural + 4 {
                assert_eq!(token.len(), pad_to);
            } else {
                assert!((pad_to..=pad_to + 2).contains(&token.len()), "{pad_to}");
            }
            let claims = issuer.validate(&token, &rules(&arm), 1_000).unwrap();
            // The same claims but for the unique ones.
            expected.uti.clone_from(&claims.uti);
            expected
                .extra
                .insert("aio".to_owned(), claims.extra["aio"].clone());
            assert_eq!(claims, expected);
        }
        // Shorter than the token: no padding.
        let token = issuer.mint(&grant(1_000), 10);
        assert_eq!(token.len(), natural);
    }

    #[test]
    fn the_lifetime_allows_five_minutes_of_skew_either_way() {
        let issuer = Issuer::new();
        let token = issuer.mint(&grant(10_000), 0);
        let arm = ["https://management.azure.com".to_owned()];
        let exp = 10_000 + 3599;
        let at = |now| issuer.validate(&token, &rules(&arm), now);
        assert!(at(exp + TOKEN_CLOCK_SKEW_SECS - 1).is_ok());
        assert_eq!(
            at(exp + TOKEN_CLOCK_SKEW_SECS),
            Err(TokenRejection::Expired {
                exp,
                now: exp + TOKEN_CLOCK_SKEW_SECS
            })
        );
        assert!(at(10_000 - TOKEN_CLOCK_SKEW_SECS).is_ok());
        assert_eq!(
            at(10_000 - TOKEN_CLOCK_SKEW_SECS - 1),
            Err(TokenRejection::NotYetValid {
                nbf: 10_000,
                now: 10_000 - TOKEN_CLOCK_SKEW_SECS - 1
            })
        );
    }

    #[test]
    fn garbage_is_refused_with_a_reason_never_a_panic() {
        let issuer = Issuer::new();
        let any = rules(&[]);
        for token in [
            "",
            ".",
            "..",
            "a.b.c",
            "a.b.c.d.e",
            "eyJhbGciOiJub25lIn0.e30.",
            "eyJhbGciOiJub25lIn0.e30.c2ln",
            "e30.e30.c2ln",
            "\u{202e}.\u{0}.\n",
        ] {
            let refused = issuer.validate(token, &any, 0).unwrap_err();
            assert!(!refused.to_string().is_empty(), "{token:?}");
        }
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert!(matches!(
            issuer.validate(&long, &any, 0),
            Err(TokenRejection::Malformed { .. })
        ));
        // `alg: none` is refused by name.
        let none = format!(
            "{}.{}.c2ln",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k"}"#),
            URL_SAFE_NO_PAD.encode("{}")
        );
        assert_eq!(
            issuer.validate(&none, &any, 0),
            Err(TokenRejection::Algorithm {
                alg: "none".to_owned()
            })
        );
    }

    #[test]
    fn extra_claims_replace_standard_ones_and_a_client_s_come_last() {
        let mut all = Map::new();
        all.insert("roles".to_owned(), json!(["Reader"]));
        all.insert("ver".to_owned(), json!("1.0"));
        let mut mine = Map::new();
        mine.insert("roles".to_owned(), json!(["Writer"]));
        let claims = access_token_claims(&grant(5), "oid-1", &all, Some(&mine));
        assert_eq!(claims["roles"], json!(["Writer"]));
        assert_eq!(claims["ver"], json!("1.0"));
        assert_eq!(claims["sub"], json!("oid-1"));
        assert_eq!(claims["exp"], json!(5 + 3599));
    }

    #[test]
    fn derived_object_ids_are_stable_uuids_per_tenant_and_client() {
        let a = derived_object_id("t", "c");
        assert_eq!(a, derived_object_id("t", "c"));
        assert_ne!(a, derived_object_id("t", "d"));
        assert_ne!(a, derived_object_id("u", "c"));
        assert!(uuid::Uuid::parse_str(&a).is_ok());
    }
}
