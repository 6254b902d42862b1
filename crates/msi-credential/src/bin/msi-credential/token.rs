//! `msi-credential token FILE --scope S`: get one access token and print its expiry.
//!
//! The token itself is put in the output only with `--show-token`: [`TokenOutput`] holds
//! it as an `Option` that stays `None` otherwise, so no rendering can print it by mistake.

use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, Error,
    RetryPolicy, UserAssignedIdentityCredentials,
};
use time::OffsetDateTime;

use crate::args::TokenArgs;
use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render::{self, TokenOutput};

/// Run the command.
pub fn run(args: &TokenArgs, format: Format) -> Exit {
    let fail = |err: &Error| {
        output::failure(&render::error(err, Some(&args.file), format), format);
        Exit::for_error(err)
    };
    let creds = match UserAssignedIdentityCredentials::from_path(&args.file) {
        Ok(creds) => creds,
        Err(err) => return fail(&err),
    };
    let options = match client_options(args) {
        Ok(options) => options,
        Err(message) => {
            output::failure(&render::plain_error("usage", &message, format), format);
            return Exit::Usage;
        }
    };
    let credential = match ClientCertificateCredential::new(&creds, options) {
        Ok(credential) => credential,
        Err(err) => return fail(&err),
    };
    let runtime = match crate::runtime() {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let scopes: Vec<&str> = args.scopes.iter().map(String::as_str).collect();
    let token = match runtime.block_on(credential.get_token(&scopes)) {
        Ok(token) => token,
        Err(err) => return fail(&err),
    };
    let now = OffsetDateTime::now_utc();
    let out = TokenOutput {
        client_id: credential.client_id().to_owned(),
        tenant_id: credential.tenant_id().to_owned(),
        token_url: credential.token_url().to_owned(),
        scopes: args.scopes.clone(),
        expires_on: token.expires_on(),
        expires_in_seconds: (token.expires_on() - now).whole_seconds(),
        refresh_on: token.refresh_on(),
        thumbprint_sha256: credential.certificate().thumbprint_sha256_hex(),
        access_token: args.show_token.then(|| token.token().to_owned()),
    };
    match output::stdout(&render::token(&out, format)) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}

/// The credential's options from the command line; an error names the option.
fn client_options(args: &TokenArgs) -> Result<ClientCertificateCredentialOptions, String> {
    let http = environment(
        args.ca_file.as_deref(),
        args.allow_http_loopback,
        args.timeout,
    )?;
    Ok(
        ClientCertificateCredentialOptions::default().with_environment(
            http.with_retry_policy(RetryPolicy::default().with_max_attempts(args.attempts)),
        ),
    )
}

/// The HTTP options of `--ca-file`, `--allow-http-loopback` and `--timeout` (`token` and
/// `serve`); an error names the option.
pub fn environment(
    ca_file: Option<&std::path::Path>,
    allow_http_loopback: bool,
    timeout: std::time::Duration,
) -> Result<Environment, String> {
    let mut http = Environment::default()
        .allow_http_loopback(allow_http_loopback)
        .with_request_timeout(timeout)
        .map_err(|e| format!("--timeout: {}", e.kind()))?;
    if let Some(path) = ca_file {
        // The library's reader: a regular file of at most 1 MiB (a FIFO or `/dev/zero`
        // is refused, not read).
        http = http
            .with_extra_root_certificates_file(path)
            .map_err(|e| format!("--ca-file {}: {}", path.display(), e.kind()))?;
    }
    Ok(http)
}
