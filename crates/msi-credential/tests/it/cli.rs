//! The `msi-credential` binary, run as a subprocess: `inspect`, `token` and `watch`, text
//! and `--json`, exit codes, and no secret in any output.
//!
//! `token` talks HTTPS to the verifying Entra-compatible server running in this test
//! process (trusted through `--ca-file` with the testing kit's CA); `watch` follows a real file
//! through real rotations. Waits are for output lines, with a generous deadline; no
//! assertion depends on how long anything took.

use crate::support;

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use msi_dataplane::{ClientCertificate, UserAssignedIdentityCredentials};
use serde_json::Value;
use support::atomic_writer::{TempDir, write_temp_then_rename};
use support::entra::{EntraServer, Outcome, Scripted, TokenShape};
use support::fixtures::{credential_path, load, load_with_endpoint};
use support::harness::{ARM, leaf_sha256_hex, register};
use support::secrets::Secrets;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const BIN: &str = env!("CARGO_BIN_EXE_msi-credential");
/// How long to wait for a line of output before giving up (a bound, not a measurement).
const DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

/// The binary, with a clean environment for what it reads.
fn cli() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(BIN);
    cmd.env_remove("MSI_CREDENTIAL_LOG")
        .env_remove("RUST_LOG")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .timeout(Duration::from_secs(120));
    cmd
}

/// What one run printed, and how it ended.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{}", self.stdout))
    }

    /// Both streams, for secret checks.
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Run with `args`; the exit code must be `code`.
#[track_caller]
fn run(args: &[&str], code: i32) -> Run {
    let assert = cli().args(args).assert();
    let out = assert.get_output();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(
        run.code, code,
        "{args:?}: exit code\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert.code(code);
    run
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

fn certificate(name: &str) -> ClientCertificate {
    ClientCertificate::from_credentials(&load(name)).expect("good fixture")
}

fn time_of(v: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(v.as_str().expect("a time string"), &Rfc3339).expect("RFC 3339")
}

/// Every secret form of fixture `name` is absent from `text`.
#[track_caller]
fn assert_no_secret(name: &str, context: &str, text: &str) {
    Secrets::of(name).assert_absent(context, text);
}

// ---------------------------------------------------------------------------------------
// inspect
// ---------------------------------------------------------------------------------------

#[test]
fn inspect_good_fixtures_as_text() {
    for name in ["pem-chain", "pfx-legacy"] {
        let file = credential_path(name);
        let run = run(&["inspect", path_str(&file)], 0);
        let cert = certificate(name);
        let creds = load(name);
        for expected in [
            format!("credential file {}", file.display()),
            "status          ok".to_owned(),
            creds.client_id.clone().unwrap(),
            creds.object_id.clone().unwrap(),
            creds.tenant_id.clone().unwrap(),
            creds.authentication_endpoint.clone().unwrap(),
            cert.thumbprint_sha1_hex(),
            cert.thumbprint_sha256_hex(),
            cert.subject().unwrap(),
            cert.issuer().unwrap(),
            format!("chain_length        {}", cert.chain().len()),
            format!("key                 RSA {} bits", cert.key_bits()),
            "problems\n  none".to_owned(),
        ] {
            assert!(
                run.stdout.contains(&expected),
                "{name}: `{expected}` missing from:\n{}",
                run.stdout
            );
        }
        let bundle = if name.starts_with("pfx") {
            "PKCS#12"
        } else {
            "PEM"
        };
        assert!(
            run.stdout
                .contains(&format!("bundle              {bundle}"))
        );
        assert!(run.stderr.is_empty(), "{name}: {}", run.stderr);
        assert_no_secret(name, name, &run.all());
    }
}

#[test]
fn inspect_json_matches_the_library_and_the_fixtures() {
    for name in [
        "pem-pkcs8",
        "pem-chain",
        "pem-rsa4096",
        "pfx-legacy",
        "pfx-aes",
    ] {
        let file = credential_path(name);
        let run = run(&["inspect", path_str(&file), "--json"], 0);
        let json = run.json();
        let creds = load(name);
        let cert = certificate(name);
        assert_eq!(json["file"], path_str(&file));
        assert_eq!(json["status"], "ok");
        assert_eq!(json["problems"], serde_json::json!([]));
        assert_eq!(json["client_id"], creds.client_id.as_deref().unwrap());
        assert_eq!(json["object_id"], creds.object_id.as_deref().unwrap());
        assert_eq!(json["resource_id"], creds.resource_id.as_deref().unwrap());
        assert_eq!(json["tenant_id"], creds.tenant_id.as_deref().unwrap());
        assert_eq!(
            json["authority"],
            creds.authentication_endpoint.as_deref().unwrap()
        );
        assert_eq!(
            json["token_url"],
            format!(
                "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
                creds.tenant_id.as_deref().unwrap()
            )
        );
        assert_eq!(json["cloud"], "AzurePublicCloud");
        let c = &json["certificate"];
        assert_eq!(c["thumbprint_sha1"], cert.thumbprint_sha1_hex());
        assert_eq!(c["thumbprint_sha256"], cert.thumbprint_sha256_hex());
        // And independently of the library: the generator's own leaf file.
        assert_eq!(
            c["thumbprint_sha256"]
                .as_str()
                .unwrap()
                .to_ascii_lowercase(),
            leaf_sha256_hex(name)
        );
        assert_eq!(c["chain_length"], cert.chain().len());
        assert_eq!(c["key_bits"], cert.key_bits());
        assert_eq!(c["subject"], cert.subject().unwrap());
        assert_eq!(c["issuer"], cert.issuer().unwrap());
        assert_eq!(time_of(&c["not_before"]), cert.not_before());
        assert_eq!(time_of(&c["not_after"]), cert.not_after());
        let format = if name.starts_with("pfx") {
            "pkcs12"
        } else {
            "pem"
        };
        assert_eq!(c["bundle_format"], format);
        let f = &json["file_times"];
        assert_eq!(
            time_of(&f["not_after"]),
            creds.not_after().unwrap().unwrap()
        );
        assert_eq!(
            time_of(&f["renew_after"]),
            creds.renew_after().unwrap().unwrap()
        );
        let v = &json["validity"];
        assert_eq!(time_of(&v["not_after"]), cert.not_after());
        let checked_at = time_of(&json["checked_at"]);
        assert_eq!(
            v["days_left"].as_i64().unwrap(),
            (cert.not_after() - checked_at).whole_days()
        );
        assert!(run.stderr.is_empty(), "{name}: {}", run.stderr);
        assert_no_secret(name, name, &run.all());
    }
}

#[test]
fn inspect_expired_is_an_error_exit_3() {
    let file = credential_path("expired");
    let text = run(&["inspect", path_str(&file)], 3);
    assert!(
        text.stdout.contains("status          error"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("error    expired: the certificate expired at 2021-01-01T00:00:00Z"),
        "{}",
        text.stdout
    );
    let json = run(&["--json", "inspect", path_str(&file)], 3).json();
    assert_eq!(json["status"], "error");
    assert!(json["validity"]["days_left"].as_i64().unwrap() < 0);
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems[0]["severity"], "error");
    assert_eq!(problems[0]["kind"], "expired");
    assert!(
        problems
            .iter()
            .any(|p| p["kind"] == "past_cannot_renew_after" && p["severity"] == "warning"),
        "{problems:?}"
    );
    assert_no_secret("expired", "expired", &format!("{}{json}", text.all()));
}

#[test]
fn inspect_warnings_only_exit_1() {
    // The rotation fixtures' not_before is fixed, unlike their certificates'.
    let run1 = run(
        &[
            "inspect",
            "--json",
            path_str(&credential_path("rotation-1")),
        ],
        1,
    );
    let json = run1.json();
    assert_eq!(json["status"], "warning");
    assert_eq!(json["problems"][0]["kind"], "file_time_mismatch");
    assert!(
        json["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("not_before 2026-01-01T00:00:00Z"),
        "{json}"
    );

    // A credential that ends within the margin.
    let file = credential_path("pem-pkcs8");
    let soon = run(&["inspect", path_str(&file), "--warn-days", "100000"], 1);
    assert!(
        soon.stdout
            .contains("warning  expires_soon: the credential ends at"),
        "{}",
        soon.stdout
    );

    // A file past its renew_after.
    let dir = TempDir::new("cli-renew");
    let path = dir.join("identity");
    let mut creds = load("pem-pkcs8");
    creds.renew_after = Some("2020-01-01T00:00:00Z".to_owned());
    std::fs::write(&path, creds.to_json().unwrap()).unwrap();
    let json = run(&["inspect", "--json", path_str(&path)], 1).json();
    assert!(
        json["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "past_renew_after" && p["severity"] == "warning"),
        "{json}"
    );
    for out in [run1.all(), soon.all(), json.to_string()] {
        assert_no_secret("pem-pkcs8", "warnings", &out);
        assert_no_secret("rotation-1", "warnings", &out);
    }
}

#[test]
fn inspect_unloadable_files_exit_4_naming_the_file() {
    let dir = TempDir::new("cli-bad");
    // Cut inside client_secret: the parser must not echo any of it.
    let good = load("pem-pkcs8").to_json().unwrap();
    let cut = good.find("\"client_secret\"").unwrap() + 200;
    let malformed = dir.join("malformed.json");
    std::fs::write(&malformed, &good[..cut]).unwrap();
    let missing_keys = dir.join("missing-keys.json");
    std::fs::write(&missing_keys, r#"{"client_id": "x"}"#).unwrap();
    let missing = dir.join("does-not-exist.json");

    let cases: [(PathBuf, &str, &str, &str); 5] = [
        (
            credential_path("ec-key"),
            "ec-key",
            "unsupported_key_type",
            "only RSA keys are supported",
        ),
        (
            credential_path("pfx-password"),
            "pfx-password",
            "pkcs12",
            "PKCS#12 archive cannot be read",
        ),
        (missing.clone(), "pem-pkcs8", "io", "cannot be read"),
        (
            malformed.clone(),
            "pem-pkcs8",
            "json",
            "invalid JSON at line",
        ),
        (
            missing_keys.clone(),
            "pem-pkcs8",
            "missing_fields",
            "missing required key(s): authentication_endpoint, tenant_id, client_secret",
        ),
    ];
    for (path, fixture, kind, message) in cases {
        let file = path_str(&path);
        let text = run(&["inspect", file], 4);
        assert!(text.stdout.is_empty(), "{file}: {}", text.stdout);
        assert!(
            text.stderr
                .starts_with(&format!("msi-credential: credential file {file}: ")),
            "{file}: {}",
            text.stderr
        );
        assert!(text.stderr.contains(message), "{file}: {}", text.stderr);

        let json = run(&["inspect", file, "--json"], 4).json();
        assert_eq!(json["error"]["kind"], kind, "{json}");
        assert_eq!(json["error"]["file"], file, "{json}");
        assert_eq!(json["error"]["transient"], false);
        assert!(
            json["error"]["message"].as_str().unwrap().contains(file),
            "{json}"
        );
        assert_no_secret(fixture, file, &format!("{}{json}", text.all()));
    }
}

// ---------------------------------------------------------------------------------------
// the command line
// ---------------------------------------------------------------------------------------

/// `RUST_LOG` is read when `--log` is not given (and `--log` wins); logs written to a file
/// carry no ANSI colour codes.
#[test]
fn rust_log_is_honoured_and_logs_off_a_terminal_have_no_colour() {
    let file = credential_path("ec-key");
    let file = path_str(&file);
    // `watch` of a file it cannot load ends at once (exit 4), after its first events.
    let traced = cli()
        .env("RUST_LOG", "trace")
        .args(["watch", "--no-watch", file])
        .output()
        .unwrap();
    assert_eq!(traced.status.code(), Some(4), "{traced:?}");
    let stderr = String::from_utf8_lossy(&traced.stderr);
    assert!(stderr.contains(" TRACE "), "RUST_LOG=trace: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "an escape code in a log file: {stderr:?}"
    );
    let quiet = cli()
        .env("RUST_LOG", "trace")
        .args(["--log", "off", "watch", "--no-watch", file])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains(" TRACE "));
    let bad = cli()
        .env("RUST_LOG", "=[")
        .args(["watch", "--no-watch", file])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("RUST_LOG"),
        "{bad:?}"
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let help = run(&["--help"], 0);
    assert!(help.stdout.contains("Exit codes:"), "{}", help.stdout);
    for code in 0..=6 {
        assert!(
            help.stdout.contains(&format!("\n  {code}  ")),
            "exit code {code} undocumented:\n{}",
            help.stdout
        );
    }
    for command in ["inspect", "token", "watch"] {
        let sub = run(&[command, "--help"], 0);
        assert!(sub.stdout.contains("--json"), "{command}: {}", sub.stdout);
    }
}

#[test]
fn usage_errors_exit_2() {
    let file = credential_path("pem-pkcs8");
    let file = path_str(&file);
    let none = run(&[], 2);
    assert!(none.stderr.contains("Usage"), "{}", none.stderr);
    let no_scope = run(&["token", file], 2);
    assert!(no_scope.stderr.contains("--scope"), "{}", no_scope.stderr);
    let bad_duration = run(&["watch", file, "--debounce", "5 parsecs"], 2);
    assert!(
        bad_duration.stderr.contains("--debounce"),
        "{}",
        bad_duration.stderr
    );
    let zero = run(&["watch", file, "--backstop", "0s"], 2);
    assert!(zero.stderr.contains("longer than zero"), "{}", zero.stderr);
    let bad_log = run(&["inspect", file, "--log", "loud=!"], 2);
    assert!(
        bad_log.stderr.contains("invalid --log filter"),
        "{}",
        bad_log.stderr
    );
    let ca = run(
        &[
            "token",
            file,
            "--scope",
            ARM,
            "--ca-file",
            "/no/such/ca.pem",
        ],
        2,
    );
    assert!(
        ca.stderr
            .contains("--ca-file /no/such/ca.pem: cannot be read"),
        "{}",
        ca.stderr
    );
    let not_pem = run(
        &["token", file, "--scope", ARM, "--ca-file", file, "--json"],
        2,
    )
    .json();
    assert_eq!(not_pem["error"]["kind"], "usage");
    assert!(
        not_pem["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no PEM CERTIFICATE block"),
        "{not_pem}"
    );
    assert_no_secret("pem-pkcs8", "usage", &not_pem.to_string());
}

// ---------------------------------------------------------------------------------------
// token
// ---------------------------------------------------------------------------------------

/// A runtime driving the test server while the CLI runs as a subprocess.
struct TokenSetup {
    _rt: tokio::runtime::Runtime,
    server: EntraServer,
    _dir: TempDir,
    file: PathBuf,
}

fn token_setup(name: &str) -> TokenSetup {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(EntraServer::start());
    register(&server, name);
    let dir = TempDir::new("cli-token");
    let file = dir.join("identity");
    let json = load_with_endpoint(name, &server.base_url())
        .to_json()
        .unwrap();
    std::fs::write(&file, json).unwrap();
    TokenSetup {
        _rt: rt,
        server,
        _dir: dir,
        file,
    }
}

/// The access tokens the server issued.
fn issued_tokens(server: &EntraServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter_map(|r| match r.outcome {
            Outcome::Token(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// The kit's CA in the setup's directory (removed with it).
fn ca_file(setup: &TokenSetup) -> String {
    path_str(&EntraServer::write_ca_pem(setup._dir.path())).to_owned()
}

#[test]
fn token_prints_the_expiry_and_the_token_only_when_asked() {
    let name = "pfx-3des";
    let setup = token_setup(name);
    setup.server.set_token_shape(TokenShape {
        expires_in: 4242,
        ..TokenShape::default()
    });
    let ca = ca_file(&setup);
    let file = path_str(&setup.file);
    let base = ["token", file, "--scope", ARM, "--ca-file", ca.as_str()];
    let args = |more: &[&'static str]| -> Vec<&str> { base.iter().chain(more).copied().collect() };
    let mut secrets = Secrets::of(name);

    // Text, with every library log on stderr.
    let before = OffsetDateTime::now_utc();
    let text = run(&args(&["--log", "trace"]), 0);
    let after = OffsetDateTime::now_utc();
    assert!(
        text.stdout.contains("token issued for client_id"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(&format!("scopes        {ARM}")));
    let expires = text
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("expires_on"))
        .unwrap_or_else(|| panic!("no expires_on line:\n{}", text.stdout));
    let expires = OffsetDateTime::parse(expires.trim().split(' ').next().unwrap(), &Rfc3339)
        .expect("RFC 3339 expiry");
    let lifetime = time::Duration::seconds(4242);
    assert!(
        expires >= before + lifetime - time::Duration::SECOND && expires <= after + lifetime,
        "{expires} not within [{before}, {after}] + 4242 s"
    );

    // JSON, without the token.
    let before = OffsetDateTime::now_utc();
    let json_run = run(&args(&["--json"]), 0);
    let after = OffsetDateTime::now_utc();
    let json = json_run.json();
    assert!(json.get("access_token").is_none(), "{json}");
    assert_eq!(json["scopes"], serde_json::json!([ARM]));
    assert_eq!(json["client_id"], load(name).client_id.as_deref().unwrap());
    assert_eq!(
        json["token_url"],
        setup.server.token_url(json["tenant_id"].as_str().unwrap())
    );
    let expires = time_of(&json["expires_on"]);
    assert!(
        expires >= before + lifetime - time::Duration::SECOND && expires <= after + lifetime,
        "{expires} not within [{before}, {after}] + 4242 s"
    );
    assert_eq!(
        json["thumbprint_sha256"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase(),
        leaf_sha256_hex(name)
    );

    // Two tokens so far, neither printed.
    let tokens = issued_tokens(&setup.server);
    assert_eq!(tokens.len(), 2, "{:?}", setup.server.requests());
    for t in &tokens {
        secrets.add("access token", t);
    }
    secrets.assert_absent("token text", &text.all());
    secrets.assert_absent("token json", &json_run.all());

    // --show-token: the very token the server issued, signed by the fixture's leaf.
    let shown = run(&args(&["--show-token", "--json"]), 0).json();
    let token = shown["access_token"].as_str().expect("access_token");
    assert_eq!(issued_tokens(&setup.server).last().unwrap(), token);
    let issued = setup.server.issued(token).expect("issued by the server");
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex(name));
    assert_eq!(issued.scope, ARM);
    let shown_text = run(&args(&["--show-token"]), 0);
    let token = issued_tokens(&setup.server).last().unwrap().clone();
    assert!(
        shown_text
            .stdout
            .contains(&format!("access_token  {token}")),
        "{}",
        shown_text.stdout
    );
    // Even then, nothing of the key or client_secret.
    assert_no_secret(
        name,
        "--show-token",
        &format!("{shown}{}", shown_text.all()),
    );
}

#[test]
/// Exit codes follow the error's category: a service's refusal 5, a server certificate not
/// trusted 2 (configuration), anything wrong with the credential file (its validity
/// included) 4. A transient failure's 7 is in crates/msi-credential/tests/it/cli_vault.rs (nobody listening).
fn token_failures_exit_by_category() {
    let setup = token_setup("pem-pkcs8");
    let ca = ca_file(&setup);
    let file = path_str(&setup.file);
    let mut secrets = Secrets::of("pem-pkcs8");

    // An Entra error answer.
    setup.server.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "Client assertion failed signature validation.",
    ));
    let text = run(
        &[
            "token",
            file,
            "--scope",
            ARM,
            "--ca-file",
            &ca,
            "--log",
            "debug",
        ],
        5,
    );
    assert!(text.stdout.is_empty(), "{}", text.stdout);
    assert!(text.stderr.contains("AADSTS700027"), "{}", text.stderr);
    setup.server.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "Client assertion failed signature validation.",
    ));
    let json = run(
        &["token", file, "--scope", ARM, "--ca-file", &ca, "--json"],
        5,
    )
    .json();
    assert_eq!(json["error"]["kind"], "token_endpoint");
    assert_eq!(json["error"]["category"], "service");
    assert_eq!(json["error"]["transient"], false);
    assert_eq!(json["error"]["file"], Value::Null);

    // Without --ca-file the test CA is not trusted: a TLS failure, not a token, and
    // configuration to fix rather than a failure to wait out.
    let untrusted = run(
        &["token", file, "--scope", ARM, "--attempts", "1", "--json"],
        2,
    )
    .json();
    assert_eq!(untrusted["error"]["kind"], "transport", "{untrusted}");
    assert_eq!(
        untrusted["error"]["category"], "configuration",
        "{untrusted}"
    );
    assert_eq!(untrusted["error"]["transient"], false, "{untrusted}");
    assert!(issued_tokens(&setup.server).is_empty());

    // An expired credential never reaches the network.
    let requests = setup.server.requests().len();
    let expired = credential_path("expired");
    let exp = run(
        &[
            "token",
            path_str(&expired),
            "--scope",
            ARM,
            "--ca-file",
            &ca,
        ],
        4,
    );
    assert!(
        exp.stderr.contains("the credential expired at"),
        "{}",
        exp.stderr
    );
    assert_eq!(setup.server.requests().len(), requests);

    // A file that does not load.
    let ec = credential_path("ec-key");
    let bad = run(&["token", path_str(&ec), "--scope", ARM, "--json"], 4).json();
    assert_eq!(bad["error"]["kind"], "unsupported_key_type");
    assert_eq!(bad["error"]["category"], "credential_file");
    assert_eq!(bad["error"]["file"], path_str(&ec));

    // An http authority without --allow-http-loopback is the file's problem.
    let dir = TempDir::new("cli-http");
    let http_file = dir.join("identity");
    let creds = load_with_endpoint("pem-pkcs8", "http://127.0.0.1:9/");
    std::fs::write(&http_file, creds.to_json().unwrap()).unwrap();
    let http = run(
        &["token", path_str(&http_file), "--scope", ARM, "--json"],
        4,
    )
    .json();
    assert_eq!(http["error"]["kind"], "invalid_field", "{http}");
    assert_eq!(http["error"]["category"], "credential_file", "{http}");
    assert!(
        http["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`authentication_endpoint`")),
        "{http}"
    );

    for t in issued_tokens(&setup.server) {
        secrets.add("access token", &t);
    }
    for out in [
        text.all(),
        json.to_string(),
        untrusted.to_string(),
        exp.all(),
        bad.to_string(),
        http.to_string(),
    ] {
        secrets.assert_absent("token failure", &out);
        assert_no_secret("ec-key", "token failure", &out);
        assert_no_secret("expired", "token failure", &out);
    }
}

// ---------------------------------------------------------------------------------------
// watch
// ---------------------------------------------------------------------------------------

/// A running `watch`, its stdout lines arriving on a channel.
struct Watcher {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Watcher {
    fn start(file: &Path, extra: &[&str]) -> Watcher {
        let mut child = std::process::Command::new(BIN)
            .args([
                "watch",
                path_str(file),
                "--debounce",
                "50ms",
                "--log",
                "info",
            ])
            .args(extra)
            .env_remove("MSI_CREDENTIAL_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn msi-credential watch");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watcher {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line matching `pred`, waiting up to [`DEADLINE`] for it.
    #[track_caller]
    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no {what} line; saw:\n{}", self.seen.join("\n"));
                }
            }
        }
    }

    /// Send SIGTERM, wait (bounded) for the exit; return the exit code and stderr.
    fn terminate(mut self) -> (Option<i32>, Vec<String>, String) {
        let pid = self.child.id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success());
        let end = Instant::now() + DEADLINE;
        let code = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(status) => break status.code(),
                None if Instant::now() > end => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("watch did not exit on SIGTERM");
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        // The rest of stdout, then stderr.
        while let Ok(line) = self.lines.recv_timeout(DEADLINE) {
            self.seen.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        (code, self.seen, stderr)
    }
}

fn fixture_json(name: &str) -> String {
    load(name).to_json().unwrap()
}

fn sha256(name: &str) -> String {
    certificate(name).thumbprint_sha256_hex()
}

#[test]
fn watch_json_reports_every_decision_of_a_rotation() {
    let dir = TempDir::new("cli-watch");
    let file = dir.join("identity");
    std::fs::write(&file, fixture_json("rotation-1")).unwrap();
    let (one, two) = (sha256("rotation-1"), sha256("rotation-2"));
    let mut w = Watcher::start(&file, &["--json"]);
    let parse = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };

    let loaded = parse(&w.wait_for("loaded", |l| l.contains("\"loaded\"")));
    assert_eq!(loaded["active"]["thumbprint_sha256"], one);
    assert_eq!(loaded["path"], path_str(&file));
    assert_eq!(time_of(&loaded["active"]["not_before"]).year(), 2026);

    // A truncated file is refused, and the active credential stays.
    let json2 = fixture_json("rotation-2");
    std::fs::write(&file, &json2[..json2.len() / 2]).unwrap();
    let invalid = parse(&w.wait_for("invalid", |l| l.contains("\"invalid\"")));
    assert_eq!(invalid["event"], "decision");
    assert_eq!(invalid["active"]["thumbprint_sha256"], one);
    let error = invalid["error"].as_str().unwrap();
    assert!(error.contains(path_str(&file)), "{error}");

    // The newer file is swapped in.
    write_temp_then_rename(&file, json2.as_bytes());
    let swapped = parse(&w.wait_for("swapped", |l| l.contains("\"swapped\"")));
    assert_eq!(swapped["active"]["thumbprint_sha256"], two);
    assert_eq!(swapped["reloads"], 1);
    assert_eq!(
        time_of(&swapped["active"]["not_before"]),
        load("rotation-2").not_before().unwrap().unwrap()
    );

    // The older file again is not newer: refused, the new one stays.
    write_temp_then_rename(&file, fixture_json("rotation-1").as_bytes());
    let older = parse(&w.wait_for("not_newer", |l| l.contains("\"not_newer\"")));
    assert_eq!(older["active"]["thumbprint_sha256"], two);
    assert_eq!(older["reloads"], 1);

    let (code, lines, stderr) = w.terminate();
    assert_eq!(code, Some(0), "stderr:\n{stderr}");
    let stopped = parse(lines.last().unwrap());
    assert_eq!(stopped["event"], "stopped");
    assert_eq!(stopped["signal"], "SIGTERM");
    // Every stdout line is one JSON object.
    for line in &lines {
        parse(line);
    }
    let all = format!("{}\n{stderr}", lines.join("\n"));
    assert!(
        stderr.contains("credential file rotated"),
        "--log info shows the library's events:\n{stderr}"
    );
    assert_no_secret("rotation-1", "watch", &all);
    assert_no_secret("rotation-2", "watch", &all);
}

#[test]
fn watch_text_shows_the_swap_and_bad_files_exit_4() {
    let dir = TempDir::new("cli-watch-text");
    let file = dir.join("identity");
    std::fs::write(&file, fixture_json("rotation-2")).unwrap();
    let mut w = Watcher::start(&file, &[]);
    let loaded = w.wait_for("loaded", |l| l.contains(" loaded "));
    assert!(loaded.contains(&sha256("rotation-2")), "{loaded}");
    write_temp_then_rename(&file, fixture_json("rotation-3").as_bytes());
    let swapped = w.wait_for("swapped", |l| l.contains(" swapped: "));
    assert!(
        swapped.contains(&format!("serving sha256 {}", sha256("rotation-3")))
            && swapped.contains("(reload #1)"),
        "{swapped}"
    );
    let (code, lines, stderr) = w.terminate();
    assert_eq!(code, Some(0), "stderr:\n{stderr}");
    assert!(
        lines.last().unwrap().ends_with("stopped by SIGTERM"),
        "{lines:?}"
    );
    let all = format!("{}\n{stderr}", lines.join("\n"));
    assert_no_secret("rotation-2", "watch text", &all);
    assert_no_secret("rotation-3", "watch text", &all);

    // A file that cannot be loaded at start ends the command at once.
    let ec = credential_path("ec-key");
    let bad = run(&["watch", path_str(&ec)], 4);
    assert!(
        bad.stderr
            .contains(&format!("credential file {}", path_str(&ec))),
        "{}",
        bad.stderr
    );
    assert_no_secret("ec-key", "watch ec-key", &bad.all());
}

#[test]
fn the_report_type_round_trips_the_fixture_times() {
    // The library side of `inspect`, against the same fixture the CLI reads.
    let creds = UserAssignedIdentityCredentials::from_path(credential_path("pem-chain")).unwrap();
    let cert = ClientCertificate::from_credentials(&creds).unwrap();
    let now = OffsetDateTime::now_utc();
    let report = msi_dataplane::inspect::CredentialReport::new(
        &creds,
        &cert,
        now,
        msi_dataplane::inspect::EXPIRES_SOON_MARGIN,
    )
    .unwrap();
    assert_eq!(report.certificate.chain_length, 3);
    assert_eq!(report.validity.not_after, cert.not_after());
    assert_eq!(report.file_times.not_before, creds.not_before().unwrap());
    let json = serde_json::to_string(&report).unwrap();
    assert_no_secret("pem-chain", "report", &json);
    assert!(!json.contains("client_secret"), "{json}");
}

// ---------------------------------------------------------------------------------------
// special files
// ---------------------------------------------------------------------------------------

/// Run with `args`, killed after `within` (a FIFO read would otherwise never return).
#[track_caller]
fn run_within(args: &[&str], within: Duration) -> Run {
    let out = cli()
        .args(args)
        .timeout(within)
        .output()
        .expect("run the binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A FIFO at `path` (released on drop by opening it for writing, so that a reader stuck
/// in `open` ends).
struct Fifo(PathBuf);

impl Fifo {
    fn make(path: &Path) -> Fifo {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        Fifo(path.to_owned())
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.0);
    }
}

#[test]
fn inspect_and_ca_file_refuse_a_fifo_or_a_device_at_once() {
    const WITHIN: Duration = Duration::from_secs(20);
    let dir = TempDir::new("cli-fifo");
    let fifo_path = dir.join("identity");
    let _fifo = Fifo::make(&fifo_path);
    let fifo = path_str(&fifo_path);

    let inspect = run_within(&["inspect", fifo, "--json"], WITHIN);
    assert_eq!(inspect.code, 4, "inspect on a FIFO\n{}", inspect.stderr);
    let json = inspect.json();
    assert_eq!(json["error"]["kind"], "not_a_regular_file", "{json}");
    assert_eq!(json["error"]["file"], fifo, "{json}");

    let good = credential_path("pem-pkcs8");
    for ca in [fifo, "/dev/zero"] {
        let run = run_within(
            &["token", path_str(&good), "--scope", ARM, "--ca-file", ca],
            WITHIN,
        );
        assert_eq!(run.code, 2, "--ca-file {ca}\n{}", run.stderr);
        assert!(
            run.stderr.contains(&format!("--ca-file {ca}: is a ")),
            "--ca-file {ca}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
    }

    // `vault list --ca-file` reads through the same bounded, regular-file-only reader: the
    // FIFO and the device are refused before any vault is contacted (port 9 is never
    // reached), where a plain read would wait on the FIFO forever or fill memory from
    // `/dev/zero`.
    #[cfg(feature = "keyvault")]
    for ca in [fifo, "/dev/zero"] {
        let started = Instant::now();
        let run = run_within(
            &[
                "vault",
                "list",
                "https://127.0.0.1:9/",
                "--credential",
                path_str(&good),
                "--ca-file",
                ca,
            ],
            WITHIN,
        );
        assert_eq!(run.code, 2, "vault list --ca-file {ca}\n{}", run.stderr);
        assert!(
            run.stderr.contains(&format!("--ca-file {ca}: is a ")),
            "--ca-file {ca}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
        eprintln!(
            "vault list --ca-file {ca}: refused in {:?}",
            started.elapsed()
        );
    }
}

// ---------------------------------------------------------------------------------------
// proxies
// ---------------------------------------------------------------------------------------

/// A "proxy" on 127.0.0.1 that must receive nothing: it counts connections and the bytes
/// sent on them, and closes each at once (so a proxied request fails fast).
struct CountingProxy {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<(usize, Vec<u8>)>>,
}

impl CountingProxy {
    fn start() -> CountingProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new((0, Vec::new())));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let mut seen = record.lock().unwrap();
                seen.0 += 1;
                seen.1.extend_from_slice(&buf[..n]);
            }
        });
        CountingProxy { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn connections(&self) -> usize {
        self.seen.lock().unwrap().0
    }
}

/// Run `args` with every proxy variable pointing at `proxy` and no `NO_PROXY`.
fn run_proxied(args: &[&str], proxy: &CountingProxy) -> Run {
    let mut cmd = cli();
    for var in [
        "NO_PROXY",
        "no_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    let url = proxy.url();
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
    ] {
        cmd.env(var, &url);
    }
    let out = cmd.args(args).output().expect("run the binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A loopback authority is never reached through a proxy from the environment: over
/// `http://` (`--allow-http-loopback`), a proxy would receive the cleartext assertion.
#[test]
fn loopback_token_requests_never_go_through_an_environment_proxy() {
    let proxy = CountingProxy::start();
    let name = "pem-pkcs8";

    // http:// loopback, the crate's shared client.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = rt.block_on(EntraServer::start_http());
    register(&http, name);
    let dir = TempDir::new("cli-proxy");
    let file = dir.join("identity");
    let json = load_with_endpoint(name, &http.base_url())
        .to_json()
        .unwrap();
    std::fs::write(&file, json).unwrap();
    let run = run_proxied(
        &[
            "token",
            path_str(&file),
            "--scope",
            ARM,
            "--allow-http-loopback",
            "--json",
        ],
        &proxy,
    );
    assert_eq!(proxy.connections(), 0, "the proxy was used: {}", run.stderr);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(http.tokens_issued(), 1);

    // https:// loopback, a client built for --ca-file.
    let setup = token_setup(name);
    let ca = ca_file(&setup);
    let run = run_proxied(
        &[
            "token",
            path_str(&setup.file),
            "--scope",
            ARM,
            "--ca-file",
            &ca,
            "--json",
        ],
        &proxy,
    );
    assert_eq!(proxy.connections(), 0, "the proxy was used: {}", run.stderr);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(setup.server.tokens_issued(), 1);
}

/// `GET /metrics` over plain HTTP/1.1; the body, once the answer is 200.
fn scrape(port: u16) -> String {
    use std::io::Write as _;
    let end = Instant::now() + DEADLINE;
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            return body.to_owned();
        }
        assert!(Instant::now() < end, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn watch_serves_metrics_that_a_prometheus_parser_accepts() {
    let dir = TempDir::new("cli-watch-metrics");
    let file = dir.join("identity");
    std::fs::write(&file, fixture_json("rotation-1")).unwrap();
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut w = Watcher::start(&file, &["--json", "--metrics", &addr]);
    w.wait_for("loaded", |l| l.contains("\"loaded\""));
    let client_id = load("rotation-1").client_id.unwrap();
    let rotation_2 = load("rotation-2");

    // A rejected file, then a swap.
    let json2 = fixture_json("rotation-2");
    std::fs::write(&file, &json2[..json2.len() / 2]).unwrap();
    w.wait_for("invalid", |l| l.contains("\"invalid\""));
    write_temp_then_rename(&file, json2.as_bytes());
    w.wait_for("swapped", |l| l.contains("\"swapped\""));

    let text = scrape(port);
    let samples = support::python::prometheus_samples(&text);
    let has = |line: &str| samples.iter().any(|s| s == line);
    let id = &client_id;
    assert!(
        has(&format!(
            "counter msi_dataplane_reloads_total{{client_id=\"{id}\",outcome=\"swapped\",reason=\"none\"}} 1.0"
        )),
        "{samples:#?}\n{text}"
    );
    assert!(
        samples.iter().any(|s| s.starts_with(&format!(
            "counter msi_dataplane_reloads_total{{client_id=\"{id}\",outcome=\"kept_last_good\",reason=\""
        ))),
        "{samples:#?}"
    );
    let not_after = rotation_2.not_after().unwrap().unwrap().unix_timestamp();
    let cert_end = certificate("rotation-2").not_after().unix_timestamp();
    let end = not_after.min(cert_end) as f64;
    assert!(
        has(&format!(
            "gauge msi_dataplane_credential_not_after_timestamp_seconds{{client_id=\"{id}\"}} {end:?}"
        )),
        "{samples:#?}"
    );
    // The help texts reach the scrape.
    assert!(
        text.contains("# HELP msi_dataplane_reloads_total "),
        "{text}"
    );
    // Prometheus's own linter accepts it (NaN gauges and all).
    support::promtool::check_metrics(&text);

    // One count per `watch --json` decision line, outcome for outcome. (A late re-read
    // settles first: the debounce is 200 ms.)
    std::thread::sleep(Duration::from_millis(1500));
    let text = scrape(port);
    support::promtool::check_metrics(&text);
    let samples = support::python::prometheus_samples(&text);
    let (code, lines, stderr) = w.terminate();
    assert_eq!(code, Some(0), "stderr:\n{stderr}");
    let decisions: Vec<String> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "decision")
        .map(|v| v["outcome"].as_str().unwrap().to_owned())
        .collect();
    let lines_of = |outcomes: &[&str]| {
        decisions
            .iter()
            .filter(|o| outcomes.contains(&o.as_str()))
            .count() as f64
    };
    let counted = |outcome: &str| -> f64 {
        let prefix = format!(
            "counter msi_dataplane_reloads_total{{client_id=\"{id}\",outcome=\"{outcome}\","
        );
        samples
            .iter()
            .filter(|s| s.starts_with(&prefix))
            .map(|s| s.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!(
        counted("swapped"),
        lines_of(&["swapped"]),
        "{decisions:?}\n{samples:#?}"
    );
    assert_eq!(
        counted("kept_last_good"),
        lines_of(&["invalid", "not_newer"]),
        "{decisions:?}\n{samples:#?}"
    );
    assert_eq!(
        counted("unchanged"),
        lines_of(&["unchanged"]),
        "{decisions:?}\n{samples:#?}"
    );

    // An address that cannot be bound: a usage error, at once.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = format!("127.0.0.1:{}", taken.local_addr().unwrap().port());
    let out = run(&["watch", path_str(&file), "--metrics", &busy], 2);
    assert!(out.all().contains("cannot serve metrics"), "{}", out.all());
}
