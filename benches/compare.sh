#!/usr/bin/env bash
# Run the benchmark suite, OpenSSL's RSA-2048 baseline and the memory test, then print
# the targets table (benchmark, median, baseline, ratio, target, pass/fail) and
# write the plots. See BENCHMARKS.md.
#
#   benches/compare.sh [--strict] [--report-only] [--no-openssl] [--no-memory]
#                      [--bench NAME]... [-- CRITERION_ARGS...]
#
#   --strict        exit 1 when a target is missed (default: report only)
#   --report-only   run nothing; report what target/criterion already holds
#   --no-openssl    skip `openssl speed` (the sign-vs-OpenSSL rows then say "skipped")
#   --no-memory     skip the memory test
#   --bench NAME    run this bench only (repeatable; default: core token first_token reload
#                   cache_scale); each bench's output is kept in target/compare/bench-NAME.log
#   -- ARGS         passed to every criterion bench, e.g. `-- --quick` or
#                   `-- --warm-up-time 1 --measurement-time 2`
#
# Environment: OPENSSL_SECONDS (default 5), PLOTS_DIR (default benches/plots).
# Needs cargo and python3 (standard library only); openssl is optional.
set -euo pipefail
cd "$(dirname "$0")/.."

strict=()
run_benches=1
run_openssl=1
run_memory=1
memory_failed=0
benches=()
criterion_args=()
while (($#)); do
    case "$1" in
        --strict) strict=(--strict) ;;
        --report-only) run_benches=0 run_openssl=0 run_memory=0 ;;
        --no-openssl) run_openssl=0 ;;
        --no-memory) run_memory=0 ;;
        --bench)
            shift
            benches+=("${1:?--bench needs a name}")
            ;;
        --)
            shift
            criterion_args=("$@")
            break
            ;;
        -h | --help)
            sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "compare.sh: unknown argument: $1 (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done
((${#benches[@]})) || benches=(core token first_token reload cache_scale)

target_dir=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
out="$target_dir/compare"
mkdir -p "$out"
since=$(date +%s)

echo "== machine (now)"
machine_log=/dev/null
((run_benches)) && machine_log="$out/machine.txt"
{
    uname -srm
    grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true
    echo "cpus: $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
    rustc --version
    command -v openssl >/dev/null && openssl version
} | tee "$machine_log"

if ((run_benches)); then
    for bench in "${benches[@]}"; do
        echo "== cargo bench --features full --bench $bench -- ${criterion_args[*]:-}"
        # Kept: the TLS handshake counts (token) and bytes per scope (cache_scale) that
        # criterion does not record are read from it by report.py.
        # MSI_BENCH_PAIRS: the token bench also alternates the two-thread hit and floor.
        MSI_BENCH_PAIRS=1 cargo bench --features full --bench "$bench" -- "${criterion_args[@]}" 2>&1 |
            tee "$out/bench-$bench.log"
    done
fi

if ((run_openssl)); then
    if command -v openssl >/dev/null; then
        echo "== openssl speed -seconds ${OPENSSL_SECONDS:-5} rsa2048"
        openssl speed -seconds "${OPENSSL_SECONDS:-5}" rsa2048 2>/dev/null | tee "$out/openssl.txt"
    else
        echo "== openssl not found: the sign-vs-OpenSSL rows are skipped"
        rm -f "$out/openssl.txt"
    fi
fi

if ((run_memory)); then
    echo "== cargo test --release --test memory -- --nocapture"
    if ! cargo test --release --test memory -- --nocapture 2>&1 | tee "$out/memory.log"; then
        memory_failed=1
        echo "== the memory test FAILED (see above)"
    fi
    grep '^memory:' "$out/memory.log" >"$out/memory.txt" || true
fi

echo
since_args=()
((run_benches)) && since_args=(--since "$since")
status=0
python3 benches/report.py \
    --criterion "$target_dir/criterion" \
    --openssl "$out/openssl.txt" \
    --memory "$out/memory.txt" \
    --logs "$out" \
    --plots "${PLOTS_DIR:-benches/plots}" \
    --markdown "$out/results.md" \
    "${since_args[@]}" "${strict[@]}" || status=$?
if ((memory_failed)) && ((${#strict[@]})); then
    status=1
fi
exit "$status"
