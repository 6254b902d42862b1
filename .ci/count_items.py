#!/usr/bin/env python3
"""Count the library's documented public API, by kind.

Builds the API documentation (unless --no-build) as docs.rs would show it, every feature
but `fips`:

    cargo doc --no-deps -p msi-dataplane --features full

then reads rustdoc's output under target/doc/msi_dataplane: the items of `all.html`
(structs, enums, traits, functions, type aliases, constants, macros, ...), the public
modules (each has an index.html; the guide's chapters, documentation only, are counted
apart), and on each type's page its public fields, enum variants and inherent methods
(trait implementations are not counted); on each trait's page its methods. Items marked
`#[doc(hidden)]` are not documented, so not counted. Prints one line per kind and the
total; `--json` prints the same as JSON.
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "target", "doc", "msi_dataplane")


def build():
    subprocess.run(
        ["cargo", "doc", "--no-deps", "-p", "msi-dataplane", "--features", "full"],
        cwd=ROOT,
        check=True,
    )


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def items_by_kind():
    """`{kind: [page, ...]}` from all.html's sections."""
    text = read(os.path.join(DOC, "all.html"))
    found = {}
    for m in re.finditer(
        r'<h3 id="([a-z-]+)">[^<]*</h3><ul class="all-items">(.*?)</ul>', text, re.S
    ):
        found[m.group(1)] = re.findall(r'<li><a href="([^"]+)">', m.group(2))
    if not found:
        sys.exit("all.html has no item lists: has rustdoc's layout changed?")
    return found


def modules():
    """(API modules, guide chapters): directories with an index.html, the root excluded."""
    api, guide = 0, 0
    for dirpath, _, files in os.walk(DOC):
        if "index.html" not in files or dirpath == DOC:
            continue
        rel = os.path.relpath(dirpath, DOC)
        if rel == "guide" or rel.startswith("guide" + os.sep):
            guide += 1
        else:
            api += 1
    return api, guide


def inherent_section(text):
    """The part of a type's page listing its inherent `impl` blocks."""
    start = text.find('id="implementations"')
    if start < 0:
        return ""
    end = len(text)
    for marker in (
        'id="trait-implementations"',
        'id="synthetic-implementations"',
        'id="blanket-implementations"',
    ):
        at = text.find(marker, start)
        if at >= 0:
            end = min(end, at)
    return text[start:end]


def members(found):
    fields = variants = methods = trait_methods = 0
    for kind, pages in found.items():
        for page in pages:
            text = read(os.path.join(DOC, page))
            if kind in ("structs", "unions"):
                fields += len(set(re.findall(r'id="structfield\.([A-Za-z0-9_]+)"', text)))
            if kind == "enums":
                variants += len(set(re.findall(r'id="variant\.([A-Za-z0-9_]+)"', text)))
            if kind in ("structs", "enums", "unions"):
                section = inherent_section(text)
                methods += len(set(re.findall(r'id="method\.([A-Za-z0-9_]+)"', section)))
            if kind == "traits":
                head = text.split('id="implementors"')[0]
                trait_methods += len(
                    set(re.findall(r'id="(?:ty)?method\.([A-Za-z0-9_]+)"', head))
                )
    return {
        "public fields": fields,
        "enum variants": variants,
        "inherent methods": methods,
        "trait methods": trait_methods,
    }


def main():
    if "--no-build" not in sys.argv:
        build()
    found = items_by_kind()
    counts = {kind: len(pages) for kind, pages in sorted(found.items())}
    api_modules, guide = modules()
    counts["modules"] = api_modules
    counts.update(members(found))
    total = sum(counts.values())
    if "--json" in sys.argv:
        print(json.dumps({"counts": counts, "total": total, "guide chapters": guide}))
        return
    for kind, n in counts.items():
        print(f"{kind:>18}  {n}")
    print(f"{'total':>18}  {total}")
    print(f"(not counted: {guide} guide chapters, documentation only)")


if __name__ == "__main__":
    main()
