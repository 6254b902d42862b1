//! A health report of a credential file: who it is for, when it is valid, which
//! certificate it carries, and every problem found — without any secret.
//!
//! [`CredentialReport::new`] is a pure function of a parsed file, its decoded certificate
//! and `now`; [`CredentialReport::from_path`] does the reading. The report holds only
//! public facts (identifiers, times, the certificate's subject, issuer and thumbprints,
//! sizes): nothing derived from the private key or the `client_secret` text can be put in
//! it, so printing or serializing it never leaks a secret. It is what the
//! `msi-credential inspect` command prints.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use crate::clock::{rfc3339, to_time};
use crate::error::{ErrorKind, Result};
use crate::file::bundle::BundleFormat;
use crate::file::certificate::ClientCertificate;
pub use crate::file::model::FileTimes;
use crate::file::model::{CredentialFile, UserAssignedIdentityCredentials, read_limited};
use crate::file::validity::{NOT_BEFORE_SKEW, Window, expiry_warning};
use crate::token::endpoint;

pub use crate::file::validity::EXPIRES_SOON_MARGIN;

/// What a credential file holds and what is wrong with it, at one instant.
///
/// Serializes (serde) to the JSON object `msi-credential inspect --json` prints; times are
/// RFC 3339 strings.
///
/// ```
/// # fn main() -> Result<(), msi_dataplane::Error> {
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/credentials/expired.json");
/// use msi_dataplane::inspect::CredentialReport;
/// use msi_dataplane::inspect::{EXPIRES_SOON_MARGIN, ProblemKind, Severity};
///
/// let now = time::OffsetDateTime::now_utc();
/// let report = CredentialReport::from_path(path, now, EXPIRES_SOON_MARGIN)?;
/// assert_eq!(report.worst(), Some(Severity::Error));
/// assert!(report.problems.iter().any(|p| p.kind == ProblemKind::Expired));
/// assert!(report.validity.days_left < 0);
/// assert_eq!(report.certificate.thumbprint_sha256.len(), 64);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CredentialReport {
    /// The application (client) id.
    pub client_id: String,
    /// The identity's object (principal) id, if the file has one.
    pub object_id: Option<String>,
    /// The identity's ARM resource id, if the file has one.
    pub resource_id: Option<String>,
    /// The tenant id.
    pub tenant_id: String,
    /// The authority (`authentication_endpoint`), as the file holds it.
    pub authority: String,
    /// Where token requests go; `None` when the authority is not usable (see `problems`).
    pub token_url: Option<String>,
    /// The well-known cloud whose authority host the authority is on
    /// ([`Cloud::for_authority`](crate::Cloud::for_authority)), e.g. `AzurePublicCloud`;
    /// `None` for any other host (a regional or custom authority, a local emulator).
    pub cloud: Option<String>,
    /// The window in which the credential can be used.
    pub validity: Validity,
    /// The times the file states.
    pub file_times: FileTimes,
    /// The leaf certificate and its bundle.
    pub certificate: CertificateSummary,
    /// The instant the report is about.
    #[serde(with = "time::serde::rfc3339")]
    pub checked_at: OffsetDateTime,
    /// Every problem found, errors first.
    pub problems: Vec<Problem>,
}

/// The effective validity window: what the credential itself enforces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Validity {
    /// The file's `not_before`, or the leaf's `notBefore` when the file has none: what a
    /// reloading credential compares to decide whether a file is newer.
    #[serde(with = "time::serde::rfc3339")]
    pub not_before: OffsetDateTime,
    /// The earlier of the file's `not_after` and the leaf's `notAfter`: after it no token
    /// is requested.
    #[serde(with = "time::serde::rfc3339")]
    pub not_after: OffsetDateTime,
    /// Whole days from `checked_at` to `not_after`, rounded down (negative once expired).
    pub days_left: i64,
}

/// Public facts about the leaf certificate and the bundle it came in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CertificateSummary {
    /// The leaf's subject (RFC 4514).
    pub subject: String,
    /// The leaf's issuer (RFC 4514).
    pub issuer: String,
    /// The leaf's `notBefore`.
    #[serde(with = "time::serde::rfc3339")]
    pub not_before: OffsetDateTime,
    /// The leaf's `notAfter`.
    #[serde(with = "time::serde::rfc3339")]
    pub not_after: OffsetDateTime,
    /// Lower-case hex SHA-1 of the leaf DER (`x5t`; the Azure portal shows it upper-case).
    pub thumbprint_sha1: String,
    /// Lower-case hex SHA-256 of the leaf DER (`x5t#S256`).
    pub thumbprint_sha256: String,
    /// Certificates in the bundle, the leaf included.
    pub chain_length: usize,
    /// RSA modulus size, in bits.
    pub key_bits: usize,
    /// PEM or PKCS#12; serialized as `"pem"` or `"pkcs12"`.
    pub bundle_format: BundleFormat,
}

/// How serious a [`Problem`] is. Ordered: `Info < Warning < Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; nothing to fix.
    Info,
    /// The credential works now, but needs attention (rotation due, times inconsistent).
    Warning,
    /// The credential cannot get a token now.
    Error,
}

/// What kind of [`Problem`] was found. Serialized in snake_case (`"expires_soon"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProblemKind {
    /// Past the leaf's `notAfter` or the file's `not_after`.
    Expired,
    /// Before the leaf's `notBefore` (an error beyond the clock-skew allowance) or the
    /// file's `not_before` (a warning).
    NotYetValid,
    /// The credential ends within the margin.
    ExpiresSoon,
    /// Past the file's `renew_after`: the file should have been rotated.
    PastRenewAfter,
    /// Past the file's `cannot_renew_after`: the credential can no longer be renewed.
    PastCannotRenewAfter,
    /// A time in the file differs from the certificate's.
    FileTimeMismatch,
    /// The file's times are out of order (e.g. `renew_after` after `not_after`).
    TimesOutOfOrder,
    /// An optional time is absent from the file.
    MissingTime,
    /// The authority cannot be used as it is.
    Authority,
}

/// One problem found in a credential file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Problem {
    /// How serious it is.
    pub severity: Severity,
    /// What kind it is.
    pub kind: ProblemKind,
    /// A sentence for people, naming the fields and times concerned.
    pub message: String,
}

impl CredentialReport {
    /// Inspect `creds` and its decoded certificate at `now`. `expiry_margin` is how close
    /// to its end a credential gets a [`ProblemKind::ExpiresSoon`] warning (usually
    /// [`EXPIRES_SOON_MARGIN`]). Fails only when `creds` does not
    /// [`validate`](UserAssignedIdentityCredentials::validate) or the leaf cannot be
    /// re-parsed.
    pub fn new(
        creds: &UserAssignedIdentityCredentials,
        cert: &ClientCertificate,
        now: OffsetDateTime,
        expiry_margin: Duration,
    ) -> Result<Self> {
        let file = CredentialFile::parse(creds)?;
        let certificate = CertificateSummary {
            subject: cert.subject()?,
            issuer: cert.issuer()?,
            not_before: cert.not_before(),
            not_after: cert.not_after(),
            thumbprint_sha1: cert.thumbprint_sha1_hex(),
            thumbprint_sha256: cert.thumbprint_sha256_hex(),
            chain_length: cert.chain().len(),
            key_bits: cert.key_bits(),
            bundle_format: cert.format(),
        };
        let file_times = file.times;
        let window = Window::new(&file_times, cert.not_before(), cert.not_after());
        let validity = Validity {
            not_before: window.not_before,
            not_after: window.end,
            days_left: (window.end - now).whole_seconds().div_euclid(86_400),
        };
        let (token_url, authority_problem) = check_authority(file.authority, file.tenant_id.trim());
        let mut problems = time_problems(&file_times, &certificate, now, expiry_margin);
        problems.extend(authority_problem);
        // Stable: within a severity, the order of the checks.
        problems.sort_by_key(|p| std::cmp::Reverse(p.severity));
        Ok(CredentialReport {
            client_id: file.client_id.to_owned(),
            object_id: file.object_id.map(str::to_owned),
            resource_id: file.resource_id.map(str::to_owned),
            tenant_id: file.tenant_id.to_owned(),
            cloud: crate::cloud::Cloud::for_authority(file.authority).map(|c| c.name().to_owned()),
            authority: file.authority.to_owned(),
            token_url,
            validity,
            file_times,
            certificate,
            checked_at: now,
            problems,
        })
    }

    /// Read the credential file at `path`, decode its bundle and inspect it at `now`.
    /// Errors (unreadable file, bad JSON, missing keys, unusable bundle) name the file.
    pub fn from_path(
        path: impl AsRef<Path>,
        now: OffsetDateTime,
        expiry_margin: Duration,
    ) -> Result<Self> {
        let path = path.as_ref();
        let report = || {
            let creds = UserAssignedIdentityCredentials::from_slice(&read_limited(path)?)?;
            let cert = ClientCertificate::from_credentials(&creds)?;
            Self::new(&creds, &cert, now, expiry_margin)
        };
        report().map_err(|e| e.with_path(path))
    }

    /// The most serious problem's severity; `None` when there is no problem.
    pub fn worst(&self) -> Option<Severity> {
        self.problems.iter().map(|p| p.severity).max()
    }

    /// How many problems have this severity.
    pub fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }
}

/// The token URL, or the problem with the authority.
fn check_authority(authority: &str, tenant: &str) -> (Option<String>, Option<Problem>) {
    let strict = endpoint::authority(authority, false);
    let loopback = endpoint::authority(authority, true);
    let found = match (&strict, &loopback) {
        (Ok(_), _) => None,
        (Err(_), Ok(_)) => Some((Severity::Warning, LOOPBACK_AUTHORITY.to_owned())),
        (Err(e), Err(_)) => Some((Severity::Error, e.kind().to_string())),
    };
    let url = (strict.or(loopback).ok()).map(|a| endpoint::token_url(&a, tenant).to_string());
    (
        url,
        found.map(|(severity, text)| problem(severity, ProblemKind::Authority, text)),
    )
}

const LOOPBACK_AUTHORITY: &str = "the authority is plain http on a loopback host: usable only \
                                  with `allow_http_loopback` (tests and local emulators)";

/// Pure: every problem with the credential's times at `now`.
fn time_problems(
    file: &FileTimes,
    cert: &CertificateSummary,
    now: OffsetDateTime,
    margin: Duration,
) -> Vec<Problem> {
    let margin = to_time(margin);
    use ProblemKind as K;
    use Severity::{Error, Info, Warning};
    let mut out = Vec::new();
    let mut push = |severity, kind, message: String| out.push(problem(severity, kind, message));

    // Validity now, as the credential enforces it; then, within it, whether it ends soon.
    let window = Window::new(file, cert.not_before, cert.not_after);
    let refusal = window.check(now).err();
    match refusal.as_ref().map(crate::error::Error::kind) {
        Some(ErrorKind::Expired { expired_at, .. }) if *expired_at < cert.not_after => push(
            Error,
            K::Expired,
            format!(
                "the file's not_after {} has passed (the certificate is valid until {})",
                rfc3339(*expired_at),
                rfc3339(cert.not_after)
            ),
        ),
        Some(ErrorKind::Expired { expired_at, .. }) => push(
            Error,
            K::Expired,
            format!("the certificate expired at {}", rfc3339(*expired_at)),
        ),
        Some(_) => push(
            Error,
            K::NotYetValid,
            format!(
                "the certificate is not valid until {}",
                rfc3339(cert.not_before)
            ),
        ),
        None if now < cert.not_before => push(
            Warning,
            K::NotYetValid,
            format!(
                "the certificate is valid from {}, within the {}-minute clock-skew allowance",
                rfc3339(cert.not_before),
                NOT_BEFORE_SKEW.as_secs() / 60
            ),
        ),
        None => {}
    }
    if let Some(start) = file.not_before.filter(|start| now < *start) {
        push(
            Warning,
            K::NotYetValid,
            format!("the file's not_before {} is in the future", rfc3339(start)),
        );
    }
    // Not once expired (the refusal says so already).
    if now <= window.end && expiry_warning(now, None, window.end, margin).is_some() {
        push(
            Warning,
            K::ExpiresSoon,
            format!(
                "the credential ends at {}, in less than {} days",
                rfc3339(window.end),
                margin.whole_days()
            ),
        );
    }
    if let Some(at) = file.renew_after.filter(|at| now >= *at) {
        push(
            Warning,
            K::PastRenewAfter,
            format!(
                "past renew_after ({}): the file should have been rotated",
                rfc3339(at)
            ),
        );
    }
    if let Some(at) = file.cannot_renew_after.filter(|at| now >= *at) {
        push(
            Warning,
            K::PastCannotRenewAfter,
            format!(
                "past cannot_renew_after ({}): this credential can no longer be renewed",
                rfc3339(at)
            ),
        );
    }

    // The file against the certificate, and against itself.
    for (field, file_time, cert_field, cert_time) in [
        ("not_before", file.not_before, "notBefore", cert.not_before),
        ("not_after", file.not_after, "notAfter", cert.not_after),
    ] {
        if let Some(t) = file_time
            && (t - cert_time).abs() >= time::Duration::SECOND
        {
            push(
                Warning,
                K::FileTimeMismatch,
                format!(
                    "the file's {field} {} differs from the certificate's {cert_field} {}",
                    rfc3339(t),
                    rfc3339(cert_time)
                ),
            );
        }
    }
    let times = [
        ("not_before", file.not_before),
        ("not_after", file.not_after),
        ("renew_after", file.renew_after),
        ("cannot_renew_after", file.cannot_renew_after),
    ];
    // Each pair: the earlier, then the later (indices into `times`).
    for (early, late) in [(0, 1), (2, 1), (0, 2), (2, 3)] {
        if let ((early, Some(a)), (late, Some(b))) = (times[early], times[late])
            && a > b
        {
            push(
                Warning,
                K::TimesOutOfOrder,
                format!("{early} ({}) is after {late} ({})", rfc3339(a), rfc3339(b)),
            );
        }
    }
    let consequences = [
        "rotation compares the certificate's notBefore instead",
        "the certificate's notAfter is the only end",
        "no rotation deadline is known",
        "no renewal deadline is known",
    ];
    for ((field, value), consequence) in times.into_iter().zip(consequences) {
        if value.is_none() {
            push(
                Info,
                K::MissingTime,
                format!("the file has no {field}: {consequence}"),
            );
        }
    }
    out
}

fn problem(severity: Severity, kind: ProblemKind, message: String) -> Problem {
    Problem {
        severity,
        kind,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn cert(not_before: OffsetDateTime, not_after: OffsetDateTime) -> CertificateSummary {
        CertificateSummary {
            subject: "CN=leaf".into(),
            issuer: "CN=ca".into(),
            not_before,
            not_after,
            thumbprint_sha1: String::new(),
            thumbprint_sha256: String::new(),
            chain_length: 1,
            key_bits: 2048,
            bundle_format: BundleFormat::Pem,
        }
    }

    fn kinds(problems: &[Problem]) -> Vec<(Severity, ProblemKind)> {
        problems.iter().map(|p| (p.severity, p.kind)).collect()
    }

    const JAN: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);
    const DEC: OffsetDateTime = datetime!(2026-12-01 00:00 UTC);

    fn matching() -> FileTimes {
        FileTimes {
            not_before: Some(JAN),
            not_after: Some(DEC),
            renew_after: Some(datetime!(2026-06-01 00:00 UTC)),
            cannot_renew_after: Some(DEC),
        }
    }

    #[test]
    fn a_healthy_credential_has_no_problem() {
        let p = time_problems(
            &matching(),
            &cert(JAN, DEC),
            datetime!(2026-03-01 00:00 UTC),
            EXPIRES_SOON_MARGIN,
        );
        assert_eq!(kinds(&p), []);
    }

    #[test]
    fn expiry_is_an_error_and_the_deadlines_are_warnings() {
        let now = datetime!(2026-12-02 00:00 UTC);
        let p = time_problems(&matching(), &cert(JAN, DEC), now, EXPIRES_SOON_MARGIN);
        assert_eq!(
            kinds(&p),
            [
                (Severity::Error, ProblemKind::Expired),
                (Severity::Warning, ProblemKind::PastRenewAfter),
                (Severity::Warning, ProblemKind::PastCannotRenewAfter),
            ]
        );
        assert!(p[0].message.contains("2026-12-01T00:00:00Z"), "{p:?}");
    }

    #[test]
    fn the_file_end_counts_when_earlier() {
        let mut file = matching();
        file.not_after = Some(datetime!(2026-04-01 00:00 UTC));
        file.cannot_renew_after = None;
        file.renew_after = None;
        let p = time_problems(
            &file,
            &cert(JAN, DEC),
            datetime!(2026-03-28 00:00 UTC),
            EXPIRES_SOON_MARGIN,
        );
        assert_eq!(
            kinds(&p),
            [
                (Severity::Warning, ProblemKind::ExpiresSoon),
                (Severity::Warning, ProblemKind::FileTimeMismatch),
                (Severity::Info, ProblemKind::MissingTime),
                (Severity::Info, ProblemKind::MissingTime),
            ]
        );
        let p = time_problems(
            &file,
            &cert(JAN, DEC),
            datetime!(2026-04-02 00:00 UTC),
            EXPIRES_SOON_MARGIN,
        );
        assert_eq!(p[0].kind, ProblemKind::Expired);
        assert!(p[0].message.contains("not_after"), "{p:?}");
    }

    #[test]
    fn not_yet_valid_honours_the_skew_allowance() {
        let file = FileTimes::default();
        let within = time_problems(
            &file,
            &cert(JAN, DEC),
            JAN - time::Duration::minutes(4),
            EXPIRES_SOON_MARGIN,
        );
        assert_eq!(
            within[0].severity,
            Severity::Warning,
            "4 minutes early: {within:?}"
        );
        let beyond = time_problems(
            &file,
            &cert(JAN, DEC),
            JAN - time::Duration::minutes(6),
            EXPIRES_SOON_MARGIN,
        );
        assert_eq!(
            kinds(&beyond)[0],
            (Severity::Error, ProblemKind::NotYetValid)
        );
        assert_eq!(
            beyond
                .iter()
                .filter(|p| p.kind == ProblemKind::MissingTime)
                .count(),
            4
        );
    }

    #[test]
    fn out_of_order_times_are_named() {
        let mut file = matching();
        file.renew_after = Some(datetime!(2027-01-01 00:00 UTC));
        let p = time_problems(
            &file,
            &cert(JAN, DEC),
            datetime!(2026-03-01 00:00 UTC),
            EXPIRES_SOON_MARGIN,
        );
        let messages: Vec<&str> = p
            .iter()
            .filter(|p| p.kind == ProblemKind::TimesOutOfOrder)
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(messages.len(), 2, "{p:?}");
        assert!(messages[0].starts_with("renew_after (2027-01-01T00:00:00Z) is after not_after"));
        assert!(messages[1].contains("cannot_renew_after"));
    }

    #[test]
    fn authority_problems() {
        assert!(
            check_authority("https://login.microsoftonline.com/", "t")
                .1
                .is_none()
        );
        let (url, p) = check_authority("http://127.0.0.1:8080/", "t");
        assert_eq!(
            url.as_deref(),
            Some("http://127.0.0.1:8080/t/oauth2/v2.0/token")
        );
        assert_eq!(p.map(|p| p.severity), Some(Severity::Warning));
        let (url, p) = check_authority("http://login.example/", "t");
        assert!(url.is_none());
        assert_eq!(p.map(|p| p.severity), Some(Severity::Error));
    }

    #[test]
    fn severities_are_ordered() {
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Error);
    }
}
