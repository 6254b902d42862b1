//! The cloud table: names, aliases, endpoints, custom clouds, `.default` scopes.

use msi_dataplane::{Cloud, ErrorKind, default_scope};

/// The documented table, row by row: every name, then authority host, ARM endpoint, ARM
/// audience.
const TABLE: [(&[&str], &str, &str, &str); 3] = [
    (
        &["AzurePublicCloud", "AzureCloud"],
        "https://login.microsoftonline.com/",
        "https://management.azure.com",
        "https://management.core.windows.net/",
    ),
    (
        &["AzureUSGovernmentCloud", "AzureUSGovernment"],
        "https://login.microsoftonline.us/",
        "https://management.usgovcloudapi.net",
        "https://management.core.usgovcloudapi.net/",
    ),
    (
        &["AzureChinaCloud"],
        "https://login.chinacloudapi.cn/",
        "https://management.chinacloudapi.cn",
        "https://management.core.chinacloudapi.cn/",
    ),
];

#[test]
fn every_name_and_alias_resolves_to_its_row_in_any_case() {
    for (names, authority, arm, audience) in TABLE {
        for name in names {
            for spelling in [name.to_string(), name.to_lowercase(), name.to_uppercase()] {
                let cloud: Cloud = spelling
                    .parse()
                    .unwrap_or_else(|e| panic!("{spelling}: {e}"));
                assert_eq!(cloud.name(), names[0], "{spelling}: canonical name");
                assert_eq!(cloud.authority_host(), authority, "{spelling}");
                assert_eq!(cloud.resource_manager_endpoint(), arm, "{spelling}");
                assert_eq!(cloud.resource_manager_audience(), audience, "{spelling}");
                assert!(cloud.is_well_known());
                assert_eq!(cloud.to_string(), names[0]);
            }
        }
    }
}

#[test]
fn constants_and_well_known_match_the_table() {
    let constants = [
        Cloud::AZURE_PUBLIC,
        Cloud::AZURE_US_GOVERNMENT,
        Cloud::AZURE_CHINA,
    ];
    assert_eq!(Cloud::well_known(), constants);
    for (cloud, (names, ..)) in constants.iter().zip(TABLE) {
        assert_eq!(&Cloud::from_name(names[0]).unwrap(), cloud);
    }
    assert_eq!(Cloud::default(), Cloud::AZURE_PUBLIC);
}

#[test]
fn unknown_names_are_errors_not_the_public_cloud() {
    for name in [
        "",
        "  ",
        "AzureGermanCloud",
        "AzurePublic",
        "public",
        "AzureStackCloud",
        "AzureCloud2",
    ] {
        let err = Cloud::from_name(name).unwrap_err();
        match err.kind() {
            ErrorKind::Config {
                code: "unknown_cloud",
                message,
                ..
            } => {
                assert!(
                    message.starts_with(&format!("unknown cloud `{name}`;")),
                    "{message}"
                )
            }
            other => panic!("{name:?}: {other}"),
        }
        let message = err.to_string();
        assert!(message.contains("AzureUSGovernmentCloud"), "{message}");
        assert!(!err.is_transient());
    }
}

#[test]
fn arm_scope_is_the_default_scope_of_the_audience() {
    assert_eq!(
        Cloud::AZURE_PUBLIC.resource_manager_scope(),
        "https://management.core.windows.net/.default"
    );
    assert_eq!(
        Cloud::AZURE_CHINA.resource_manager_scope(),
        "https://management.core.chinacloudapi.cn/.default"
    );
}

#[test]
fn default_scope_handles_slashes_and_existing_suffixes() {
    let cases = [
        (
            "https://vault.azure.net",
            "https://vault.azure.net/.default",
        ),
        (
            "https://vault.azure.net/",
            "https://vault.azure.net/.default",
        ),
        (
            "https://storage.azure.com//",
            "https://storage.azure.com/.default",
        ),
        ("api://0000-1111", "api://0000-1111/.default"),
        (
            " https://graph.microsoft.com ",
            "https://graph.microsoft.com/.default",
        ),
        (
            "https://management.azure.com/.default",
            "https://management.azure.com/.default",
        ),
    ];
    for (resource, scope) in cases {
        assert_eq!(default_scope(resource), scope, "{resource}");
    }
}

#[test]
fn custom_clouds_normalise_and_validate_their_urls() {
    let cloud = Cloud::custom(
        "AzureStackHub",
        "https://login.stack.example",
        "https://management.stack.example//",
        "https://management.stack.example/",
    )
    .unwrap();
    assert_eq!(cloud.name(), "AzureStackHub");
    assert_eq!(cloud.authority_host(), "https://login.stack.example/");
    assert_eq!(
        cloud.resource_manager_endpoint(),
        "https://management.stack.example"
    );
    assert_eq!(
        cloud.resource_manager_scope(),
        "https://management.stack.example/.default"
    );
    assert!(!cloud.is_well_known());

    let bad = [
        (("", "https://a", "https://b", "https://c"), "name"),
        (
            ("X", "http://a", "https://b", "https://c"),
            "authority_host",
        ),
        (
            ("X", "https://a", "management.example", "https://c"),
            "resource_manager_endpoint",
        ),
        (
            ("X", "https://a", "https://b", "https://c?x=1"),
            "resource_manager_audience",
        ),
        (
            ("X", "https://a#f", "https://b", "https://c"),
            "authority_host",
        ),
        (
            ("X", "https://a", "https://b", "not a url"),
            "resource_manager_audience",
        ),
    ];
    for ((name, authority, arm, audience), field) in bad {
        let err = Cloud::custom(name, authority, arm, audience).unwrap_err();
        match err.kind() {
            ErrorKind::Config {
                code: "invalid_cloud",
                field: seen,
                ..
            } => {
                assert_eq!(*seen, field, "{name} {authority} {arm} {audience}")
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn a_custom_cloud_with_a_known_cloud_s_values_is_that_cloud() {
    let copy = Cloud::custom(
        "AzurePublicCloud",
        "https://login.microsoftonline.com/",
        "https://management.azure.com",
        "https://management.core.windows.net/",
    )
    .unwrap();
    assert_eq!(copy, Cloud::AZURE_PUBLIC);
    assert!(copy.is_well_known());
}

#[test]
fn the_cloud_of_an_authentication_endpoint_is_found_by_host() {
    let cases = [
        (
            "https://login.microsoftonline.com/",
            Some(Cloud::AZURE_PUBLIC),
        ),
        (
            "https://LOGIN.microsoftonline.com",
            Some(Cloud::AZURE_PUBLIC),
        ),
        (
            "https://login.microsoftonline.com/some/path/",
            Some(Cloud::AZURE_PUBLIC),
        ),
        (
            "https://login.microsoftonline.us/",
            Some(Cloud::AZURE_US_GOVERNMENT),
        ),
        ("https://login.chinacloudapi.cn/", Some(Cloud::AZURE_CHINA)),
        ("http://login.microsoftonline.com/", None),
        ("https://eastus.login.microsoft.com/", None),
        ("https://127.0.0.1:8443/", None),
        ("not a url", None),
    ];
    for (endpoint, cloud) in cases {
        assert_eq!(Cloud::for_authority(endpoint), cloud, "{endpoint}");
    }
}
