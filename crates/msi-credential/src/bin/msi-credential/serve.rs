//! `msi-credential serve FILE...`: serve tokens of the credential files to the other
//! containers of the pod, over the App Service managed identity protocol on loopback,
//! until SIGINT or SIGTERM; and `msi-credential probe`, its health check for Kubernetes
//! `exec` probes (kubelet's `httpGet` probes come from outside the pod and cannot reach
//! a loopback address).

use std::path::Path;
use std::time::Duration;

use msi_credential::serve::{
    IdentityHeaderSecret, PROBE_ANSWER_HEADER, PROBE_NONCE_HEADER, PROBE_PROOF_HEADER,
    ProbeChallenge, ServeError, ServeOptions, ServedIdentity, TokenServer, read_presented_secret,
};
use msi_dataplane::unstable::is_loopback_host;
use msi_dataplane::{ClientCertificateCredentialOptions, ReloadOptions, RetryPolicy};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::args::{ProbeArgs, ServeArgs};
use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render;
use crate::signals::StopSignals;

/// Run `serve`.
pub fn run(args: &ServeArgs, format: Format) -> Exit {
    // Two workers: the token server answers many connections while the credentials'
    // background work (file events, refreshes) goes on.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("msi-credential-serve")
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(serve(args, format)),
        Err(e) => {
            let message = format!("cannot start the async runtime: {e}");
            output::failure(&render::plain_error("internal", &message, format), format);
            Exit::Internal
        }
    }
}

/// The line printed once serving.
#[derive(Serialize)]
struct Serving<'a> {
    event: &'static str,
    endpoint: &'a str,
    health: &'a str,
    identities: Vec<&'a str>,
}

async fn serve(args: &ServeArgs, format: Format) -> Exit {
    let fail = |err: &ServeError| report(err, None, format);
    let mut signals = match StopSignals::install() {
        Ok(signals) => signals,
        Err(e) => {
            let message = format!("cannot install the signal handlers: {e}");
            output::failure(&render::plain_error("internal", &message, format), format);
            return Exit::Internal;
        }
    };
    let serve_options = ServeOptions::default()
        .with_listen(args.listen)
        .with_token_path(args.path.clone())
        .with_max_connections(usize::try_from(args.max_connections).unwrap_or(usize::MAX))
        .with_first_byte_timeout(args.first_byte_timeout)
        .with_idle_timeout(args.idle_timeout)
        .with_write_timeout(args.write_timeout)
        .with_max_token_requests_per_second(
            (args.max_token_requests_per_second > 0).then_some(args.max_token_requests_per_second),
        );
    if let Err(err) = serve_options.validate() {
        return fail(&err);
    }
    let _metrics = match crate::metrics::serve_if_asked(args.metrics, format).await {
        Ok(metrics) => metrics,
        Err(exit) => return exit,
    };
    let secret = match (&args.secret_file, &args.secret_env) {
        (Some(path), _) => {
            IdentityHeaderSecret::from_files(path, args.previous_secret_file.as_deref())
        }
        (None, Some(name)) => IdentityHeaderSecret::from_env(name),
        (None, None) => unreachable_secret(),
    };
    let secret = match secret {
        Ok(secret) => secret,
        Err(err) => return fail(&err),
    };
    let options = match client_options(args) {
        Ok(options) => options,
        Err(message) => {
            output::failure(&render::plain_error("usage", &message, format), format);
            return Exit::Usage;
        }
    };
    let reload = ReloadOptions::default().with_backstop_interval(args.backstop);
    let mut identities = Vec::new();
    for file in &args.files {
        match ServedIdentity::load(file, options.clone(), reload.clone()).await {
            Ok(identity) if args.allow_resources.is_empty() => identities.push(identity),
            Ok(identity) => identities
                .push(identity.with_allowed_resources(args.allow_resources.iter().cloned())),
            Err(err) => return report(&err, Some(file), format),
        }
    }
    let credentials: Vec<_> = identities.iter().map(|i| i.credential().clone()).collect();
    let client_ids: Vec<String> = identities
        .iter()
        .map(|i| i.client_id().to_owned())
        .collect();
    let server = match TokenServer::start(identities, secret, serve_options).await {
        Ok(server) => server,
        Err(err) => return fail(&err),
    };
    let (endpoint, health) = (server.endpoint(), server.health_url());
    let line = match format {
        Format::Json => serde_json::to_string(&Serving {
            event: "serving",
            endpoint: &endpoint,
            health: &health,
            identities: client_ids.iter().map(String::as_str).collect(),
        })
        .unwrap_or_default(),
        Format::Text => format!(
            "serving {} identit{} at {endpoint} (health: {health}); set IDENTITY_ENDPOINT={endpoint} \
             and IDENTITY_HEADER from the same secret in the application containers",
            client_ids.len(),
            if client_ids.len() == 1 { "y" } else { "ies" },
        ),
    };
    if let Err(exit) = output::stdout(&line) {
        return exit;
    }
    let signal = signals.recv().await;
    server.shutdown();
    for credential in credentials {
        credential.cancel();
    }
    tracing::info!(signal, "token server stopping");
    Exit::Success
}

/// A failure to set the server up: a credential's is the library's error (its file,
/// category and exit); the server's own is a configuration error (exit 2).
fn report(err: &ServeError, file: Option<&Path>, format: Format) -> Exit {
    match err.as_credential_error() {
        Some(e) => {
            output::failure(&render::error(e, file, format), format);
            Exit::for_error(e)
        }
        None => {
            let message = err.to_string();
            output::failure(
                &render::configuration_error(err.code(), &message, format),
                format,
            );
            Exit::Usage
        }
    }
}

/// clap requires one of the two; kept total without a panic.
fn unreachable_secret() -> Result<IdentityHeaderSecret, ServeError> {
    IdentityHeaderSecret::from_env("IDENTITY_HEADER")
}

/// The credentials' options from the command line; an error names the option.
fn client_options(args: &ServeArgs) -> Result<ClientCertificateCredentialOptions, String> {
    let http = crate::token::environment(
        args.ca_file.as_deref(),
        args.allow_http_loopback,
        args.timeout,
    )?;
    // The clients retry what is worth retrying themselves: few retries here, so a
    // failure reaches them quickly.
    let retry = RetryPolicy::default()
        .with_max_attempts(args.attempts)
        .with_max_total(Duration::from_secs(10));
    Ok(ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(retry))
        .with_max_cached_scopes(usize::try_from(args.max_cached_resources).unwrap_or(usize::MAX)))
}

/// Run `probe`: GET the health URL (loopback only, no proxy); exit 0 when it answers 200,
/// 7 otherwise (not ready, not reachable, or, given the secret, a server that does not
/// prove it holds it: the secret itself is never sent).
pub fn probe(args: &ProbeArgs, format: Format) -> Exit {
    let runtime = match crate::runtime() {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let url = match url::Url::parse(&args.url) {
        Ok(url) if url.scheme() == "http" && url.host().is_some_and(|h| is_loopback_host(&h)) => {
            url
        }
        _ => {
            let message = format!(
                "--url {}: an http:// URL on a loopback address is needed",
                args.url
            );
            output::failure(&render::plain_error("usage", &message, format), format);
            return Exit::Usage;
        }
    };
    let challenge = match probe_secret(args) {
        Ok(secret) => secret.map(|secret| ProbeChallenge::new(&secret, unix_now())),
        Err(err) => return report(&err, None, format),
    };
    let challenge = match challenge.transpose() {
        Ok(challenge) => challenge,
        Err(err) => return report(&err, None, format),
    };
    let answer = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(args.timeout)
            .build()
            .map_err(|e| e.to_string())?;
        let mut request = client.get(url.clone());
        if let Some(challenge) = &challenge {
            request = request
                .header(PROBE_NONCE_HEADER, challenge.nonce())
                .header(PROBE_PROOF_HEADER, challenge.proof());
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let proof = response.headers().get(PROBE_ANSWER_HEADER).cloned();
        let body = response.bytes().await.unwrap_or_default();
        Ok::<_, String>((status, proof, body))
    });
    let (status, body) = match answer {
        Ok((status, proof, body)) => {
            let proven =
                |c: &ProbeChallenge| proof.is_some_and(|p| c.verifies(status, &body, p.as_bytes()));
            if challenge.as_ref().is_some_and(|c| !proven(c)) {
                let message = format!(
                    "the server on {} did not prove it holds the secret (another process \
                     may hold the port, or its secret differs)",
                    url.authority()
                );
                output::failure(
                    &render::plain_error("unauthorized", &message, format),
                    format,
                );
                return Exit::Transient;
            }
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(e) => {
            let message = format!("the token server does not answer: {e}");
            output::failure(&render::plain_error("transient", &message, format), format);
            return Exit::Transient;
        }
    };
    if status == 200 {
        let _ = output::stdout(body.trim());
        return Exit::Success;
    }
    let message = format!("not ready (HTTP {status}): {}", body.trim());
    output::failure(&render::plain_error("transient", &message, format), format);
    Exit::Transient
}

fn unix_now() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The secret the probe proves it knows, if it was given one (checked as the server
/// checks it; never sent, never printed).
fn probe_secret(args: &ProbeArgs) -> Result<Option<Zeroizing<String>>, ServeError> {
    match (&args.secret_file, &args.secret_env) {
        (Some(path), _) => read_presented_secret(path).map(Some),
        (None, Some(name)) => {
            IdentityHeaderSecret::from_env(name)?;
            Ok(std::env::var(name).ok().map(Zeroizing::new))
        }
        (None, None) => Ok(None),
    }
}
