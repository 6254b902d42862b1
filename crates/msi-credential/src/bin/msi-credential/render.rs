//! Turning results into text for people or JSON for scripts. Pure: strings in, strings
//! out; nothing here writes.
//!
//! Only public facts reach these functions (reports, expiry times, thumbprints, error
//! messages that the library keeps secret-free); the access token is rendered only when
//! the caller put it in the [`TokenOutput`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use msi_dataplane::inspect::CredentialReport;
use msi_dataplane::inspect::Severity;
use msi_dataplane::{BundleFormat, Error, ErrorCategory, rfc3339};
use serde::Serialize;
use time::OffsetDateTime;

use crate::output::Format;

/// What `token` prints.
#[derive(Debug, Serialize)]
pub struct TokenOutput {
    /// The application (client) id.
    pub client_id: String,
    /// The tenant id.
    pub tenant_id: String,
    /// Where the token was requested.
    pub token_url: String,
    /// The scopes requested.
    pub scopes: Vec<String>,
    /// When the token expires.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_on: OffsetDateTime,
    /// Seconds from now to `expires_on`.
    pub expires_in_seconds: i64,
    /// When the server asked the token to be refreshed, if it did.
    #[serde(with = "time::serde::rfc3339::option")]
    pub refresh_on: Option<OffsetDateTime>,
    /// SHA-256 thumbprint of the certificate that signed the request.
    pub thumbprint_sha256: String,
    /// The access token: only with `--show-token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
}

/// The credential being served, as a watch line shows it.
#[derive(Debug, Serialize)]
pub struct Active {
    /// Its effective `not_before`.
    #[serde(with = "time::serde::rfc3339")]
    pub not_before: OffsetDateTime,
    /// Its end.
    #[serde(with = "time::serde::rfc3339")]
    pub not_after: OffsetDateTime,
    /// Its leaf's SHA-256 thumbprint.
    pub thumbprint_sha256: String,
}

/// One line of `watch` output (`"event"` is the JSON tag).
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    /// The first load succeeded.
    Loaded {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The file.
        path: PathBuf,
        /// What is served.
        active: Active,
        /// Whether the directory is watched.
        watching: bool,
    },
    /// A re-read ended in a decision.
    Decision {
        /// When the file was re-read.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// `swapped`, `unchanged`, `not_newer` or `invalid`.
        outcome: &'static str,
        /// How many swaps so far.
        reloads: u64,
        /// What is served after the decision.
        active: Active,
        /// Why the file was refused, for `invalid`.
        error: Option<String>,
    },
    /// The directory watch was lost or re-armed.
    Watching {
        /// When this was seen.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// Whether the directory is watched now.
        watching: bool,
    },
    /// A signal stopped the command.
    Stopped {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// `SIGTERM`, `SIGINT` or `Ctrl-C`.
        signal: &'static str,
    },
}

/// The `inspect` JSON object: the report, the file and an overall status.
#[derive(Serialize)]
struct InspectJson<'a> {
    file: &'a Path,
    status: &'static str,
    #[serde(flatten)]
    report: &'a CredentialReport,
}

/// `"ok"`, `"warning"` or `"error"`: the worst problem that counts (info does not).
pub fn status(report: &CredentialReport) -> &'static str {
    match report.worst() {
        Some(Severity::Error) => "error",
        Some(Severity::Warning) => "warning",
        _ => "ok",
    }
}

/// The `inspect` output.
pub fn inspect(file: &Path, report: &CredentialReport, format: Format) -> String {
    if format == Format::Json {
        return json(&InspectJson {
            file,
            status: status(report),
            report,
        });
    }
    let r = report;
    let c = &r.certificate;
    let f = &r.file_times;
    let mut text = String::new();
    let _ = writeln!(text, "credential file {}", file.display());
    let _ = writeln!(text, "status          {}", summary(r));

    let mut section = |title: &str, rows: &[(&str, String)]| {
        let _ = writeln!(text, "\n{title}");
        for (label, value) in rows {
            let _ = writeln!(text, "  {label:<20}{value}");
        }
    };
    section(
        "identity",
        &[
            ("client_id", r.client_id.clone()),
            ("object_id", or_dash(r.object_id.as_deref())),
            ("resource_id", or_dash(r.resource_id.as_deref())),
            ("tenant_id", r.tenant_id.clone()),
            ("authority", r.authority.clone()),
            ("token_url", or_dash(r.token_url.as_deref())),
            ("cloud", or_dash(r.cloud.as_deref())),
        ],
    );
    section(
        "validity",
        &[
            ("not_before", rfc3339(r.validity.not_before).to_string()),
            ("not_after", rfc3339(r.validity.not_after).to_string()),
            ("days_left", r.validity.days_left.to_string()),
        ],
    );
    section(
        "file times",
        &[
            ("not_before", opt_time(f.not_before)),
            ("not_after", opt_time(f.not_after)),
            ("renew_after", opt_time(f.renew_after)),
            ("cannot_renew_after", opt_time(f.cannot_renew_after)),
        ],
    );
    section(
        "certificate (leaf)",
        &[
            ("subject", c.subject.clone()),
            ("issuer", c.issuer.clone()),
            ("not_before", rfc3339(c.not_before).to_string()),
            ("not_after", rfc3339(c.not_after).to_string()),
            ("sha1", c.thumbprint_sha1.clone()),
            ("sha256", c.thumbprint_sha256.clone()),
            ("chain_length", c.chain_length.to_string()),
            ("key", format!("RSA {} bits", c.key_bits)),
            ("bundle", bundle_name(c.bundle_format).to_owned()),
        ],
    );
    let _ = writeln!(text, "\nproblems");
    if r.problems.is_empty() {
        let _ = writeln!(text, "  none");
    }
    for p in &r.problems {
        let _ = writeln!(
            text,
            "  {:<8} {}: {}",
            name(&p.severity),
            name(&p.kind),
            p.message
        );
    }
    text
}

/// "ok", or the problem counts ("1 error, 2 warnings, 1 info").
fn summary(report: &CredentialReport) -> String {
    let parts: Vec<String> = [
        (Severity::Error, "error", "errors"),
        (Severity::Warning, "warning", "warnings"),
        (Severity::Info, "info", "info"),
    ]
    .iter()
    .filter_map(|(severity, one, many)| match report.count(*severity) {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    })
    .collect();
    let counts = parts.join(", ");
    match status(report) {
        "ok" if counts.is_empty() => "ok".to_owned(),
        s => format!("{s} ({counts})"),
    }
}

/// The `token` output.
pub fn token(out: &TokenOutput, format: Format) -> String {
    if format == Format::Json {
        return json(out);
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "token issued for client_id {} (tenant {})",
        out.client_id, out.tenant_id
    );
    let mut row = |label: &str, value: &str| {
        let _ = writeln!(text, "  {label:<14}{value}");
    };
    row("scopes", &out.scopes.join(" "));
    row("token_url", &out.token_url);
    row(
        "expires_on",
        &format!(
            "{} (in {})",
            rfc3339(out.expires_on),
            human(out.expires_in_seconds)
        ),
    );
    if let Some(at) = out.refresh_on {
        row("refresh_on", &rfc3339(at).to_string());
    }
    row("certificate", &format!("sha256 {}", out.thumbprint_sha256));
    if let Some(token) = &out.access_token {
        row("access_token", token);
    }
    text
}

/// One `watch` line.
pub fn watch_event(event: &WatchEvent, format: Format) -> String {
    if format == Format::Json {
        return json(event);
    }
    match event {
        WatchEvent::Loaded {
            at,
            path,
            active,
            watching,
        } => format!(
            "{} loaded {}: serving sha256 {}, valid {} to {}; {}",
            rfc3339(*at),
            path.display(),
            active.thumbprint_sha256,
            rfc3339(active.not_before),
            rfc3339(active.not_after),
            if *watching {
                "watching its directory"
            } else {
                "not watching its directory (backstop re-reads only)"
            }
        ),
        WatchEvent::Decision {
            at,
            outcome,
            reloads,
            active,
            error,
        } => {
            let at = rfc3339(*at);
            let tp = &active.thumbprint_sha256;
            match (*outcome, error) {
                ("swapped", _) => format!(
                    "{at} swapped: serving sha256 {tp}, valid {} to {} (reload #{reloads})",
                    rfc3339(active.not_before),
                    rfc3339(active.not_after)
                ),
                ("unchanged", None) => {
                    format!("{at} unchanged: the file was decided on before; serving sha256 {tp}")
                }
                ("unchanged", Some(error)) => format!(
                    "{at} unchanged: the file was refused before ({error}); keeping sha256 {tp}"
                ),
                ("not_newer", _) => format!(
                    "{at} not_newer: the file's not_before is not later than the active {}; \
                     keeping sha256 {tp}",
                    rfc3339(active.not_before)
                ),
                (outcome, Some(error)) => {
                    format!("{at} {outcome}: {error}; keeping sha256 {tp}")
                }
                (outcome, None) => format!("{at} {outcome}: keeping sha256 {tp}"),
            }
        }
        WatchEvent::Watching { at, watching } => format!(
            "{} watching: {}",
            rfc3339(*at),
            if *watching {
                "the directory watch is in place"
            } else {
                "the directory watch is lost; backstop re-reads only until it is re-armed"
            }
        ),
        WatchEvent::Stopped { at, signal } => format!("{} stopped by {signal}", rfc3339(*at)),
    }
}

/// The JSON form of an error.
#[derive(Serialize)]
struct ErrorJson<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    kind: &'static str,
    message: &'a str,
    file: Option<&'a Path>,
    /// What to do: `transient`, `configuration`, `credential_file`, `service`.
    category: &'static str,
    transient: bool,
}

/// An error that ends a command: text for stderr, or the JSON object for stdout. When
/// the error is about the credential file `file` and does not name it yet, the message
/// names it.
pub fn error(err: &Error, file: Option<&Path>, format: Format) -> String {
    let file = err.path().or(file);
    let message = match (err.path(), file) {
        (None, Some(file)) if is_file_error(err) => {
            format!("credential file {}: {err}", file.display())
        }
        _ => err.to_string(),
    };
    match format {
        Format::Text => format!("msi-credential: {message}"),
        Format::Json => json(&ErrorJson {
            error: ErrorBody {
                kind: err.kind().code(),
                message: &message,
                file: if is_file_error(err) { file } else { None },
                category: err.category().as_str(),
                transient: err.is_transient(),
            },
        }),
    }
}

/// A failure that is not a library [`Error`] (text or JSON, like [`error`]); `kind` is
/// `"usage"` for the command line, `"internal"` for the tool itself.
pub fn plain_error(kind: &'static str, message: &str, format: Format) -> String {
    match format {
        Format::Text => format!("msi-credential: {message}"),
        Format::Json => json(&ErrorJson {
            error: ErrorBody {
                kind,
                message,
                file: None,
                // Not a library error: the command line is the user's configuration; the
                // tool's own failure is `internal`.
                category: if kind == "usage" {
                    "configuration"
                } else {
                    kind
                },
                transient: false,
            },
        }),
    }
}

/// A configuration failure that is not a library [`Error`] (the token server's own, such
/// as an address it cannot bind): its stable `code` as `kind`, category `configuration`.
pub fn configuration_error(code: &'static str, message: &str, format: Format) -> String {
    match format {
        Format::Text => format!("msi-credential: {message}"),
        Format::Json => json(&ErrorJson {
            error: ErrorBody {
                kind: code,
                message,
                file: None,
                category: "configuration",
                transient: false,
            },
        }),
    }
}

/// Whether an error is about the credential file (its content, its bundle, its validity).
fn is_file_error(err: &Error) -> bool {
    err.category() == ErrorCategory::CredentialFile
}

fn bundle_name(format: BundleFormat) -> &'static str {
    match format {
        BundleFormat::Pem => "PEM",
        BundleFormat::Pkcs12 => "PKCS#12",
        _ => "other",
    }
}

fn opt_time(t: Option<OffsetDateTime>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| rfc3339(t).to_string())
}

fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

/// `"1h 0m"`, `"59m 59s"`, `"2d 3h"`; negative durations as `"-5s"`.
fn human(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.unsigned_abs();
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sign}{s}s"),
        (0, 0, _) => format!("{sign}{m}m {s}s"),
        (0, _, _) => format!("{sign}{h}h {m}m"),
        _ => format!("{sign}{d}d {h}h"),
    }
}

/// The serde name of a unit enum value (`Severity::Warning` -> `"warning"`).
fn name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::from("?"),
    }
}

/// Compact JSON (one line). Serializing these plain structs cannot fail; if it ever did,
/// the output says so as JSON rather than panicking.
fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        format!(
            "{{\"error\":{{\"kind\":\"internal\",\"message\":{}}}}}",
            serde_json::Value::String(e.to_string())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use msi_dataplane::ErrorKind;

    #[test]
    fn human_durations() {
        assert_eq!(human(3599), "59m 59s");
        assert_eq!(human(3600), "1h 0m");
        assert_eq!(human(59), "59s");
        assert_eq!(human(-5), "-5s");
        assert_eq!(human(2 * 86_400 + 3 * 3600 + 7), "2d 3h");
    }

    #[test]
    fn file_errors_name_the_file_once() {
        let err = Error::from(ErrorKind::File {
            code: "no_private_key",
            field: None,
            message: "the certificate bundle holds no private key".into(),
        });
        let text = error(&err, Some(Path::new("/mnt/certs/x")), Format::Text);
        assert_eq!(
            text,
            "msi-credential: credential file /mnt/certs/x: the certificate bundle holds no private key"
        );
        let json: serde_json::Value =
            serde_json::from_str(&error(&err, Some(Path::new("/mnt/certs/x")), Format::Json))
                .unwrap();
        assert_eq!(json["error"]["kind"], "no_private_key");
        assert_eq!(json["error"]["file"], "/mnt/certs/x");
        assert_eq!(json["error"]["transient"], false);
    }
}
