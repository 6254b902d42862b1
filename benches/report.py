#!/usr/bin/env python3
"""Read criterion's estimates and print the targets table; write the SVG plots.

Used by benches/compare.sh (which runs the benches first); runnable alone on whatever
`target/criterion` holds:

    python3 benches/report.py [--criterion DIR] [--openssl FILE] [--memory FILE]
                              [--logs DIR] [--since EPOCH] [--plots DIR] [--markdown FILE]
                              [--strict]

`--logs` is the directory where benches/compare.sh saves each bench's output
(`bench-NAME.log`): the counts criterion does not keep (TLS handshakes per token request,
bytes per cached scope) are read from there.

Standard library only. Medians are criterion's `median.point_estimate` (the median of
the per-sample mean times), in nanoseconds.
"""

import argparse
import json
import os
import re
import sys
from xml.sax.saxutils import escape

# -------------------------------------------------------------------------------------
# Reading


def load_estimates(root):
    """full_id -> (median ns, mtime) for every benchmark under `root`."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
            continue
        try:
            with open(os.path.join(dirpath, "benchmark.json")) as f:
                full_id = json.load(f)["full_id"]
            path = os.path.join(dirpath, "estimates.json")
            with open(path) as f:
                median = json.load(f)["median"]["point_estimate"]
            out[full_id] = (float(median), os.path.getmtime(path))
        except (OSError, KeyError, ValueError):
            continue
    return out


def openssl_sign_ns(path):
    """RSA-2048 sign time from `openssl speed rsa2048` output, in ns (None if absent)."""
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*rsa\s+2048\s+bits\s+([0-9.]+)s", line)
            if m:
                return float(m.group(1)) * 1e9
    return None


def bench_logs(directory):
    """What the benches print besides criterion's estimates, from `bench-*.log`:
    ({group: (handshakes, requests)}, {scopes: (bytes per scope, token bytes)},
    {group: (requests, herds)}, the median two-thread hit/floor ratio of `pairs:`)."""
    handshakes, per_scope, herds, pairs = {}, {}, {}, None
    if not directory or not os.path.isdir(directory):
        return handshakes, per_scope, herds, pairs
    for name in sorted(os.listdir(directory)):
        if not (name.startswith("bench-") and name.endswith(".log")):
            continue
        with open(os.path.join(directory, name), errors="replace") as f:
            for line in f:
                m = re.search(r"(\S+)/get_token_miss_crate_client: (\d+) TLS handshakes for (\d+)", line)
                if m:
                    handshakes[m.group(1)] = (int(m.group(2)), int(m.group(3)))
                m = re.search(r"scale: (\d+) scopes: ([0-9.]+) bytes live per cached scope \(token text (\d+)", line)
                if m:
                    per_scope[int(m.group(1))] = (float(m.group(2)), int(m.group(3)))
                m = re.search(r"(\S+)/herd_64: (\d+) token requests for (\d+) herds", line)
                if m:
                    herds[m.group(1)] = (int(m.group(2)), int(m.group(3)))
                m = re.search(r"pairs: median ratio hit/floor on two threads ([0-9.]+)", line)
                if m:
                    pairs = float(m.group(1))
    return handshakes, per_scope, herds, pairs


def memory_lines(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.startswith("memory:")]


# -------------------------------------------------------------------------------------
# Formatting


def fmt_time(ns):
    if ns is None:
        return "—"
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.1f} ns"


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


class Report:
    def __init__(self, est, since, handshakes=None, per_scope=None, herds=None, pairs=None):
        self.est = est
        self.since = since
        self.handshakes = handshakes or {}
        self.per_scope = per_scope or {}
        self.herds = herds or {}
        self.pairs = pairs
        self.rows = []
        self.stale = set()

    def get(self, name):
        """Median ns of a benchmark, or None; remembers benchmarks older than `since`."""
        if name not in self.est:
            return None
        ns, mtime = self.est[name]
        if self.since is not None and mtime < self.since:
            self.stale.add(name)
        return ns

    def stale_of(self, *names):
        return any(n in self.stale for n in names)

    def row(self, target_name, bench, median, baseline_desc, ratio, target_desc, ok, names):
        if ok is None:
            result = "no data"
        else:
            result = "pass" if ok else "**MISS**"
            if self.stale_of(*names):
                result += " (stale)"
        self.rows.append(
            {
                "target": target_name,
                "bench": bench,
                "median": median,
                "baseline": baseline_desc,
                "ratio": ratio,
                "goal": target_desc,
                "result": result,
                "ok": ok,
            }
        )


def machine_scaling(rep):
    """2·t1/t2 of `machine/hash`: what two threads sharing nothing get on this machine."""
    m1, m2 = rep.get("machine/hash/1thread"), rep.get("machine/hash/2threads")
    return 2 * m1 / m2 if (m1 and m2) else None


def build_targets(rep, openssl_ns):
    g = rep.get

    # A cached hit <= 1.1x the floor (a plain RwLock<HashMap> look-up), on 1 and 2 threads.
    for threads in ("1thread", "2threads"):
        name, floor_name = f"cached/get_token/{threads}", f"cached/floor/{threads}"
        t, f = g(name), g(floor_name)
        r = t / f if (t and f) else None
        rep.row(
            f"cached hit, {threads[0]} thread{'s' if threads[0] != '1' else ''}",
            name,
            fmt_time(t),
            f"{floor_name}: " + fmt_time(f),
            fmt_ratio(r),
            "≤ 1.10×",
            None if r is None else r <= 1.1,
            [name, floor_name],
        )
    if rep.pairs is not None:
        rep.row(
            "cached hit, 2 threads, alternating with the floor (MSI_BENCH_PAIRS=1)",
            "cached/get_token/2threads",
            "median of 21 rounds",
            "cached/floor/2threads, alternating",
            fmt_ratio(rep.pairs),
            "≤ 1.10×",
            rep.pairs <= 1.1,
            [],
        )

    # Sign <= 1.15x OpenSSL.
    for alg in ("ps256", "rs256"):
        name = f"sign/assertion/{alg}"
        s = g(name)
        if openssl_ns is None:
            rep.row(
                f"sign ({alg.upper()})",
                name,
                fmt_time(s),
                "openssl absent: skipped",
                "—",
                "≤ 1.15×",
                None,
                [name],
            )
            continue
        r = s / openssl_ns if s else None
        rep.row(
            f"sign ({alg.upper()})",
            name,
            fmt_time(s),
            "openssl speed rsa2048 sign: " + fmt_time(openssl_ns),
            fmt_ratio(r),
            "≤ 1.15×",
            None if r is None else r <= 1.15,
            [name],
        )

    # Parse+validate PEM <= 1.25x the sum of its parts.
    parts = ["json", "base64", "pem", "x509", "key_load"]
    part_names = [f"parse/pem/part/{p}" for p in parts]
    part_ns = [g(n) for n in part_names]
    full = g("parse/pem/full")
    total = sum(part_ns) if all(p is not None for p in part_ns) else None
    r = full / total if (full and total) else None
    rep.row(
        "parse+validate PEM",
        "parse/pem/full",
        fmt_time(full),
        "sum of parse/pem/part/{json,base64,pem,x509,key_load}: " + fmt_time(total),
        fmt_ratio(r),
        "≤ 1.25×",
        None if r is None else r <= 1.25,
        ["parse/pem/full"] + part_names,
    )

    # First token <= 1.2x by hand.
    c = g("first_token/crate")
    h = g("first_token/by_hand")
    r = c / h if (c and h) else None
    rep.row(
        "first token (load + handshake + sign + POST)",
        "first_token/crate",
        fmt_time(c),
        "first_token/by_hand: " + fmt_time(h),
        fmt_ratio(r),
        "≤ 1.20×",
        None if r is None else r <= 1.2,
        ["first_token/crate", "first_token/by_hand"],
    )

    # Building a credential from its file <= 1.25x reading, parsing and loading by hand.
    b, l = g("first_token/build"), g("first_token/part/load")
    r = b / l if (b and l) else None
    rep.row(
        "build a credential from its file",
        "first_token/build",
        fmt_time(b),
        "first_token/part/load: " + fmt_time(l),
        fmt_ratio(r),
        "≤ 1.25×",
        None if r is None else r <= 1.25,
        ["first_token/build", "first_token/part/load"],
    )

    # The cold path, on a current-thread runtime (`cold`: the exchange hops to the I/O
    # thread) and on a multi-threaded one (`cold_mt`: it runs where the caller is).
    for group, where in (("cold", ""), ("cold_mt", ", multi-threaded caller")):
        sign_name, raw_name = f"{group}/sign_only", f"{group}/raw_https_round_trip"
        sign, rt = g(sign_name), g(raw_name)
        base = sign + rt if (sign and rt) else None
        # Cold path <= 1.15x (sign + round trip), signing on the spot or through the cache.
        for bench, what in (("get_token", "cold path"), ("get_token_miss", "cold path, through the cache (a miss)")):
            name = f"{group}/{bench}"
            ns = g(name)
            r = ns / base if (ns and base) else None
            rep.row(
                what + where,
                name,
                fmt_time(ns),
                f"{sign_name} + {raw_name}: " + fmt_time(base),
                fmt_ratio(r),
                "≤ 1.15×",
                None if r is None else r <= 1.15,
                [name, sign_name, raw_name],
            )
        # A miss with 30 ms between requests <= 1.15x (sign + the POST spaced alike).
        spaced_name, spaced_raw_name = f"{group}_spaced/get_token_miss", f"{group}_spaced/raw_https_round_trip"
        ns, spaced_rt = g(spaced_name), g(spaced_raw_name)
        spaced_base = sign + spaced_rt if (sign and spaced_rt) else None
        r = ns / spaced_base if (ns and spaced_base) else None
        rep.row(
            f"cold path, through the cache, 30 ms apart{where}",
            spaced_name,
            fmt_time(ns),
            f"{sign_name} + {spaced_raw_name}: " + fmt_time(spaced_base),
            fmt_ratio(r),
            "≤ 1.15×",
            None if r is None else r <= 1.15,
            [spaced_name, sign_name, spaced_raw_name],
        )
        # A herd of 64 callers on a cold scope: one request.
        if group in rep.herds:
            reqs, herds = rep.herds[group]
            per = reqs / herds if herds else None
            rep.row(
                f"herd of 64 callers on a cold scope{where}",
                f"{group}/herd_64",
                f"{reqs:,} requests for {herds:,} herds",
                "—",
                "—" if per is None else f"{per:.2f}",
                "1 per herd",
                None if per is None else per == 1,
                [f"{group}/herd_64"],
            )
        # TLS handshakes per token request (counted by the bench, read from its log).
        if group in rep.handshakes:
            hs, reqs = rep.handshakes[group]
            per = hs / reqs if reqs else None
            rep.row(
                f"TLS handshakes per cold token{where}",
                f"{group}/get_token_miss_crate_client",
                f"{hs} for {reqs:,} requests",
                "—",
                "—" if per is None else f"{per:.4f}",
                "≤ 0.15",
                None if per is None else per <= 0.15,
                [f"{group}/get_token_miss_crate_client"],
            )

    # Adding a scope at 50,000 scopes <= 2x at 10.
    small, large = g("scale/add_scope/10"), g("scale/add_scope/50000")
    r = large / small if (small and large) else None
    rep.row(
        "add one scope at 50,000 vs at 10",
        "scale/add_scope/50000",
        fmt_time(large),
        "scale/add_scope/10: " + fmt_time(small),
        fmt_ratio(r),
        "≤ 2×",
        None if r is None else r <= 2,
        ["scale/add_scope/10", "scale/add_scope/50000"],
    )

    # Reload active < 1 s after the rename.
    rl = g("reload/rename_to_active")
    rep.row(
        "reload active after rename",
        "reload/rename_to_active",
        fmt_time(rl),
        "1 s (absolute)",
        fmt_ratio(rl / 1e9 if rl else None),
        "< 1 s",
        None if rl is None else rl < 1e9,
        ["reload/rename_to_active"],
    )


def markdown_targets(rep):
    lines = [
        "| target | benchmark | median | baseline | ratio | goal | result |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for r in rep.rows:
        lines.append(
            f"| {r['target']} | `{r['bench']}` | {r['median']} | {r['baseline']} | "
            f"{r['ratio']} | {r['goal']} | {r['result']} |"
        )
    return "\n".join(lines)


SCALE_SIZES = [10, 1000, 10000, 50000]


def markdown_scale(rep):
    """The time to add a scope and the bytes per cached scope at each cache size."""
    g = rep.get
    base = g("scale/add_scope_baseline")
    lines = [
        "| scopes | `scale/add_scope/N` | minus `scale/add_scope_baseline` (" + fmt_time(base)
        + ") | vs 10 scopes | Rust heap per cached scope (token text) |",
        "|---:|---:|---:|---:|---:|",
    ]
    small = g("scale/add_scope/10")
    for n in SCALE_SIZES:
        ns = g(f"scale/add_scope/{n}")
        if ns is None and n not in rep.per_scope:
            continue
        minus = "—" if (ns is None or base is None) else ("−" if ns < base else "") + fmt_time(abs(ns - base))
        vs = fmt_ratio(ns / small if (ns and small) else None)
        mem = rep.per_scope.get(n)
        mem_text = "—" if mem is None else f"{mem[0]:,.0f} B ({mem[1]:,} B)"
        lines.append(f"| {n:,} | {fmt_time(ns)} | {minus} | {vs} | {mem_text} |")
    if len(lines) == 2:
        return "(no scale data: `cargo bench --features full --bench cache_scale`)"
    return "\n".join(lines)


COLD_BENCHES = [
    ("get_token", "signs on the spot", "sign + raw"),
    ("get_token_miss", "through the cache, back to back", "sign + raw"),
    ("herd_64", "64 callers on one cold scope", None),
    ("get_token_miss_crate_client", "through the crate-built client", "sign + raw"),
    ("raw_https_round_trip", "the raw pooled POST (baseline)", None),
    ("sign_only", "the signature (baseline)", None),
    ("_spaced/get_token_miss", "through the cache, 30 ms apart", "sign + spaced raw"),
    ("_spaced/raw_https_round_trip", "the raw POST, 30 ms apart (baseline)", None),
]


def markdown_exchange(rep):
    """`cold` (the exchange hops to the I/O thread) beside `cold_mt` (it does not)."""
    g = rep.get
    lines = [
        "| bench | what | `cold` (hop) | ratio | `cold_mt` (no hop) | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    seen = False
    for bench, what, against in COLD_BENCHES:
        cells = []
        for group in ("cold", "cold_mt"):
            ns = g(f"{group}{bench}" if bench.startswith("_") else f"{group}/{bench}")
            seen = seen or ns is not None
            sign, rt = g(f"{group}/sign_only"), g(f"{group}/raw_https_round_trip")
            spaced = g(f"{group}_spaced/raw_https_round_trip")
            base = {
                "raw": rt,
                "sign + raw": sign + rt if (sign and rt) else None,
                "sign + spaced raw": sign + spaced if (sign and spaced) else None,
            }.get(against)
            ratio = f"{fmt_ratio(ns / base)} {against}" if (ns and base) else ""
            cells += [fmt_time(ns), ratio]
        shown = bench.lstrip("_")
        lines.append(f"| `{shown}` | {what} | " + " | ".join(cells) + " |")
    for group in ("cold", "cold_mt"):
        if group in rep.handshakes:
            hs, reqs = rep.handshakes[group]
            lines.append(f"\n`{group}/get_token_miss_crate_client`: {hs} TLS handshakes for {reqs:,} token requests.")
    return "\n".join(lines) if seen else "(no cold/cold_mt data)"


def markdown_backends(rep, openssl_ns):
    g = rep.get
    rows = [
        ("sign/assertion/ps256", "crate: claims + PSS sign + encode, AWS-LC via aws-lc-rs"),
        ("sign/jsonwebtoken/ps256", "jsonwebtoken 11 (aws_lc_rs backend), same header, claims, key"),
        ("sign/assertion/rs256", "crate, PKCS#1 v1.5"),
        ("sign/jsonwebtoken/rs256", "jsonwebtoken 11 (aws_lc_rs backend), PKCS#1 v1.5"),
        ("sign/raw/aws-lc-rs/pss", "raw AWS-LC PSS sign of a 1.9 KB message"),
        ("sign/raw/aws-lc-rs/pkcs1", "raw AWS-LC PKCS#1 v1.5 sign"),
        ("sign/raw/rsa-crate/pkcs1", "raw `rsa` crate 0.9 PKCS#1 v1.5 sign (pure Rust)"),
        ("parse/pem/part/key_load", "key load: AWS-LC `RsaKeyPair::from_pkcs8` (checks the key)"),
        ("parse/keyload/rsa-crate", "key load: `rsa` crate `RsaPrivateKey::from_pkcs8_der`"),
    ]
    ref = g("sign/assertion/ps256")
    lines = [
        "| benchmark | what | median | vs crate PS256 | vs OpenSSL sign |",
        "|---|---|---:|---:|---:|",
    ]
    for name, what in rows:
        ns = g(name)
        vs_ref = ns / ref if (ns and ref and name.startswith("sign/")) else None
        vs_ossl = ns / openssl_ns if (ns and openssl_ns and name.startswith("sign/")) else None
        lines.append(
            f"| `{name}` | {what} | {fmt_time(ns)} | {fmt_ratio(vs_ref)} | {fmt_ratio(vs_ossl)} |"
        )
    if openssl_ns:
        lines.append(
            f"| `openssl speed rsa2048` | OpenSSL 3, PKCS#1 v1.5 sign | {fmt_time(openssl_ns)} | "
            f"{fmt_ratio(openssl_ns / ref if ref else None)} | 1.00× |"
        )
    return "\n".join(lines)


def markdown_pkcs12(rep):
    """PKCS#12 parses against the key derivations they must do (the target)."""
    g = rep.get
    key = g("parse/pem/part/key_load")
    lines = [
        "| archive | full parse | full − key load | KDF (AWS-LC digests) | (full − key load) / KDF |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, what in (("pfx-aes", "AES-256-CBC, SHA-256 MAC"), ("pfx-legacy", "RC2-40 + 3DES, SHA-1 MAC")):
        full, kdf = g(f"parse/{name}/full"), g(f"parse/{name}/part/kdf")
        above = full - key if (full and key) else None
        r = above / kdf if (above and kdf) else None
        lines.append(
            f"| `{name}` ({what}) | {fmt_time(full)} | {fmt_time(above)} | {fmt_time(kdf)} | "
            f"{fmt_ratio(r)} |"
        )
    return "\n".join(lines)


THREAD_COUNTS = [1, 2, 4, 8]


def thread_points(rep):
    pts = []
    for n in THREAD_COUNTS:
        name = "cached/get_token/1thread" if n == 1 else f"cached/get_token/{n}threads"
        ns = rep.get(name)
        if ns is not None:
            pts.append((n, ns))
    return pts


def markdown_threads(rep):
    pts = thread_points(rep)
    if not pts:
        return "(no cached/get_token data)"
    t1 = dict(pts).get(1)
    lines = [
        "| threads | time per call, per thread | aggregate throughput | scaling vs 1 thread |",
        "|---:|---:|---:|---:|",
    ]
    for n, ns in pts:
        thr = n / ns * 1e3  # calls per ns -> M calls/s
        scale = n * t1 / ns if t1 else None
        lines.append(f"| {n} | {fmt_time(ns)} | {thr:.1f} M/s | {fmt_ratio(scale)} |")
    m1, m2 = rep.get("machine/hash/1thread"), rep.get("machine/hash/2threads")
    if m1 and m2:
        lines += [
            "",
            f"Machine baseline (`machine/hash`, the same harness on computation that shares "
            f"nothing): 1 thread {fmt_time(m1)}, 2 threads {fmt_time(m2)}, scaling "
            f"{fmt_ratio(2 * m1 / m2)}.",
        ]
    return "\n".join(lines)


def breakdown(rep):
    """Stacked-bar data: [(label, [(segment, ns)], total ns)]."""
    g = rep.get
    bars = []
    cold, sign, rt = g("cold/get_token"), g("cold/sign_only"), g("cold/raw_https_round_trip")
    if cold and sign and rt:
        bars.append(
            (
                "cold get_token (pooled connection)",
                [("sign", sign), ("round trip", rt), ("rest", max(cold - sign - rt, 0))],
                cold,
            )
        )
    # A new credential's first signature (fresh AWS-LC key) is what the first token pays.
    load = g("first_token/part/load")
    psign = g("first_token/part/first_sign") or g("first_token/part/sign")
    build, cpost = g("first_token/part/client_build"), g("first_token/part/connect_post")
    for label, name in (
        ("first token, by hand", "first_token/by_hand"),
        ("first token, crate", "first_token/crate"),
    ):
        total = g(name)
        if total and load and psign and build and cpost:
            handshake = max(cpost - build, 0)
            parts = [
                ("parse + key load", load),
                ("first sign (fresh key)", psign),
                ("client build", build),
                ("handshake + round trip", handshake),
            ]
            rest = total - sum(ns for _, ns in parts)
            parts.append(("rest", max(rest, 0)))
            bars.append((label, parts, total))
    return bars


def markdown_breakdown(rep):
    bars = breakdown(rep)
    if not bars:
        return "(no cold/first_token data)"
    present = {s for _, parts, _ in bars for s, _ in parts}
    segs = [s for s in SEGMENTS if s in present]
    lines = [
        "| | " + " | ".join(segs) + " | total |",
        "|---|" + "---:|" * (len(segs) + 1),
    ]
    for label, parts, total in bars:
        d = dict(parts)
        cells = [fmt_time(d[s]) if s in d else "" for s in segs]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {fmt_time(total)} |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------
# SVG plots (hand-written; no plotting library)

FONT = 'font-family="sans-serif" font-size="12"'
TITLE = 'font-family="sans-serif" font-size="14" font-weight="bold"'
SEGMENTS = [
    "parse + key load",
    "sign",
    "first sign (fresh key)",
    "client build",
    "handshake + round trip",
    "round trip",
    "rest",
]
COLORS = {
    "parse + key load": "#59a14f",
    "sign": "#4e79a7",
    "first sign (fresh key)": "#2b4f73",
    "client build": "#b07aa1",
    "handshake + round trip": "#f28e2b",
    "round trip": "#ffbe7d",
    "rest": "#e15759",
}


def svg_threads(pts, cores, path):
    w, h = 640, 430
    left, right, top, bottom = 70, 40, 40, 90
    pw, ph = w - left - right, h - top - bottom
    t1 = dict(pts)[1]
    ideal = [(n, t1 * max(1.0, n / cores)) for n, _ in pts]
    ymax = max(max(ns for _, ns in pts), max(ns for _, ns in ideal)) * 1.15
    ns_list = [n for n, _ in pts]

    def x(i):
        return left + (pw * i / (len(ns_list) - 1) if len(ns_list) > 1 else pw / 2)

    def y(v):
        return top + ph - ph * v / ymax

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="22" text-anchor="middle" {TITLE}>cached get_token: time per call vs threads '
        f"({cores} cores)</text>",
    ]
    # Grid and y labels.
    step = nice_step(ymax / 5)
    v = 0.0
    while v <= ymax:
        out.append(
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + pw}" y2="{y(v):.1f}" '
            f'stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" {FONT}>{v:g}</text>'
        )
        v += step
    out.append(
        f'<text x="18" y="{top + ph / 2}" text-anchor="middle" {FONT} '
        f'transform="rotate(-90 18 {top + ph / 2})">ns per call (as each thread sees it)</text>'
    )
    for i, n in enumerate(ns_list):
        out.append(
            f'<text x="{x(i):.1f}" y="{top + ph + 18}" text-anchor="middle" {FONT}>{n}</text>'
        )
    out.append(
        f'<text x="{left + pw / 2}" y="{top + ph + 36}" text-anchor="middle" {FONT}>threads</text>'
    )
    out.append(
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>'
    )
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>')

    def polyline(points, color, dash=""):
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, (_, v) in enumerate(points))
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{extra}/>'

    out.append(polyline(ideal, "#999", "6,4"))
    out.append(polyline(pts, "#4e79a7"))
    for i, (n, v) in enumerate(pts):
        thr = n / v * 1e3
        last = i == len(pts) - 1
        anchor = "end" if last else "start"
        dx = -8 if last else 6
        out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="4" fill="#4e79a7"/>')
        out.append(
            f'<text x="{x(i) + dx:.1f}" y="{y(v) - 8:.1f}" text-anchor="{anchor}" {FONT}>'
            f"{v:.0f} ns · {thr:.0f} M calls/s</text>"
        )
    ly = h - 22
    out.append(f'<line x1="{left}" y1="{ly - 4}" x2="{left + 25}" y2="{ly - 4}" stroke="#4e79a7" stroke-width="2"/>')
    out.append(f'<text x="{left + 30}" y="{ly}" {FONT}>measured (labels: time per call · aggregate throughput)</text>')
    out.append(
        f'<line x1="{left + 390}" y1="{ly - 4}" x2="{left + 415}" y2="{ly - 4}" stroke="#999" '
        f'stroke-width="2" stroke-dasharray="6,4"/>'
    )
    out.append(f'<text x="{left + 420}" y="{ly}" {FONT}>ideal: t1 · max(1, n/{cores})</text>')
    out.append("</svg>")
    write(path, "\n".join(out))


def svg_breakdown(bars, path):
    w = 780
    left, right, top = 250, 70, 50
    bar_h, gap = 34, 22
    legend_h = 50
    h = top + len(bars) * (bar_h + gap) + legend_h + 30
    pw = w - left - right
    tmax = max(total for _, _, total in bars) * 1.05

    def x(v):
        return left + pw * v / tmax

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="24" text-anchor="middle" {TITLE}>Cold path and first token: where the time goes</text>',
    ]
    axis_y = top + len(bars) * (bar_h + gap)
    step = nice_step(tmax / 1e6 / 6) * 1e6
    v = 0.0
    while v <= tmax:
        out.append(f'<line x1="{x(v):.1f}" y1="{top - 5}" x2="{x(v):.1f}" y2="{axis_y}" stroke="#eee"/>')
        out.append(
            f'<text x="{x(v):.1f}" y="{axis_y + 15}" text-anchor="middle" {FONT}>'
            f"{v / 1e6:g} ms</text>"
        )
        v += step
    seen = []
    for i, (label, parts, total) in enumerate(bars):
        y0 = top + i * (bar_h + gap)
        out.append(
            f'<text x="{left - 8}" y="{y0 + bar_h / 2 + 4}" text-anchor="end" {FONT}>'
            f"{escape(label)}</text>"
        )
        acc = 0.0
        for seg, ns in parts:
            if seg not in seen:
                seen.append(seg)
            color = COLORS.get(seg, "#76b7b2")
            out.append(
                f'<rect x="{x(acc):.1f}" y="{y0}" width="{max(x(acc + ns) - x(acc), 0):.1f}" '
                f'height="{bar_h}" fill="{color}" stroke="white"><title>{escape(seg)}: '
                f"{fmt_time(ns)}</title></rect>"
            )
            if x(acc + ns) - x(acc) > 62:
                ink = "black" if seg == "round trip" else "white"
                out.append(
                    f'<text x="{(x(acc) + x(acc + ns)) / 2:.1f}" y="{y0 + bar_h / 2 + 4}" '
                    f'text-anchor="middle" {FONT} fill="{ink}">{fmt_time(ns)}</text>'
                )
            acc += ns
        out.append(
            f'<text x="{x(max(acc, total)) + 4:.1f}" y="{y0 + bar_h / 2 + 4}" {FONT}>'
            f"{fmt_time(total)}</text>"
        )
    lx, ly = 20, axis_y + 40
    for seg in [s for s in SEGMENTS if s in seen]:
        width = 30 + 7 * len(seg)
        if lx + width > w - 10:
            lx, ly = 20, ly + 20
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{COLORS.get(seg, "#76b7b2")}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}" {FONT}>{escape(seg)}</text>')
        lx += width
    out.append("</svg>")
    write(path, "\n".join(out))


def nice_step(raw):
    if raw <= 0:
        return 1.0
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


# -------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--criterion", default="target/criterion")
    ap.add_argument("--openssl", help="saved output of `openssl speed rsa2048`")
    ap.add_argument("--memory", help="saved output of the memory test (lines starting memory:)")
    ap.add_argument("--logs", help="directory of the benches' saved output (bench-NAME.log)")
    ap.add_argument("--since", type=float, help="epoch seconds; older estimates are marked stale")
    ap.add_argument("--plots", help="directory for the SVG plots")
    ap.add_argument("--markdown", help="also write the tables here")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()

    est = load_estimates(args.criterion)
    if not est:
        print(f"no criterion estimates under {args.criterion}", file=sys.stderr)
        return 2
    openssl_ns = openssl_sign_ns(args.openssl)
    handshakes, per_scope, herds, pairs = bench_logs(args.logs)
    rep = Report(est, args.since, handshakes, per_scope, herds, pairs)
    build_targets(rep, openssl_ns)

    sections = [
        "## Targets",
        "",
        markdown_targets(rep),
        "",
        "## Cached get_token vs threads",
        "",
        markdown_threads(rep),
        "",
        "## The cache at size",
        "",
        markdown_scale(rep),
        "",
        "## The exchange: with the hop and without",
        "",
        markdown_exchange(rep),
        "",
        "## Cold path and first token breakdown",
        "",
        markdown_breakdown(rep),
        "",
        "## Backend choice",
        "",
        markdown_backends(rep, openssl_ns),
        "",
        "## PKCS#12",
        "",
        markdown_pkcs12(rep),
    ]
    mem = memory_lines(args.memory)
    if mem:
        sections += ["", "## Memory", ""] + [f"- {m[len('memory: '):]}" for m in mem]
    if rep.stale:
        sections += [
            "",
            "(stale) = estimates older than this run (not re-measured): "
            + ", ".join(sorted(rep.stale)),
        ]
    m = machine_scaling(rep)
    t1, t2 = rep.get("cached/get_token/1thread"), rep.get("cached/get_token/2threads")
    hit_scaling = 2 * t1 / t2 if (t1 and t2) else None
    if any(x is not None and x > 2.1 for x in (m, hit_scaling)):
        sections += [
            "",
            "**Unsteady run**: a 2-thread scaling above 2× (get_token "
            f"{fmt_ratio(hit_scaling)}, machine/hash {fmt_ratio(m)}) means a one-thread sample "
            "was slowed by other work (another VM on the host, or a process here): the "
            "thread rows and the ns-scale rows of this run are not trustworthy; rerun.",
        ]
    elif m is not None and m < 1.8:
        sections += [
            "",
            f"Note: two threads of ALU-bound work that share nothing (`machine/hash`) got "
            f"{m:.2f}× of one thread in this run, not 2×: this machine's two CPUs do not "
            "deliver two full cores' worth of computation now (shared physical cores, or a "
            "busy host). That bounds what any 2-thread scaling can show here.",
        ]
    text = "\n".join(sections)
    print(text)
    if args.markdown:
        write(args.markdown, text)

    if args.plots:
        pts = thread_points(rep)
        if pts and pts[0][0] == 1:
            svg_threads(pts, args.cores, os.path.join(args.plots, "cached_threads.svg"))
        bars = breakdown(rep)
        if bars:
            svg_breakdown(bars, os.path.join(args.plots, "cold_breakdown.svg"))
        print(f"\nplots: {args.plots}/cached_threads.svg, {args.plots}/cold_breakdown.svg")

    missed = [r for r in rep.rows if r["ok"] is False]
    if missed:
        print(
            "\nmissed: " + "; ".join(f"{r['target']} ({r['ratio']}, goal {r['goal']})" for r in missed),
            file=sys.stderr,
        )
        if args.strict:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
