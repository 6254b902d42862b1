//! The credential file model: parsing, validation, round trip, limits.

use crate::support;

use msi_dataplane::limits::MAX_CREDENTIAL_FILE_BYTES;
use msi_dataplane::{ErrorKind, UserAssignedIdentityCredentials};
use support::fixtures::{GOOD, credential_path, load};

#[test]
fn every_key_round_trips_to_the_same_json() {
    for name in GOOD.iter().chain(["expired", "ec-key"].iter()) {
        let bytes = std::fs::read(credential_path(name)).unwrap();
        let original: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let creds = UserAssignedIdentityCredentials::from_slice(&bytes).unwrap();
        let again: serde_json::Value = serde_json::from_str(&creds.to_json().unwrap()).unwrap();
        assert_eq!(original, again, "{name}");
    }
}

#[test]
fn all_fields_are_read() {
    let creds = load("pem-pkcs8");
    assert_eq!(
        creds.authentication_endpoint.as_deref(),
        Some("https://login.microsoftonline.com/")
    );
    assert_eq!(
        creds.client_id.as_deref(),
        Some("7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d")
    );
    assert_eq!(
        creds.tenant_id.as_deref(),
        Some("72f988bf-86f1-41af-91ab-2d7cd011db47")
    );
    assert!(creds.client_secret.is_some());
    assert!(
        creds
            .client_secret_url
            .as_deref()
            .unwrap()
            .contains("vault.azure.net")
    );
    assert!(creds.mtls_authentication_endpoint.is_some());
    assert!(creds.object_id.is_some());
    assert!(
        creds
            .resource_id
            .as_deref()
            .unwrap()
            .contains("userAssignedIdentities")
    );
    let claims = creds.custom_claims.as_ref().unwrap();
    assert_eq!(claims.xms_az_tm.as_deref(), Some("azureplatform"));
    assert_eq!(claims.xms_az_nwperimid.as_ref().unwrap().len(), 1);
    let nb = creds.not_before().unwrap().unwrap();
    let na = creds.not_after().unwrap().unwrap();
    let renew = creds.renew_after().unwrap().unwrap();
    let cannot = creds.cannot_renew_after().unwrap().unwrap();
    assert!(nb < renew && renew < na && cannot == na);
}

#[test]
fn unknown_keys_are_ignored() {
    let creds = UserAssignedIdentityCredentials::from_slice(
        br#"{"authentication_endpoint":"https://a/","client_id":"7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d","tenant_id":"t","client_secret":"s","future_key":{"x":1}}"#,
    )
    .unwrap();
    assert_eq!(
        creds.client_id.as_deref(),
        Some("7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d")
    );
}

#[test]
fn every_missing_required_key_is_named_at_once() {
    let err = UserAssignedIdentityCredentials::from_slice(b"{}").unwrap_err();
    assert_eq!(err.kind().code(), "missing_fields");
    let message = err.to_string();
    assert_eq!(
        message,
        "missing required key(s): authentication_endpoint, client_id, tenant_id, client_secret"
    );
    for key in [
        "authentication_endpoint",
        "client_id",
        "tenant_id",
        "client_secret",
    ] {
        assert!(message.contains(key), "{message}");
    }
    let err =
        UserAssignedIdentityCredentials::from_slice(br#"{"client_id":"c","client_secret":"s"}"#)
            .unwrap_err();
    assert_eq!(err.kind().code(), "missing_fields");
    assert_eq!(
        err.to_string(),
        "missing required key(s): authentication_endpoint, tenant_id"
    );
}

#[test]
fn camel_case_keys_are_called_out() {
    let json = br#"{"authenticationEndpoint":"https://login.microsoftonline.com/","clientId":"c","tenantId":"t","clientSecret":"SECRETBASE64","notBefore":"2026-01-01T00:00:00Z"}"#;
    let err = UserAssignedIdentityCredentials::from_slice(json).unwrap_err();
    assert_eq!(err.kind().code(), "camel_case_keys");
    let message = err.to_string();
    assert_eq!(
        message,
        "found camelCase key(s) `authenticationEndpoint`, `clientId`, `clientSecret`, \
         `notBefore`, `tenantId`; credential files use snake_case keys (e.g. \
         `authentication_endpoint`, `client_id`, `client_secret`, `not_before`, `tenant_id`)"
    );
    assert!(message.contains("snake_case"), "{message}");
    assert!(message.contains("camelCase"), "{message}");
    assert!(!message.contains("SECRETBASE64"), "{message}");
}

#[test]
fn empty_required_value_and_bad_tenant_and_bad_time() {
    let err = UserAssignedIdentityCredentials::from_slice(
        br#"{"authentication_endpoint":"https://a/","client_id":" ","tenant_id":"t","client_secret":"s"}"#,
    )
    .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("client_id"),
                ..
            }
        ),
        "{err}"
    );

    let err = UserAssignedIdentityCredentials::from_slice(
        br#"{"authentication_endpoint":"https://a/","client_id":"7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d","tenant_id":"../evil","client_secret":"s"}"#,
    )
    .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("tenant_id"),
                ..
            }
        ),
        "{err}"
    );

    let err = UserAssignedIdentityCredentials::from_slice(
        br#"{"authentication_endpoint":"https://a/","client_id":"7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d","tenant_id":"t","client_secret":"s","not_before":"last tuesday"}"#,
    )
    .unwrap_err();
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
}

#[test]
fn json_errors_have_position_and_no_values() {
    let err = UserAssignedIdentityCredentials::from_slice(b"{\n  \"client_id\": \"c\",\n  oops\n}")
        .unwrap_err();
    assert_eq!(err.kind().code(), "json");
    assert!(
        err.to_string()
            .starts_with("invalid JSON at line 3, column "),
        "{err}"
    );
    // A wrong type echoes no value.
    let err = UserAssignedIdentityCredentials::from_slice(br#"{"custom_claims":"TOPSECRETVALUE"}"#)
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::File { code: "json", .. }));
    assert!(!err.to_string().contains("TOPSECRETVALUE"), "{err}");
    // Truncated file.
    let bytes = std::fs::read(credential_path("pem-pkcs8")).unwrap();
    let err = UserAssignedIdentityCredentials::from_slice(&bytes[..bytes.len() / 2]).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::File { code: "json", .. }));
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let big = vec![b' '; MAX_CREDENTIAL_FILE_BYTES as usize + 1];
    let err = UserAssignedIdentityCredentials::from_slice(&big).unwrap_err();
    assert_eq!(err.kind().code(), "file_too_large");
    let (size, limit) = (MAX_CREDENTIAL_FILE_BYTES + 1, MAX_CREDENTIAL_FILE_BYTES);
    assert_eq!(
        err.to_string(),
        format!("is {size} bytes; credential files over {limit} bytes are refused")
    );

    let dir = std::env::temp_dir().join(format!("msi-dp-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.json");
    std::fs::write(&path, &big).unwrap();
    let err = UserAssignedIdentityCredentials::from_path(&path).unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::File {
            code: "file_too_large",
            ..
        }
    ));
    assert_eq!(err.path(), Some(path.as_path()));
    assert!(err.to_string().contains("big.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn path_errors_name_the_file() {
    let path = credential_path("does-not-exist");
    let err = UserAssignedIdentityCredentials::from_path(&path).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io { .. }));
    assert!(err.to_string().contains("does-not-exist.json"), "{err}");

    let dir = std::env::temp_dir().join(format!("msi-dp-model2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("camel.json");
    std::fs::write(&path, br#"{"clientId":"c"}"#).unwrap();
    let err = UserAssignedIdentityCredentials::from_path(&path).unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::File {
            code: "camel_case_keys",
            ..
        }
    ));
    assert_eq!(err.path(), Some(path.as_path()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn to_json_of_an_accepted_file_is_always_accepted_again() {
    // Found by the fuzz crate's review: pretty-printed output of a large accepted file
    // could exceed the 1 MiB limit. Compact output is never larger than the input.
    let mut json = String::from(
        r#"{"authentication_endpoint":"https://login.microsoftonline.com/","client_id":"7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d","tenant_id":"t","client_secret":"QQ==","custom_claims":{"xms_az_nwperimid":["#,
    );
    json.push_str(&vec!["\"\""; 110_000].join(","));
    json.push_str("]}}");
    let creds = UserAssignedIdentityCredentials::from_slice(json.as_bytes()).unwrap();
    let out = creds.to_json().unwrap();
    assert!(out.len() <= json.len());
    assert_eq!(
        UserAssignedIdentityCredentials::from_slice(out.as_bytes()).unwrap(),
        creds
    );
}

/// A bundle's base64 pasted into the wrong key: the file is refused, and no error quotes
/// more than a short prefix of it (a whole bundle in `inspect`, `watch`, `status()` or a
/// WARN log would be key material on a terminal).
#[test]
fn a_secret_in_the_wrong_key_is_refused_without_being_echoed() {
    let bundle = load("pem-pkcs8")
        .client_secret
        .unwrap()
        .expose_secret()
        .to_owned();
    assert!(bundle.len() > 1_000);
    let good: serde_json::Value =
        serde_json::from_slice(&std::fs::read(credential_path("pem-pkcs8")).unwrap()).unwrap();
    for field in [
        "client_id",
        "object_id",
        "resource_id",
        "not_before",
        "not_after",
        "renew_after",
        "cannot_renew_after",
    ] {
        let mut file = good.clone();
        file[field] = serde_json::json!(bundle);
        let err =
            UserAssignedIdentityCredentials::from_slice(file.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::File { code: "invalid_field", field: Some(f), .. } if *f == field),
            "{field}: {err}"
        );
        for text in [err.to_string(), format!("{err:?}")] {
            // 41 characters of the bundle, anywhere in the message, would be too many.
            let leaked = bundle
                .as_bytes()
                .windows(41)
                .step_by(7)
                .any(|w| text.contains(std::str::from_utf8(w).unwrap()));
            assert!(!leaked, "{field}: {text}");
            assert!(text.len() < 400, "{field}: {} bytes: {text}", text.len());
        }
    }
}

#[test]
fn ids_have_their_known_shapes() {
    let good: serde_json::Value =
        serde_json::from_slice(&std::fs::read(credential_path("pem-pkcs8")).unwrap()).unwrap();
    for (field, value) in [
        ("client_id", "not-a-guid"),
        ("client_id", "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7"),
        ("client_id", "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7dz"),
        ("object_id", "0e2f6a1c5b7d4e3f8a9b1c2d3e4f5a6b"),
        ("resource_id", "rg/identity"),
        ("resource_id", "/subscriptions/s/with space"),
    ] {
        let mut file = good.clone();
        file[field] = serde_json::json!(value);
        let err =
            UserAssignedIdentityCredentials::from_slice(file.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::File { code: "invalid_field", field: Some(f), .. } if *f == field),
            "{field}={value}: {err}"
        );
    }
    // Upper-case GUIDs and a resource id in any case pass.
    let mut file = good.clone();
    file["client_id"] = serde_json::json!("7C6A1E2B-3F4D-4B8A-9C1E-2D3F4A5B6C7D");
    file["resource_id"] = serde_json::json!("/SUBSCRIPTIONS/s/resourceGroups/g");
    UserAssignedIdentityCredentials::from_slice(file.to_string().as_bytes()).unwrap();
}
