//! The Key Vault storage format (writer side), as Go's
//! `FormatUserAssignedIdentityCredentialsForStorage` produces it.

use crate::support;

use msi_dataplane::dataplane::ManagedIdentityCredentials;
use msi_dataplane::keyvault::{
    self, CANNOT_RENEW_AFTER_TAG, MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX, RENEW_AFTER_TAG,
    USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX,
};
use msi_dataplane::{ErrorCategory, ErrorKind, UserAssignedIdentityCredentials};
use support::fixtures::{load, secret};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";

fn rfc3339(s: &Option<String>) -> OffsetDateTime {
    OffsetDateTime::parse(s.as_deref().unwrap(), &Rfc3339).unwrap()
}

#[test]
fn prefixes_and_tags_are_the_go_reference_s() {
    assert_eq!(USER_ASSIGNED_IDENTITY_CREDENTIALS_STORAGE_PREFIX, "uamsi-");
    assert_eq!(MANAGED_IDENTITY_CREDENTIALS_STORAGE_PREFIX, "msi-");
    assert_eq!(RENEW_AFTER_TAG, "renew_after");
    assert_eq!(CANNOT_RENEW_AFTER_TAG, "cannot_renew_after");
    assert_eq!(
        keyvault::identifier_for_user_assigned_identity_credentials(ID),
        format!("uamsi-{ID}")
    );
    assert_eq!(
        keyvault::identifier_for_managed_identity_credentials(ID),
        format!("msi-{ID}")
    );
}

#[test]
fn a_fixture_formats_to_name_value_attributes_and_tags() {
    for name in ["pem-pkcs8", "pfx-aes", "rotation-2"] {
        let creds = load(name);
        let secret = keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(secret.name(), format!("uamsi-{ID}"));
        let attributes = secret.attributes();
        assert!(attributes.enabled);
        assert_eq!(attributes.expires, rfc3339(&creds.not_after), "{name}");
        assert_eq!(attributes.not_before, rfc3339(&creds.not_before), "{name}");
        assert_eq!(secret.tags().len(), 2);
        assert_eq!(
            Some(&secret.tags()["renew_after"]),
            creds.renew_after.as_ref()
        );
        assert_eq!(
            Some(&secret.tags()["cannot_renew_after"]),
            creds.cannot_renew_after.as_ref()
        );
        // The value is the credential JSON: it parses back to the same credentials.
        let back =
            UserAssignedIdentityCredentials::from_slice(secret.value().expose_secret().as_bytes())
                .unwrap();
        assert_eq!(back, creds, "{name}");
    }
}

#[test]
fn the_set_secret_body_is_key_vault_s_rest_shape() {
    let creds = load("pem-pkcs8");
    let secret =
        keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds).unwrap();
    let body = secret.set_secret_body().unwrap();
    let json: serde_json::Value = serde_json::from_str(body.expose_secret()).unwrap();
    let object = json.as_object().unwrap();
    let mut keys: Vec<_> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["attributes", "tags", "value"]);
    assert_eq!(json["value"], secret.value().expose_secret());
    assert_eq!(json["attributes"]["enabled"], true);
    assert_eq!(
        json["attributes"]["nbf"],
        rfc3339(&creds.not_before).unix_timestamp()
    );
    assert_eq!(
        json["attributes"]["exp"],
        rfc3339(&creds.not_after).unix_timestamp()
    );
    assert_eq!(
        json["tags"]["renew_after"],
        creds.renew_after.clone().unwrap()
    );
    assert_eq!(
        json["tags"]["cannot_renew_after"],
        creds.cannot_renew_after.clone().unwrap()
    );
    assert_eq!(format!("{body:?}"), "** redacted **");
}

#[test]
fn each_missing_time_is_named() {
    type Clear = fn(&mut UserAssignedIdentityCredentials);
    let cases: [(&str, Clear); 4] = [
        ("not_after", |c| c.not_after = None),
        ("not_before", |c| c.not_before = None),
        ("renew_after", |c| c.renew_after = None),
        ("cannot_renew_after", |c| c.cannot_renew_after = None),
    ];
    for (field, clear) in cases {
        let mut creds = load("pem-pkcs8");
        clear(&mut creds);
        let err = keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds)
            .unwrap_err();
        match err.kind() {
            ErrorKind::Config {
                code: "missing_storage_time",
                field: seen,
                ..
            } => {
                assert_eq!(*seen, field)
            }
            other => panic!("{field}: {other}"),
        }
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn a_time_that_is_not_rfc3339_is_named() {
    let mut creds = load("pem-pkcs8");
    creds.renew_after = Some("next tuesday".into());
    let err =
        keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("renew_after"),
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn secret_names_follow_key_vault_s_rule() {
    let ok = [ID, "a", "cloud-provider", &"x".repeat(127 - "uamsi-".len())];
    for identifier in ok {
        let name = keyvault::identifier_for_user_assigned_identity_credentials(identifier);
        keyvault::validate_secret_name(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let bad = [
        ("", "is empty"),
        ("a_b", "letters, digits"),
        ("a.b", "letters, digits"),
        ("a/b", "letters, digits"),
        ("é", "letters, digits"),
    ];
    for (name, reason) in bad {
        let err = keyvault::validate_secret_name(name).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "invalid_secret_name",
                    ..
                }
            ),
            "{name}"
        );
        assert!(err.to_string().contains(reason), "{name}: {err}");
    }
    let long = "x".repeat(128);
    assert!(keyvault::validate_secret_name(&long).is_err());

    let creds = load("pem-pkcs8");
    let err = keyvault::format_user_assigned_identity_credentials_for_storage("bad id", &creds)
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Config { code: "invalid_secret_name", message, .. } if message.contains("`uamsi-bad id`"))
    );
    let err =
        keyvault::format_user_assigned_identity_credentials_for_storage(&"x".repeat(122), &creds)
            .unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::Config {
            code: "invalid_secret_name",
            ..
        }
    ));
}

#[test]
fn the_secret_never_prints() {
    let creds = load("pem-pkcs8");
    let client_secret = secret("pem-pkcs8");
    let formatted =
        keyvault::format_user_assigned_identity_credentials_for_storage(ID, &creds).unwrap();
    let debug = format!("{formatted:?} {formatted:#?} {:?}", formatted.value());
    for slice in [
        &client_secret[..40],
        &client_secret[client_secret.len() - 40..],
    ] {
        assert!(!debug.contains(slice), "{debug}");
    }
    assert!(debug.contains(&format!("uamsi-{ID}")), "{debug}");
}

// ---- `msi-`: ManagedIdentityCredentials as the data plane returns them ----

/// Managed identity credentials whose top level is `top` and whose explicit identities are
/// the fixtures named.
fn managed(top: &str, explicit: &[&str]) -> ManagedIdentityCredentials {
    let mut value = serde_json::to_value(load(top)).unwrap();
    value.as_object_mut().unwrap().remove("resource_id");
    if !explicit.is_empty() {
        value["explicit_identities"] = explicit
            .iter()
            .map(|name| serde_json::to_value(load(name)).unwrap())
            .collect();
    }
    serde_json::from_value(value).unwrap()
}

#[test]
fn managed_identity_times_come_from_the_top_level_without_explicit_identities() {
    let creds = managed("pem-pkcs8", &[]);
    let secret = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap();
    assert_eq!(secret.name(), format!("msi-{ID}"));
    assert_eq!(
        secret.attributes().expires,
        rfc3339(&creds.identity.not_after)
    );
    assert_eq!(
        secret.attributes().not_before,
        rfc3339(&creds.identity.not_before)
    );
    assert_eq!(
        Some(&secret.tags()["renew_after"]),
        creds.identity.renew_after.as_ref()
    );
    assert_eq!(
        Some(&secret.tags()["cannot_renew_after"]),
        creds.identity.cannot_renew_after.as_ref()
    );
    // The value is the compact JSON of the whole object, absent fields omitted.
    let value = secret.value().expose_secret();
    assert_eq!(value, creds.to_json().unwrap());
    assert!(!value.contains(' ') && !value.contains("null"), "{value}");
    let back: ManagedIdentityCredentials = serde_json::from_str(value).unwrap();
    assert_eq!(back, creds);
}

#[test]
fn managed_identity_times_come_from_the_single_explicit_identity() {
    // rotation-1's times differ from pem-pkcs8's at the top level.
    let creds = managed("pem-pkcs8", &["rotation-1"]);
    let one = load("rotation-1");
    assert_ne!(creds.identity.not_before, one.not_before);
    let secret = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap();
    assert_eq!(secret.attributes().not_before, rfc3339(&one.not_before));
    assert_eq!(secret.attributes().expires, rfc3339(&one.not_after));
    assert_eq!(
        Some(&secret.tags()["renew_after"]),
        one.renew_after.as_ref()
    );
    // The explicit identity's times are required even if the top level has them.
    let mut creds = creds;
    creds.explicit_identities.as_mut().unwrap()[0].renew_after = None;
    let err = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "missing_storage_time",
                field: "renew_after",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn two_explicit_identities_are_an_error() {
    let creds = managed("pem-pkcs8", &["rotation-1", "rotation-2"]);
    let err = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "invalid_argument",
                field: "credentials",
                ..
            }
        ),
        "{err}"
    );
    // The caller's value: the program's configuration, not a credential file to replace.
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(err.to_string().contains("holds 2 identities"), "{err}");
}

#[test]
fn managed_identity_bad_or_missing_times_are_named() {
    let mut creds = managed("pem-pkcs8", &[]);
    creds.identity.not_before = Some("2026-13-01".into());
    let err = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("not_before"),
                ..
            }
        ),
        "{err}"
    );
    let mut creds = managed("pem-pkcs8", &[]);
    creds.identity.cannot_renew_after = None;
    let err = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "missing_storage_time",
                field: "cannot_renew_after",
                ..
            }
        ),
        "{err}"
    );
    // The managed secret's value never prints either.
    let creds = managed("pem-pkcs8", &[]);
    let formatted = keyvault::format_managed_identity_credentials_for_storage(ID, &creds).unwrap();
    assert!(!format!("{formatted:?}").contains(&secret("pem-pkcs8")[..40]));
}
