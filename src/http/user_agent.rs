//! The `User-Agent` every request of the crate carries, in the Azure SDKs' form:
//! `[<application id> ]azsdk-rust-msi-dataplane/<version> (<OS>; <ARCH>)`.
//!
//! azure_core's `UserAgentPolicy` sends `azsdk-rust-<crate>/<version> (<rustc version>;
//! <OS>; <ARCH>)`, with the rustc version taken by a build script. This crate has no build
//! script, so its platform part leaves the rustc version out: `(<OS>; <ARCH>)`, from
//! `std::env::consts`. An application id is checked as azure_core checks it (at most 24
//! characters, RFC 9110 token characters only), but refused with an error rather than a
//! panic.

use std::sync::LazyLock;

use reqwest::header::HeaderValue;

use crate::error::{Error, Result};
use crate::http::is_tchar;
use crate::untrusted_text::quoted_input;

/// The longest application id accepted (azure_core's limit, from the Azure SDK
/// guidelines' telemetry rules).
pub(crate) const MAX_APPLICATION_ID_LEN: usize = 24;

/// The crate's own product and platform, built once:
/// `azsdk-rust-msi-dataplane/<version> (<OS>; <ARCH>)`.
static BASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "azsdk-rust-{}/{} ({}; {})",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
});

/// The crate's `User-Agent` without an application id.
pub(crate) fn base() -> &'static str {
    &BASE
}

/// The `User-Agent` value for an application id (already checked by
/// [`check_application_id`]) or none.
pub(crate) fn header_value(application_id: Option<&str>) -> HeaderValue {
    let text = match application_id {
        Some(id) => format!("{id} {}", base()),
        None => base().to_owned(),
    };
    // Every character is ASCII and visible (OS and ARCH names, a checked id), so this
    // never falls back; the fallback still names the crate.
    HeaderValue::from_str(&text).unwrap_or_else(|_| {
        HeaderValue::from_static(concat!(
            "azsdk-rust-",
            env!("CARGO_PKG_NAME"),
            "/",
            env!("CARGO_PKG_VERSION")
        ))
    })
}

/// `Ok` when `id` is a usable application id: 1 to [`MAX_APPLICATION_ID_LEN`]
/// characters, each an RFC 9110 `tchar` (letters, digits and `` !#$%&'*+-.^_`|~ ``; no
/// space, no `/`).
///
/// # Errors
///
/// `invalid_option` naming `application_id`.
pub(crate) fn check_application_id(id: &str) -> Result<()> {
    let refuse = |reason: String| Error::invalid_option("application_id", reason);
    if id.is_empty() {
        return Err(refuse("is empty".into()));
    }
    if !id.bytes().all(is_tchar) {
        return Err(refuse(format!(
            "`{}` has a character that is not an RFC 9110 token character (letters, \
             digits and !#$%&'*+-.^_`|~; no space or `/`)",
            quoted_input(id)
        )));
    }
    if id.len() > MAX_APPLICATION_ID_LEN {
        return Err(refuse(format!(
            "`{}` is {} characters long; at most {MAX_APPLICATION_ID_LEN} are allowed",
            quoted_input(id),
            id.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCategory, ErrorKind};

    #[test]
    fn the_value_is_the_azure_sdk_form_without_the_rustc_version() {
        let expected = format!(
            "azsdk-rust-msi-dataplane/{} ({}; {})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        );
        assert_eq!(base(), expected);
        assert_eq!(header_value(None).to_str().unwrap(), expected);
        assert_eq!(
            header_value(Some("myapp")).to_str().unwrap(),
            format!("myapp {expected}")
        );
    }

    #[test]
    fn application_ids_follow_azure_core_rules() {
        for good in [
            "myapp",
            "my_app",
            "my-custom-app-2.1.0",
            "exactly_24_characters!!!",
            "a",
            "!#$%&'*+-.^_`|~",
        ] {
            check_application_id(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "",
            "invalid application id",
            "myapp/1.0",
            "tab\there",
            "new\nline",
            "caf\u{e9}",
            "(comment)",
            "this_application_id_is_way_too_long",
            "exactly_25_characters!!!!",
        ] {
            let err = check_application_id(bad).unwrap_err();
            assert!(
                matches!(
                    err.kind(),
                    ErrorKind::Config {
                        code: "invalid_option",
                        field: "application_id",
                        ..
                    }
                ),
                "{bad:?}: {err:?}"
            );
            assert_eq!(err.kind().code(), "invalid_option");
            assert_eq!(err.category(), ErrorCategory::Configuration);
            let text = err.to_string();
            assert!(text.contains("application_id"), "{text}");
            assert!(!text.contains('\n') && !text.contains('\t'), "{text}");
        }
    }

    #[test]
    fn a_long_refused_id_is_quoted_only_in_part() {
        let long = "x".repeat(200);
        let err = check_application_id(&long).unwrap_err().to_string();
        assert!(!err.contains(&long), "{err}");
        assert!(err.contains("200 characters"), "{err}");
    }
}
