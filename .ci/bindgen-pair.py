"""Print the prettyplease to move back to 0.2, if the lock pairs bindgen's syn 2 with
prettyplease 0.3 (which is built on syn 3, so bindgen does not compile).

bindgen 0.73 (a build dependency of aws-lc-fips-sys, feature `fips`) accepts syn 2 or 3
and prettyplease 0.2 or 0.3 independently, and the resolver can pick a pair that does not
build together. Prints nothing when the pair is consistent (or bindgen is not in the
graph), so .ci/run changes nothing once bindgen couples the two.
"""
import json
import subprocess

meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--all-features", "--quiet"]))
packages = {p["id"]: p for p in meta["packages"]}
for node in meta["resolve"]["nodes"]:
    if packages[node["id"]]["name"] != "bindgen":
        continue
    deps = {packages[d]["name"]: packages[d]["version"] for d in node["dependencies"]}
    syn, pretty = deps.get("syn", ""), deps.get("prettyplease", "")
    if syn.startswith("2.") and pretty.startswith("0.3."):
        print(f"prettyplease@{pretty}")
