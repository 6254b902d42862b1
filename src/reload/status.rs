//! What a reloading credential is serving and how its last re-read went
//! ([`ReloadStatus`]), as health endpoints, metrics and logs see it: as JSON
//! (`Serialize`), as one line of text (`Display`), and compared (`PartialEq`).
//!
//! Errors appear as their stable [`code`](crate::ErrorKind::code), their message (which
//! the crate keeps free of secrets: it names the file and the field, never their
//! content) and whether they are transient. Two statuses are equal when every field is;
//! their errors are equal when code and message are (an [`Error`] carries sources such
//! as I/O errors that cannot be compared). Times are RFC 3339 in UTC, to the second.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};
use time::OffsetDateTime;

use crate::clock::Rfc3339;
use crate::error::Error;
use crate::reload::rule::ReloadOutcome;
use crate::token::credential::ClientCertificateCredential;

/// What a reloading credential is serving, and how its last re-read went: for health
/// endpoints, metrics and the CLI. Secrets are not included. It is `Serialize` (times RFC
/// 3339, the error as `{"code", "message", "transient"}`), `Display` (one line) and
/// `PartialEq` (errors compared by code and message). Its JSON has its fields, in order;
/// absent values are `null`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ReloadStatus {
    /// The credential file's visible path.
    #[serde(serialize_with = "path")]
    pub path: PathBuf,
    /// The active credential's effective `not_before` (the file's, else the leaf's).
    #[serde(serialize_with = "time")]
    pub not_before: OffsetDateTime,
    /// The active credential's end: the earlier of the file's `not_after` and the leaf's.
    #[serde(serialize_with = "time")]
    pub not_after: OffsetDateTime,
    /// Lower-case hex SHA-256 thumbprint of the active leaf certificate.
    pub thumbprint_sha256: String,
    /// When the active credential became active.
    #[serde(serialize_with = "time")]
    pub loaded_at: OffsetDateTime,
    /// When the file was last re-read (`None`: not since the first load).
    #[serde(serialize_with = "maybe_time")]
    pub last_check: Option<OffsetDateTime>,
    /// How the last re-read ended.
    pub last_outcome: Option<ReloadOutcome>,
    /// Whether the last re-read decided on a file not decided on before (`true` for a
    /// swap and for a first refusal); `false` when it found the file last decided on
    /// again (the active credential's, or the one already refused, which is not refused
    /// a second time). The metrics count a refusal only when this is `true`.
    pub last_new_file: bool,
    /// The error of the last re-read, if it failed (`None` when the last one did not).
    #[serde(serialize_with = "error")]
    pub last_error: Option<Error>,
    /// How many times a newer credential was swapped in.
    pub reloads: u64,
    /// Whether the directory watch is in place (false: backstop only, or stopped).
    pub watching: bool,
    /// Why fetching tokens ahead with the last swapped-in credential failed (for the
    /// scopes its predecessor had served), `None` when the last such fetch succeeded or
    /// none was made. Set as soon as it fails, before any caller asks: a new credential
    /// that Entra rejects shows here while the old one may still be valid.
    #[serde(serialize_with = "error")]
    pub last_prefetch_error: Option<Error>,
}

fn path<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&path.display())
}

fn time<S: Serializer>(time: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&Rfc3339(*time))
}

fn maybe_time<S: Serializer>(time: &Option<OffsetDateTime>, s: S) -> Result<S::Ok, S::Error> {
    time.map(|t| Rfc3339(t).to_string()).serialize(s)
}

/// An error as a status shows it: `{"code", "message", "transient"}`.
fn error<S: Serializer>(error: &Option<Error>, s: S) -> Result<S::Ok, S::Error> {
    let summary = |e: &Error| {
        let (code, message, transient) = (e.kind().code(), e.to_string(), e.is_transient());
        serde_json::json!({ "code": code, "message": message, "transient": transient })
    };
    error.as_ref().map(summary).serialize(s)
}

/// One line: `<path>: serving <thumbprint> (valid <not_before> to <not_after>, since
/// <loaded_at>), <n> reloads, watching|not watching[; last check <time>: <outcome>[
/// (<code>: <message>)]]`.
impl fmt::Display for ReloadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: serving {} (valid {} to {}, since {}), {} reloads, {}",
            self.path.display(),
            self.thumbprint_sha256,
            Rfc3339(self.not_before),
            Rfc3339(self.not_after),
            Rfc3339(self.loaded_at),
            self.reloads,
            if self.watching {
                "watching"
            } else {
                "not watching"
            },
        )?;
        if let Some(at) = self.last_check {
            write!(f, "; last check {}", Rfc3339(at))?;
            if let Some(outcome) = self.last_outcome {
                write!(f, ": {outcome}")?;
            }
            if let Some(err) = &self.last_error {
                write!(f, " ({}: {err})", err.kind().code())?;
            }
        }
        Ok(())
    }
}

/// Every field equal; errors compared by code and message (see the module docs).
impl PartialEq for ReloadStatus {
    fn eq(&self, other: &Self) -> bool {
        fn errors(s: &ReloadStatus) -> [Option<(&'static str, String)>; 2] {
            [&s.last_error, &s.last_prefetch_error]
                .map(|e| e.as_ref().map(|e| (e.kind().code(), e.to_string())))
        }
        fn fields(s: &ReloadStatus) -> impl PartialEq + '_ {
            let times = (s.not_before, s.not_after, s.loaded_at, s.last_check);
            let check = (s.last_outcome, s.last_new_file, s.reloads, s.watching);
            (&s.path, &s.thumbprint_sha256, times, check)
        }
        errors(self) == errors(other) && fields(self) == fields(other)
    }
}

impl ReloadStatus {
    /// A first load's status: `credential` at `path`, active since `now`.
    pub(crate) fn new(
        path: PathBuf,
        credential: &ClientCertificateCredential,
        now: OffsetDateTime,
        watching: bool,
    ) -> Self {
        let window = credential.window();
        ReloadStatus {
            path,
            not_before: window.not_before,
            not_after: window.end,
            thumbprint_sha256: credential.certificate().thumbprint_sha256_hex(),
            loaded_at: now,
            last_check: None,
            last_outcome: None,
            last_new_file: false,
            last_error: None,
            reloads: 0,
            watching,
            last_prefetch_error: None,
        }
    }
}
