#!/usr/bin/env bash
# The cost of the `metrics` feature, measured side by side (BENCHMARKS.md): the cached
# `get_token` and a cold token request, in alternated rounds of three builds of
# benches/token.rs: without the feature; with it and no recorder; with it and the
# Prometheus recorder installed (MSI_BENCH_RECORDER=prometheus).
#
#   benches/metrics_ab.sh [ROUNDS]     (default 3)
#
# Prints each run's criterion estimate (the middle of `time: [low mean high]`), then
# the median of each configuration's rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
filter='cached/get_token/1thread$|cold/get_token$'
args=(--warm-up-time 1 --measurement-time 3 --noplot)
declare -A features=([off]="azure_core" [on]="metrics" [recorder]="metrics")
for config in off on recorder; do
    cargo bench --quiet --no-run --features "${features[$config]}" --bench token
done
results=$(mktemp)
for round in $(seq "$rounds"); do
    for config in off on recorder; do
        recorder=""
        [ "$config" = recorder ] && recorder=prometheus
        MSI_BENCH_RECORDER=$recorder cargo bench --quiet --features "${features[$config]}" \
            --bench token -- "$filter" "${args[@]}" 2>/dev/null |
            awk -v c="$config" -v r="$round" '
                /^cached\/get_token\/1thread|^cold\/get_token/ { name = $1 }
                /time:/ && name != "" {
                    split(substr($0, index($0, "[") + 1), f, " ")
                    print c, r, name, f[3], f[4]
                    name = ""
                }' |
            tee -a "$results"
    done
done
echo "== medians (config bench value unit)"
python3 - "$results" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
scale = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
for line in open(sys.argv[1]):
    config, _, name, value, unit = line.split()
    runs[(name, config)].append(float(value) * scale[unit])
for (name, config), values in sorted(runs.items()):
    print(f"{name:28} {config:9} {statistics.median(values):12.1f} ns  ({len(values)} rounds)")
PY
