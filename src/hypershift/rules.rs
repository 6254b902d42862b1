//! The naming rules the HyperShift helpers check, as pure functions: each returns why a
//! value breaks its rule, if it does.

use crate::keyvault::validate_secret_name;
use crate::untrusted_text::quoted_input;

/// A naming rule: why a value breaks it, if it does.
pub(super) type Rule = fn(&str) -> Option<String>;

/// Why `value` is not a usable name or path at all, if it is not: empty, surrounding
/// whitespace, control characters (NUL included).
pub(super) fn text_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        Some("is empty".to_owned())
    } else if value.chars().any(char::is_control) {
        Some(format!(
            "{value:?} contains a control character (NUL, newline, ...)"
        ))
    } else if value.trim() != value {
        Some(format!("{value:?} has leading or trailing whitespace"))
    } else {
        None
    }
}

/// Why `name` cannot be the name of a file in the credential mount, if it cannot.
pub(super) fn bare_name_problem(name: &str) -> Option<String> {
    if let Some(problem) = text_problem(name) {
        Some(problem)
    } else if name.contains('/') {
        Some(format!("{name:?} contains `/`; a file name is expected"))
    } else if name == "." || name == ".." {
        Some(format!("{name:?} is not a file name"))
    } else if name.len() > 255 {
        Some(format!(
            "is {} bytes long; file names are at most 255 bytes",
            name.len()
        ))
    } else {
        None
    }
}

/// Key Vault's rule for vault names: 3 to 24 of `0-9`, `a-z`, `A-Z`, `-`; a letter first,
/// a letter or digit last, no `--`.
pub(super) fn key_vault_name_problem(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let ok = (3..=24).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && !name.contains("--");
    (!ok).then(|| {
        format!(
            "`{}` is not a Key Vault name (3 to 24 letters, digits and `-`, starting with a \
             letter, ending with a letter or digit, no `--`)",
            quoted_input(name)
        )
    })
}

/// Key Vault's rule for secret names ([`validate_secret_name`]): 1 to 127 of `0-9`,
/// `a-z`, `A-Z`, `-`.
pub(super) fn secret_name_problem(name: &str) -> Option<String> {
    validate_secret_name(name).err().map(|e| e.to_string())
}

/// A GUID in its usual form: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, hex digits.
pub(super) fn guid_problem(value: &str) -> Option<String> {
    (!crate::file::model::is_guid(value)).then(|| {
        let shown = quoted_input(value);
        format!("`{shown}` is not a GUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)")
    })
}

/// An invalid Kubernetes object, naming the field.
#[cfg(feature = "k8s")]
pub(super) fn check(field: &'static str, problem: Option<String>) -> crate::error::Result<()> {
    match problem {
        Some(reason) => {
            let message = format!("invalid {field}: {reason}");
            Err(crate::error::Error::config(
                "invalid_kubernetes_object",
                field,
                message,
            ))
        }
        None => Ok(()),
    }
}

/// Kubernetes' DNS-1123 label (volume names, namespaces): 1 to 63 of `a-z`, `0-9`, `-`,
/// starting and ending with a letter or digit.
#[cfg(feature = "k8s")]
pub(super) fn dns1123_label_problem(value: &str) -> Option<String> {
    dns1123_problem(value, 63, false)
}

/// Kubernetes' DNS-1123 subdomain (object names): at most 253 characters, dot-separated
/// labels.
#[cfg(feature = "k8s")]
pub(super) fn dns1123_subdomain_problem(value: &str) -> Option<String> {
    dns1123_problem(value, 253, true)
}

#[cfg(feature = "k8s")]
fn dns1123_problem(value: &str, max: usize, dots: bool) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label = |part: &str| {
        part.starts_with(alnum)
            && part.ends_with(alnum)
            && part.chars().all(|c| alnum(c) || c == '-')
    };
    let what = if dots { "subdomain" } else { "label" };
    let dot = if dots { " and `.`" } else { "" };
    if value.is_empty() {
        Some("is empty".to_owned())
    } else if value.len() > max {
        let len = value.len();
        Some(format!(
            "{value:?} is {len} characters; at most {max} are allowed"
        ))
    } else if !value.split('.').all(label) || (!dots && value.contains('.')) {
        Some(format!(
            "{value:?} is not a DNS-1123 {what} (lower-case letters, digits and `-`{dot}, \
             each part starting and ending with a letter or digit)"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "k8s")]
    #[test]
    fn dns1123_labels() {
        for ok in ["a", "cpo-cert", "a1", "0a", &"a".repeat(63)] {
            assert_eq!(dns1123_label_problem(ok), None, "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64), "é"] {
            assert!(dns1123_label_problem(bad).is_some(), "{bad}");
        }
    }

    #[cfg(feature = "k8s")]
    #[test]
    fn dns1123_subdomains() {
        for ok in ["managed-azure-cpo", "a.b-c.d", &"a".repeat(253)] {
            assert_eq!(dns1123_subdomain_problem(ok), None, "{ok}");
        }
        for bad in ["", ".", "a.", ".a", "a..b", "A", "a.-b", &"a".repeat(254)] {
            assert!(dns1123_subdomain_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn key_vault_names() {
        for ok in [
            "abc",
            "demo-mi-kv",
            "A1-b2",
            &format!("a{}", "b".repeat(23)),
        ] {
            assert_eq!(key_vault_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "ab",
            "1abc",
            "abc-",
            "ab--c",
            "ab_c",
            &format!("a{}", "b".repeat(24)),
        ] {
            assert!(key_vault_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn guids() {
        assert_eq!(guid_problem("72f988bf-86f1-41af-91ab-2d7cd011db47"), None);
        assert_eq!(guid_problem("72F988BF-86F1-41AF-91AB-2D7CD011DB47"), None);
        for bad in [
            "",
            "tenant-id",
            "72f988bf86f141af91ab2d7cd011db47",
            "{72f988bf-86f1-41af-91ab-2d7cd011db47}",
            "72f988bf-86f1-41af-91ab-2d7cd011db4g",
            "72f988bf-86f1-41af-91ab-2d7cd011db47 ",
        ] {
            assert!(guid_problem(bad).is_some(), "{bad}");
        }
    }
}
