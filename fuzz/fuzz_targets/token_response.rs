//! The token endpoint's response parser (`msi_dataplane::fuzzing::token_response`, present
//! only under `--cfg fuzzing`, which `cargo fuzz` sets) on arbitrary answers.
//!
//! Input layout (what `fuzz/seed.sh` writes):
//!
//! | bytes | meaning |
//! |---|---|
//! | 0..2 | HTTP status, big-endian `u16` |
//! | 2 | `n`: 0 = no `Retry-After` header; otherwise the header value is the next `n - 1` bytes (lossy UTF-8) |
//! | rest | the body |
//!
//! Short inputs take what there is (a missing status byte counts as 0). Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (status, retry_after, body) = split(data);
    msi_dataplane::fuzzing::token_response(status, retry_after.as_deref(), body);
});

fn split(data: &[u8]) -> (u16, Option<String>, &[u8]) {
    let status = u16::from_be_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    let rest = data.get(2..).unwrap_or_default();
    let Some((&n, rest)) = rest.split_first() else {
        return (status, None, rest);
    };
    if n == 0 {
        return (status, None, rest);
    }
    let len = usize::from(n - 1).min(rest.len());
    let (value, body) = rest.split_at(len);
    (
        status,
        Some(String::from_utf8_lossy(value).into_owned()),
        body,
    )
}
