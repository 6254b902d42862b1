//! Exit codes: one per outcome a script may want to tell apart.

use std::process::ExitCode;

use msi_dataplane::{Error, ErrorCategory};

/// The `--help` section listing the exit codes (also in the crate docs of `main.rs`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success: inspect found no problem, token got a token, watch or serve was stopped
     by a signal, probe found the token server ready
  1  inspect found warnings only: the credential works now but needs attention
  2  usage or configuration: invalid command line, an option value that cannot be used
     (e.g. --ca-file), a setting the library refused (e.g. a vault URL), or a server
     certificate not trusted (give its CA with --ca-file)
  3  inspect found errors: the credential cannot get a token now (expired, not yet valid,
     unusable authority)
  4  the credential file is unusable: unreadable, not JSON, missing keys, unusable
     certificate bundle, outside its validity (the message names the file and the field)
  5  a service refused: an error answer from the token endpoint or Key Vault, or an
     answer that cannot be used (or that breaks HTTP)
  6  internal failure: the async runtime, a signal handler, or writing the output
  7  transient failure: a connection refused, reset or closed early, a timeout, or HTTP
     408, 429, 500, 502, 503, 504 (after the retries); trying again later may succeed;
     probe: the token server is not ready or not answering

Environment:
  MSI_CREDENTIAL_LOG  the --log filter";

/// How the program ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0.
    Success,
    /// 1: `inspect` found warnings only.
    Warnings,
    /// 2: the command line cannot be acted upon.
    Usage,
    /// 3: `inspect` found errors.
    Errors,
    /// 4: the credential file is unusable.
    InvalidCredential,
    /// 5: a service refused or failed.
    ServiceFailed,
    /// 6: the tool itself failed.
    Internal,
    /// 7: a transient failure.
    Transient,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Warnings => 1,
            Exit::Usage => 2,
            Exit::Errors => 3,
            Exit::InvalidCredential => 4,
            Exit::ServiceFailed => 5,
            Exit::Internal => 6,
            Exit::Transient => 7,
        }
    }

    /// Pure: the exit for a library error, from its category (what the user should do).
    /// Building the HTTP client is the tool's own failure.
    pub fn for_error(err: &Error) -> Exit {
        if err.kind().code() == "http_client" {
            return Exit::Internal;
        }
        match err.category() {
            ErrorCategory::Transient => Exit::Transient,
            ErrorCategory::Configuration => Exit::Usage,
            ErrorCategory::CredentialFile => Exit::InvalidCredential,
            _ => Exit::ServiceFailed,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_documented_once() {
        let all = [
            Exit::Success,
            Exit::Warnings,
            Exit::Usage,
            Exit::Errors,
            Exit::InvalidCredential,
            Exit::ServiceFailed,
            Exit::Internal,
            Exit::Transient,
        ];
        for (i, exit) in all.iter().enumerate() {
            assert_eq!(usize::from(exit.code()), i);
            let line = format!("\n  {}  ", exit.code());
            assert_eq!(EXIT_CODES_HELP.matches(&line).count(), 1, "{exit:?}");
        }
    }

    #[test]
    fn a_service_failure_is_not_a_credential_file_failure() {
        let file = msi_dataplane::UserAssignedIdentityCredentials::from_slice(b"{}").unwrap_err();
        assert_eq!(Exit::for_error(&file), Exit::InvalidCredential);
        let unknown_cloud = msi_dataplane::Cloud::from_name("Mars").unwrap_err();
        assert_eq!(Exit::for_error(&unknown_cloud), Exit::Usage);
    }
}
