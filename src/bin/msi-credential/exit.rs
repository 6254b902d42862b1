//! Exit codes: one per outcome a script may want to tell apart.

use std::process::ExitCode;

/// The `--help` section listing the exit codes (also in the crate docs of `main.rs`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success: inspect found no problem, token got a token, watch was stopped by a signal
  1  inspect found warnings only: the credential works now but needs attention
  2  usage: invalid command line, or an option value that cannot be used (e.g. --ca-file)
  3  inspect found errors: the credential cannot get a token now (expired, not yet valid,
     unusable authority)
  4  the credential file cannot be loaded: unreadable, not JSON, missing keys, unusable
     certificate bundle (the message names the file and the field)
  5  token: the token request failed (credential outside its validity, transport or TLS
     failure, error answer from the token endpoint)
  6  internal failure: the async runtime, a signal handler, or writing the output

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
    /// 4: the credential file cannot be loaded.
    InvalidCredential,
    /// 5: the token request failed.
    TokenFailed,
    /// 6: the tool itself failed.
    Internal,
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
            Exit::TokenFailed => 5,
            Exit::Internal => 6,
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
            Exit::TokenFailed,
            Exit::Internal,
        ];
        for (i, exit) in all.iter().enumerate() {
            assert_eq!(usize::from(exit.code()), i);
            let line = format!("\n  {}  ", exit.code());
            assert_eq!(EXIT_CODES_HELP.matches(&line).count(), 1, "{exit:?}");
        }
    }
}
