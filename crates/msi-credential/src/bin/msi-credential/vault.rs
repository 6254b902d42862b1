//! `msi-credential vault list VAULT_URL --credential FILE` (features `cli` + `keyvault`):
//! the stored credentials of a vault with their renewal state, a text row printed as its
//! page arrives and the count last. Only properties are listed (Key Vault's listing
//! carries no values), so no secret value can be printed. The listing is bounded by the
//! store's limits (pages, items, bytes, a deadline).

use std::sync::Arc;

use msi_dataplane::keyvault::renewal::{RenewalState, renewal_state};
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, RetryPolicy,
    UserAssignedIdentityCredentials,
};
use serde::Serialize;
use time::OffsetDateTime;

use crate::args::VaultListArgs;
use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render;

/// One stored credential as `vault list` prints it.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub name: String,
    pub state: &'static str,
    pub detail: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_before: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires: Option<OffsetDateTime>,
    pub renew_after: Option<String>,
    pub cannot_renew_after: Option<String>,
}

/// One stored credential's row at `now`.
fn listed(p: &msi_dataplane::keyvault::renewal::StoredProperties, now: OffsetDateTime) -> Listed {
    let state = renewal_state(p, now);
    let detail = match &state {
        RenewalState::Current { renew_after } => {
            format!("renew after {}", msi_dataplane::rfc3339(*renew_after))
        }
        RenewalState::Due { renew_after } => {
            format!("renewal due since {}", msi_dataplane::rfc3339(*renew_after))
        }
        RenewalState::Unusable(why) => why.to_string(),
        RenewalState::Untracked { reason } => reason.clone(),
    };
    Listed {
        name: p.name.clone(),
        state: state.code(),
        detail,
        not_before: p.not_before,
        expires: p.expires,
        renew_after: p.tags.get("renew_after").cloned(),
        cannot_renew_after: p.tags.get("cannot_renew_after").cloned(),
    }
}

/// Run `vault list`.
pub fn list(args: &VaultListArgs, format: Format) -> Exit {
    let fail_err = |err: &msi_dataplane::Error| {
        output::failure(&render::error(err, None, format), format);
        Exit::for_error(err)
    };
    let creds = match UserAssignedIdentityCredentials::from_path(&args.credential) {
        Ok(creds) => creds,
        Err(err) => return fail_err(&err),
    };
    let retry = RetryPolicy::default().with_max_attempts(args.attempts);
    let mut options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_retry_policy(retry.clone()));
    let mut store_options = StoreOptions::default()
        .verify_challenge_resource(!args.no_verify_challenge_resource)
        .with_environment(Environment::default().with_retry_policy(retry));
    if let Some(path) = &args.ca_file {
        // The library's reader: a regular file of at most 1 MiB (a FIFO or `/dev/zero`
        // is refused, not read). One read serves the credential and the store.
        let http = match Environment::default().with_extra_root_certificates_file(path) {
            Ok(http) => http,
            Err(e) => {
                let message = format!("--ca-file {}: {}", path.display(), e.kind());
                output::failure(&render::plain_error("usage", &message, format), format);
                return Exit::Usage;
            }
        };
        options = options.with_environment(http.clone());
        store_options = store_options.with_environment(http);
    }
    let credential = match ClientCertificateCredential::new(&creds, options) {
        Ok(c) => c,
        Err(err) => return fail_err(&err),
    };
    let store = match CredentialStore::new(&args.vault_url, Arc::new(credential), store_options) {
        Ok(s) => s,
        Err(err) => return fail_err(&err),
    };
    let runtime = match crate::runtime() {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    // Text rows are printed as their page arrives (nothing is held but the row); JSON is
    // one object, written once the listing ended (the store bounds its items and bytes).
    let now = OffsetDateTime::now_utc();
    let mut rows: Vec<Listed> = Vec::new();
    let mut written: Result<(), Exit> = Ok(());
    let listing = runtime.block_on(store.list_with(|p| {
        let row = listed(&p, now);
        match format {
            Format::Json => rows.push(row),
            Format::Text if written.is_ok() => {
                written =
                    output::stdout(&format!("{:<40} {:<9} {}", row.name, row.state, row.detail));
            }
            Format::Text => {}
        }
    }));
    let count = match listing {
        Ok(count) => count,
        Err(err) => return fail_err(&err),
    };
    if let Err(exit) = written {
        return exit;
    }
    let text = match format {
        Format::Json => {
            serde_json::json!({ "vault_url": store.vault_url(), "credentials": rows }).to_string()
        }
        Format::Text => format!("{count} stored credential(s) in {}", store.vault_url()),
    };
    match output::stdout(&text) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}
