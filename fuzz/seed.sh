#!/usr/bin/env bash
# Fill fuzz/corpus/<target>/ with seed inputs made from the committed fixtures.
#
# Corpora are not committed (.gitignore ignores /fuzz/corpus): run this before the first
# `cargo fuzz run`. It is idempotent; files the fuzzer added to a corpus are kept.
#
#   credential_json  every fixtures/credentials/*.json as is
#   bundle           every fixture's client_secret, base64-decoded (PEM and PKCS#12
#                    bundles: NAME.bundle) and as the base64 text itself (NAME.b64, for
#                    the target's from_base64 path)
#   token_response   realistic token endpoint answers, each prefixed with the target's
#                    header: 2-byte big-endian status, then 1 byte n (0 = no Retry-After,
#                    else the Retry-After value is the next n-1 bytes), then the body
set -euo pipefail

fuzz_dir="$(cd "$(dirname "$0")" && pwd)"
fixtures="$fuzz_dir/../fixtures/credentials"
corpus="$fuzz_dir/corpus"

mkdir -p "$corpus/credential_json" "$corpus/bundle" "$corpus/token_response"

shopt -s nullglob
fixture_files=("$fixtures"/*.json)
if [ "${#fixture_files[@]}" -eq 0 ]; then
    echo "seed.sh: no fixtures in $fixtures" >&2
    exit 1
fi

for f in "${fixture_files[@]}"; do
    cp "$f" "$corpus/credential_json/"
done

python3 - "$corpus/bundle" "${fixture_files[@]}" <<'PY'
import base64, json, os, sys

out = sys.argv[1]
for path in sys.argv[2:]:
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, "rb") as f:
        secret = json.load(f).get("client_secret")
    if not secret:
        continue
    with open(os.path.join(out, name + ".bundle"), "wb") as f:
        f.write(base64.b64decode(secret.strip(), validate=True))
    with open(os.path.join(out, name + ".b64"), "wb") as f:
        f.write(secret.encode())
PY

python3 - "$corpus/token_response" <<'PY'
import os, struct, sys

out = sys.argv[1]

def seed(name, status, body, retry_after=None):
    if retry_after is None:
        header = struct.pack(">HB", status, 0)
    else:
        value = retry_after.encode()
        assert len(value) < 255
        header = struct.pack(">HB", status, len(value) + 1) + value
    with open(os.path.join(out, name), "wb") as f:
        f.write(header + body)

jwt = b"eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL21hbmFnZW1lbnQuYXp1cmUuY29tLyJ9.c2lnbmF0dXJl"

def success(extra):
    return b'{"token_type":"Bearer",' + extra + b'"access_token":"' + jwt + b'"}'

seed("success", 200, success(b'"expires_in":3599,'))
seed("success-ext-expires", 200, success(b'"expires_in":3599,"ext_expires_in":3599,'))
seed("success-string-expires", 200, success(b'"expires_in":"3599","ext_expires_in":"3599",'))
seed("success-refresh-in", 200, success(b'"expires_in":86399,"ext_expires_in":86399,"refresh_in":43199,'))
seed("success-refresh-in-string", 203, success(b'"expires_in":"7200","refresh_in":"3600",'))
seed("success-zero-expires", 200, success(b'"expires_in":0,'))
seed("success-empty-token", 200, b'{"token_type":"Bearer","expires_in":3599,"access_token":""}')
seed("success-missing-token", 200, b'{"token_type":"Bearer","expires_in":3599}')

def aadsts(error, code, description):
    return (
        b'{"error":"' + error + b'","error_description":"AADSTS' + str(code).encode()
        + b": " + description
        + b'\\r\\nTrace ID: 0d0e6b2c-1f2a-4b3c-8d4e-5f6a7b8c9d00\\r\\nCorrelation ID: '
        + b'4f3e2d1c-0b9a-4876-a5b4-c3d2e1f0a9b8\\r\\nTimestamp: 2026-11-22 10:00:00Z",'
        + b'"error_codes":[' + str(code).encode() + b'],"timestamp":"2026-11-22 10:00:00Z",'
        + b'"trace_id":"0d0e6b2c-1f2a-4b3c-8d4e-5f6a7b8c9d00",'
        + b'"correlation_id":"4f3e2d1c-0b9a-4876-a5b4-c3d2e1f0a9b8",'
        + b'"error_uri":"https://login.microsoftonline.com/error?code=' + str(code).encode() + b'"}'
    )

seed("aadsts700027", 401, aadsts(b"invalid_client", 700027, b"Client assertion failed signature validation."))
seed("aadsts700016", 400, aadsts(b"unauthorized_client", 700016, b"Application with identifier 'x' was not found in the directory."))
seed("aadsts90002", 400, aadsts(b"invalid_request", 90002, b"Tenant 'x' not found."))
seed("aadsts50196-throttled", 429, aadsts(b"temporarily_unavailable", 50196, b"The server terminated an operation because it encountered a client request loop."), "30")
seed("aadsts-503-http-date", 503, aadsts(b"temporarily_unavailable", 90033, b"A transient error has occurred."), "Sun, 22 Nov 2026 10:00:30 GMT")
seed("html-502", 502, b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>\r\n")
seed("html-200", 200, b"<!DOCTYPE html><html><body>Sign in to your account</body></html>")
seed("empty-500", 500, b"")
seed("empty-200", 200, b"")
seed("empty-429-retry", 429, b"", "120")
PY

for t in credential_json bundle token_response; do
    echo "seed.sh: $t: $(find "$corpus/$t" -type f | wc -l) files in $corpus/$t"
done
