//! `msi-credential watch FILE`: follow a credential file through rotations and print
//! every reload decision as it happens, until SIGINT or SIGTERM.
//!
//! The decisions come from [`UserAssignedIdentityCredential::subscribe`]: each re-read
//! updates the status (`last_check`, `last_outcome`, ...), and each update with a new
//! `last_check` is one line. The status channel keeps only the latest value, so two
//! re-reads finishing before this loop wakes would show as one line; the `reloads`
//! counter in every line stays exact.

use msi_dataplane::{
    ClientCertificateCredentialOptions, ReloadOptions, ReloadOutcome, ReloadStatus,
    UserAssignedIdentityCredential,
};
use time::OffsetDateTime;

use crate::args::WatchArgs;
use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render::{self, Active, WatchEvent};
use crate::signals::StopSignals;

/// Run the command.
pub fn run(args: &WatchArgs, format: Format) -> Exit {
    match crate::runtime() {
        Ok(runtime) => runtime.block_on(watch(args, format)),
        Err(exit) => exit,
    }
}

async fn watch(args: &WatchArgs, format: Format) -> Exit {
    let mut signals = match StopSignals::install() {
        Ok(signals) => signals,
        Err(e) => {
            let message = format!("cannot install the signal handlers: {e}");
            output::failure(&render::plain_error("internal", &message, format), format);
            return Exit::Internal;
        }
    };
    let _metrics = match crate::metrics::serve_if_asked(args.metrics, format).await {
        Ok(metrics) => metrics,
        Err(exit) => return exit,
    };
    let options = ClientCertificateCredentialOptions::default();
    let reload = ReloadOptions::default()
        .with_backstop_interval(args.backstop)
        .with_debounce(args.debounce)
        .with_watch(!args.no_watch);
    let credential = match UserAssignedIdentityCredential::new(&args.file, options, reload).await {
        Ok(credential) => credential,
        Err(err) => {
            output::failure(&render::error(&err, Some(&args.file), format), format);
            return Exit::for_error(&err);
        }
    };
    let mut updates = credential.subscribe();
    let mut seen = updates.borrow_and_update().clone();
    let emit = |event: WatchEvent| output::stdout(&render::watch_event(&event, format));
    let loaded = WatchEvent::Loaded {
        at: seen.loaded_at,
        path: seen.path.clone(),
        active: active(&seen),
        watching: seen.watching,
    };
    if let Err(exit) = emit(loaded) {
        return exit;
    }
    let exit = loop {
        tokio::select! {
            changed = updates.changed() => {
                if changed.is_err() {
                    break Exit::Internal;
                }
                let next = updates.borrow_and_update().clone();
                let written = events(&seen, &next).into_iter().try_for_each(emit);
                seen = next;
                if let Err(exit) = written {
                    break exit;
                }
            }
            signal = signals.recv() => {
                let stopped = WatchEvent::Stopped { at: OffsetDateTime::now_utc(), signal };
                break match emit(stopped) {
                    Ok(()) => Exit::Success,
                    Err(exit) => exit,
                };
            }
        }
    };
    credential.cancel();
    exit
}

/// Pure: the lines that one status update calls for.
pub fn events(before: &ReloadStatus, after: &ReloadStatus) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    if let Some(at) = after.last_check
        && after.last_check != before.last_check
    {
        out.push(WatchEvent::Decision {
            at,
            outcome: if after.last_new_file {
                outcome_name(after.last_outcome)
            } else {
                // The file decided on before, read again: no new decision (and not
                // counted again in the metrics).
                "unchanged"
            },
            reloads: after.reloads,
            active: active(after),
            error: after.last_error.as_ref().map(ToString::to_string),
        });
    }
    if after.watching != before.watching {
        out.push(WatchEvent::Watching {
            at: OffsetDateTime::now_utc(),
            watching: after.watching,
        });
    }
    out
}

fn active(status: &ReloadStatus) -> Active {
    Active {
        not_before: status.not_before,
        not_after: status.not_after,
        thumbprint_sha256: status.thumbprint_sha256.clone(),
    }
}

fn outcome_name(outcome: Option<ReloadOutcome>) -> &'static str {
    match outcome {
        Some(ReloadOutcome::Swapped) => "swapped",
        Some(ReloadOutcome::Unchanged) => "unchanged",
        Some(ReloadOutcome::NotNewer) => "not_newer",
        Some(ReloadOutcome::Invalid) => "invalid",
        Some(_) => "other",
        None => "none",
    }
}
