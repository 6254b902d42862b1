//! `UserAssignedIdentityCredentials::from_slice` on arbitrary bytes.
//!
//! Must never panic. When the bytes parse, the credential must survive a round trip
//! through `to_json` unchanged, and its typed time accessors must agree with `validate`
//! (which already parsed every time that is present).
#![no_main]

use libfuzzer_sys::fuzz_target;
use msi_dataplane::UserAssignedIdentityCredentials;

fuzz_target!(|data: &[u8]| {
    let Ok(creds) = UserAssignedIdentityCredentials::from_slice(data) else {
        return;
    };
    let times = accessors(&creds);

    let json = creds
        .to_json()
        .expect("to_json failed on a credential that from_slice accepted");
    let again = UserAssignedIdentityCredentials::from_slice(json.as_bytes())
        .expect("from_slice refused the output of to_json");
    assert_eq!(
        creds, again,
        "the to_json round trip changed the credential"
    );
    assert_eq!(
        times,
        accessors(&again),
        "the round trip changed a parsed time"
    );
    assert_eq!(
        json,
        again.to_json().expect("second to_json failed"),
        "to_json is not stable across a round trip"
    );
});

/// The four typed times. `from_slice` validated them, so each accessor must succeed.
fn accessors(creds: &UserAssignedIdentityCredentials) -> [Option<time::OffsetDateTime>; 4] {
    [
        creds
            .not_before()
            .expect("not_before() failed after validate()"),
        creds
            .not_after()
            .expect("not_after() failed after validate()"),
        creds
            .renew_after()
            .expect("renew_after() failed after validate()"),
        creds
            .cannot_renew_after()
            .expect("cannot_renew_after() failed after validate()"),
    ]
}
