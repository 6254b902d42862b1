//! The probe's proof: `msi-credential probe` shows the token server that it knows the
//! identity header's secret without sending it, and the server shows the probe the same,
//! so that whoever holds the port while the sidecar is down learns nothing and the probe
//! fails against it.
//!
//! The key is the SHA-256 digest of the secret (what the server keeps). The probe sends a
//! fresh nonce, `<Unix seconds>.<32 hex digits>`, in [`PROBE_NONCE_HEADER`] and
//! `HMAC-SHA256(key, "msi-credential probe request\n" + nonce)` in [`PROBE_PROOF_HEADER`]
//! (lowercase hex). The server accepts a proof made with any secret it accepts, of a
//! nonce within [`PROBE_WINDOW`] of its clock and not seen before, and then answers the
//! full health report with `HMAC-SHA256(key, "msi-credential probe answer\n" + nonce +
//! "\n" + status + "\n" + body)` in [`PROBE_ANSWER_HEADER`]. Any other proof gets what a
//! caller without the secret gets (the bare status), with no answer header.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use aws_lc_rs::hmac::{self, HMAC_SHA256, Key};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

use crate::serve::error::{Result, ServeError};
use crate::serve::secret::IdentityHeaderSecret;

/// The header carrying the probe's nonce.
pub const PROBE_NONCE_HEADER: &str = "x-msi-probe-nonce";

/// The header carrying the probe's proof of the secret.
pub const PROBE_PROOF_HEADER: &str = "x-msi-probe-proof";

/// The header carrying the server's proof of the secret, over its answer.
pub const PROBE_ANSWER_HEADER: &str = "x-msi-probe-answer";

/// How far a nonce's time may be from the server's clock (the probe and the server run
/// on one machine, so their clocks agree; a probe's answer is due within seconds).
pub const PROBE_WINDOW: Duration = Duration::from_secs(10);

/// The accepted nonces the server remembers, to refuse a replay within the window.
const REMEMBERED_NONCES: usize = 64;

/// One probe's nonce and key: what it sends, and the check of the server's answer.
/// `Debug` shows the nonce only.
///
/// ```
/// use msi_credential::serve::ProbeChallenge;
///
/// let probe = ProbeChallenge::new("the-secret-0123456789", 1_700_000_000)?;
/// assert!(probe.nonce().starts_with("1700000000."));
/// assert_eq!(probe.proof().len(), 64);
/// assert!(!probe.verifies(200, b"{}", b"not the server's proof"));
/// # Ok::<(), msi_credential::serve::ServeError>(())
/// ```
pub struct ProbeChallenge {
    key: Key,
    nonce: String,
}

impl std::fmt::Debug for ProbeChallenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeChallenge")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl ProbeChallenge {
    /// A fresh challenge for `secret` (checked as the server checks it) at `now_unix`.
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidSecret`] for a secret the server would not accept, or when
    /// the system's random source fails.
    pub fn new(secret: &str, now_unix: i64) -> Result<Self> {
        let key = IdentityHeaderSecret::new(secret)?.key();
        let mut random = [0u8; 16];
        SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| ServeError::InvalidSecret {
                origin: "the probe".to_owned(),
                reason: "the system's random source failed".to_owned(),
            })?;
        Ok(ProbeChallenge {
            key: Key::new(HMAC_SHA256, &key),
            nonce: format!("{now_unix}.{}", hex(&random)),
        })
    }

    /// The nonce to send in [`PROBE_NONCE_HEADER`].
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// The proof to send in [`PROBE_PROOF_HEADER`].
    pub fn proof(&self) -> String {
        hex(hmac::sign(&self.key, &request_message(&self.nonce)).as_ref())
    }

    /// Whether `answer` (the [`PROBE_ANSWER_HEADER`] value) proves that whoever answered
    /// `status` and `body` holds the secret.
    pub fn verifies(&self, status: u16, body: &[u8], answer: &[u8]) -> bool {
        let Some(tag) = unhex(answer) else {
            return false;
        };
        let message = answer_message(&self.nonce, status, body);
        hmac::verify(&self.key, &message, &tag).is_ok()
    }
}

/// The server's side: the nonces of accepted proofs, within the window.
#[derive(Default)]
pub(crate) struct ProbeNonces(Mutex<VecDeque<(i64, String)>>);

impl ProbeNonces {
    /// The key of the accepted secret `proof` was made with, when the proof is good, its
    /// nonce fresh at `now_unix` and not seen before (it is remembered then).
    pub(crate) fn check(
        &self,
        secret: &IdentityHeaderSecret,
        nonce: &[u8],
        proof: &[u8],
        now_unix: i64,
    ) -> Option<Key> {
        let nonce = std::str::from_utf8(nonce).ok()?;
        let at = fresh(nonce, now_unix)?;
        let tag = unhex(proof)?;
        let message = request_message(nonce);
        // Every accepted secret is tried (both, always, when there are two).
        let keys = secret.keys().map(|k| Key::new(HMAC_SHA256, &k));
        let mut proven = None;
        for key in keys {
            if hmac::verify(&key, &message, &tag).is_ok() {
                proven = Some(key);
            }
        }
        let key = proven?;
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window = i64::try_from(PROBE_WINDOW.as_secs()).unwrap_or(i64::MAX);
        seen.retain(|(t, _)| t.abs_diff(now_unix) <= window.unsigned_abs());
        if seen.iter().any(|(_, n)| n == nonce) {
            return None;
        }
        if seen.len() == REMEMBERED_NONCES {
            seen.pop_front();
        }
        seen.push_back((at, nonce.to_owned()));
        Some(key)
    }
}

/// The server's proof over its answer.
pub(crate) fn answer_proof(key: &Key, nonce: &[u8], status: u16, body: &[u8]) -> String {
    let nonce = std::str::from_utf8(nonce).unwrap_or_default();
    hex(hmac::sign(key, &answer_message(nonce, status, body)).as_ref())
}

/// The nonce's time, when it has the nonce's shape and is within the window of `now`.
fn fresh(nonce: &str, now_unix: i64) -> Option<i64> {
    let (secs, random) = nonce.split_once('.')?;
    let at: i64 = secs.parse().ok()?;
    let shaped = random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit());
    let window = PROBE_WINDOW.as_secs();
    (shaped && at.abs_diff(now_unix) <= window).then_some(at)
}

fn request_message(nonce: &str) -> Vec<u8> {
    format!("msi-credential probe request\n{nonce}").into_bytes()
}

fn answer_message(nonce: &str, status: u16, body: &[u8]) -> Vec<u8> {
    let mut message = format!("msi-credential probe answer\n{nonce}\n{status}\n").into_bytes();
    message.extend_from_slice(body);
    message
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "the-secret-0123456789";
    const NOW: i64 = 1_700_000_000;

    fn server() -> (IdentityHeaderSecret, ProbeNonces) {
        let secret = IdentityHeaderSecret::new(SECRET)
            .unwrap()
            .with_previous("old-secret-0123456789")
            .unwrap();
        (secret, ProbeNonces::default())
    }

    #[test]
    fn a_proof_is_accepted_once_and_the_answer_proves_the_server() {
        let (secret, nonces) = server();
        let probe = ProbeChallenge::new(SECRET, NOW).unwrap();
        let (nonce, proof) = (probe.nonce().as_bytes(), probe.proof());
        let key = nonces
            .check(&secret, nonce, proof.as_bytes(), NOW + 3)
            .unwrap();
        let answer = answer_proof(&key, nonce, 200, b"{\"status\":\"ready\"}");
        assert!(probe.verifies(200, b"{\"status\":\"ready\"}", answer.as_bytes()));
        // The answer is bound to its status and body.
        assert!(!probe.verifies(503, b"{\"status\":\"ready\"}", answer.as_bytes()));
        assert!(!probe.verifies(200, b"{}", answer.as_bytes()));
        // A replay is refused.
        assert!(
            nonces
                .check(&secret, nonce, proof.as_bytes(), NOW + 4)
                .is_none()
        );
        // The previous secret proves too.
        let old = ProbeChallenge::new("old-secret-0123456789", NOW).unwrap();
        let key = nonces.check(&secret, old.nonce().as_bytes(), old.proof().as_bytes(), NOW);
        assert!(key.is_some());
    }

    #[test]
    fn a_wrong_stale_or_misshapen_proof_is_refused() {
        let (secret, nonces) = server();
        let other = ProbeChallenge::new("another-secret-0123456789", NOW).unwrap();
        let check = |n: &str, p: &str, now| nonces.check(&secret, n.as_bytes(), p.as_bytes(), now);
        assert!(
            check(other.nonce(), &other.proof(), NOW).is_none(),
            "another secret"
        );
        let probe = ProbeChallenge::new(SECRET, NOW).unwrap();
        assert!(
            check(probe.nonce(), &probe.proof(), NOW + 11).is_none(),
            "too late"
        );
        assert!(
            check(probe.nonce(), &probe.proof(), NOW - 11).is_none(),
            "too early"
        );
        let forged = format!("{}.{}", NOW, "0".repeat(32));
        assert!(
            check(&forged, &probe.proof(), NOW).is_none(),
            "another nonce"
        );
        assert!(check(probe.nonce(), &probe.proof()[..63], NOW).is_none());
        assert!(check(probe.nonce(), "zz", NOW).is_none());
        assert!(check("1700000000", &probe.proof(), NOW).is_none());
        // None of those was remembered: the good proof still passes once.
        assert!(check(probe.nonce(), &probe.proof(), NOW).is_some());
    }

    #[test]
    fn the_memory_of_nonces_is_bounded() {
        let (secret, nonces) = server();
        for _ in 0..200 {
            let probe = ProbeChallenge::new(SECRET, NOW).unwrap();
            let proof = probe.proof();
            assert!(
                nonces
                    .check(&secret, probe.nonce().as_bytes(), proof.as_bytes(), NOW)
                    .is_some()
            );
        }
        assert_eq!(nonces.0.lock().unwrap().len(), REMEMBERED_NONCES);
        let later = ProbeChallenge::new(SECRET, NOW + 60).unwrap();
        let proof = later.proof();
        assert!(
            nonces
                .check(
                    &secret,
                    later.nonce().as_bytes(),
                    proof.as_bytes(),
                    NOW + 60
                )
                .is_some()
        );
        assert_eq!(nonces.0.lock().unwrap().len(), 1, "the stale ones are gone");
    }
}
