//! `msi-credential inspect FILE`: load, inspect ([`CredentialReport`], a pure function of
//! the file and `now` in the library), print, and choose the exit code.

use msi_dataplane::inspect::CredentialReport;
use msi_dataplane::inspect::Severity;
use time::OffsetDateTime;

use crate::args::InspectArgs;
use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render;

/// Run the command.
pub fn run(args: &InspectArgs, format: Format) -> Exit {
    let now = OffsetDateTime::now_utc();
    let margin = std::time::Duration::from_secs(u64::from(args.warn_days) * crate::args::DAY);
    match CredentialReport::from_path(&args.file, now, margin) {
        Err(err) => {
            output::failure(&render::error(&err, Some(&args.file), format), format);
            Exit::for_error(&err)
        }
        Ok(report) => match output::stdout(&render::inspect(&args.file, &report, format)) {
            Ok(()) => exit_for(&report),
            Err(exit) => exit,
        },
    }
}

/// Pure: errors exit 3, warnings 1, otherwise (info or nothing) 0.
pub fn exit_for(report: &CredentialReport) -> Exit {
    match report.worst() {
        Some(Severity::Error) => Exit::Errors,
        Some(Severity::Warning) => Exit::Warnings,
        _ => Exit::Success,
    }
}
