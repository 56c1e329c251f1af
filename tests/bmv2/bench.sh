#!/usr/bin/env bash
# Aggregation on bmv2 next to the emulator, in one run (a benchmark, not a
# test: it prints figures and asserts only that every sum verified):
#
#   1. what simple_switch_grpc sustains with this program: one worker alone
#      in a job, its whole pool in flight (--fixed-window), so every
#      contribution completes its slot at once: the contributions the
#      switch counted per second (every copy, retransmissions included: the
#      rate at which it aggregates), the bmv2 rate;
#   2. int32 and float all-reduces of LEN elements with 4 workers, one per
#      namespace, with the adaptive window and with the whole pool in
#      flight: seconds, contributions per second, payload Mbit/s,
#      retransmissions and the switch's duplicate and resend counters;
#   3. the same 4-worker all-reduce through the emulator (inagg demo, K = 64,
#      the same pool), on loopback;
#   4. the targets: each adaptive all-reduce's useful contributions per
#      second against the bmv2 rate (at least half), and its
#      retransmissions against its useful contributions (at most 10%).
#
#   tests/bmv2/bench.sh                    # LEN=300000 POOL=256
#   LEN=100000 POOL=16 tests/bmv2/bench.sh
#
# Needs what tests/bmv2/run.sh needs; says "skipped" without it.
set -euo pipefail
name="tests/bmv2/bench.sh"
# shellcheck source=tests/bmv2/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

k=64
len=${LEN:-300000}
pool=${POOL:-256}
workers=4
agent_timeout=60

P4_BUILD_DIR="$tmp/p4" K="$k" "$repo/p4/build.sh" v1model >/dev/null
(cd "$repo" && cargo build --release --quiet)
inagg="$repo/target/release/inagg"
make_hosts "$workers"
grpc_port=$port_base
grpc="127.0.0.1:$grpc_port"
start_switch - "$grpc_port" $((port_base + 1)) \
    "1@ibs${id}w0 2@ibs${id}w1 3@ibs${id}w2 4@ibs${id}w3" bench
topology="$tmp/topology.toml"
{
    echo "[workers]"
    for ((w = 0; w < workers; w++)); do
        printf '"10.0.0.%d" = { port = %d, mac = "02:00:00:00:00:%02x" }\n' $((w + 1)) $((w + 1)) $((w + 1))
    done
} >"$topology"
ctl() {
    "$inagg" ctl --target bmv2 --addr "$grpc" --topology "$topology" "$@"
}
ctl --p4info "$tmp/p4/v1model/inagg.p4info.bin" --bmv2-json "$tmp/p4/v1model/inagg.json" info >/dev/null

rounds=$(((len + k - 1) / k))
job=0
# One all-reduce of job $job over $1 workers, dtype $2, extra agent flags
# after. Prints one table row.
measure() {
    local n=$1 dtype=$2 label=$3
    shift 3
    job=$((job + 1))
    ctl job create --id "$job" --workers "$(seq -s, -f "10.0.0.%g:5000" 1 "$n")" \
        --pool-base 0 --pool-size "$pool" --elements "$k" >/dev/null
    local start end
    start=$(date +%s.%N)
    allreduce "$job" "$n" "$dtype" "$@"
    local resent=$retransmissions
    end=$(date +%s.%N)
    ctl --json job show "$job" >"$tmp/job.json"
    python3 - "$tmp/job.json" "$label" "$n" "$dtype" "$start" "$end" "$rounds" "$len" "$resent" "$tmp/rates.tsv" <<'EOF'
import json, sys
job = json.load(open(sys.argv[1]))
label, n, dtype = sys.argv[2], int(sys.argv[3]), sys.argv[4]
secs = float(sys.argv[6]) - float(sys.argv[5])
rounds, length, resent = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
c = job.get("counters", {})
dup = sum(v for k, v in c.items() if "duplicate" in k and isinstance(v, int))
res = c.get("resent_results", 0)
switch_rate = c.get("contributions", 0) / secs
print(f"| {label} | {n} | {dtype} | {secs:.1f} | {n * rounds / secs:,.0f} | {switch_rate:,.0f} | "
      f"{length * 32 / secs / 1e6:.2f} | {resent} ({100 * resent / (n * rounds):.1f}%) | {dup} | {res} |")
with open(sys.argv[10], "a") as f:
    f.write(f"{label}\t{dtype}\t{n * rounds / secs}\t{switch_rate}\t{resent / (n * rounds)}\n")
EOF
    ctl job delete "$job" >/dev/null
}

echo "bmv2 (simple_switch_grpc $(simple_switch_grpc --version 2>/dev/null | head -n 1)), K = $k, pool $pool, $len elements"
echo
echo "| run | workers | dtype | s | useful contributions/s | contributions/s at the switch | payload Mbit/s | retransmissions (of useful contributions) | duplicates at the switch | results resent |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
measure 1 i32 "bmv2: one worker, whole pool in flight" --fixed-window
for dtype in i32 f32; do
    measure "$workers" "$dtype" "bmv2: adaptive window"
    measure "$workers" "$dtype" "bmv2: whole pool in flight" --fixed-window
done
"$inagg" demo --workers "$workers" --elements "$len" -k "$k" --window "$pool" --loss 0 --json \
    >"$tmp/demo.json"
python3 - "$tmp/demo.json" "$rounds" "$workers" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rounds, n = int(sys.argv[2]), int(sys.argv[3])
s = d["seconds"]
r = d["retransmissions"]
print(f"| emulator (inagg demo): adaptive window | {n} | f32 | {s:.2f} | {n * rounds / s:,.0f} | | "
      f"{d['goodput_gbps'] * 1e3:.1f} | {r} ({100 * r / (n * rounds):.1f}%) | | |")
EOF
echo
python3 - "$tmp/rates.tsv" <<'EOF'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
bmv2 = float(rows[0][3])
print(f"bmv2 rate (one worker, whole pool in flight): {bmv2:,.0f} contributions/s at the switch")
for label, dtype, useful, _, resent in rows[1:]:
    if "adaptive" not in label:
        continue
    met = float(useful) >= bmv2 / 2 and float(resent) <= 0.10
    print(f"{dtype}, adaptive window: {float(useful):,.0f} useful contributions/s, "
          f"{float(useful) / bmv2:.2f} of the bmv2 rate (target >= 0.5); retransmissions "
          f"{100 * float(resent):.1f}% (target <= 10%): {'met' if met else 'NOT met'}")
EOF
