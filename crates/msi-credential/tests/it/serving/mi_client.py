"""Python azure-identity's ManagedIdentityCredential, as an application in the pod runs it.

IDENTITY_ENDPOINT and IDENTITY_HEADER come from the environment (set by the test).
Usage: mi_client.py SCOPE [client_id|object_id|resource_id ID]
Prints one JSON line: {"token", "expires_on"} or {"error_type", "message"}.
"""
import json
import sys

from azure.identity import ManagedIdentityCredential

scope = sys.argv[1]
kwargs = {}
if len(sys.argv) == 4:
    kind, value = sys.argv[2], sys.argv[3]
    if kind == "client_id":
        kwargs["client_id"] = value
    else:
        kwargs["identity_config"] = {kind: value}
try:
    token = ManagedIdentityCredential(**kwargs).get_token(scope)
    print(json.dumps({"token": token.token, "expires_on": token.expires_on}))
except Exception as e:  # every failure is reported, with its type
    print(json.dumps({"error_type": type(e).__name__, "message": str(e)}))
