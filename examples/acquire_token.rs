//! The main job: a credential file in, an access token out.
//!
//! With no arguments: loads `fixtures/credentials/pem-pkcs8.json`, starts the
//! Entra-compatible test server on 127.0.0.1 (HTTPS, test CA; it verifies the assertion's
//! signature, thumbprint, chain, audience, issuer and times as Entra does), and gets a
//! token for `https://management.azure.com/.default` from it.
//!
//! With `--file PATH`: loads that credential file and talks to its real
//! `authentication_endpoint`; no local server.
//!
//! Options: `--scope SCOPE` (default ARM), `--rs256` (RS256 + `x5t` instead of PS256 +
//! `x5t#S256`). It prints the token's expiry and the decoded assertion header and claims;
//! never the signature, the token, or key material.
//!
//! ```text
//! cargo run --example acquire_token
//! cargo run --example acquire_token -- --file /mnt/certs/my-identity
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use msi_dataplane::{
    AssertionAlgorithm, ClientCertificateCredential, ClientCertificateCredentialOptions,
    Environment, UserAssignedIdentityCredentials, rfc3339,
};
use msi_dataplane_testing::EntraServer;

const ARM_SCOPE: &str = "https://management.azure.com/.default";
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/credentials/pem-pkcs8.json"
);
const FIXTURE_LEAF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/certs/pem-pkcs8.leaf.pem"
);

struct Args {
    file: Option<PathBuf>,
    scope: String,
    algorithm: AssertionAlgorithm,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        file: None,
        scope: ARM_SCOPE.to_owned(),
        algorithm: AssertionAlgorithm::Ps256,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--file" => args.file = Some(it.next().ok_or("--file needs a path")?.into()),
            "--scope" => args.scope = it.next().ok_or("--scope needs a value")?,
            "--rs256" => args.algorithm = AssertionAlgorithm::Rs256,
            "-h" | "--help" => {
                return Err("usage: acquire_token [--file PATH] [--scope SCOPE] [--rs256]".into());
            }
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let options =
        ClientCertificateCredentialOptions::default().with_assertion_algorithm(args.algorithm);
    let (credential, server) = match &args.file {
        Some(path) => {
            let creds = UserAssignedIdentityCredentials::from_path(path)?;
            println!("credential file   {}", path.display());
            (ClientCertificateCredential::new(&creds, options)?, None)
        }
        None => {
            let server = EntraServer::start().await;
            let mut creds = UserAssignedIdentityCredentials::from_path(FIXTURE)?;
            let (client_id, tenant_id) = (
                creds.client_id.clone().unwrap_or_default(),
                creds.tenant_id.clone().unwrap_or_default(),
            );
            server.register_certificate_file(&client_id, &tenant_id, FIXTURE_LEAF);
            creds.authentication_endpoint = Some(server.base_url());
            let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem())?;
            let http = reqwest::Client::builder()
                .tls_certs_only([ca])
                .redirect(reqwest::redirect::Policy::none())
                .build()?;
            println!("credential file   {FIXTURE}");
            println!(
                "token endpoint    local Entra-compatible server at {} (test CA)",
                server.base_url()
            );
            (
                ClientCertificateCredential::new(
                    &creds,
                    options.with_environment(Environment::default().with_http_client(http)),
                )?,
                Some(server),
            )
        }
    };

    let cert = credential.certificate();
    println!("client id         {}", credential.client_id());
    println!("token url         {}", credential.token_url());
    println!("leaf subject      {}", cert.subject()?);
    println!("leaf SHA-256      {}", cert.thumbprint_sha256_hex());
    println!(
        "leaf valid        {} .. {}",
        rfc3339(cert.not_before()),
        rfc3339(cert.not_after())
    );
    println!(
        "chain / key       {} certificate(s), RSA {} bits",
        cert.chain().len(),
        cert.key_bits()
    );

    let token = credential.get_token(&[args.scope.as_str()]).await?;
    println!();
    println!("token for         {}", args.scope);
    println!("token expires on  {}", rfc3339(token.expires_on()));
    if let Some(refresh) = token.refresh_on() {
        println!("refresh on        {refresh}");
    }
    println!(
        "token             ({} characters, not shown)",
        token.token().len()
    );

    if let Some(server) = &server {
        let issued = server
            .issued(token.token())
            .ok_or("the local server did not issue this token")?;
        println!();
        println!(
            "server verified   alg {}, signed by the registered leaf {}",
            issued.alg, issued.cert_sha256_hex
        );
        if let Some(req) = server.requests().last() {
            println!(
                "                  aud == request URL: {}",
                req.aud.as_deref() == Some(req.expected_aud.as_str())
            );
        }
    }

    // The assertion's header and claims, decoded (a fresh one: each request signs anew).
    let assertion = credential.client_assertion()?;
    let mut parts = assertion.expose_secret().split('.');
    let (Some(header), Some(claims)) = (parts.next(), parts.next()) else {
        return Err("malformed assertion".into());
    };
    let mut header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header)?)?;
    if let Some(x5c) = header.get_mut("x5c").and_then(|v| v.as_array_mut()) {
        for cert in x5c.iter_mut() {
            let len = cert.as_str().map(str::len).unwrap_or_default();
            *cert = serde_json::Value::String(format!("<base64 DER, {len} chars>"));
        }
    }
    let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims)?)?;
    println!();
    println!(
        "assertion header  {}",
        serde_json::to_string_pretty(&header)?
    );
    println!(
        "assertion claims  {}",
        serde_json::to_string_pretty(&claims)?
    );
    println!("(signature not shown)");
    Ok(())
}
