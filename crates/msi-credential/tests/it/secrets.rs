//! The command line prints no secret of a malformed credential file: every run of 40
//! characters of the key, its base64 or its DER is absent from `inspect` and `watch`
//! output, in text and JSON.

use crate::support::malformed::{credential_json, malformed_bundles, runs_for};

#[test]
fn malformed_bundles_leave_no_secret_in_cli_output() {
    let dir = std::env::temp_dir().join(format!("msi-dp-malformed-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (index, (what, bundle)) in malformed_bundles().into_iter().enumerate() {
        let path = dir.join(format!("identity-{index}"));
        std::fs::write(&path, credential_json(&bundle, None)).unwrap();
        let runs = runs_for(&bundle);
        for args in [
            &["inspect"][..],
            &["inspect", "--json"],
            &["watch"],
            &["watch", "--json"],
        ] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_msi-credential"))
                .args(args)
                .arg(&path)
                .env_remove("MSI_CREDENTIAL_LOG")
                .output()
                .unwrap();
            assert!(!out.status.success(), "{what}: {args:?} succeeded");
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                text.contains("identity-"),
                "{what}: {args:?} names no file:\n{text}"
            );
            runs.assert_absent(&format!("{what}: msi-credential {args:?}"), &text);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
