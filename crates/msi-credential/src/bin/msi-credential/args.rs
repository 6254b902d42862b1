//! The command line: every command, option and default, parsed by `clap`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::EXIT_CODES_HELP;

/// The default of `inspect --warn-days`: the library's expiry margin, in days (7).
const DEFAULT_WARN_DAYS: u32 = (msi_dataplane::inspect::EXPIRES_SOON_MARGIN.as_secs() / DAY) as u32;

/// Seconds in a day.
pub const DAY: u64 = 24 * 60 * 60;

/// Inspect an Azure managed-identity credential file, get a token with it, or watch it
/// rotate.
///
/// The file is the JSON `UserAssignedIdentityCredentials` that the Secrets Store CSI
/// driver mounts (e.g. /mnt/certs/NAME). No command ever prints the client secret or
/// the private key; `token` prints the access token only when asked with --show-token.
#[derive(Debug, Parser)]
#[command(name = "msi-credential", version, after_long_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Print one JSON object (for `watch`: one JSON object per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Log filter for diagnostics on stderr: a level (`off`, `error`, `warn`, `info`,
    /// `debug`, `trace`) or `target=level` directives, comma-separated
    /// (e.g. `msi_dataplane=debug`). Without it, `RUST_LOG` when set. Default: `warn`
    /// (`error` for `watch`, whose own lines already report every decision; `info` for
    /// `serve`, which logs its start, stop and rotations).
    #[arg(long, global = true, env = "MSI_CREDENTIAL_LOG", value_name = "FILTER")]
    pub log: Option<String>,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report identity, authority, validity, certificate and every problem found.
    ///
    /// Exit code 0: no problem; 1: warnings only (the credential works but needs
    /// attention: rotation due, ends within --warn-days, file times disagreeing with the
    /// certificate, ...); 3: errors (the credential cannot get a token now: expired, not
    /// yet valid, unusable authority); 4: the file cannot be loaded.
    Inspect(InspectArgs),
    /// Get an access token and print its expiry (the token itself only with --show-token).
    ///
    /// Exit code 0: a token was issued; 4: the file cannot be loaded; 5: the token
    /// request failed (the credential outside its validity, a transport or TLS failure,
    /// an error answer from the token endpoint).
    Token(TokenArgs),
    /// Follow the file through rotations and print every reload decision, until Ctrl-C
    /// or SIGTERM.
    ///
    /// One line per decision (swapped, unchanged, not newer, invalid), plus a line when
    /// the directory watch is lost or re-armed. Exit code 0 when stopped by a signal; 4
    /// when the file cannot be loaded at start. Send the output outside the watched
    /// directory: every write there is a file event, and so a re-read.
    Watch(WatchArgs),
    /// Serve tokens of the credential files to the other containers of the pod: the App
    /// Service managed identity protocol (`IDENTITY_ENDPOINT`, `IDENTITY_HEADER`) that
    /// every Azure SDK's managed identity credential speaks, on loopback, until Ctrl-C or
    /// SIGTERM.
    ///
    /// The secret the applications send in X-IDENTITY-HEADER is read from a file
    /// (--secret-file: the current secret, and the previous one on a second line during a
    /// rotation; re-read every 10 s) or an environment variable (--secret-env NAME, and
    /// NAME_PREVIOUS); never from the command line. Exit code 0 when stopped by a signal;
    /// 2 for a bad option, a non-loopback address or an unusable secret; 4 when a file
    /// cannot be loaded.
    Serve(Box<ServeArgs>),
    /// Check the token server's health (for a Kubernetes `exec` probe): exit 0 when
    /// /healthz answers 200, 7 otherwise.
    Probe(ProbeArgs),
    /// Key Vault: the stored credentials (`msi-`, `uamsi-`) and their renewal state
    /// (feature `keyvault`). No secret value is read or printed.
    #[cfg(feature = "keyvault")]
    #[command(subcommand)]
    Vault(VaultCommand),
}

/// `vault ...`.
#[cfg(feature = "keyvault")]
#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// List the stored credentials with their renewal state: current, due (past
    /// renew_after), unusable (past exp or cannot_renew_after, or disabled), untracked.
    List(VaultListArgs),
}

/// `vault list VAULT_URL --credential FILE`.
#[cfg(feature = "keyvault")]
#[derive(Debug, Args)]
pub struct VaultListArgs {
    /// The vault, e.g. `https://my-vault.vault.azure.net/`.
    pub vault_url: String,
    /// The credential file the service reads the vault with.
    #[arg(long, value_name = "FILE")]
    pub credential: PathBuf,
    /// Extra trusted root CAs (PEM) for Entra and the vault.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Do not check the challenge's resource against the vault's host (test vaults on
    /// a loopback address only).
    #[arg(long)]
    pub no_verify_challenge_resource: bool,
    /// Requests to make at most (to Entra and to the vault) before giving up on a
    /// transient failure.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts: u32,
}

/// `serve FILE...`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("secret").required(true).args(["secret_file", "secret_env"])))]
pub struct ServeArgs {
    /// The credential files, one per identity (each is followed through rotations).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A file holding the identity header secret (first line), and the previous one
    /// during a rotation (second line).
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// A file holding the previous identity header secret, read while it exists (during
    /// a rotation of the secret: a Secret's optional key).
    #[arg(long, value_name = "FILE", requires = "secret_file")]
    pub previous_secret_file: Option<PathBuf>,
    /// An environment variable holding the identity header secret (and NAME_PREVIOUS the
    /// previous one).
    #[arg(long, value_name = "NAME")]
    pub secret_env: Option<String>,
    /// The loopback address and port to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:50342")]
    pub listen: std::net::SocketAddr,
    /// The path tokens are served on (IDENTITY_ENDPOINT's path).
    #[arg(long, value_name = "PATH", default_value = "/msi/token")]
    pub path: String,
    /// Most connections open at once (when full, a new one closes the one idle longest).
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    /// Time a new connection has to send its first byte, e.g. `2s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "2s")]
    pub first_byte_timeout: Duration,
    /// Time a request head has to arrive (and the longest a keep-alive connection stays
    /// idle), e.g. `30s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "30s")]
    pub idle_timeout: Duration,
    /// Time an answer has to be written in full once the client's window held it back: a
    /// client that does not read its answers is disconnected after it, e.g. `5s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "5s")]
    pub write_timeout: Duration,
    /// Most new token requests a second sent to the token endpoint (bursts of twice that;
    /// more are answered 429); cached tokens and requests joining one in flight are never
    /// limited. 0: no limit.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 50,
        alias = "max-requests-per-second"
    )]
    pub max_token_requests_per_second: u32,
    /// Most resources whose tokens are cached per identity (the least recently used leave
    /// first): bounds what a container with the secret can make the server hold.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_cached_resources: u32,
    /// Serve tokens for this resource only (repeat for more; e.g.
    /// `https://management.azure.com/`); any other is refused with 403. Default: any.
    #[arg(long = "allow-resource", value_name = "RESOURCE")]
    pub allow_resources: Vec<String>,
    /// Re-read each credential file this often even without a file event.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "6h")]
    pub backstop: Duration,
    /// Trust the root CAs in this PEM file too (for an authority behind a private CA).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Accept an `http://` authority on a loopback host (local test servers only).
    #[arg(long)]
    pub allow_http_loopback: bool,
    /// Time allowed for each token request, e.g. `10s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub timeout: Duration,
    /// Token requests to make at most for one answer (the clients retry a 503 themselves).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts: u32,
    /// Serve the metrics (answers by status, token requests, reloads, the credentials'
    /// times) in Prometheus's text format on `http://ADDR/metrics`: the pod's IP (with a
    /// NetworkPolicy admitting the monitoring namespace) for a scrape from another pod,
    /// or loopback for a scraping sidecar. Its own listener and limits: the token listener
    /// stays loopback only.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// `probe [--url URL] [--secret-file FILE | --secret-env NAME]`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The health URL (http:// on a loopback address).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:50342/healthz"
    )]
    pub url: String,
    /// Time allowed for the answer.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "3s")]
    pub timeout: Duration,
    /// The server's identity header secret file (its first line). The probe proves it
    /// knows the secret without sending it and requires the server to prove the same,
    /// so it fails against another process holding the port; it then gets the full
    /// health report and is never held to the budget of callers without the secret.
    #[arg(long, value_name = "FILE", conflicts_with = "secret_env")]
    pub secret_file: Option<PathBuf>,
    /// An environment variable holding the identity header secret (as `--secret-file`).
    #[arg(long, value_name = "NAME")]
    pub secret_env: Option<String>,
}

/// `inspect FILE`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The credential file.
    pub file: PathBuf,
    /// Warn when the credential ends within this many days (by default the library's
    /// margin, the one a credential warns at).
    #[arg(long, default_value_t = DEFAULT_WARN_DAYS, value_name = "DAYS")]
    pub warn_days: u32,
}

/// `token FILE --scope S`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The credential file.
    pub file: PathBuf,
    /// A scope to request, e.g. `https://management.azure.com/.default`; repeat for more.
    #[arg(long = "scope", required = true, value_name = "SCOPE")]
    pub scopes: Vec<String>,
    /// Print the access token too. It is a credential: do not paste it anywhere.
    #[arg(long)]
    pub show_token: bool,
    /// Trust the root CAs in this PEM file too (for an authority behind a private CA).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Accept an `http://` authority on a loopback host (local test servers only).
    #[arg(long)]
    pub allow_http_loopback: bool,
    /// Time allowed for each token request, e.g. `30s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub timeout: Duration,
    /// Requests to make at most before giving up on a transient failure.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts: u32,
}

/// `watch FILE`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The credential file (its directory is watched).
    pub file: PathBuf,
    /// Re-read the file this often even without a file event, e.g. `6h`, `10m`.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "6h")]
    pub backstop: Duration,
    /// After a file event, wait this long for more before re-reading, e.g. `200ms`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "200ms")]
    pub debounce: Duration,
    /// Do not watch the directory: re-read on the backstop only.
    #[arg(long)]
    pub no_watch: bool,
    /// Serve the metrics (reloads, the credential's times) in Prometheus's text format
    /// on `http://ADDR/metrics`: the pod's IP (with a NetworkPolicy admitting the
    /// monitoring namespace) for a scrape from another pod, or `127.0.0.1:9464` for a
    /// scraping sidecar.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// A duration: a whole number followed by `ms`, `s`, `m` or `h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 200ms, 30s, 10m, 6h)"))?;
    let seconds = |factor: u64| {
        value
            .checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("`{text}` is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "" | "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        other => Err(format!(
            "unknown unit `{other}` in `{text}` (use ms, s, m or h)"
        )),
    }
}

/// A duration that is not zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err("must be longer than zero".to_owned()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("6h"), Ok(Duration::from_secs(21_600)));
        assert!(parse_duration("6d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }
}
