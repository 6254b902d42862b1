//! `ReloadStatus` and `ReloadOutcome` as a health endpoint shows them: JSON with RFC 3339
//! times and errors as `{code, message, transient}`, one line of text, and equality.
//! Real files, a real reloading credential, a real refused file; no secret in any form.

use crate::support;

use std::sync::Arc;

use msi_dataplane::{
    Error, ErrorKind, ManualClock, ReloadOptions, ReloadOutcome, UserAssignedIdentityCredential,
};
use serde_json::Value;
use support::atomic_writer::{TempDir, write_temp_then_rename};
use support::fixtures::{credential_path, load};
use support::harness::{https_env, options};
use time::macros::datetime;

const MARKER: &str = "SECRETMARKERd2hhdGV2ZXI";

#[tokio::test]
async fn status_serializes_displays_and_compares_without_secrets() {
    let dir = TempDir::new("status");
    let path = dir.join("uami-credential");
    std::fs::copy(credential_path("rotation-1"), &path).expect("copy fixture");
    let clock = Arc::new(ManualClock::new(datetime!(2026-03-04 05:06:07.89 UTC)));
    let cred = UserAssignedIdentityCredential::new(
        &path,
        options().with_environment(https_env().with_clock(clock.clone())),
        ReloadOptions::default().with_watch(false),
    )
    .await
    .expect("new");

    let s0 = cred.status();
    assert_eq!(s0, cred.status());
    let json: Value = serde_json::to_value(&s0).expect("serialize");
    assert_eq!(json["path"], path.to_string_lossy().as_ref());
    assert_eq!(json["loaded_at"], "2026-03-04T05:06:07Z");
    let nb = json["not_before"].as_str().expect("not_before");
    assert_eq!(
        time::OffsetDateTime::parse(nb, &time::format_description::well_known::Rfc3339)
            .expect("RFC 3339"),
        s0.not_before.replace_nanosecond(0).unwrap()
    );
    assert_eq!(json["thumbprint_sha256"], s0.thumbprint_sha256.as_str());
    assert_eq!(json["last_check"], Value::Null);
    assert_eq!(json["last_outcome"], Value::Null);
    assert_eq!(json["last_error"], Value::Null);
    assert_eq!(json["reloads"], 0);
    assert_eq!(json["watching"], false);
    let line = s0.to_string();
    assert!(line.contains(&s0.thumbprint_sha256), "{line}");
    assert!(
        line.contains("since 2026-03-04T05:06:07Z), 0 reloads, not watching"),
        "{line}"
    );
    assert!(!line.contains("last check"), "{line}");

    // A refused file (newer, so that its bundle is decoded): its client_secret (a
    // credential) must not reach any rendering.
    let mut bad = load("rotation-2");
    bad.client_secret = Some(format!("{MARKER}!!not base64").into());
    write_temp_then_rename(&path, bad.to_json().expect("to_json").as_bytes());
    clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(cred.check_now().await, ReloadOutcome::Invalid);
    let s1 = cred.status();
    let err = s1.last_error.clone().expect("last_error");
    let json: Value = serde_json::to_value(&s1).expect("serialize");
    assert_eq!(json["last_outcome"], "invalid");
    assert_eq!(json["last_check"], "2026-03-04T05:07:07Z");
    assert_eq!(json["last_error"]["code"], err.kind().code());
    assert_eq!(json["last_error"]["message"], err.to_string());
    assert_eq!(json["last_error"]["transient"], false);
    let line = s1.to_string();
    assert!(
        line.contains(&format!(
            "last check 2026-03-04T05:07:07Z: invalid ({}: ",
            err.kind().code()
        )),
        "{line}"
    );
    for rendered in [json.to_string(), line, format!("{s1:?}")] {
        assert!(!rendered.contains(MARKER), "secret in {rendered}");
    }

    // Equality: field by field, errors by code and message.
    assert_ne!(s1, s0);
    assert_eq!(s1, s1.clone());
    let mut other = s1.clone();
    other.last_error = Some(Error::from(ErrorKind::File {
        code: "file_too_large",
        field: None,
        message: "is 2 bytes; credential files over 1 bytes are refused".into(),
    }));
    assert_ne!(other, s1);
    let mut none = s1.clone();
    none.last_error = None;
    assert_ne!(none, s1);

    assert_eq!(ReloadOutcome::NotNewer.to_string(), "not_newer");
    assert_eq!(
        serde_json::to_value(ReloadOutcome::Swapped).unwrap(),
        "swapped"
    );
}
